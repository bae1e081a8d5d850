"""Read a value's shape back from what the model declares about the values computed from it.

Exporters declare types on the values an op computes (branch outputs, value_info) more often
than on its inputs. TorchScript-exported recurrent models are the common case: silero VAD's
``If(Not(Size(Shape(x)) == 2))`` chooses between ``Unsqueeze(x, 0)`` and ``Identity(x)``, and
ONNX shape inference cannot tell the rank of ``x`` (it is itself an If output whose branches
differ in rank). Both branches declare their output's type, though: ``[1, N, 128]`` after the
Unsqueeze, ``[N, 128]`` after the Identity. Either way the model says ``x`` is ``[N, 128]``; once
that is written down, shape folding settles the condition and the If folds away. onnxscript's
optimizer draws the same conclusion (by merging an Identity's output shape into its input).

A declared type is a fact only where the declaration is certain to apply:

- a declaration in the graph that computes ``x`` always applies (every node of a graph runs);
- a declaration inside an If branch applies only when that branch runs, so a fact about ``x``
  counts only when *both* branches of one If in ``x``'s graph imply it, and they agree on the
  rank (dims they disagree on become unknown).

The ops read backwards are those whose output shape gives the input's: same-shape ops (Identity,
Cast, unary elementwise) and Unsqueeze/Squeeze with constant axes. ``x`` gets a value_info only
when nothing declares or infers its rank yet; a contradiction (the branches disagree on the
rank) records nothing. Cost: one look at each reader of each value read inside a branch.
"""

from __future__ import annotations

from onnx import ValueInfoProto, helper

from graphtool.ir.graph import Graph, Node
from graphtool.pass_manager import Pass, PassContext, PassResult, register

Dims = list  # of int | str | None
SAME_SHAPE = frozenset({"Identity", "Cast", "Relu", "Sigmoid", "Tanh", "Neg", "Abs", "Exp", "Log", "Sqrt",
                        "Not", "Reciprocal", "Floor", "Ceil", "Erf", "Softplus", "LeakyRelu", "Elu"})


def _axes(node: Node, graph: Graph) -> list[int] | None:
    """Constant Unsqueeze/Squeeze axes (input since opset 13, attribute before), else None."""
    if len(node.inputs) > 1 and node.inputs[1]:
        value = graph.const(node.inputs[1])
        return None if value is None else [int(a) for a in value.reshape(-1)]
    axes = node.attr("axes")
    return None if axes is None else [int(a) for a in axes]


def implied_input_shape(node: Node, graph: Graph) -> Dims | None:
    """The shape of ``node``'s first input that its declared output shape implies, or None."""
    if node.domain not in ("", "ai.onnx") or not node.outputs or not node.inputs:
        return None
    out = graph.declared_shape(node.outputs[0])
    if out is None:
        return None
    if node.op_type in SAME_SHAPE:
        return list(out)
    axes = _axes(node, graph)
    if axes is None:
        return None
    if node.op_type == "Unsqueeze":
        rank = len(out)
        drop = {a % rank for a in axes} if rank else set()
        if len(drop) != len(axes):
            return None
        return [d for i, d in enumerate(out) if i not in drop]
    if node.op_type == "Squeeze" and axes:
        rank = len(out) + len(axes)
        spots = sorted(a % rank for a in axes)
        if len(set(spots)) != len(spots):
            return None
        dims, rest = [], iter(out)
        for i in range(rank):
            dims.append(1 if i in spots else next(rest))
        return dims
    return None


def _merge(a: Dims | None, b: Dims | None) -> Dims | None:
    """What two facts about one value both say (None: they disagree on the rank)."""
    if a is None or b is None or len(a) != len(b):
        return None
    return [x if x == y else None for x, y in zip(a, b)]


def _dtype(reader: Node, branch: Graph) -> int | None:
    """The input's element type a reader's declared output gives (a Cast's says nothing)."""
    return None if reader.op_type == "Cast" else branch.dtype(reader.outputs[0])


def _facts(graph: Graph, branch: Graph) -> dict[str, tuple[Dims, int | None]]:
    """Outer values of ``graph`` whose shape (and maybe dtype) a declaration in ``branch`` implies."""
    facts: dict[str, tuple[Dims, int | None]] = {}
    for value in branch.free_values():
        if not graph.has_value(value) or graph.is_free(value):
            continue  # defined above ``graph``: the If may not run every time it is computed
        implied: Dims | None = None
        dtype: int | None = None
        for reader in branch.consumers(value):
            if reader.inputs[:1] != [value]:
                continue
            shape = implied_input_shape(reader, branch)
            if shape is not None:
                implied = shape if implied is None else _merge(implied, shape)
                if implied is None:
                    break
                dtype = dtype or _dtype(reader, branch)
        if implied is not None:
            facts[value] = (implied, dtype)
    return facts


def _info(name: str, elem_type: int, dims: Dims) -> ValueInfoProto:
    return helper.make_tensor_value_info(name, elem_type, dims)


@register(level=1, priority=14)
class DeclaredShapes(Pass):
    """Give a value of unknown rank the shape both branches of an If declare for it."""

    def run(self, graph: Graph, ctx: PassContext) -> PassResult:
        recorded = 0
        for node in graph.nodes("If"):
            if node.domain not in ("", "ai.onnx"):
                continue
            then_b, else_b = node.attr("then_branch"), node.attr("else_branch")
            if not isinstance(then_b, Graph) or not isinstance(else_b, Graph):
                continue
            other = _facts(graph, else_b)
            for value, (dims, dtype) in _facts(graph, then_b).items():
                if value not in other or graph.declared_shape(value) is not None:
                    continue
                merged = _merge(dims, other[value][0])
                dtype = graph.dtype(value) or dtype or other[value][1]
                if merged is None or not dtype:
                    continue
                graph.set_value_info(value, _info(value, dtype, merged))
                recorded += 1
        return PassResult(changed=recorded > 0, stats={"recorded": recorded})
