"""Exact numpy kernels for the data-movement ops constant folding meets most (Shape, Gather,
Concat, Reshape, Slice, Expand, integer Cast/Range…): for these numpy's result is bit-identical
to onnxruntime's by construction, and computing them here spares a session (a 411 MB
``ConstantOfShape`` weight is fastest as ``np.full``). Every other op is onnxruntime's
(graphtool.runtime.constants)."""

from __future__ import annotations

from typing import Callable

import numpy as np
from onnx import helper, numpy_helper

from graphtool.ir.graph import Node


def numpy_kernel(node: Node, args: list[np.ndarray | None], opset: int) -> list[np.ndarray] | None:
    """Outputs of ``node`` when numpy gives bit-identical results for it, else None (use ORT)."""
    if node.domain not in ("", "ai.onnx"):
        return None
    fn = _KERNELS.get(node.op_type)
    if fn is None:
        return None
    try:
        out = fn(node, args, opset)
    except (ValueError, IndexError, TypeError, OverflowError, AttributeError):  # AttributeError: an omitted input
        return None  # let ORT decide (and report the error)
    return out


def _ints(a: np.ndarray | None) -> list[int] | None:
    if a is None or a.dtype.kind not in "iu":
        return None
    return [int(x) for x in np.asarray(a).reshape(-1)]


def _axes(node: Node, args: list, opset: int, since: int) -> list[int] | None:
    if opset >= since:
        return _ints(args[1]) if len(args) > 1 and args[1] is not None else None
    axes = node.attr("axes")
    return list(axes) if axes is not None else None


def _k_identity(node, args, opset):
    return [args[0]]


def _k_shape(node, args, opset):
    dims = list(args[0].shape)
    rank = len(dims)
    start, end = node.attr("start", 0), node.attr("end", rank)
    start = min(max(start + rank if start < 0 else start, 0), rank)
    end = min(max(end + rank if end < 0 else end, 0), rank)
    return [np.array(dims[start:end], dtype=np.int64)]


def _k_size(node, args, opset):
    return [np.array(args[0].size, dtype=np.int64)]


def _k_constant_of_shape(node, args, opset):
    shape = _ints(args[0])
    if shape is None or any(d < 0 for d in shape):
        return None
    proto = node.attr_proto("value")
    value = numpy_helper.to_array(proto.t).reshape(-1) if proto is not None else np.zeros(1, np.float32)
    if value.size != 1:
        return None
    # A read-only zero-stride view: no memory until the value is written into a TensorProto.
    return [np.broadcast_to(value[:1].reshape(()), shape)]


def _k_unsqueeze(node, args, opset):
    axes = _axes(node, args, opset, 13)
    if axes is None:
        return None
    x = args[0]
    rank = x.ndim + len(axes)
    norm = sorted(a + rank if a < 0 else a for a in axes)
    if len(set(norm)) != len(norm) or any(a < 0 or a >= rank for a in norm):
        return None
    shape = list(x.shape)
    for a in norm:
        shape.insert(a, 1)
    return [x.reshape(shape)]


def _k_squeeze(node, args, opset):
    x = args[0]
    axes = _axes(node, args, opset, 13)
    if axes is None:
        return [x.reshape([d for d in x.shape if d != 1])]
    norm = {a + x.ndim if a < 0 else a for a in axes}
    if any(a < 0 or a >= x.ndim or x.shape[a] != 1 for a in norm):
        return None
    return [x.reshape([d for i, d in enumerate(x.shape) if i not in norm])]


def _k_concat(node, args, opset):
    arrays = [a for a in args if a is not None]
    if not arrays or len({a.dtype for a in arrays}) != 1 or len({a.ndim for a in arrays}) != 1:
        return None
    axis = node.attr("axis")
    if axis is None:
        return None
    return [np.concatenate(arrays, axis=axis)]


def _k_gather(node, args, opset):
    data, indices = args[0], args[1]
    if indices.dtype.kind not in "iu" or data.ndim == 0:
        return None
    axis = node.attr("axis", 0)
    axis = axis + data.ndim if axis < 0 else axis
    n = data.shape[axis]
    if indices.size and (indices.min() < -n or indices.max() >= n):
        return None
    return [np.take(data, indices.astype(np.int64), axis=axis)]


def _k_reshape(node, args, opset):
    x, shape = args[0], _ints(args[1])
    if shape is None:
        return None
    allowzero = node.attr("allowzero", 0) if opset >= 14 else 0
    if not allowzero and any(d == 0 and i >= x.ndim for i, d in enumerate(shape)):
        return None
    target = [x.shape[i] if (d == 0 and not allowzero and i < x.ndim) else d for i, d in enumerate(shape)]
    if target.count(-1) > 1:
        return None
    return [x.reshape(target)]


def _k_transpose(node, args, opset):
    perm = node.attr("perm")
    x = args[0]
    if perm is None:
        perm = list(range(x.ndim))[::-1]
    return [np.ascontiguousarray(np.transpose(x, perm))]


def _k_expand(node, args, opset):
    x, shape = args[0], _ints(args[1])
    if shape is None:
        return None
    out_shape = np.broadcast_shapes(x.shape, tuple(shape))
    return [np.broadcast_to(x, out_shape)]  # read-only view, like ConstantOfShape's


def _k_cast(node, args, opset):
    x = args[0]
    to = node.attr("to")
    if node.attr("saturate") is not None and x.dtype.kind == "f":
        return None
    try:
        target = np.dtype(helper.tensor_dtype_to_np_dtype(to))
    except (KeyError, TypeError, ValueError):
        return None
    if target == x.dtype:
        return [x]
    if x.dtype.kind in "iu" and target.kind in "iu":
        info = np.iinfo(target)
        if x.size == 0 or (int(x.min()) >= info.min and int(x.max()) <= info.max):
            return [x.astype(target)]
        return None
    if x.dtype.kind == "b" and target.kind in "iuf":
        return [x.astype(target)]
    if x.dtype.kind in "iu" and target.kind == "b":
        return [x != 0]
    if x.dtype.kind in "iu" and target.type in (np.float32, np.float64):
        exact = 1 << (24 if target.type is np.float32 else 53)  # every integer below is a float
        if x.size == 0 or (-exact <= int(x.min()) and int(x.max()) <= exact):
            return [x.astype(target)]
    return None


def _k_slice(node, args, opset):
    x = args[0]
    if opset < 10:
        starts, ends, axes, steps = node.attr("starts"), node.attr("ends"), node.attr("axes"), None
    else:
        starts, ends = _ints(args[1]), _ints(args[2])
        axes = _ints(args[3]) if len(args) > 3 and args[3] is not None else None
        steps = _ints(args[4]) if len(args) > 4 and args[4] is not None else None
    if starts is None or ends is None or len(starts) != len(ends):
        return None
    axes = list(axes) if axes is not None else list(range(len(starts)))
    steps = list(steps) if steps is not None else [1] * len(starts)
    for start, end, axis, step in zip(starts, ends, axes, steps):
        axis = axis + x.ndim if axis < 0 else axis
        if step == 0 or axis < 0 or axis >= x.ndim:
            return None
        dim = x.shape[axis]
        start = start + dim if start < 0 else start
        end = end + dim if end < 0 else end
        if step > 0:
            start, end = min(max(start, 0), dim), min(max(end, 0), dim)
        else:
            start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
        x = np.take(x, np.arange(start, end, step, dtype=np.int64), axis=axis)
    return [np.ascontiguousarray(x)]


def _k_range(node, args, opset):
    start, limit, delta = args
    if any(a.dtype.kind not in "iu" for a in (start, limit, delta)) or int(delta) == 0:
        return None
    return [np.arange(int(start), int(limit), int(delta), dtype=start.dtype)]


# Elementwise ops numpy computes bit-identically: comparisons and logic on any dtype, and one
# IEEE operation (correctly rounded in both) on float32/float64 or wrapping integer arithmetic.
# float16 is left to onnxruntime (numpy rounds through float32: a second rounding can differ).
_EXACT_FLOATS = (np.float32, np.float64)
_BINARY = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide}
_COMPARE = {"Equal": np.equal, "Less": np.less, "Greater": np.greater, "LessOrEqual": np.less_equal,
            "GreaterOrEqual": np.greater_equal}
_LOGIC = {"And": np.logical_and, "Or": np.logical_or, "Xor": np.logical_xor}


def _same_dtype(args: list) -> np.dtype | None:
    if len(args) < 2 or any(a is None for a in args) or args[0].dtype != args[1].dtype:
        return None
    return args[0].dtype


def _k_arith(node, args, opset):
    dtype = _same_dtype(args)
    if dtype is None or not (dtype.type in _EXACT_FLOATS or (dtype.kind in "iu" and node.op_type != "Div")):
        return None
    with np.errstate(all="ignore"):
        return [np.asarray(_BINARY[node.op_type](args[0], args[1])).astype(dtype, copy=False)]


def _k_compare(node, args, opset):
    dtype = _same_dtype(args)
    if dtype is None or dtype.kind not in "iufb":
        return None
    return [np.asarray(_COMPARE[node.op_type](args[0], args[1]))]


def _k_logic(node, args, opset):
    if _same_dtype(args) != np.bool_:
        return None
    return [np.asarray(_LOGIC[node.op_type](args[0], args[1]))]


def _k_not(node, args, opset):
    return [np.logical_not(args[0])] if args[0].dtype == np.bool_ else None


def _k_neg(node, args, opset):
    a = args[0]
    if not (a.dtype.type in _EXACT_FLOATS or a.dtype.kind == "i"):
        return None
    return [np.asarray(np.negative(a) if node.op_type == "Neg" else np.abs(a)).astype(a.dtype, copy=False)]


def _k_where(node, args, opset):
    cond, x, y = args[0], args[1], args[2]
    if cond is None or cond.dtype != np.bool_ or _same_dtype([x, y]) is None:
        return None
    return [np.asarray(np.where(cond, x, y)).astype(x.dtype, copy=False)]


_KERNELS: dict[str, Callable[[Node, list, int], list[np.ndarray] | None]] = {
    **{op: _k_arith for op in _BINARY},
    **{op: _k_compare for op in _COMPARE},
    **{op: _k_logic for op in _LOGIC},
    "Not": _k_not,
    "Neg": _k_neg,
    "Abs": _k_neg,
    "Where": _k_where,
    "Identity": _k_identity,
    "Shape": _k_shape,
    "Size": _k_size,
    "ConstantOfShape": _k_constant_of_shape,
    "Unsqueeze": _k_unsqueeze,
    "Squeeze": _k_squeeze,
    "Concat": _k_concat,
    "Gather": _k_gather,
    "Reshape": _k_reshape,
    "Transpose": _k_transpose,
    "Expand": _k_expand,
    "Cast": _k_cast,
    "Slice": _k_slice,
    "Range": _k_range,
}
