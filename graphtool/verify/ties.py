"""Which free input dims a model's graph ties together (read by graphtool.verify.dims).

Every free dim of the inputs is a token (``n:name`` for a named symbol, ``u:input:axis`` for an
unnamed dim); onnx shape inference propagates them, and ops that need equal dims tie them in a
union-find: the aligned dims of broadcasting ops (a dim broadcast against a constant > 1 is pinned
to it), the non-axis dims of Concat, the inner dims of MatMul and Gemm. Inference runs again with
the ties applied until no new tie appears (at most ``ROUNDS`` runs; one past ``BIG_NODES`` ops, none
past ``MAX_NODES``). Symbols inference makes up are marked with their run, so two runs' ``unk__3``
never tie.
"""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np
import onnx

ROUNDS = 3
MAX_NODES = 300_000
BIG_NODES = 30_000
_BROADCAST = {"Add", "Sub", "Mul", "Div", "Pow", "Mod", "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual",
              "And", "Or", "Xor", "Where", "Max", "Min", "Sum", "Mean", "BitShift", "PRelu", "BitwiseAnd",
              "BitwiseOr", "BitwiseXor"}


class Union:
    def __init__(self) -> None:
        self.parent: dict[Any, Any] = {}

    def find(self, x: Any) -> Any:
        root = x
        while self.parent.get(root, root) != root:
            root = self.parent[root]
        while x != root:
            self.parent[x], x = root, self.parent.get(x, x)
        return root

    def union(self, a: Any, b: Any) -> bool:
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return False
        if isinstance(ra, int) or (isinstance(ra, str) and ra[:2] in ("n:", "u:") and
                                   not isinstance(rb, int) and rb[:2] not in ("n:", "u:")):
            ra, rb = rb, ra  # a constant stays the root (its class is pinned), then an input's own symbol
        self.parent[ra] = rb
        return True


def _token(d: Any) -> Any:
    """A dim as a union-find item: int for static, the symbol for symbolic, None if unknown."""
    if isinstance(d, int):
        return d
    return d if isinstance(d, str) and d else None


def _tie_positions(uf: Union, columns: Iterable[list[Any]]) -> int:
    """Dims that must be equal (or 1, which verification never picks for a free dim)."""
    new = 0
    for col in columns:
        items = [t for t in (_token(d) for d in col) if t is not None and t != 1]
        symbols = [t for t in items if isinstance(t, str)]
        if not symbols:
            continue
        consts = {t for t in items if isinstance(t, int)}
        anchor = next(iter(consts)) if len(consts) == 1 else symbols[0]
        for s in symbols:
            new += uf.union(s, anchor)
    return new


def _broadcast_columns(shapes: list[list[Any]]) -> list[list[Any]]:
    rank = max((len(s) for s in shapes), default=0)
    return [[s[len(s) - rank + i] for s in shapes if len(s) - rank + i >= 0] for i in range(rank)]


def _node_ties(uf: Union, node: onnx.NodeProto, shape_of: dict[str, list[Any]]) -> int:
    ins = [shape_of.get(n) if n else None for n in node.input]
    op = node.op_type
    if node.domain not in ("", "ai.onnx"):
        return 0
    if op in _BROADCAST:
        known = [s for s in ins if s is not None]
        return _tie_positions(uf, _broadcast_columns(known)) if len(known) >= 2 else 0
    if op == "Concat":
        known = [s for s in ins if s is not None]
        if len(known) < 2 or len({len(s) for s in known}) != 1:
            return 0
        rank = len(known[0])
        axis = next((a.i for a in node.attribute if a.name == "axis"), 0) % max(rank, 1)
        return _tie_positions(uf, [[s[i] for s in known] for i in range(rank) if i != axis])
    if op == "MatMul" and len(ins) == 2 and ins[0] and ins[1]:
        a, b = ins
        inner = [[a[-1], b[-2] if len(b) >= 2 else b[0]]]
        batch = _broadcast_columns([a[:-2], b[:-2]]) if len(a) > 2 and len(b) > 2 else []
        return _tie_positions(uf, inner + batch)
    if op == "Gemm" and len(ins) >= 2 and ins[0] and ins[1] and len(ins[0]) == 2 and len(ins[1]) == 2:
        ta = next((a.i for a in node.attribute if a.name == "transA"), 0)
        tb = next((a.i for a in node.attribute if a.name == "transB"), 0)
        return _tie_positions(uf, [[ins[0][0 if ta else 1], ins[1][1 if tb else 0]]])
    return 0


def _shapes(proto: onnx.ModelProto, run: int) -> dict[str, list[Any]]:
    """Dims of every typed value; symbols inference made up are marked with the run (``unk__3@1``):
    the same name in another run is another size."""
    out: dict[str, list[Any]] = {}

    def param(p: str) -> str | None:
        return (p if p[:2] in ("n:", "u:") else f"{p}@{run}") if p else None

    g = proto.graph
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        t = vi.type
        if t.WhichOneof("value") != "tensor_type" or not t.tensor_type.HasField("shape"):
            continue
        out[vi.name] = [d.dim_value if d.HasField("dim_value") else param(d.dim_param)
                        for d in t.tensor_type.shape.dim]
    for init in g.initializer:
        out.setdefault(init.name, list(init.dims))
    return out


def _skeleton(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model for shape inference: nodes and types, big initializers as type-only references."""
    from graphtool.shapes import SMALL_TENSOR_BYTES

    out = onnx.ModelProto()
    out.ir_version = max(model.ir_version, 4)
    out.opset_import.extend(model.opset_import)
    out.functions.extend(model.functions)
    g, src = out.graph, model.graph
    g.node.extend(src.node)
    g.input.extend(src.input)
    g.output.extend(src.output)
    for init in src.initializer:
        size = len(init.raw_data) if init.HasField("raw_data") else 0
        if init.data_location == onnx.TensorProto.EXTERNAL or size > SMALL_TENSOR_BYTES or \
                (not size and np.prod(init.dims, dtype=np.int64) > 64):
            ref = onnx.TensorProto(name=init.name, data_type=init.data_type, dims=init.dims)
            ref.data_location = onnx.TensorProto.EXTERNAL
            entry = ref.external_data.add()
            entry.key, entry.value = "location", "graphtool-dims-placeholder"
            g.initializer.append(ref)
        else:
            g.initializer.append(init)
    return out


def graph_ties(model: onnx.ModelProto, tokens: dict[tuple[str, int], str]) -> tuple[Union, int]:
    """Union-find over the input dims' tokens (and static sizes) from the graph's own constraints."""
    from graphtool.shapes import infer

    uf = Union()
    nodes = len(model.graph.node)
    if not tokens or nodes == 0 or nodes > MAX_NODES:
        return uf, 0
    rounds = ROUNDS if nodes <= BIG_NODES else 1
    base = _skeleton(model)
    by_input = {vi.name: vi for vi in base.graph.input}
    for run in range(rounds):
        for (name, axis), tok in tokens.items():
            dim = by_input[name].type.tensor_type.shape.dim[axis]
            root = uf.find(tok)
            if isinstance(root, int):
                dim.dim_value = root
            else:
                dim.dim_param = root
        try:
            inferred = infer(onnx.ModelProto.FromString(base.SerializeToString()))
        except Exception:  # noqa: BLE001 - a model inference cannot read: no ties from the graph
            break
        shape_of = _shapes(inferred, run)
        if not sum(_node_ties(uf, node, shape_of) for node in inferred.graph.node):
            break
    symbols = set(tokens.values())
    return uf, len(symbols) - len({uf.find(t) for t in symbols})
