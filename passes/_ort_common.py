"""Helpers shared by the level-2 fusions (``ort_*`` contrib fusions, attention, RMSNorm).

Three things every level-2 rule needs and the level-1 helpers (``_fuse_common``) do not give:

* **Where contrib ops may go.** A ``com.microsoft`` op needs that domain in the opset imports of
  the model that holds it. Function bodies carry their own imports, so contrib fusions only touch
  the main graph and its subgraphs (``contrib_allowed``), and import the domain on first use
  (``use_ms_domain``). Every contrib op emitted is also checked against onnxruntime's own CPU
  kernel registry: a model that ORT cannot run is never produced.
* **Shapes as proof.** Fusions such as SkipLayerNormalization, FusedConv's ``Z`` or Attention are
  only exact when two tensors have the same shape or a value has rank 3. Declared shapes
  (``value_info``) are used first; when the model declares none (TorchScript exports), ONNX shape
  inference with data propagation runs *once per pass run* on a weightless copy of the graph
  (``Shapes``), which costs one linear walk, never a walk per node. Equal symbolic dims from that
  inference are equal by construction; unknown dims never compare equal.
* **Small pattern vocabulary**: ``producer_op`` (the producer if it has one of the op types),
  ``float_scalar`` and transpose-permutation composition.
"""

from __future__ import annotations

import numpy as np
from graphtool.passes._fuse_common import STANDARD_DOMAINS, is_op
from onnx import TensorProto, helper

from graphtool.ir.graph import Graph, Node
from graphtool.pass_manager import PassContext
from graphtool.runtime import has_cpu_kernel
from graphtool.shapes import declared_dims, dims_of

MS_DOMAIN = "com.microsoft"
FLOAT_TYPES = (TensorProto.FLOAT,)

Dim = int | str | None


def contrib_allowed(graph: Graph, ctx: PassContext, *op_types: str) -> bool:
    """True when ``graph`` belongs to the main graph tree (not a function body) and ORT's CPU
    provider has a kernel for every ``com.microsoft`` op in ``op_types``."""
    root = graph
    while root.parent is not None:
        root = root.parent
    if root is not ctx.model.graph:
        return False
    return all(has_cpu_kernel(op, MS_DOMAIN, 1) for op in op_types)


def use_ms_domain(ctx: PassContext) -> None:
    """Import ``com.microsoft`` (version 1) into the model, once."""
    if ctx.model.opset(MS_DOMAIN) is None:
        ctx.model.set_opset(MS_DOMAIN, 1)


def producer_op(graph: Graph, value: str, *op_types: str) -> Node | None:
    """The standard-domain producer of ``value`` when it is one of ``op_types``."""
    node = graph.producer(value) if value else None
    return node if is_op(node, *op_types) else None


def float_scalar(graph: Graph, value: str) -> float | None:
    """A finite one-element float/int constant of rank <= 1, as a Python float."""
    array = graph.const(value) if value else None
    if array is None or array.size != 1 or array.ndim > 1 or array.dtype.kind not in "fiu":
        return None
    number = float(array.reshape(-1)[0])
    return number if np.isfinite(number) else None


def compose_perm(first: list[int], then: list[int]) -> list[int]:
    """The permutation of Transpose(Transpose(x, first), then) as one Transpose of x."""
    return [first[i] for i in then]


def transpose_perm(node: Node, rank: int | None) -> list[int] | None:
    perm = node.attr("perm")
    if perm is not None:
        return [int(p) for p in perm]
    return list(range(rank - 1, -1, -1)) if rank is not None else None


def same_dim(a: Dim, b: Dim) -> bool:
    """Two dims are provably equal: the same static number, or the same symbolic name."""
    return a is not None and b is not None and type(a) is type(b) and a == b


def same_shape(a: list[Dim] | None, b: list[Dim] | None) -> bool:
    return a is not None and b is not None and len(a) == len(b) and all(same_dim(x, y) for x, y in zip(a, b))


def array_dtype(onnx_type: int | None) -> np.dtype | None:
    if not onnx_type:
        return None
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(onnx_type))
    except (KeyError, TypeError, ValueError):
        return None


class Shapes:
    """Shapes and dtypes of a graph's values: declared first, then the pass context's oracle.

    Valid for one pass run (the oracle's symbolic dims are comparable within one inference run,
    and the manager reruns it only between passes): fusions keep every surviving value's shape,
    and values they create are simply unknown to the oracle until the next run.
    """

    def __init__(self, graph: Graph, ctx: PassContext):
        self.graph = graph
        self.ctx = ctx

    def _inferred(self, value: str) -> tuple[int, list[Dim] | None] | None:
        t = self.ctx.shapes.type_of(self.graph, value)
        if t is None or not t.HasField("tensor_type"):
            return None
        return t.tensor_type.elem_type, dims_of(t)

    def shape(self, value: str) -> list[Dim] | None:
        shape = declared_dims(self.graph, value)  # another tool's made-up unk__N dims: unknown
        if shape is not None and all(d is not None for d in shape):
            return shape
        array = self.graph.const(value) if value in self.graph.initializers else None
        if array is not None:
            return list(array.shape)
        found = self._inferred(value)
        inferred = found[1] if found else None
        if shape is None:
            return inferred
        if inferred is not None and len(inferred) == len(shape):
            return [d if d is not None else e for d, e in zip(shape, inferred)]
        return shape

    def rank(self, value: str) -> int | None:
        shape = self.shape(value)
        return None if shape is None else len(shape)

    def dtype(self, value: str) -> int | None:
        dtype = self.graph.dtype(value)
        if dtype:
            return dtype
        array = self.graph.const(value)
        if array is not None:
            try:
                return helper.np_dtype_to_tensor_dtype(array.dtype)
            except (KeyError, TypeError, ValueError):
                return None
        found = self._inferred(value)
        if found and found[0]:
            return found[0]
        from graphtool.passes._types import infer_dtype  # what inference could not type

        return infer_dtype(self.graph, value)

    def is_float(self, value: str) -> bool:
        return self.dtype(value) in FLOAT_TYPES


def is_standard(node: Node | None) -> bool:
    return node is not None and node.domain in STANDARD_DOMAINS


# ---------------------------------------------------------------- shape tensors and dims

Piece = int | tuple[str, int]  # a constant, or (value, axis): "the size of that value's axis"


def _const_ints(graph: Graph, value: str) -> list[int] | None:
    array = graph.const(value) if value else None
    if array is None or array.dtype.kind not in "iu" or array.ndim > 1:
        return None
    return [int(v) for v in array.reshape(-1)]


def shape_pieces(graph: Graph, shapes: Shapes, value: str, depth: int = 0) -> list[Piece] | None:
    """What a 1-D int64 shape tensor is made of, element by element, or None if not traceable.

    Follows the exporters' shape plumbing: constants, Concat, Unsqueeze/Squeeze/Cast of one
    element, Shape (with start/end), Gather(Shape(z), k) and Slice of a traced vector.
    """
    if depth > 12:
        return None
    consts = _const_ints(graph, value)
    if consts is not None:
        return list(consts)
    node = graph.producer(value)
    if node is None or not is_standard(node):
        return None
    op = node.op_type
    if op == "Concat":
        out: list[Piece] = []
        for part in node.inputs:
            sub = shape_pieces(graph, shapes, part, depth + 1)
            if sub is None:
                return None
            out.extend(sub)
        return out
    if op in ("Unsqueeze", "Squeeze", "Cast", "Identity"):
        sub = shape_pieces(graph, shapes, node.inputs[0], depth + 1)
        return sub if sub is not None and (op in ("Cast", "Identity") or len(sub) == 1) else None
    if op == "Shape":
        source = node.inputs[0]
        r = shapes.rank(source)
        start, end = node.attr("start", 0), node.attr("end", None)
        if r is None and (start < 0 or end is None or end < 0):
            return None
        if r is not None:
            start = max(0, start + r if start < 0 else start)
            end = r if end is None else min(r, end + r if end < 0 else end)
        return [(source, k) for k in range(start, end)]
    if op == "Gather":
        if node.attr("axis", 0) != 0:
            return None
        index = _const_ints(graph, node.inputs[1])
        base = shape_pieces(graph, shapes, node.inputs[0], depth + 1)
        if index is None or base is None:
            return None
        try:
            return [base[i] for i in index]
        except IndexError:
            return None
    if op == "Slice" and len(node.inputs) >= 3:
        base = shape_pieces(graph, shapes, node.inputs[0], depth + 1)
        starts, ends = _const_ints(graph, node.inputs[1]), _const_ints(graph, node.inputs[2])
        axes = _const_ints(graph, node.inputs[3]) if len(node.inputs) > 3 and node.inputs[3] else [0]
        steps = _const_ints(graph, node.inputs[4]) if len(node.inputs) > 4 and node.inputs[4] else [1]
        if base is None or starts is None or ends is None or axes not in ([0], [-1]) or steps != [1]:
            return None
        return base[slice(starts[0], ends[0])]
    return None


def piece_at(graph: Graph, shapes: Shapes, value: str, index: int, depth: int = 0) -> Piece | None:
    """Element ``index`` of a 1-D shape tensor, traced on its own where the whole vector is not
    (``shape_pieces``): the Concat part that holds it, a vector flattened by Reshape [-1], and
    TorchScript's Expand target ``Where(Equal(t, -1), ones, t)`` (a dim of t is never negative,
    so it stays; a -1 becomes the 1). A decoder mask's target [B, -1, S, P + S] gives B and S
    though P + S is a sum."""
    if depth > 12 or index < 0:
        return None
    whole = shape_pieces(graph, shapes, value, depth)
    if whole is not None:
        return whole[index] if index < len(whole) else None
    node = graph.producer(value)
    if node is None or not is_standard(node):
        return None
    op = node.op_type
    if op == "Concat":
        start = 0
        for part in node.inputs:
            shape = shapes.shape(part)
            if shape is None or len(shape) != 1 or not isinstance(shape[0], int):
                return None
            if index < start + shape[0]:
                return piece_at(graph, shapes, part, index - start, depth + 1)
            start += shape[0]
        return None
    if op == "Reshape" and _const_ints(graph, node.inputs[1]) == [-1]:
        return piece_at(graph, shapes, node.inputs[0], index, depth + 1)
    if op == "Where":
        cond = graph.producer(node.inputs[0])
        if cond is None or cond.op_type != "Equal" or not is_standard(cond) or cond.inputs[0] != node.inputs[2]:
            return None
        k, alt = _const_ints(graph, cond.inputs[1]), _const_ints(graph, node.inputs[1])
        if not k or not alt or any(len(v) > 1 and index >= len(v) for v in (k, alt)):
            return None
        k_i, alt_i = k[index if len(k) > 1 else 0], alt[index if len(alt) > 1 else 0]
        piece = piece_at(graph, shapes, node.inputs[2], index, depth + 1)
        if isinstance(piece, int):
            return alt_i if piece == k_i else piece
        return piece if piece is not None and k_i < 0 else None
    return None


_SAME_SHAPE_UNARY = {
    "Relu", "Gelu", "Erf", "Tanh", "Sigmoid", "Cast", "Identity", "Softmax", "LayerNormalization",
    "Dropout", "Neg", "Sqrt", "Exp", "Abs", "LeakyRelu", "HardSigmoid", "HardSwish", "Clip",
    "IsNaN", "IsInf", "Not", "Reciprocal", "Log", "Sin", "Cos", "Floor", "Ceil", "Round", "Sign", "Softplus",
    "Elu", "Selu", "Celu", "Mish",
}
_ELEMENTWISE = {"Add", "Sub", "Mul", "Div", "Pow", "Where"}
_REDUCE = {"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
           "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"}
_MS_SAME_SHAPE = {"SkipLayerNormalization", "SkipSimplifiedLayerNormalization", "SimplifiedLayerNormalization",
                  "RotaryEmbedding", "BiasGelu", "FastGelu",
                  "Gelu", "QuickGelu", "FusedMatMul"}


class Dims:
    """Proves two dims equal: same value and axis, equal declared/inferred dims, or the same
    *root* — the dim a chain of shape-preserving ops copied it from (``root``)."""

    def __init__(self, graph: Graph, shapes: Shapes):
        self.graph = graph
        self.shapes = shapes
        self._roots: dict[tuple[str, int], tuple[str, int]] = {}

    def static(self, value: str, axis: int) -> int | None:
        shape = self.shapes.shape(value)
        if shape is None or not -len(shape) <= axis < len(shape):
            return None
        dim = shape[axis]
        return dim if isinstance(dim, int) else None

    def root(self, value: str, axis: int) -> tuple[str, int]:
        """Walk producers while dim ``axis`` of the output is provably dim ``a`` of one input.

        Memoized for the pass run, so every (value, axis) is walked once however often asked.
        """
        start = (value, axis)
        visited: list[tuple[str, int]] = []
        while (value, axis) not in self._roots and len(visited) < 4096:
            visited.append((value, axis))
            step = self._step(value, axis)
            if step is None:
                break
            value, axis = step
        found = self._roots.get((value, axis), (value, axis))
        for key in visited:
            self._roots[key] = found
        return self._roots.get(start, found)

    def _step(self, value: str, axis: int) -> tuple[str, int] | None:
        """One producer up: the (input, axis) that dim ``axis`` of ``value`` is a copy of."""
        r = self.shapes.rank(value)
        node = self.graph.producer(value)
        if r is None or not 0 <= axis < r or node is None:
            return None
        op, ins = node.op_type, node.inputs
        if node.domain == MS_DOMAIN:
            if op in ("Attention", "MultiHeadAttention") and axis < 2 and r == 3:
                return (ins[0], axis)  # [B, S, ·] of the query input
            same = op in _MS_SAME_SHAPE and op != "FusedMatMul"
            return (ins[0], axis) if same and self.shapes.rank(ins[0]) == r else None
        if op == "SimplifiedLayerNormalization" and node.domain in ("", "ai.onnx"):  # ORT's, in the ONNX domain
            return (ins[0], axis) if self.shapes.rank(ins[0]) == r else None
        if not is_standard(node):
            return None
        if op in _SAME_SHAPE_UNARY:
            return (ins[0], axis) if self.shapes.rank(ins[0]) == r else None
        if op in _ELEMENTWISE:
            return self._elementwise(node, r, axis)
        if op == "MatMul" and self.shapes.rank(ins[0]) == r and r >= 2:
            # batch dims and rows come from A when B has no batch dims of its own
            if axis == r - 2 or (axis < r - 2 and (self.shapes.rank(ins[1]) or 99) <= 2):
                return (ins[0], axis)
            return None
        if op == "Gather":  # out = data's dims before the axis, the indices' dims, data's dims after it
            ids_rank, data_rank = self.shapes.rank(ins[1]), self.shapes.rank(ins[0])
            if ids_rank is None or data_rank is None:
                return None
            at = node.attr("axis", 0)
            at = at + data_rank if at < 0 else at
            if axis < at:
                return (ins[0], axis)
            if axis < at + ids_rank:
                return (ins[1], axis - at)
            return (ins[0], axis - ids_rank + 1)
        if op == "Transpose":
            perm = transpose_perm(node, r)
            return (ins[0], perm[axis]) if perm is not None and len(perm) == r else None
        if op == "Split":
            split_axis = node.attr("axis", 0)
            split_axis = split_axis + r if split_axis < 0 else split_axis
            return (ins[0], axis) if axis != split_axis and self.shapes.rank(ins[0]) == r else None
        if op == "Unsqueeze":
            axes = node.attr("axes")
            axes = [int(a) for a in axes] if axes is not None else _const_ints(self.graph, ins[1]) if len(ins) > 1 else None
            if axes is None:
                return None
            axes = sorted(a + r if a < 0 else a for a in axes)
            return None if axis in axes else (ins[0], axis - sum(a < axis for a in axes))
        if op == "Reshape":
            # a 0 copies the input's dim (allowzero 0); a traced Shape piece is that value's dim
            target = shape_pieces(self.graph, self.shapes, ins[1])
            if target is None or len(target) != r:
                return None
            piece = target[axis]
            if isinstance(piece, tuple):
                return piece
            return (ins[0], axis) if piece == 0 and not node.attr("allowzero", 0) else None
        if op == "Tile":  # an axis repeated once is the input's (GPT-J's repeat_interleave of the angles)
            repeats = _const_ints(self.graph, ins[1]) if len(ins) > 1 else None
            return (ins[0], axis) if repeats is not None and len(repeats) == r and repeats[axis] == 1 else None
        if op in _REDUCE and node.attr("keepdims", 1) and self.shapes.rank(ins[0]) == r:
            return self._kept_axis(node, r, axis)
        return None

    def _kept_axis(self, node: Node, r: int, axis: int) -> tuple[str, int] | None:
        """A reduction with keepdims: an axis it does not reduce is its input's (an RMS norm's
        ReduceMean over the last axis keeps x's batch, heads and length). Axes from the attribute
        (opset < 18) or a constant input; none given reduces all axes, or none with
        noop_with_empty_axes."""
        ins = node.inputs
        axes = node.attr("axes")
        if axes is None and len(ins) > 1 and ins[1]:
            axes = _const_ints(self.graph, ins[1])
            if axes is None:
                return None
        if axes is None or len(axes) == 0:
            return (ins[0], axis) if node.attr("noop_with_empty_axes", 0) else None
        reduced = {int(a) + r if int(a) < 0 else int(a) for a in axes}
        return None if axis in reduced else (ins[0], axis)

    def _elementwise(self, node: Node, r: int, axis: int) -> tuple[str, int] | None:
        """Output dim = the one input whose dim is not a broadcast 1 (others are provably 1 or
        absent, or have the same root)."""
        candidates: list[tuple[str, int]] = []
        for value in node.inputs:
            shape = self.shapes.shape(value)
            if shape is None:
                return None
            pos = axis - (r - len(shape))
            if pos < 0 or shape[pos] == 1:
                continue  # absent or broadcast along this axis
            candidates.append((value, pos))
        if not candidates:
            return None
        if len(candidates) == 1:
            return candidates[0]
        roots = {self.root(v, a) for v, a in candidates}
        return roots.pop() if len(roots) == 1 else None

    def equal(self, a: tuple[str, int], b: tuple[str, int]) -> bool:
        if a == b:
            return True
        sa, sb = self.shapes.shape(a[0]), self.shapes.shape(b[0])
        if sa is not None and sb is not None and a[1] < len(sa) and b[1] < len(sb) and same_dim(sa[a[1]], sb[b[1]]):
            return True
        ra, rb = self.root(*a), self.root(*b)
        if ra == rb:
            return True
        sa, sb = self.shapes.shape(ra[0]), self.shapes.shape(rb[0])
        return sa is not None and sb is not None and ra[1] < len(sa) and rb[1] < len(sb) and same_dim(sa[ra[1]], sb[rb[1]])

    def target_is(self, target: str, allowzero: int, expected: list[int | tuple[str, int]],
                  copies: dict[int, tuple[str, int]]) -> bool:
        """A Reshape target provably equals ``expected`` (ints, or (value, axis) dims).

        ``copies[j]`` is what a literal 0 at position j copies (the Reshape input's dim j) when
        allowzero is 0. One -1 is accepted when every other entry is proven: the element count
        then fixes it (the caller guarantees the expected shape has the input's element count).
        """
        pieces = shape_pieces(self.graph, self.shapes, target)
        if pieces is None or len(pieces) != len(expected):
            return False
        unknown = 0
        for j, (piece, want) in enumerate(zip(pieces, expected)):
            if isinstance(piece, int):
                if piece == -1:
                    unknown += 1
                    continue
                if piece == 0 and not allowzero:
                    copy = copies.get(j)
                    if copy is None or not (copy == want or (not isinstance(want, int) and self.equal(copy, want))
                                            or (isinstance(want, int) and self.static(*copy) == want)):
                        return False
                    continue
                if isinstance(want, int):
                    if piece != want:
                        return False
                elif self.static(*want) != piece:
                    return False
            else:
                if isinstance(want, int):
                    if self.static(*piece) != want:
                        return False
                elif not self.equal(piece, want):
                    return False
        return unknown <= 1


def record_shape(graph: Graph, shapes: Shapes, value: str, dims: list[Dim] | None = None, dtype: int | None = None) -> None:
    """Declare a fused op's output type in ``value_info`` when the graph declares none.

    ONNX shape inference cannot see through ``com.microsoft`` ops, so without this every value
    downstream of the first contrib op would lose its shape for the next pass run. The shape is
    the one the replaced subgraph's value had (or one the caller proved); inference-generated
    names (``unk__N``) are written as unknown dims, so they can never alias a later run's names.
    """
    if graph.declared_shape(value) is not None and graph.dtype(value):
        return
    dims = dims if dims is not None else shapes.shape(value)
    dtype = dtype or shapes.dtype(value)
    if dims is None or not dtype:
        return
    clean = [d if isinstance(d, int) or (isinstance(d, str) and not d.startswith("unk__")) else None for d in dims]
    graph.set_value_info(value, helper.make_tensor_value_info(value, dtype, clean))


def replace_with(graph: Graph, chain: list[Node], op_type: str, inputs: list[str], outputs: list[str],
                 attrs: dict | None = None, name: str = "", domain: str = MS_DOMAIN) -> Node:
    """Remove ``chain`` and add one op writing ``outputs`` (the chain's values, same names).

    Like ``_fuse_common.replace_chain`` but for any domain and several outputs ('' = omitted).
    The new op is placed in the saved order after the producer of its first input.
    """
    near = None
    for value in inputs:
        producer = graph.producer(value) if value else None
        if producer is not None and producer not in chain:
            near = producer
            break
    graph.remove_nodes(chain)
    return graph.add_node(op_type, inputs, outputs, attrs or {}, domain=domain, name=name, near=near)
