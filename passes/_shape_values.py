"""Symbolic values of the small integer tensors exporters build from ``Shape``/``Size``: the
analysis half of fold-shapes (passes/fold_shapes.py does the rewrites).

Each such tensor gets a ``SymValue``: its elements, each an ``int`` (static), a ``str`` (a named
symbolic dim) or a ``(value, i)`` token ("dim i of value", when nothing better is known), computed
in one topological sweep through the ops in ``SHAPE_OPS``. Dims of the tensors that ``Shape``
reads come from a ``DimsView``: the graph's declarations first, the pass context's shape oracle
(graphtool.shapes.oracle) where they fall short.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Union

import numpy as np
from onnx import TensorProto

from graphtool.ir.graph import Graph, Node
from graphtool.pass_manager import PassContext
from graphtool.runtime import is_constant
from graphtool.shapes import declared_dims

# int: static; str: a named symbolic dim; (value, i): "dim i of value"
Dim = Union[int, str, tuple]
ARITH_OPS = frozenset({"Add", "Sub", "Mul", "Div"})
SHAPE_OPS = frozenset({"Shape", "Size", "Gather", "Slice", "Concat", "Unsqueeze", "Squeeze", "Cast", "Identity",
                       "Reshape", "Equal", "Where"}) | ARITH_OPS
INT_TYPES = {TensorProto.INT64: "int64", TensorProto.INT32: "int32"}
MAX_CONST_ELEMS = 64  # constants read as shape values: small integer vectors only
MAX_REBUILD = 8  # elements of a value worth rebuilding from pieces


@dataclass(frozen=True)
class SymValue:
    """A 0-D (``scalar``) or 1-D int/bool tensor whose elements are known dims."""

    dims: tuple[Dim, ...]
    scalar: bool
    dtype: str = "int64"

    @property
    def static(self) -> bool:
        return all(isinstance(d, (int, bool)) for d in self.dims)

    def array(self) -> np.ndarray:
        arr = np.array(self.dims, dtype=np.dtype(self.dtype))
        return arr.reshape(()) if self.scalar else arr


class DimsView:
    """Dims of a value: the graph's declarations, completed by inference when they fall short."""

    def __init__(self, graph: Graph, ctx: PassContext):
        self.graph, self.ctx = graph, ctx
        root = graph
        while root.parent is not None:
            root = root.parent
        self.in_function = root is not ctx.model.graph
        self.prepared = False

    def prepare(self, names: list[str]) -> None:
        """Make sure inference covers ``names`` (one run at most, before any lookup: the symbols
        that inference invents (unk__N) are only comparable within one run)."""
        if self.in_function:
            return
        self.prepared = any(not complete(shape_in_scope(self.graph, v)) for v in names)

    def dims(self, value: str) -> list[Dim] | None:
        declared = shape_in_scope(self.graph, value)
        if complete(declared):
            return declared
        if self.in_function:
            return declared
        if not self.prepared:
            return declared
        inferred = self.ctx.shapes.dims(self.graph, value)
        if inferred is None:
            return declared
        if declared is None or len(declared) != len(inferred):
            return inferred
        return [d if isinstance(d, (int, str)) else i for d, i in zip(declared, inferred)]


def complete(dims: list[Dim] | None) -> bool:
    return dims is not None and all(isinstance(d, (int, str)) for d in dims)


def shape_in_scope(graph: Graph, value: str) -> list[Dim] | None:
    g: Graph | None = graph
    while g is not None:
        if g.has_value(value) and not (g.parent is not None and g.is_free(value)):
            return declared_dims(g, value)  # another tool's made-up unk__N dims: unknown
        g = g.parent
    return None


# ---------------------------------------------------------------------------- propagation


def _const_sym(graph: Graph, value: str) -> SymValue | None:
    if not is_constant(graph, value):
        return None
    t = graph.initializers.get(value)
    if t is not None and (t.size > MAX_CONST_ELEMS or t.data_type not in INT_TYPES):
        return None
    array = graph.const(value)
    if array is None or array.dtype.name not in ("int64", "int32") or array.ndim > 1 or array.size > MAX_CONST_ELEMS:
        return None
    return SymValue(tuple(int(x) for x in array.reshape(-1)), array.ndim == 0, array.dtype.name)


def tokens(value: str, dims: list) -> list[Dim]:
    """Unknown dims become "dim i of value" tokens: equal tokens are equal sizes."""
    return [(value, i) if d is None else d for i, d in enumerate(dims)]


Getter = Callable[[str], Optional[SymValue]]


def propagate(graph: Graph, oracle: DimsView, order: list[Node]) -> dict[str, SymValue]:
    """Symbolic values of every shape-op output that has one (one topological walk)."""
    values: dict[str, SymValue] = {}

    def get(v: str) -> SymValue | None:
        if not v:
            return None
        if v in values:
            return values[v]
        return _const_sym(graph, v)

    for node in order:
        if node.op_type not in SHAPE_OPS or node.domain not in ("", "ai.onnx") or len(node.outputs) != 1:
            continue
        out = node.outputs[0]
        if not out:
            continue
        try:
            result = _transfer(node, get, oracle)
        except (ValueError, IndexError, TypeError, KeyError, ZeroDivisionError):
            result = None
        if result is not None:
            values[out] = result
    return values


def _ints(sym: SymValue | None) -> list[int] | None:
    return [int(d) for d in sym.dims] if sym is not None and sym.static else None  # type: ignore[arg-type]


def _axes(node: Node, get: Getter) -> list[int] | None:
    ins = node.inputs
    if len(ins) > 1 and ins[1]:
        return _ints(get(ins[1]))
    axes = node.attr("axes")
    return list(axes) if axes is not None else None


def _transfer(node: Node, get: Getter, oracle: DimsView) -> SymValue | None:
    op, ins = node.op_type, node.inputs
    if op == "Size" and (vector := get(ins[0])) is not None and not vector.scalar:
        return SymValue((len(vector.dims),), True)  # Size(Shape(x)) is x's rank, known or not its dims
    if op in ("Shape", "Size"):
        dims = oracle.dims(ins[0])
        if dims is None:
            return None
        if op == "Size":
            return SymValue((int(np.prod(dims, dtype=np.int64)),), True) if all(isinstance(d, int) for d in dims) else None
        rank = len(dims)
        start, end = node.attr("start", 0), node.attr("end", rank)
        start = min(max(start + rank if start < 0 else start, 0), rank)
        end = min(max(end + rank if end < 0 else end, 0), rank)
        return SymValue(tuple(tokens(ins[0], dims)[start:end]), False)
    if op == "Where":
        return _where(get(ins[0]), get(ins[1]), get(ins[2]))
    data = get(ins[0])
    if data is None:
        return None
    if op == "Identity":
        return data
    if op == "Cast":
        to = INT_TYPES.get(node.attr("to"))
        return None if to is None or data.dtype == "bool" else SymValue(data.dims, data.scalar, to)
    if op == "Gather":
        idx = get(ins[1])
        if data.scalar or idx is None or not idx.static or node.attr("axis", 0) not in (0, -1):
            return None
        n = len(data.dims)
        picked = []
        for i in _ints(idx) or []:
            i = i + n if i < 0 else i
            if not 0 <= i < n:
                return None
            picked.append(data.dims[i])
        return SymValue(tuple(picked), idx.scalar, data.dtype)
    if op == "Unsqueeze":
        axes = _axes(node, get)
        if axes not in ([0], [-1]) or not data.scalar:
            return None
        return SymValue(data.dims, False, data.dtype)
    if op == "Squeeze":
        axes = _axes(node, get)
        if data.scalar or len(data.dims) != 1 or (axes is not None and axes not in ([0], [-1])):
            return None
        return SymValue(data.dims, True, data.dtype)
    if op == "Concat":
        parts = [get(v) for v in ins if v]
        if node.attr("axis") not in (0, -1) or any(p is None or p.scalar or p.dtype != data.dtype for p in parts):
            return None
        return SymValue(tuple(d for p in parts for d in p.dims), False, data.dtype)  # type: ignore[union-attr]
    if op == "Slice":
        return _slice(node, data, get)
    if op == "Reshape":
        target = _ints(get(ins[1])) if len(ins) > 1 else None
        n = len(data.dims)
        if target in ([-1], [n]):
            return SymValue(data.dims, False, data.dtype)
        if target == [] and n == 1:
            return SymValue(data.dims, True, data.dtype)
        return None
    if op == "Equal":
        return _elementwise(data, get(ins[1]), _equal, "bool")
    if op in ARITH_OPS:
        other = get(ins[1])
        if data.dtype != "int64" or other is None or other.dtype != "int64":
            return None
        return _elementwise(data, other, _ARITH[op], "int64")
    return None


def _broadcast(a: SymValue, b: SymValue) -> tuple[list[tuple[Dim, Dim]], bool] | None:
    """Element pairs of two scalars/vectors under ONNX broadcasting (1-element sides repeat)."""
    la, lb = len(a.dims), len(b.dims)
    if la != lb and la != 1 and lb != 1:
        return None
    n = max(la, lb)
    pairs = [(a.dims[i if la > 1 else 0], b.dims[i if lb > 1 else 0]) for i in range(n)]
    return pairs, a.scalar and b.scalar


def _elementwise(a: SymValue, b: SymValue | None, fn: Callable[[Dim, Dim], Dim | None], dtype: str) -> SymValue | None:
    if b is None:
        return None
    pb = _broadcast(a, b)
    if pb is None:
        return None
    pairs, scalar = pb
    out = [fn(x, y) for x, y in pairs]
    if any(d is None or (isinstance(d, int) and not -(2**63) <= d < 2**63) for d in out):
        return None  # undecided, or would wrap around in int64
    return SymValue(tuple(out), scalar, dtype)  # type: ignore[arg-type]


def _equal(x: Dim, y: Dim) -> Dim | None:
    if isinstance(x, int) and isinstance(y, int):
        return bool(x == y)
    if x == y:
        return True
    if (isinstance(x, int) and x < 0) or (isinstance(y, int) and y < 0):
        return False  # a dim is never negative
    return None


def _add(x: Dim, y: Dim) -> Dim | None:
    if isinstance(x, int) and isinstance(y, int):
        return x + y
    return y if x == 0 else x if y == 0 else None


def _sub(x: Dim, y: Dim) -> Dim | None:
    if isinstance(x, int) and isinstance(y, int):
        return x - y
    if x == y:
        return 0
    return x if y == 0 else None


def _mul(x: Dim, y: Dim) -> Dim | None:
    if isinstance(x, int) and isinstance(y, int):
        return x * y
    if x == 0 or y == 0:
        return 0
    return y if x == 1 else x if y == 1 else None


def _div(x: Dim, y: Dim) -> Dim | None:
    if isinstance(x, int) and isinstance(y, int):
        if y == 0:
            return None
        q = abs(x) // abs(y)  # C++ integer division truncates toward zero
        return q if (x >= 0) == (y >= 0) else -q
    return x if y == 1 else None


_ARITH: dict[str, Callable[[Dim, Dim], Dim | None]] = {"Add": _add, "Sub": _sub, "Mul": _mul, "Div": _div}


def _where(cond: SymValue | None, x: SymValue | None, y: SymValue | None) -> SymValue | None:
    if cond is None or x is None or y is None or cond.dtype != "bool" or not cond.static or x.dtype != y.dtype:
        return None
    lengths = {len(v.dims) for v in (cond, x, y)} - {1}
    if len(lengths) > 1:
        return None
    n = lengths.pop() if lengths else 1
    pick = lambda v, i: v.dims[i if len(v.dims) > 1 else 0]  # noqa: E731
    out = tuple(pick(x, i) if pick(cond, i) else pick(y, i) for i in range(n))
    return SymValue(out, cond.scalar and x.scalar and y.scalar, x.dtype)


def _slice(node: Node, data: SymValue, get: Getter) -> SymValue | None:
    if data.scalar:
        return None
    ins = node.inputs
    if len(ins) < 3:
        starts, ends, axes, steps = node.attr("starts"), node.attr("ends"), node.attr("axes"), None
    else:
        starts, ends = _ints(get(ins[1])), _ints(get(ins[2]))
        axes = _ints(get(ins[3])) if len(ins) > 3 and ins[3] else None
        steps = _ints(get(ins[4])) if len(ins) > 4 and ins[4] else None
        if (len(ins) > 3 and ins[3] and axes is None) or (len(ins) > 4 and ins[4] and steps is None):
            return None
    if starts is None or ends is None or len(starts) != 1 or len(ends) != 1:
        return None
    if axes is not None and list(axes) not in ([0], [-1]):
        return None
    step = steps[0] if steps else 1
    if step == 0:
        return None
    n = len(data.dims)
    start, end = starts[0], ends[0]
    start = start + n if start < 0 else start
    end = end + n if end < 0 else end
    if step > 0:
        start, end = min(max(start, 0), n), min(max(end, 0), n)
    else:
        start, end = min(max(start, 0), n - 1), min(max(end, -1), n - 1)
    return SymValue(tuple(data.dims[i] for i in range(start, end, step)), False, data.dtype)
