"""Patterns, checks and replacements of the norm rules (``fuse_layernorm``, ``fuse_rmsnorm``, ``ort_layernorm``).

A check returns None to accept or the reason it refuses (what ``--explain`` prints). The
patterns say which ops; the checks say the numbers: trailing reduce axes, eps / exponent / the
1 of ``1/std`` one-element constants of a rank that cannot broadcast the result, gamma and beta
that only span the normalized dims, the dtypes the kernels take.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
from graphtool.passes._fuse_common import graph_opset, rank, reduce_mean_axes, scalar_const, trailing_axes_count
from graphtool.passes._ort_common import Dims, Shapes, record_shape, use_ms_domain
from graphtool.passes._rule_common import Facts
from onnx import TensorProto, helper

from graphtool.ir.graph import Graph
from graphtool.pass_manager import PassContext
from graphtool.rewrite import Const, Match, Rewrite, Scalar, Var, either, op, opt

# ---------------------------------------------------------------------- patterns


def _axes(tag: str) -> Var:
    return Var(f"axes_{tag}", omittable=True)  # ReduceMean's axes: an input from opset 18, else the attribute


def _divided(num: Any, std: Any) -> Any:
    """``num / std`` in its three spellings: Div, Mul by Reciprocal, Mul by Div(1, ·)."""
    return either(op.Div(num, std, _name="norm"),
                  op.Mul(num, either(op.Reciprocal(std), op.Div(Scalar("one"), std)), _name="norm"))


def _root(mean_square: Any) -> Any:
    """``Sqrt(mean_square + eps)``, the Add left out when eps is 0."""
    return op.Sqrt(opt(op.Add(mean_square, Scalar("eps"))))


def _square(v: Any) -> Any:
    return either(op.Pow(v, Scalar("two")), op.Mul(v, v))


x = Var("x")
_mean = op.ReduceMean(x, _axes("mean"), _name="mean", keepdims=1)
_d = op.Sub(x, _mean)
# the older PyTorch form computes d twice: a second identical Sub feeds the division
LN_NORM = _divided(either(_d, op.Sub(x, _mean)), _root(op.ReduceMean(_square(_d), _axes("var"), _name="var",
                                                                     keepdims=1)))
# the affine after it: both, gamma only, or beta only (ones for gamma) — bare norms are a later rule
LN_AFFINE = either(op.Add(opt(op.Mul(LN_NORM, Const("gamma"), _name="scale")), Const("beta")),
                   op.Mul(LN_NORM, Const("gamma"), _name="scale"))

RMS_NORM = _divided(x, _root(op.ReduceMean(_square(x), _axes("ms"), _name="ms", keepdims=1)))
RMS_SCALED = op.Mul(RMS_NORM, Const("gamma"), _name="scale")

# ---------------------------------------------------------------------- shared checks


def _trailing(m: Match, x_rank: int | None, *reduces: str) -> int | str:
    """k, the number of trailing axes every ReduceMean of ``reduces`` normalizes, or the reason."""
    k = None
    for name in reduces:
        axes = reduce_mean_axes(m.graph, m.node(name))
        if axes is None:
            return f"the {name} ReduceMean's axes are not constant (or it is not keepdims=1)"
        count = trailing_axes_count(axes, x_rank) if axes or name != "ms" else None
        if not count:
            return f"the {name} ReduceMean's axes {axes} are not the trailing ones of x (rank {x_rank})"
        if k is not None and count != k:
            return f"the two ReduceMeans normalize different axes ({k} and {count} trailing)"
        k = count
    return k


def _constants(m: Match, max_rank: int, wanted: dict[str, float | None]) -> str | None:
    """Each bound constant of ``wanted`` is one finite number of rank <= max_rank (equal to its
    value, when one is given)."""
    for name, expected in wanted.items():
        if m.get(name) is None:
            continue
        number = scalar_const(m.graph, m[name], max_rank)
        if number is None:
            return f"{name} ('{m[name]}') is not one finite number of rank <= {max_rank}"
        if expected is not None and number != expected:
            return f"{name} is {number:g}, not {expected:g}"
    return None


# ---------------------------------------------------------------------- LayerNormalization

_LN_DTYPES = (np.float32, np.float16)


def _fit(array: np.ndarray, k: int, norm_dims: tuple[int, ...] | None, x_rank: int | None) -> np.ndarray | None:
    """gamma/beta as a LayerNormalization scale/bias of the normalized shape, or None."""
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


def _ln_dtype(m: Match) -> np.dtype | None:
    """x's dtype from its declared type, else from eps (Add makes them equal), else gamma/beta's."""
    onnx_type = m.graph.dtype(m["x"])
    if onnx_type:
        try:
            return np.dtype(helper.tensor_dtype_to_np_dtype(onnx_type))
        except (KeyError, TypeError, ValueError):
            return None
    for name in ("eps", "gamma", "beta"):
        if m.get(name):
            return m.const(name).dtype
    return None


def check_layernorm(m: Match) -> str | None:
    graph, xv = m.graph, m["x"]
    x_rank = rank(graph, xv)
    k = _trailing(m, x_rank, "mean", "var")
    if isinstance(k, str):
        return k
    why = _constants(m, k, {"eps": None, "two": 2.0})
    if why:
        return why
    if m.get("one") is not None and scalar_const(graph, m["one"], k) != 1.0:
        return f"the numerator of 1/std ('{m['one']}') is not a one-element 1 of rank <= {k}"
    dtype = _ln_dtype(m)
    shape = graph.declared_shape(xv)
    norm_dims = None
    if shape is not None and len(shape) >= k and all(isinstance(d, int) for d in shape[len(shape) - k:]):
        norm_dims = tuple(shape[len(shape) - k:])
    fitted = {}
    for name in ("gamma", "beta"):
        if m.get(name) is None:
            continue
        array = m.const(name)
        if array.dtype.kind != "f" or array.dtype != dtype:
            return f"{name} is a {array.dtype} constant, x is {dtype}"
        fitted[name] = _fit(array, k, norm_dims, x_rank)
        if fitted[name] is None:
            return f"{name} {list(array.shape)} does not broadcast onto the normalized dims {norm_dims} only"
    if dtype is None or dtype.type not in _LN_DTYPES:
        return f"x is {dtype}, not float or float16"
    if "gamma" not in fitted:
        if norm_dims is None:
            return "no gamma, and the normalized shape is not static (LayerNormalization needs a scale)"
        fitted["gamma"] = np.ones(norm_dims, dtype)
    m.extra.update(k=k, eps=0.0 if m.get("eps") is None else m.scalar("eps"), **fitted)
    return None


def check_ln_opset(m: Match) -> str | None:
    if graph_opset(m.graph, m.ctx) < 17 and not ort_below_17(m.graph, m.ctx):
        return f"opset {graph_opset(m.graph, m.ctx)}: LayerNormalization needs opset >= 17 (or --target ort)"
    return None


def ort_below_17(graph: Graph, ctx: PassContext) -> bool:
    """``--target ort`` below opset 17: onnxruntime registers LayerNormalization in the default
    domain from version 1 (its own schema; its LayerNormFusion emits it there), so the fused op
    runs in ORT though ONNX's checker does not know it. Main graph tree only, like contrib ops."""
    from graphtool.runtime import ort_registers

    root = graph
    while root.parent is not None:
        root = root.parent
    return ctx.target == "ort" and root is ctx.model.graph and ort_registers("LayerNormalization", "", 1)


def _tensor_input(m: Match, name: str, hint: str) -> str:
    """Reuse the constant's own value when it already has the fitted shape and dtype."""
    fitted, original = m.extra[name], m.const(name) if m.get(name) else None
    if original is not None and original.shape == fitted.shape and original.dtype == fitted.dtype:
        return m[name]
    return m.graph.add_initializer(fitted, hint)


def emit_layernorm(m: Match, rw: Rewrite) -> str:
    inputs = [m["x"], _tensor_input(m, "gamma", "ln_scale")]
    if "beta" in m.extra:
        inputs.append(_tensor_input(m, "beta", "ln_bias"))
    attrs = {"axis": -m.extra["k"], "epsilon": float(m.extra["eps"])}
    return rw.add("LayerNormalization", inputs, attrs=attrs).outputs[0]


# ---------------------------------------------------------------------- RMS norm


def check_rmsnorm(m: Match) -> str | None:
    shapes: Shapes = m.facts.shapes
    xv = m["x"]
    x_rank = shapes.rank(xv)
    k = _trailing(m, x_rank, "ms")
    if isinstance(k, str):
        return k
    max_rank = x_rank if x_rank is not None else 0
    why = _constants(m, max_rank, {"two": 2.0, "eps": None, "one": 1.0})
    if why:
        return why
    if m.get("eps") is not None and m.scalar("eps") < 0:
        return f"eps is {m.scalar('eps'):g}, negative"
    x_type = shapes.dtype(xv)
    if x_type not in (TensorProto.FLOAT, TensorProto.FLOAT16):
        return "x is not float32 or float16"
    dtype = np.float32 if x_type == TensorProto.FLOAT else np.float16
    shape = shapes.shape(xv)
    dims = shape[len(shape) - k:] if shape is not None and len(shape) >= k else None
    static = dims is not None and all(isinstance(d, int) for d in dims)
    scale = None
    if m.get("gamma") is None:
        scale = np.ones(dims, dtype) if static else None
    else:
        gamma = m.const("gamma")
        if gamma.dtype != dtype or gamma.ndim > max(x_rank or 0, k):
            return (f"gamma is a {gamma.dtype} constant of rank {gamma.ndim}, "
                    f"not {np.dtype(dtype)} of rank <= {max(x_rank or 0, k)}")
        if any(d != 1 for d in gamma.shape[: max(0, gamma.ndim - k)]):
            return f"gamma {list(gamma.shape)} varies along a non-normalized axis"
        gamma = gamma.reshape(gamma.shape[max(0, gamma.ndim - k):])
        if gamma.ndim == k and 1 not in gamma.shape and (not static or list(gamma.shape) == list(dims)):
            scale = gamma
        elif static:
            try:
                scale = np.ascontiguousarray(np.broadcast_to(gamma, dims)).astype(dtype)
            except ValueError:
                return f"gamma {list(gamma.shape)} does not broadcast to the normalized dims {dims}"
    if scale is None:
        return "the normalized shape is not static (the op needs an explicit scale of it)"
    m.extra.update(k=k, scale=scale)
    return None


def emit_rms(op_type: str) -> Callable[[Match, Rewrite], str]:
    def replace(m: Match, rw: Rewrite) -> str:
        shapes, root = m.facts.shapes, m.root.outputs[0]
        out_shape = shapes.shape(root)
        scale = m.graph.add_initializer(m.extra["scale"], f"{rw.name or 'rms'}_scale")
        attrs = {"axis": -m.extra["k"], "epsilon": float(0.0 if m.get("eps") is None else m.scalar("eps"))}
        if op_type == "RMSNormalization":
            attrs["stash_type"] = 1
        out = rw.add(op_type, [m["x"], scale], attrs=attrs).outputs[0]
        record_shape(m.graph, shapes, out, out_shape, 10 if m.extra["scale"].dtype == np.float16 else 1)
        return out

    return replace


# ---------------------------------------------------------------------- Skip(Simplified)LayerNormalization


def _single_output(_matcher: Any, node: Any) -> str | None:
    if not node.outputs or not node.outputs[0] or len([o for o in node.outputs if o]) != 1:
        return "it writes Mean / InvStdDev too (the fused op has no such outputs)"
    return None


def skip_pattern(*norm_types: str) -> Any:
    """``Norm(Add(Add(m, bias) | a, b), gamma, beta?)``: the bias split is tried first."""
    biased = op.Add(op.Add(Var("m"), Var("bias"), _name="bias_add"), Var("b"), _name="sum", _shared=True)
    post = op.Add(op.Add(Var("a"), Var("b"), _name="pair"), Var("bias"), _name="sum", _shared=True)
    plain = op.Add(Var("a"), Var("b"), _name="sum", _shared=True)
    return op.LayerNormalization(either(biased, post, plain), Var("gamma"), Var("beta", omittable=True),
                                 _types=norm_types, _where=_single_output, _name="ln")


def _same_dims(dims: Dims, a: str, b: str, axes_a: list[int], axes_b: list[int]) -> bool:
    return all(dims.equal((a, i), (b, j)) for i, j in zip(axes_a, axes_b))


def input_and_skip(dims: Dims, a: str, b: str) -> tuple[str, str] | None:
    """(input, skip): same shape, or skip a kernel-supported broadcast of a rank-3 input."""
    shapes = dims.shapes
    ra, rb = shapes.rank(a), shapes.rank(b)
    if ra is None or rb is None or max(ra, rb) not in (2, 3):
        return None
    if ra == rb and _same_dims(dims, a, b, list(range(ra)), list(range(rb))):
        return a, b
    for xv, skip, rx, rs in ((a, b, ra, rb), (b, a, rb, ra)):
        if rx != 3:
            continue
        if rs == 3 and dims.static(skip, 0) == 1 and _same_dims(dims, xv, skip, [1, 2], [1, 2]):
            return xv, skip
        if rs == 2 and _same_dims(dims, xv, skip, [1, 2], [0, 1]):
            return xv, skip
    return None


def check_skip(m: Match) -> str | None:
    graph, shapes, dims = m.graph, m.facts.shapes, m.facts.dims
    ln, s = m.node("ln"), m.node("sum").outputs[0]
    hidden, r = dims.static(s, -1), shapes.rank(s)
    if hidden is None or r not in (2, 3) or ln.attr("axis", -1) not in (-1, r - 1):
        return (f"the sum has rank {r} (the kernel takes 2 or 3), hidden size {hidden}, "
                f"the norm axis {ln.attr('axis', -1)}")
    simplified = ln.op_type != "LayerNormalization"
    s_type = shapes.dtype(s)

    def vector(name: str) -> bool:
        """A constant [H], or a value the shapes prove [H] of the sum's type (an input: the kernel reads it)."""
        const = m.const(name)
        if const is not None:
            return const.shape == (hidden,)
        value = m[name]
        return shapes.rank(value) == 1 and dims.static(value, 0) == hidden and shapes.dtype(value) == s_type

    if not vector("gamma"):
        return f"gamma is not [{hidden}]"
    if m.get("beta") and (simplified or not vector("beta")):
        return f"beta is not [{hidden}]"
    a, b = m.node("pair").inputs if m.node("pair") is not None else m.node("sum").inputs
    if (graph.const(a) is not None and graph.const(b) is not None) or s_type not in (TensorProto.FLOAT,
                                                                                     TensorProto.FLOAT16):
        return "both operands of the sum are constants, or it is not float32 / float16"
    wanted = np.float32 if s_type == TensorProto.FLOAT else np.float16
    for name in ("gamma", "beta", "bias"):
        if m.get(name) is not None and m.const(name) is not None and m.const(name).dtype != wanted:
            return f"{name} is {m.const(name).dtype}, the sum is {np.dtype(wanted)}"
    if m.get("bias") is not None and m.node("bias_add") is not None:  # (m + bias) + b
        mv = m["m"]
        if (not vector("bias") or graph.const(mv) is not None or dims.static(mv, -1) != hidden
                or shapes.rank(mv) != shapes.rank(m.node("bias_add").outputs[0])):
            return f"the bias Add is not a non-constant input plus a [{hidden}] bias"
        a, b = mv, m["b"]
    elif m.get("bias") is not None and not vector("bias"):  # (a + b) + bias
        return f"the Add after the residual sum does not add a [{hidden}] bias"
    pair = input_and_skip(dims, a, b)
    if pair is None:
        return "the two operands' shapes are not provably equal or a [1, S, H] / [S, H] skip of a rank-3 input"
    if graph.const(pair[0]) is not None:
        return "a constant may only be the skip"
    m.extra["pair"] = pair
    return None


def emit_skip(op_type: str) -> Callable[[Match, Rewrite], str]:
    def replace(m: Match, rw: Rewrite) -> str:
        graph, shapes = m.graph, m.facts.shapes
        ln, add = m.node("ln"), m.node("sum")
        s = add.outputs[0]
        (xv, skip), bias = m.extra["pair"], m.get("bias") or ""
        if op_type == "SkipSimplifiedLayerNormalization":
            inputs = [xv, skip, m["gamma"], bias]
        else:
            inputs = [xv, skip, m["gamma"], m.get("beta") or "", bias]
        while inputs and not inputs[-1]:
            inputs.pop()
        use_ms_domain(m.ctx)
        keep_sum = graph.is_output(s) or any(u != ln for u, _ in graph.uses(s))
        s_shape = shapes.shape(s)
        outputs: Any = [graph.fresh_name(f"{rw.name or op_type}_out"), "", "", rw.take_over(s)] if keep_sum else 1
        node = rw.add(op_type, inputs, outputs, {"epsilon": float(ln.attr("epsilon", 1e-5))}, domain="com.microsoft")
        s_type = shapes.dtype(s) or 1
        if keep_sum:
            record_shape(graph, shapes, node.outputs[3], s_shape, s_type)
        record_shape(graph, shapes, node.outputs[0], s_shape, s_type)
        m.facts.with_bias += bool(bias)
        return node.outputs[0]

    return replace


class SkipFacts(Facts):
    def __init__(self, graph: Graph, ctx: PassContext):
        super().__init__(graph, ctx)
        self.with_bias = 0
