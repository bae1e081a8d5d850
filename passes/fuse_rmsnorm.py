"""Hand-written RMS norm → RMSNormalization (opset >= 23), or ORT's SimplifiedLayerNormalization.

LLaMA/T5-style models normalize by the root mean square only; exporters write it as five or six
elementwise ops::

    ms = ReduceMean(Pow(x, 2) | Mul(x, x), trailing axes, keepdims=1)
    r  = Sqrt(Add(ms, eps))                       (no Add: eps = 0)
    n  = Div(x, r) | Mul(x, Reciprocal(r)) | Mul(x, Div(1, r))
    y  = Mul(n, gamma)                            (optional, either operand order)

* ``fuse-rms-norm`` (standard ops) writes ``RMSNormalization(x, scale, axis=-k, epsilon)`` when the
  opset is >= 23 (where the op exists); below that it leaves the graph alone.
* ``ort-rms-norm`` (``--target ort``) writes onnxruntime's ``SimplifiedLayerNormalization`` (an ORT
  op in the default domain, registered since version 1) below opset 23.

It refuses when an intermediate has another reader or is a graph output, when the reduced axes
are not the trailing ones, when eps / the exponent are not one-element constants (exponent
exactly 2), when gamma does not broadcast along the normalized axes only, when gamma is absent
and the normalized size is not static (the op needs an explicit scale), or when the dtype is not
float32.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from graphtool.ir.graph import Graph, Node
from graphtool.pass_manager import Pass, PassContext, PassResult, register
from graphtool.passes._fuse_common import (
    Namer,
    drop_dead_constants,
    graph_opset,
    is_op,
    only_feeds,
    other_input,
    reduce_mean_axes,
    scalar_const,
    sole_user,
    trailing_axes_count,
)
from graphtool.passes._ort_common import Shapes, record_shape, replace_with


@dataclass
class RmsMatch:
    x: str
    k: int
    eps: float
    chain: list[Node]
    out: str
    gamma: np.ndarray | None = None
    consts: list[str] = field(default_factory=list)


def match_rms(graph: Graph, shapes: Shapes, rm: Node) -> RmsMatch | None:
    """Anchored on the ReduceMean of x²."""
    square = graph.producer(rm.inputs[0])
    if is_op(square, "Pow") and len(square.inputs) == 2:
        x = square.inputs[0]
        exponent = square.inputs[1]
    elif is_op(square, "Mul") and len(square.inputs) == 2 and square.inputs[0] == square.inputs[1]:
        x, exponent = square.inputs[0], None
    else:
        return None
    if not only_feeds(graph, rm.inputs[0], rm):
        return None
    rank = shapes.rank(x)
    axes = reduce_mean_axes(graph, rm)
    k = trailing_axes_count(axes, rank) if axes else None
    if not k:
        return None
    max_rank = rank if rank is not None else 0
    consts = list(rm.inputs[1:])
    if exponent is not None:
        if scalar_const(graph, exponent, max_rank) != 2.0:
            return None
        consts.append(exponent)
    chain = [square, rm]
    value = rm.outputs[0]
    eps = 0.0
    user = sole_user(graph, value)
    if is_op(user, "Add"):
        c = other_input(user, value)
        eps = scalar_const(graph, c, max_rank) if c is not None else None
        if eps is None or eps < 0:
            return None
        consts.append(c)
        chain.append(user)
        value = user.outputs[0]
        user = sole_user(graph, value)
    if not is_op(user, "Sqrt"):
        return None
    chain.append(user)
    std = user.outputs[0]
    user = sole_user(graph, std)
    if is_op(user, "Div") and len(user.inputs) == 2 and user.inputs == [x, std]:
        chain.append(user)
    elif is_op(user, "Reciprocal") or (is_op(user, "Div") and len(user.inputs) == 2 and user.inputs[1] == std
                                       and scalar_const(graph, user.inputs[0], max_rank) == 1.0):
        if user.op_type == "Div":
            consts.append(user.inputs[0])
        chain.append(user)
        norm = sole_user(graph, user.outputs[0])
        if not is_op(norm, "Mul") or other_input(norm, user.outputs[0]) != x:
            return None
        chain.append(norm)
    else:
        return None
    out = chain[-1].outputs[0]
    match = RmsMatch(x, k, eps, chain, out, consts=consts)
    user = sole_user(graph, out)
    if is_op(user, "Mul"):
        gamma_value = other_input(user, out)
        gamma = graph.const(gamma_value) if gamma_value else None
        if gamma is not None and gamma.dtype == np.float32 and gamma.ndim <= max(rank or 0, k):
            lead = gamma.shape[: max(0, gamma.ndim - k)]
            if all(d == 1 for d in lead):
                match.gamma = gamma.reshape(gamma.shape[max(0, gamma.ndim - k):])
                match.chain.append(user)
                match.out = user.outputs[0]
                match.consts.append(gamma_value)
    return match


def _scale(graph: Graph, shapes: Shapes, match: RmsMatch) -> np.ndarray | None:
    """The op's scale of exactly the normalized shape (gamma broadcast, or ones)."""
    shape = shapes.shape(match.x)
    dims = shape[len(shape) - match.k:] if shape is not None and len(shape) >= match.k else None
    static = dims is not None and all(isinstance(d, int) for d in dims)
    if match.gamma is None:
        return np.ones(dims, np.float32) if static else None
    if match.gamma.ndim == match.k and 1 not in match.gamma.shape and (not static or list(match.gamma.shape) == list(dims)):
        return match.gamma
    if not static:
        return None
    try:
        return np.ascontiguousarray(np.broadcast_to(match.gamma, dims)).astype(np.float32)
    except ValueError:
        return None


def _run(graph: Graph, ctx: PassContext, op_type: str) -> PassResult:
    shapes = Shapes(graph, ctx)
    namer = Namer(graph)
    fused = 0
    for rm in graph.nodes("ReduceMean"):
        if not graph.has_node(rm) or not is_op(rm, "ReduceMean"):
            continue
        match = match_rms(graph, shapes, rm)
        if match is None or not shapes.is_float(match.x):
            continue
        scale = _scale(graph, shapes, match)
        if scale is None:
            continue
        out_shape = shapes.shape(match.out)
        name = namer(match.chain, op_type, fallback=match.chain[-1].name)
        absorbed = [n.name or n.op_type for n in match.chain]
        scale_name = graph.add_initializer(scale, f"{name or 'rms'}_scale")
        attrs = {"axis": -match.k, "epsilon": float(match.eps)}
        if op_type == "RMSNormalization":
            attrs["stash_type"] = 1
        node = replace_with(graph, match.chain, op_type, [match.x, scale_name], [match.out], attrs, name=name, domain="")
        record_shape(graph, shapes, match.out, out_shape, 1)
        ctx.absorbed(node, absorbed)
        drop_dead_constants(graph, match.consts)
        fused += 1
    return PassResult(fused > 0, {"fused": fused})


@register(level=2, priority=57)
class FuseRmsNorm(Pass):
    """Fuse a hand-written RMS norm into one RMSNormalization (opset >= 23)."""

    def run(self, graph: Graph, ctx: PassContext) -> PassResult:
        if graph_opset(graph, ctx) < 23:
            return PassResult(False, {"fused": 0})
        return _run(graph, ctx, "RMSNormalization")


@register(level=2, target="ort", priority=57)
class OrtRmsNorm(Pass):
    """Below opset 23: fuse a hand-written RMS norm into ORT's SimplifiedLayerNormalization."""

    def run(self, graph: Graph, ctx: PassContext) -> PassResult:
        root = graph
        while root.parent is not None:
            root = root.parent
        if graph_opset(graph, ctx) >= 23 or root is not ctx.model.graph:
            return PassResult(False, {"fused": 0})
        return _run(graph, ctx, "SimplifiedLayerNormalization")
