"""Remove ops whose output always equals one of their inputs.

``y = Op(x, ...)`` is removed and its readers read ``x`` when the rewrite is provably exact:

1. ``Identity(x)``.
2. ``Dropout(x)`` in inference: opset ≥ 12 without ``training_mode`` or with a constant false one;
   opset 7–11 always; opset < 7 only with ``is_test=1``. The ratio does not matter. Only when the
   ``mask`` output is unused.
3. ``Cast(x, to=T)`` when ``x`` is known to be of type T already; ``CastLike(x, t)`` when both
   dtypes are known and equal. An unknown dtype refuses.
4. ``Reshape(x, s)`` to the shape ``x`` already has: ``s`` is ``Shape(x)``, or ``s`` is a constant
   whose every entry keeps its dim (equal static value, ``0`` meaning copy when ``allowzero=0``, at
   most one ``-1`` with every other dim kept). x's shape is the declared one, else what shape
   inference proves (its rank and static dims: a 0 or -1 entry never compares a symbolic dim, so
   inference's made-up symbols are not trusted). A dynamic ``s`` or an unknown rank refuses.
5. ``Expand(x, s)`` with a constant ``s`` that broadcasting does not change (every entry 1 or the
   equal static dim, rank not above x's; x's shape declared or inferred, as in 11).
6. ``Transpose(x, perm)`` with the identity perm (no perm means reversed: identity at rank ≤ 1).
7. ``Pad(x, pads)`` with constant all-zero pads (attribute before opset 11, input after), any mode.
8. ``Slice(x, ...)`` with constant starts/ends/axes/steps that keep every sliced axis whole: step 1,
   start clamped to 0, end ≥ the static dim (or ≥ 2**31 - 1, the "to the end" convention).
9. ``Concat`` of a single input.
10. ``Squeeze(Unsqueeze(x, a), a)`` and ``Unsqueeze(Squeeze(x, a), a)``: the second op is removed
    (the first goes with dead-code elimination when nothing else reads it). Axes come from the
    attribute (opset < 13) or a constant input (opset ≥ 13); a Squeeze without axes refuses.
11. ``x * 1``, ``1 * x``, ``x + 0``, ``0 + x``, ``x - 0``, ``x / 1`` when the constant is all
    ones/zeros and broadcasting it does not change x's shape (a scalar, or x's shape covers it:
    declared, else inference's rank and static dims — a random-init export's zero biases and
    MobileBERT's NoNorm ones/zeros on a MatMul output nothing declares). Note ``-0.0 + 0.0 = +0.0``: Add of a positive zero may flip the sign of a zero, which
    compares equal; every other case is bit-exact. Likewise ``x And True`` and ``x Or False``
    (torch's dynamo export starts its attention masks with ``And(True, ge)``).

Keeping graph-output names: when ``y`` is an output of its graph, ``x`` is renamed to ``y`` — only
when ``x`` is produced by an op of this graph and is not itself an output.

12. Refusing case: ``y`` is a graph output and ``x`` is a graph input, an initializer, another
    graph output, or a value of an enclosing scope: the op stays (both names are interface).

Works the same in the main graph, If/Loop/Scan bodies and function bodies: the pass manager calls
``run`` once per graph.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
from onnx import FunctionProto, helper, numpy_helper

from graphtool.ir.graph import Graph, Node
from graphtool.pass_manager import Pass, PassContext, PassResult, register
from graphtool.passes._types import infer_dtype

STANDARD_DOMAINS = ("", "ai.onnx")
INT_MAX_END = 2**31 - 1  # exporters write INT_MAX / INT64_MAX for "slice to the end"


# ---------------------------------------------------------------- helpers shared by cleanup passes


def root_of(graph: Graph) -> Graph:
    while graph.parent is not None:
        graph = graph.parent
    return graph


def in_function(graph: Graph) -> bool:
    """True inside a function body (or a subgraph of one)."""
    return isinstance(root_of(graph).proto_shell, FunctionProto)


def graph_opset(graph: Graph, ctx: PassContext, domain: str = "") -> int:
    """The opset a graph's ops are read with: a function body's own import, else the model's."""
    shell = root_of(graph).proto_shell
    if isinstance(shell, FunctionProto):
        wanted = ("", "ai.onnx") if domain in ("", "ai.onnx") else (domain,)
        for imp in shell.opset_import:
            if imp.domain in wanted:
                return imp.version
    return ctx.opset(domain)


def add_constant(graph: Graph, array: np.ndarray, hint: str, ctx: PassContext) -> str | None:
    """A new constant value, stored the way this graph allows; None when it cannot be.

    Function bodies hold no initializers: a Constant op (int64 needs opset ≥ 9). IR < 4 models
    list every initializer as a graph input too: the main graph lists the new one as well; a
    subgraph cannot (its inputs are positional), so it gets a Constant op.
    """
    array = np.asarray(array)
    if in_function(graph) or (graph.parent is not None and not graph.overridable_initializers):
        if array.dtype.kind != "f" and graph_opset(graph, ctx) < 9:
            return None  # Constant-1 is float-only
        node = graph.add_node("Constant", [], 1, attrs={"value": numpy_helper.from_array(array)}, name=hint)
        return node.outputs[0]
    name = graph.add_initializer(array, hint)
    if not graph.overridable_initializers:
        tensor = graph.initializers[name]
        graph.inputs[name] = helper.make_tensor_value_info(name, tensor.data_type, tensor.dims)
    return name


def output_is_free(graph: Graph, value: str) -> bool:
    """True when ``value`` has no reader and is no graph output (an output slot we may drop)."""
    return not value or (not graph.uses(value) and not graph.is_output(value))


def can_take_name(graph: Graph, src: str) -> bool:
    """Whether ``src`` may be renamed to a graph output's name: it must be made by an op here
    (not an input, initializer or outer-scope value) and not be an output itself."""
    return graph.producer(src) is not None and not graph.is_output(src)


def forward(graph: Graph, node: Node, pairs: list[tuple[str, str]]) -> bool:
    """Remove ``node``; for each (src, dst) pair, whatever read ``dst`` reads ``src`` instead.

    A ``dst`` that is a graph output keeps its name: ``src`` is renamed to it. When that is not
    possible (see ``can_take_name``) nothing changes and False is returned. Outputs of ``node``
    not listed must be unused.
    """
    renames = [(s, d) for s, d in pairs if graph.is_output(d)]
    if renames and any(not can_take_name(graph, s) for s, _ in renames):
        return False
    if renames and len({s for s, _ in renames}) != len(renames):
        return False  # one value cannot take two output names
    for src, dst in pairs:
        if not graph.is_output(dst):
            graph.replace_all_uses(dst, src)
    graph.remove_nodes([node])
    for src, dst in renames:
        graph.rename_value(src, dst)
    return True


def axes_of(graph: Graph, node: Node) -> list[int] | None:
    """``axes`` from the attribute (old opsets) or the constant second input (opset ≥ 13)."""
    axes = node.attr("axes")
    if axes is not None:
        return [int(a) for a in axes]
    inputs = node.inputs
    if len(inputs) > 1 and inputs[1]:
        c = graph.const(inputs[1])
        if c is not None:
            return [int(a) for a in np.asarray(c).reshape(-1)]
    return None


def rank_of(graph: Graph, value: str) -> int | None:
    shape = graph.declared_shape(value)
    return None if shape is None else len(shape)


def normalize_axes(axes: list[int], rank: int | None) -> list[int] | None:
    """Axes made non-negative; None when a negative axis meets an unknown rank."""
    if any(a < 0 for a in axes):
        if rank is None:
            return None
        return [a + rank if a < 0 else a for a in axes]
    return list(axes)


# ---------------------------------------------------------------- the cases


Handler = Callable[[Graph, Node, int], "str | None"]


def _identity(graph: Graph, node: Node, opset: int) -> str | None:
    return node.inputs[0] if node.inputs else None


def _dropout(graph: Graph, node: Node, opset: int) -> str | None:
    inputs, outputs = node.inputs, node.outputs
    if len(outputs) > 1 and not output_is_free(graph, outputs[1]):
        return None  # the mask is read
    if opset < 7:
        if not node.attr("is_test", 0):
            return None
    elif len(inputs) > 2 and inputs[2]:
        training = graph.const(inputs[2])
        if training is None or bool(np.any(training)):
            return None
    return inputs[0]


def _cast(graph: Graph, node: Node, opset: int) -> str | None:
    x = node.inputs[0]
    known = infer_dtype(graph, x)
    return x if known is not None and known == node.attr("to") else None


def _cast_like(graph: Graph, node: Node, opset: int) -> str | None:
    x, target = node.inputs[0], node.inputs[1]
    known = infer_dtype(graph, x)
    return x if known is not None and known == infer_dtype(graph, target) else None


def _reshape(graph: Graph, node: Node, opset: int, shapes=None) -> str | None:
    inputs = node.inputs
    if len(inputs) < 2 or not inputs[1]:
        return None  # Reshape-1 (shape attribute) is not handled
    x, s = inputs[0], inputs[1]
    maker = graph.producer(s)
    if (
        maker is not None
        and maker.op_type == "Shape"
        and maker.domain in STANDARD_DOMAINS
        and maker.inputs[0] == x
        and not maker.attr("start", 0)
        and maker.attr("end") is None
    ):
        return x
    target = graph.const(s)
    shape = graph.declared_shape(x)
    if shape is None and target is not None and shapes is not None:
        shape = shapes.shape(x)  # tf2onnx's Reshape(x, [-1, 1, 172, 264]) of a [N, 1, 172, 264] x
    if target is None or shape is None:
        return None
    target = [int(t) for t in np.asarray(target).reshape(-1)]
    if len(target) != len(shape):
        return None
    allowzero = node.attr("allowzero", 0)
    inferred = 0
    for t, d in zip(target, shape):
        if t == 0 and not allowzero:
            continue
        if t == -1:
            inferred += 1
            continue
        if not isinstance(d, int) or d != t:
            return None
    if inferred > 1:
        return None
    if inferred and any(d == 0 for d in shape):
        return None  # -1 next to a zero dim is ambiguous
    return x


def _expand(graph: Graph, node: Node, opset: int, shapes=None) -> str | None:
    x, s = node.inputs[0], node.inputs[1]
    target = graph.const(s)
    shape = _known_shape(graph, x, shapes)
    if target is None or shape is None:
        return None
    target = [int(t) for t in np.asarray(target).reshape(-1)]
    if len(target) > len(shape):
        return None
    for t, d in zip(reversed(target), reversed(shape)):
        if t != 1 and not (isinstance(d, int) and d == t):
            return None
    return x


def _transpose(graph: Graph, node: Node, opset: int) -> str | None:
    x = node.inputs[0]
    perm = node.attr("perm")
    if perm is None:
        rank = rank_of(graph, x)
        return x if rank is not None and rank <= 1 else None
    return x if list(perm) == list(range(len(perm))) else None


def _pad(graph: Graph, node: Node, opset: int) -> str | None:
    inputs = node.inputs
    pads = node.attr("pads")
    if pads is None:
        if len(inputs) < 2 or not inputs[1]:
            return None
        pads = graph.const(inputs[1])
        if pads is None:
            return None
    return inputs[0] if not np.any(np.asarray(pads)) else None


def _slice(graph: Graph, node: Node, opset: int) -> str | None:
    inputs = node.inputs
    x = inputs[0]
    if node.attr("starts") is not None:  # Slice-1: attributes
        starts, ends = node.attr("starts"), node.attr("ends")
        axes, steps = node.attr("axes"), None
    else:
        parts = []
        for slot in range(1, 5):
            if slot < len(inputs) and inputs[slot]:
                c = graph.const(inputs[slot])
                if c is None:
                    return None
                parts.append([int(v) for v in np.asarray(c).reshape(-1)])
            else:
                parts.append(None)
        starts, ends, axes, steps = parts
    if starts is None or ends is None:
        return None
    axes = list(range(len(starts))) if axes is None else list(axes)
    steps = [1] * len(starts) if steps is None else list(steps)
    shape = graph.declared_shape(x)
    rank = None if shape is None else len(shape)
    axes = normalize_axes(axes, rank)
    if axes is None:
        return None
    for start, end, axis, step in zip(starts, ends, axes, steps):
        if step != 1:
            return None
        dim = shape[axis] if shape is not None and axis < len(shape) else None
        static = isinstance(dim, int)
        if start > 0 or (start < 0 and not (static and start + dim <= 0) and start > -INT_MAX_END):
            return None
        if end < INT_MAX_END and not (static and end >= dim):
            return None
    return x


def _concat(graph: Graph, node: Node, opset: int) -> str | None:
    inputs = node.inputs
    return inputs[0] if len(inputs) == 1 and inputs[0] else None


def _undo_pair(graph: Graph, node: Node, opset: int) -> str | None:
    """Squeeze(Unsqueeze(x, a), a) or Unsqueeze(Squeeze(x, a), a)."""
    first = graph.producer(node.inputs[0])
    partner = "Unsqueeze" if node.op_type == "Squeeze" else "Squeeze"
    if first is None or first.op_type != partner or first.domain not in STANDARD_DOMAINS:
        return None
    a_first, a_second = axes_of(graph, first), axes_of(graph, node)
    if not a_first or not a_second:
        return None  # Squeeze without axes drops every 1-dim: not the inverse
    x = first.inputs[0]
    # Both lists address the same frame: Unsqueeze's output (= Squeeze's input), or x itself.
    rank = rank_of(graph, x)
    if rank is not None and first.op_type == "Unsqueeze":
        rank += len(a_first)
    if sorted(a_first) == sorted(a_second) and len(set(a_first)) == len(a_first):
        return x
    n_first, n_second = normalize_axes(a_first, rank), normalize_axes(a_second, rank)
    if n_first is None or n_second is None or len(set(n_first)) != len(n_first):
        return None
    return x if sorted(n_first) == sorted(n_second) else None


def _neutral(value: float, sides: tuple[int, ...]) -> Handler:
    """x op c == x when c is all ``value`` and broadcasting it keeps x's shape."""

    def handler(graph: Graph, node: Node, opset: int, shapes=None) -> str | None:
        inputs = node.inputs
        if len(inputs) != 2:
            return None
        for side in sides:
            c = graph.const(inputs[side])
            if c is None or c.dtype == np.bool_ or c.dtype.kind not in "fiuc" or not np.all(c == value):
                continue
            x = inputs[1 - side]
            if _broadcast_keeps(graph, x, c.shape, shapes):
                return x
        return None

    return handler


def _logic_neutral(value: bool) -> Handler:
    """``x And True`` and ``x Or False`` are x (both operands are bool by the schema)."""

    def handler(graph: Graph, node: Node, opset: int, shapes=None) -> str | None:
        inputs = node.inputs
        if len(inputs) != 2:
            return None
        for side in (1, 0):
            c = graph.const(inputs[side])
            if c is not None and c.dtype == np.bool_ and bool(np.all(c == value)) and \
                    _broadcast_keeps(graph, inputs[1 - side], c.shape, shapes):
                return inputs[1 - side]
        return None

    return handler


def _known_shape(graph: Graph, x: str, shapes=None) -> list | None:
    """x's declared shape, completed by shape inference (its rank and static dims; a symbolic dim never
    equals a number here) when ``shapes`` is given."""
    return shapes.shape(x) if shapes is not None else graph.declared_shape(x)


def _broadcast_keeps(graph: Graph, x: str, cshape: tuple[int, ...], shapes=None) -> bool:
    if len(cshape) == 0:
        return True
    shape = _known_shape(graph, x, shapes)
    if shape is None or len(cshape) > len(shape):
        return False
    return all(c == 1 or (isinstance(d, int) and d == c) for c, d in zip(reversed(cshape), reversed(shape)))


CASES: dict[str, Handler] = {
    "Identity": _identity,
    "Dropout": _dropout,
    "Cast": _cast,
    "CastLike": _cast_like,
    "Reshape": _reshape,
    "Expand": _expand,
    "Transpose": _transpose,
    "Pad": _pad,
    "Slice": _slice,
    "Concat": _concat,
    "Squeeze": _undo_pair,
    "Unsqueeze": _undo_pair,
    "Add": _neutral(0, (1, 0)),
    "Sub": _neutral(0, (1,)),
    "Mul": _neutral(1, (1, 0)),
    "Div": _neutral(1, (1,)),
    "And": _logic_neutral(True),
    "Or": _logic_neutral(False),
}
SHAPED = frozenset({"Reshape", "Expand", "Add", "Sub", "Mul", "Div", "And", "Or"})  # handlers that take ``shapes``


@register(level=1, priority=20)
class EliminateNoOps(Pass):
    """Remove ops that return their input unchanged: Identity, inference Dropout, same-type Cast, x*1..."""

    def run(self, graph: Graph, ctx: PassContext) -> PassResult:
        from graphtool.passes._ort_common import Shapes

        opset = graph_opset(graph, ctx)
        stats: dict[str, int] = {}
        kept = 0
        shapes = Shapes(graph, ctx)  # asked only where a declared shape does not settle it
        for op_type, handler in CASES.items():
            for node in graph.nodes(op_type):
                if node.domain not in STANDARD_DOMAINS or not graph.has_node(node):
                    continue
                outputs = node.outputs
                if not outputs or any(not output_is_free(graph, o) for o in outputs[1:]):
                    continue
                src = handler(graph, node, opset, shapes) if op_type in SHAPED else handler(graph, node, opset)
                if not src or src == outputs[0]:
                    continue
                if forward(graph, node, [(src, outputs[0])]):
                    stats[op_type] = stats.get(op_type, 0) + 1
                else:
                    kept += 1
        removed = sum(stats.values())
        if kept:
            stats["kept_for_output_name"] = kept
        return PassResult(changed=removed > 0, stats=stats)
