"""Hand-written layer norm → one LayerNormalization (opset >= 17).

Exporters turn a layer norm written out in Python (BERT-style ``(x - u) / sqrt(s + eps)``) into
nine ops and three full passes over the activation; ``LayerNormalization`` does it in one kernel.
The pass recognises, anchored on each ``Sqrt`` and walking only producers/consumers::

    mean = ReduceMean(x, axes)            d = Sub(x, mean)
    var  = ReduceMean(Pow(d, 2) | Mul(d, d), axes)
    std  = Sqrt(Add(var, eps))            (no Add: eps = 0, as the dynamo exporter emits it)
    n    = Div(d, std) | Mul(d, Reciprocal(std)) | Mul(d, Div(1, std))
    y    = Add(Mul(n, gamma), beta)       (gamma and beta optional, either operand order)

including the older PyTorch form where ``d`` is computed by two identical Subs. It refuses when:

1. the model's (or function's) opset is below 17 — LayerNormalization does not exist there —
   unless the target is onnxruntime (``--target ort``), which has it from version 1;
2. the two ReduceMeans do not read the same ``x`` with the same axes and keepdims=1, or the axes
   are not the trailing ones (-k..-1, or r-k..r-1 with a known rank r): LayerNormalization only
   normalizes a suffix of the dimensions;
3. any intermediate (mean, d, d², var, var+eps, std, n, n*gamma) has a reader outside the chain
   or is a graph output — the unfused value would still be needed;
4. eps / the exponent 2 / the 1 of ``1/std`` are not one-element constants of rank <= k, or the
   exponent is not exactly 2;
5. the dtype is not float or float16 (the kernels computing with float32 stash);
6. gamma / beta are not constants that broadcast onto the normalized dims without touching the
   other axes — such a Mul/Add is then simply left after the LayerNormalization; and when gamma is
   missing, ones of the normalized shape are only created if that shape is statically known.

LayerNormalization gets ``axis=-k`` and the exporter's epsilon, and writes the chain's final
value under its name.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from onnx import helper

from graphtool.ir.graph import Graph, Node
from graphtool.pass_manager import Pass, PassContext, PassResult, register
from graphtool.passes._fuse_common import (
    Namer,
    drop_dead_constants,
    graph_opset,
    is_op,
    only_feeds,
    other_input,
    rank,
    reduce_mean_axes,
    replace_chain,
    scalar_const,
    sole_user,
    trailing_axes_count,
)

_LN_DTYPES = (np.float32, np.float16)


@dataclass
class _Match:
    x: str
    k: int  # number of trailing normalized axes
    eps: float
    chain: list[Node]
    out: str
    dtype: np.dtype | None = None
    gamma: tuple[str, np.ndarray] | None = None
    beta: tuple[str, np.ndarray] | None = None
    norm_dims: tuple[int, ...] | None = None  # static normalized dims, when the shape says so
    leftovers: list[str] = field(default_factory=list)


def _fit(array: np.ndarray, k: int, norm_dims: tuple[int, ...] | None, x_rank: int | None) -> np.ndarray | None:
    """gamma/beta as a LayerNormalization scale/bias of the normalized shape (case 6), or None."""
    if array.ndim > (x_rank if x_rank is not None else k):
        return None  # would grow the result's rank
    lead, tail = array.shape[: max(0, array.ndim - k)], array.shape[max(0, array.ndim - k):]
    if any(d != 1 for d in lead):
        return None  # varies along a non-normalized axis: not a LayerNorm affine
    if norm_dims is None:
        return array.reshape(tail) if len(tail) == k else None
    try:
        if np.broadcast_shapes(tail, norm_dims) != norm_dims:
            return None
    except ValueError:
        return None
    return np.ascontiguousarray(np.broadcast_to(array.reshape(tail), norm_dims))


def _match(graph: Graph, sqrt: Node) -> _Match | None:
    std = sqrt.outputs[0]
    chain: list[Node] = [sqrt]
    leftovers: list[str] = []

    # ---- upward: (Add eps)? ← ReduceMean ← Pow/Mul ← Sub ← ReduceMean
    source = graph.producer(sqrt.inputs[0])
    eps_value: str | None = None
    if is_op(source, "Add"):
        if not only_feeds(graph, source.outputs[0], sqrt) or len(source.inputs) != 2:
            return None
        slot = 0 if is_op(graph.producer(source.inputs[0]), "ReduceMean") else 1
        eps_value = source.inputs[1 - slot]
        chain.append(source)
        leftovers.append(eps_value)
        reader, source = source, graph.producer(source.inputs[slot])
    else:
        reader = sqrt
    rm2 = source
    if not is_op(rm2, "ReduceMean") or not only_feeds(graph, rm2.outputs[0], reader):
        return None
    square = graph.producer(rm2.inputs[0])
    if is_op(square, "Pow") and len(square.inputs) == 2:
        exponent = square.inputs[1]
        leftovers.append(exponent)
    elif is_op(square, "Mul") and len(square.inputs) == 2 and square.inputs[0] == square.inputs[1]:
        exponent = None
    else:
        return None
    if not only_feeds(graph, square.outputs[0], rm2):
        return None
    d = square.inputs[0]
    sub = graph.producer(d)
    if not is_op(sub, "Sub") or len(sub.inputs) != 2:
        return None
    x, mean = sub.inputs
    rm1 = graph.producer(mean)
    if not is_op(rm1, "ReduceMean") or rm1.inputs[0] != x:
        return None
    axes1, axes2 = reduce_mean_axes(graph, rm1), reduce_mean_axes(graph, rm2)
    leftovers += rm1.inputs[1:] + rm2.inputs[1:]
    if axes1 is None or axes2 is None:
        return None
    x_rank = rank(graph, x)
    k = trailing_axes_count(axes1, x_rank)
    if k is None or k == 0 or trailing_axes_count(axes2, x_rank) != k:
        return None

    # ---- the normalization: d / std in one of its three spellings
    user = sole_user(graph, std)
    if is_op(user, "Div") and len(user.inputs) == 2 and user.inputs[1] == std and scalar_const(graph, user.inputs[0], k) != 1.0:
        norm, d2, extra = user, user.inputs[0], []
    elif is_op(user, "Reciprocal") or (is_op(user, "Div") and len(user.inputs) == 2 and user.inputs[1] == std):
        if user.op_type == "Div":
            leftovers.append(user.inputs[0])
        recip = user.outputs[0]
        norm = sole_user(graph, recip)
        if not is_op(norm, "Mul"):
            return None
        d2 = other_input(norm, recip)
        if d2 is None:
            return None
        extra = [user]
    else:
        return None
    subs = [sub]
    if d2 == d:
        if graph.is_output(d) or any(u not in (square, norm) for u, _ in graph.uses(d)):
            return None
    else:
        sub2 = graph.producer(d2)
        if not is_op(sub2, "Sub") or sub2.inputs != [x, mean]:
            return None
        if not only_feeds(graph, d, square) or not only_feeds(graph, d2, norm):
            return None
        subs.append(sub2)
    if graph.is_output(mean) or any(u not in subs for u, _ in graph.uses(mean)):
        return None

    # ---- constants (case 4)
    eps = 0.0
    if eps_value is not None:
        eps = scalar_const(graph, eps_value, k)
        if eps is None:
            return None
    if exponent is not None and scalar_const(graph, exponent, k) != 2.0:
        return None

    chain = [rm1, *subs, square, rm2, *chain[::-1], *extra, norm]
    match = _Match(x, k, eps, chain, norm.outputs[0], leftovers=leftovers)
    match.dtype = _dtype(graph, x, eps_value)
    _absorb_affine(graph, match, x_rank)
    return match


def _dtype(graph: Graph, x: str, eps_value: str | None) -> np.dtype | None:
    """x's dtype from its declared type, else from eps (Add makes them equal); None if unknown."""
    onnx_type = graph.dtype(x)
    if onnx_type:
        try:
            return np.dtype(helper.tensor_dtype_to_np_dtype(onnx_type))
        except (KeyError, TypeError, ValueError):
            return None
    array = graph.const(eps_value) if eps_value else None
    return array.dtype if array is not None else None


def _absorb_affine(graph: Graph, match: _Match, x_rank: int | None) -> None:
    """Extend the match over a following Mul(·, gamma) and Add(·, beta) when they fit (case 6)."""
    shape = graph.shape(match.x)
    norm_dims = None
    if shape is not None and len(shape) >= match.k and all(isinstance(d, int) for d in shape[len(shape) - match.k:]):
        norm_dims = tuple(shape[len(shape) - match.k:])
    match.norm_dims = norm_dims
    for op_type, slot in (("Mul", "gamma"), ("Add", "beta")):
        user = sole_user(graph, match.out)
        if not is_op(user, op_type):
            continue
        value = other_input(user, match.out)
        array = graph.const(value) if value else None
        if array is None or array.dtype.kind != "f":
            break
        if match.dtype is None:
            match.dtype = array.dtype
        if array.dtype != match.dtype:
            break
        fitted = _fit(array, match.k, norm_dims, x_rank)
        if fitted is None:
            break
        setattr(match, slot, (value, fitted))
        match.chain.append(user)
        match.out = user.outputs[0]


def _tensor_input(graph: Graph, source: tuple[str, np.ndarray] | None, hint: str) -> str | None:
    """Reuse the constant's own value when it already has the fitted shape and dtype."""
    if source is None:
        return None
    value, fitted = source
    original = graph.const(value)
    if original is not None and original.shape == fitted.shape and original.dtype == fitted.dtype:
        return value
    return graph.add_initializer(fitted, hint)


def _ort_below_17(graph: Graph, ctx: PassContext) -> bool:
    """``--target ort`` below opset 17: onnxruntime registers LayerNormalization in the default
    domain from version 1 (its own schema; its LayerNormFusion emits it there), so the fused op
    runs in ORT though ONNX's checker does not know it. Main graph tree only, like contrib ops."""
    from graphtool.ort_kernels import ort_registers

    root = graph
    while root.parent is not None:
        root = root.parent
    return ctx.target == "ort" and root is ctx.model.graph and ort_registers("LayerNormalization", "", 1)


@register(level=1, priority=57)
class FuseLayerNorm(Pass):
    """Fuse a hand-written layer norm (ReduceMean/Sub/Pow/.../Div/Mul/Add) into LayerNormalization (opset >= 17)."""

    def run(self, graph: Graph, ctx: PassContext) -> PassResult:
        if graph_opset(graph, ctx) < 17 and not _ort_below_17(graph, ctx):
            return PassResult(False, {"fused": 0})
        fused = 0
        namer = Namer(graph)
        for sqrt in graph.nodes("Sqrt"):
            if not graph.has_node(sqrt) or sqrt.domain not in ("", "ai.onnx"):
                continue
            match = _match(graph, sqrt)
            if match is not None and self._commit(graph, ctx, match, namer):
                fused += 1
        return PassResult(fused > 0, {"fused": fused})

    @staticmethod
    def _commit(graph: Graph, ctx: PassContext, match: _Match, namer: Namer) -> bool:
        if match.dtype is None or match.dtype.type not in _LN_DTYPES:
            return False  # case 5
        if match.gamma is None:
            if match.norm_dims is None:
                return False  # case 6: ones of an unknown shape
            match.gamma = ("", np.ones(match.norm_dims, match.dtype))
        scale = _tensor_input(graph, match.gamma, "ln_scale")
        bias = _tensor_input(graph, match.beta, "ln_bias")
        inputs = [match.x, scale] + ([bias] if bias else [])
        name = namer(match.chain, "LayerNormalization", fallback=match.chain[-1].name)
        absorbed = [n.name or n.op_type for n in match.chain]
        leftovers = [*match.leftovers, match.gamma[0], match.beta[0] if match.beta else ""]
        node = replace_chain(graph, match.chain, "LayerNormalization", inputs, match.out,
                             {"axis": -match.k, "epsilon": float(match.eps)}, name=name)
        ctx.absorbed(node, absorbed)
        drop_dead_constants(graph, leftovers)
        return True
