"""Small helpers shared by the fusion passes (fuse_conv, fuse_gemm, fuse_layernorm, fuse_gelu).

Every fusion has the same shape: match a chain locally around an anchor node, check that the
chain's intermediate values are read by nothing else, then replace the chain by one node that
writes the chain's final value *under the same name* (so graph outputs and downstream readers
keep working without any rewiring). These helpers hold the parts that would otherwise be copied
four times: constant checks, single-use checks, the replacement itself, and naming.
"""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np

from graphtool.ir.graph import Graph, Node
from graphtool.pass_manager import PassContext
from graphtool.rewrite import Namer  # noqa: F401  (re-exported: the passes name fused nodes with it)

STANDARD_DOMAINS = ("", "ai.onnx")


def is_op(node: Node | None, *op_types: str) -> bool:
    """True for a standard-domain op of one of ``op_types`` (None is never an op)."""
    return node is not None and node.op_type in op_types and node.domain in STANDARD_DOMAINS


def graph_opset(graph: Graph, ctx: PassContext, domain: str = "") -> int:
    """The opset that governs ``graph``: a function body follows its function's own imports."""
    root = graph
    while root.parent is not None:
        root = root.parent
    for fn in ctx.model.functions:
        if fn.body is root:
            wanted = ("", "ai.onnx") if domain in ("", "ai.onnx") else (domain,)
            for op in fn.proto_shell.opset_import:
                if op.domain in wanted:
                    return op.version
            return 0
    return ctx.opset(domain)


def only_feeds(graph: Graph, value: str, node: Node) -> bool:
    """``value`` is read by ``node`` (in any number of slots) and by nothing else, nor is a graph output."""
    uses = graph.uses(value)
    return bool(uses) and all(user == node for user, _ in uses) and not graph.is_output(value)


def sole_user(graph: Graph, value: str) -> Node | None:
    """The one op reading ``value`` in exactly one slot, when ``value`` is not also a graph output."""
    uses = graph.uses(value)
    if len(uses) != 1 or graph.is_output(value):
        return None
    node, slot = uses[0]
    return node if slot >= 0 else None


def other_input(node: Node, value: str) -> str | None:
    """For a binary op reading ``value`` in one slot, the value in the other slot (None otherwise)."""
    ins = node.inputs
    if len(ins) != 2 or ins[0] == ins[1]:
        return None
    if ins[0] == value:
        return ins[1]
    if ins[1] == value:
        return ins[0]
    return None


def scalar_const(graph: Graph, value: str, max_rank: int | None = 0) -> float | None:
    """The number held by a one-element float/int constant of rank <= ``max_rank``.

    The rank bound is what keeps a rewrite shape-preserving: ``x * c`` with ``c`` of shape
    [1, 1, 1] has rank 3 even when ``x`` has rank 1, so a constant may only be dropped when its
    rank cannot exceed the other operand's. ``max_rank=None`` means "no bound".
    """
    array = graph.const(value)
    if array is None or array.size != 1 or array.dtype.kind not in "fiu":
        return None
    if max_rank is not None and array.ndim > max_rank:
        return None
    number = float(array.reshape(-1)[0])
    return number if np.isfinite(number) else None


def close(value: float | None, expected: float, rtol: float = 1e-4) -> bool:
    return value is not None and abs(value - expected) <= rtol * abs(expected)


def rank(graph: Graph, value: str) -> int | None:
    shape = graph.declared_shape(value)
    return None if shape is None else len(shape)


def attr_protos(node: Node) -> dict[str, Any]:
    """A node's attributes in a form ``add_node`` keeps verbatim (AttributeProto or subgraph)."""
    out: dict[str, Any] = {}
    for key, value in node.attrs.items():
        proto = node.attr_proto(key)
        out[key] = proto if proto is not None else value
    return out


def replace_chain(
    graph: Graph,
    chain: Iterable[Node],
    op_type: str,
    inputs: list[str],
    output: str,
    attrs: dict[str, Any] | None = None,
    name: str = "",
) -> Node:
    """Replace ``chain`` by one ``op_type`` node that writes ``output`` (the chain's last value).

    The output keeps its name (and its value_info), so graph outputs and every reader stay valid;
    the new node takes the saved-order place of the earliest node of the chain.
    """
    chain = list(chain)
    info = graph.value_info.get(output)
    first = min(chain, key=lambda n: n.order)
    node = graph.add_node(op_type, inputs, 1, attrs or {}, name=name, near=first)
    temp = node.outputs[0]
    graph.replace_all_uses(output, temp)
    graph.remove_nodes(chain)
    graph.rename_value(temp, output)
    if info is not None:
        graph.set_value_info(output, info)
    return node


def drop_dead_constants(graph: Graph, values: Iterable[str]) -> None:
    """Remove initializers / Constant ops that a fusion left unread (cheap, local, no scan)."""
    for value in dict.fromkeys(v for v in values if v):
        if not graph.has_value(value) or graph.uses(value) or graph.is_output(value) or graph.is_input(value):
            continue
        if graph.is_initializer(value):
            graph.remove_initializer(value)
            continue
        producer = graph.producer(value)
        if is_op(producer, "Constant"):
            graph.remove_nodes([producer])


def reduce_mean_axes(graph: Graph, node: Node) -> list[int] | None:
    """The axes of a keepdims=1 ReduceMean (attribute before opset 18, input after); [] = all."""
    if node.attr("keepdims", 1) != 1:
        return None
    if len(node.inputs) > 1 and node.inputs[1]:
        array = graph.const(node.inputs[1])
        if array is None or array.dtype.kind not in "iu":
            return None
        axes = [int(a) for a in array.reshape(-1)]
    else:
        axes = [int(a) for a in (node.attr("axes") or [])]
    if not axes and node.attr("noop_with_empty_axes", 0):
        return None  # an identity, not a mean
    return axes


def trailing_axes_count(axes: list[int], x_rank: int | None) -> int | None:
    """k when ``axes`` are exactly the last k axes of an input of rank ``x_rank``, else None."""
    if not axes:
        return x_rank  # reduce over everything: all axes are trailing
    k = len(axes)
    if all(a < 0 for a in axes):
        return k if sorted(axes) == list(range(-k, 0)) else None
    if x_rank is None:
        return None
    positive = sorted(a + x_rank if a < 0 else a for a in axes)
    return k if positive == list(range(x_rank - k, x_rank)) else None
