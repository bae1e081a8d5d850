"""Patterns, checks and replacements of the GELU rules (``passes/fuse_gelu.py``, ``passes/ort_gelu.py``).

A check returns None to accept or the reason it refuses (what ``--explain`` prints); the numbers
a pattern cannot say — every constant within 1e-4 (relative) of its exact value, one element, of
no higher rank than ``x`` (else it would broadcast the result) — are checked here.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
from onnx import TensorProto

from graphtool.passes._fuse_common import close, graph_opset, rank
from graphtool.passes._ort_common import MS_DOMAIN, record_shape, use_ms_domain
from graphtool.rewrite import Match, Rewrite, Scalar, Var, either, op

RTOL = 1e-4
# the exact value of every constant a GELU spelling may hold, by the Var name the patterns bind it to
EXPECTED = {"sqrt2": math.sqrt(2.0), "rsqrt2": 1.0 / math.sqrt(2.0), "one": 1.0, "half": 0.5, "two": 2.0,
            "three": 3.0, "cubic": 0.044715, "k": math.sqrt(2.0 / math.pi), "one_inner": 1.0}

# ---------------------------------------------------------------------- patterns

x = Var("x")


def _times_half(value: Any) -> Any:
    """``value * 0.5`` (either order) or ``value / 2``."""
    return either(op.Mul(value, Scalar("half")), op.Div(value, Scalar("two")))


def gelu_of(one_plus: Any) -> Any:
    """``x * 0.5 * one_plus`` in every association: (x·½)·a, (x·a)·½, x·(a·½); ½ as Mul 0.5 or Div 2."""
    return either(op.Mul(_times_half(x), one_plus), _times_half(op.Mul(x, one_plus)), op.Mul(x, _times_half(one_plus)))


ERF = gelu_of(op.Add(op.Erf(either(op.Div(x, Scalar("sqrt2")), op.Mul(x, Scalar("rsqrt2")))), Scalar("one")))
_cube = either(op.Pow(x, Scalar("three")), op.Mul(x, op.Mul(x, x)))  # x·(x·x) and (x·x)·x: Mul commutes
_inner = op.Mul(op.Add(x, op.Mul(_cube, Scalar("cubic"))), Scalar("k"))
# OpenAI's / Megatron's and HuggingFace's FastGELUActivation: tanh(k·x·(1 + c·x·x)) — the same
# number, k·(x + c·x³), factored; c·x·x as (c·x)·x or c·(x·x), k·x·(…) in either association
_cx2 = either(op.Mul(op.Mul(x, Scalar("cubic")), x), op.Mul(op.Mul(x, x), Scalar("cubic")))
_one_plus_cx2 = op.Add(_cx2, Scalar("one_inner"))
_factored = either(op.Mul(op.Mul(x, Scalar("k")), _one_plus_cx2), op.Mul(op.Mul(x, _one_plus_cx2), Scalar("k")))
TANH = either(gelu_of(op.Add(op.Tanh(_inner), Scalar("one"))), gelu_of(op.Add(op.Tanh(_factored), Scalar("one"))))

# ---------------------------------------------------------------------- checks


def check_constants(m: Match) -> str | None:
    """Every bound constant is its GELU value (1e-4 relative), one finite number, rank <= x's."""
    r = rank(m.graph, m["x"])
    max_rank = 0 if r is None else r
    for name, expected in EXPECTED.items():
        value = m.get(name)
        if value is None:
            continue
        array = m.graph.const(value)
        if array.dtype.kind not in "fiu":
            return f"{name} ('{value}') is a {array.dtype} constant, not a number"
        if array.ndim > max_rank:
            return f"{name} ('{value}') has rank {array.ndim}, more than x's {max_rank}: it would broadcast the result"
        number = float(array.reshape(-1)[0])
        # a float16 graph holds the nearest float16 (0.044715 is 0.0447083 there, 1.5e-4 off)
        nearest = float(np.asarray(expected, array.dtype)) if array.dtype.kind == "f" else expected
        if not np.isfinite(number) or not (close(number, expected, RTOL) or number == nearest):
            return f"{name} is {number:g}, not {expected:.6g} (within {RTOL:g} relative, or its {array.dtype} nearest)"
    return None


def check_opset(at_least_20: bool) -> Callable[[Match], str | None]:
    """ONNX Gelu exists from opset 20: fuse-gelu needs it, ort-gelu leaves such graphs to fuse-gelu."""

    def check(m: Match) -> str | None:
        opset = graph_opset(m.graph, m.ctx)
        if (opset >= 20) != at_least_20:
            return (f"opset {opset}: ONNX Gelu needs opset >= 20" if at_least_20 else
                    f"opset {opset} has ONNX Gelu (fuse-gelu writes it)")
        return None

    return check


def check_float(name: str, half: bool = False) -> Callable[[Match], str | None]:
    """float32, or with ``half`` float16 too (onnxruntime's CPU Gelu and FastGelu have float16 kernels)."""

    def check(m: Match) -> str | None:
        if m.facts.shapes.is_float(m[name]) or (half and m.facts.shapes.dtype(m[name]) == TensorProto.FLOAT16):
            return None
        return f"{name} is not float32{' or float16' if half else ''} (the contrib kernels' types)"

    return check


def check_bias(m: Match) -> str | None:
    """b is a 1-D bias of exactly a's last-dim length: a constant, or a value (a graph input) whose
    shape [n] and type the shapes prove (a bias that broadcasts a's last dim — a's last dim is 1 or
    unknown — is refused: the kernels add it per row)."""
    a, bias = m["a"], m.const("bias")
    if m.graph.const(a) is not None:
        return "a is a constant (the kernels' bias is the second operand)"
    shapes = m.facts.shapes
    if bias is None:
        value = m["bias"]
        if shapes.rank(value) != 1 or shapes.dtype(value) != shapes.dtype(a):
            return f"the bias ('{value}') is not a constant and not provably 1-D of a's type"
        n = m.facts.dims.static(value, 0)
    else:
        if bias.ndim != 1:
            return f"the bias has rank {bias.ndim}, not 1"
        n = bias.shape[0]
    last = m.facts.dims.static(a, -1)
    if n is None or n < 1 or last != n:
        return f"the bias has {n} elements, a's last dim is {last}"
    return None


def check_alpha(m: Match) -> str | None:
    """QuickGelu's alpha: a finite one-element number of rank <= 1 that cannot broadcast x."""
    if m.get("alpha") is None:
        return None
    array = m.const("alpha")
    if array.ndim > 1 or array.dtype.kind not in "fiu" or not np.isfinite(float(array.reshape(-1)[0])):
        return f"alpha ('{m['alpha']}') is not a finite number of rank <= 1"
    if array.ndim > 0 and (m.facts.shapes.rank(m["x"]) or 0) < array.ndim:
        return f"alpha has rank {array.ndim}, more than x's: it would broadcast the result"
    return None


# ---------------------------------------------------------------------- replacements


def emit(op_type: str, inputs: list[str], domain: str = "", **attrs: Any) -> Callable[[Match, Rewrite], str]:
    """A replacement: one ``op_type`` node on the bound values ``inputs``; a contrib op imports
    com.microsoft and declares the output's type (ORT's ops are opaque to ONNX shape inference)."""

    def replace(m: Match, rw: Rewrite) -> str:
        values = [m[name] for name in inputs]
        out = rw.add(op_type, values, attrs=attrs, domain=domain).outputs[0]
        if domain == MS_DOMAIN:
            use_ms_domain(m.ctx)
            root = m.root.outputs[0]
            record_shape(m.graph, m.facts.shapes, out, m.facts.shapes.shape(root), m.facts.shapes.dtype(root))
        return out

    return replace


def emit_quick_gelu(m: Match, rw: Rewrite) -> str:
    alpha = m.const("alpha")
    return emit("QuickGelu", ["x"], MS_DOMAIN, alpha=1.0 if alpha is None else float(alpha.reshape(-1)[0]))(m, rw)


# ---------------------------------------------------------------------- passes
