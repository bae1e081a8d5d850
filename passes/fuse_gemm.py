"""MatMul(A, B) + C → Gemm(A, B, C) for 2-D operands.

Gemm is MatMul plus a bias in one kernel, which ORT and most backends run faster than the pair
(no intermediate [M, N] tensor). It is only equivalent in a narrow case, and the pass proves each
part from declared shapes, from what the producers prove (a Flatten's output has rank 2;
passes/_types.py) or from the shape oracle (``ctx.shapes``: a Keras Dense after PRelu, a
ReduceMax with keepdims=0), never from guesses:

1. A and B have known rank 2: Gemm has no batch dimensions. A 3-D MatMul (transformers) is left
   alone — rewriting it needs Reshapes around the Gemm, which is not a simplification.
2. The MatMul's output is read only by the Add (and is not a graph output).
3. C broadcasts *unidirectionally* to [M, N] — Gemm cannot broadcast the product to C's shape:
   right-aligned against (M, N), every dim of C is a literal 1 or provably equal to M / N (same
   integer, or the same symbolic name). So [N], [1, N], [M, 1], [M, N], [1] and scalars fold;
   a C of unknown shape, rank > 2, or [K, N] with K unknown does not.
4. The dtype is float, float16 or double — types whose Gemm kernels exist in onnxruntime; int
   MatMul+Add is left alone.

As a rule (``graphtool.rewrite``): ``Add(MatMul(a, b), bias)``, either operand order; the engine
refuses case 2, the check cases 1, 3 and 4 (and an Add of the product to itself). The Gemm writes
the Add's output under its name.
"""

from __future__ import annotations

from onnx import TensorProto, helper

from graphtool.ir.graph import Graph
from graphtool.pass_manager import register
from graphtool.passes._types import infer_dtype, infer_rank
from graphtool.rewrite import Match, Rewrite, Rule, RulePass, Var, op

_GEMM_TYPES = {TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE}


def _shape(graph: Graph, value: str, ctx=None) -> list[int | str | None] | None:
    shape = graph.declared_shape(value)
    if shape is None and ctx is not None:  # the shape oracle: ranks through PRelu, ReduceMax(keepdims=0), ...
        shape = ctx.shapes.dims(graph, value)
    if shape is None:
        array = graph.const(value)
        if array is not None:
            shape = list(array.shape)
        elif infer_rank(graph, value) == 2:  # e.g. the output of a Flatten: rank 2, dims unknown
            shape = [None, None]
    return shape


def _dtype(graph: Graph, value: str) -> int | None:
    dtype = infer_dtype(graph, value)
    if dtype is None:
        array = graph.const(value)
        if array is not None:
            try:
                dtype = helper.np_dtype_to_tensor_dtype(array.dtype)
            except (KeyError, TypeError, ValueError):
                return None
    return dtype


def _same_dim(a: int | str | None, b: int | str | None) -> bool:
    return a is not None and b is not None and type(a) is type(b) and a == b


def bias_fits(bias: list[int | str | None], m: int | str | None, n: int | str | None) -> bool:
    """Case 3: ``bias`` broadcasts to exactly (M, N) without growing it."""
    if len(bias) > 2:
        return False
    for dim, target in zip(reversed(bias), (n, m)):
        if not (dim == 1 or _same_dim(dim, target)):
            return False
    return True


def check(m: Match) -> str | None:
    g, a, b, bias = m.graph, m["a"], m["b"], m["bias"]
    if bias == m.node("mm").outputs[0]:
        return "the Add adds the product to itself"
    shape_a, shape_b, shape_c = _shape(g, a, m.ctx), _shape(g, b, m.ctx), _shape(g, bias, m.ctx)
    if shape_a is None or shape_b is None or len(shape_a) != 2 or len(shape_b) != 2:
        return f"A {shape_a} and B {shape_b} are not both known to be 2-D"  # case 1
    if shape_c is None:
        return "the bias's shape is unknown"  # case 3
    dtype = _dtype(g, a) or _dtype(g, b)
    if dtype not in _GEMM_TYPES or _dtype(g, bias) not in (None, dtype):
        return f"dtype {dtype} (bias {_dtype(g, bias)}) is not one of Gemm's float types"  # case 4
    if not bias_fits(shape_c, shape_a[0], shape_b[1]):
        return f"the bias {shape_c} does not broadcast to exactly [{shape_a[0]}, {shape_b[1]}]"  # case 3
    return None


def emit(m: Match, rw: Rewrite) -> str:
    return rw.add("Gemm", [m["a"], m["b"], m["bias"]]).outputs[0]


MATMUL_ADD = Rule("matmul-add", op.Add(op.MatMul(Var("a"), Var("b"), _name="mm"), Var("bias")), emit, check,
                  emits="Gemm")


@register(level=1, priority=55, name="fuse-matmul-add")
class FuseMatMulAdd(RulePass):
    """Fuse a 2-D MatMul followed by Add of a Gemm-broadcastable bias into one Gemm."""

    rules = (MATMUL_ADD,)
    stat_keys = {"matmul-add": "fused"}
