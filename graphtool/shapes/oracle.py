"""The one shape/type oracle: ONNX shape inference over the whole model, shared by every pass.

Passes ask "what shape is this value" all the time (a fusion must prove a rank, shape folding
needs dims, infer-shapes records them). Each used to run ``onnx.shape_inference`` its own way, on
its own copy, with its own cache — the level-2 matchers once per pass and graph, so a level-2 run
inferred the same unchanged model dozens of times, and subgraphs were never inferred for them.

Here inference runs on a weightless copy of the whole model (small tensors with their data, so
data propagation can read shape constants; big ones as type-only references that are never
read), and its results are kept per graph, subgraphs included. The pass manager calls
``invalidate()`` whenever a pass changed the model; the next question runs inference again.
Between runs the tables stay valid for every value that still exists (rewrites give new shapes
new names, so a surviving value keeps its shape); values created since are unknown until then.

A later run can know less than an earlier one (inference stops at the com.microsoft ops a fusion
made), so each run's tables are completed by the earlier runs' facts about values that still
exist. Symbols inference makes up (``unk__N``) name one size only within one run: they are
marked with their run (``unk__3@run2``), so symbols of two runs never compare equal.
Big models get a bounded number of runs (``MAX_RUNS_BIG``): past it, the last tables serve, which
is still sound (older facts about surviving values are true), only less complete. A main graph past
150k ops is inferred in segments where only types cross the cuts (graphtool.shapes.segments: the
whole inference held +1.6 GB at a million ops), with the same tables.
"""

from __future__ import annotations

import weakref
from typing import Mapping, Optional, Union

from onnx import GraphProto, ModelProto, TensorProto, TypeProto, numpy_helper
from onnx import onnx_cpp2py_export as _onnx_cpp

from graphtool.ir.graph import Graph
from graphtool.ir.model import Model
from graphtool.ir.protos import graph_without_nodes
from graphtool.ir.tensor import Tensor
from graphtool.ir.to_onnx import model_bytes
from graphtool.shapes.segments import infer_in_segments, segmentable

Dim = Optional[Union[int, str]]
SMALL_TENSOR_BYTES = 4096  # tensors inference may read (shape constants); bigger ones are type-only
BIG_MODEL_NODES = 50_000
MAX_RUNS_BIG = 3


def weightless(tensor: Tensor) -> TensorProto:
    """A tensor for shape inference: small ones with their data, big ones as a reference to
    external data that is never read (inference then knows the type and not the values)."""
    if tensor.nbytes <= SMALL_TENSOR_BYTES:
        return tensor.proto if tensor.external is None else numpy_helper.from_array(tensor.numpy(), tensor.name)
    out = TensorProto(name=tensor.name, data_type=tensor.data_type, dims=tensor.dims)
    out.data_location = TensorProto.EXTERNAL
    entry = out.external_data.add()
    entry.key, entry.value = "location", "graphtool-shape-inference-placeholder"
    return out


def infer(proto: ModelProto, data_prop: bool = True) -> ModelProto:
    """ONNX shape inference, lenient (unknown ops and conflicts leave values untyped instead of
    failing): the one place graphtool calls it. Raises what onnx raises on a model it cannot read."""
    if proto.ir_version < 4:  # IR < 4 ignores initializers that are not graph inputs
        proto.ir_version = 4
    return ModelProto.FromString(infer_serialized(proto.SerializeToString(), data_prop))


def infer_serialized(data: bytes, data_prop: bool = True) -> bytes:
    """``infer`` from and to the serialized model (what onnx.shape_inference.infer_shapes does
    around this call): the one place graphtool runs onnx's shape inference."""
    return _onnx_cpp.shape_inference.infer_shapes(data, False, False, data_prop)


def dims_of(t: TypeProto | None) -> list[Dim] | None:
    """Dims as ints (static), strs (symbolic) or None (unknown); None when the rank is unknown."""
    if t is None or t.WhichOneof("value") != "tensor_type" or not t.tensor_type.HasField("shape"):
        return None
    dims: list[Dim] = []
    for d in t.tensor_type.shape.dim:
        if d.HasField("dim_value"):
            dims.append(int(d.dim_value))
        elif d.HasField("dim_param") and d.dim_param:
            dims.append(d.dim_param)
        else:
            dims.append(None)
    return dims


class ShapeOracle:
    """Inferred types of one model's values, per graph; rerun lazily after ``invalidate()``."""

    def __init__(self, model: Model):
        self.model = model
        self.runs = 0
        self.stale = True
        self._tables: weakref.WeakKeyDictionary[Graph, dict[str, TypeProto]] = weakref.WeakKeyDictionary()

    def invalidate(self) -> None:
        """The model changed: the next question runs inference again (within the run budget)."""
        self.stale = True

    def table(self, graph: Graph) -> dict[str, TypeProto]:
        """Inferred types of the values ``graph`` defines (not those it reads from outside)."""
        self._refresh()
        return self._tables.get(graph, {})

    def type_of(self, graph: Graph, name: str) -> TypeProto | None:
        """The inferred type of ``name`` as seen from ``graph`` (looked up through enclosing graphs)."""
        self._refresh()
        g: Graph | None = graph
        while g is not None:
            t = self._tables.get(g, {}).get(name)
            if t is not None:
                return t
            g = g.parent
        return None

    def dims(self, graph: Graph, name: str) -> list[Dim] | None:
        return dims_of(self.type_of(graph, name))

    def elem_type(self, graph: Graph, name: str) -> int:
        t = self.type_of(graph, name)
        return t.tensor_type.elem_type if t is not None and t.HasField("tensor_type") else 0

    def _refresh(self) -> None:
        if not self.stale:
            return
        if self.runs >= MAX_RUNS_BIG and self.model.node_count() > BIG_MODEL_NODES:
            return  # the last tables serve: still true for every surviving value
        self.stale = False
        self.runs += 1
        previous, self._tables = self._tables, weakref.WeakKeyDictionary()
        distinct: dict = {}  # see _shared
        try:
            table = None
            if segmentable(self.model):
                table = infer_in_segments(self.model, weightless, infer_serialized,
                                          lambda t, segment: self._shared(t, f"run{self.runs}.{segment}", distinct))
            if table is not None:
                self._tables[self.model.graph] = table
            else:
                inferred = _inferred(self.model)
                self._collect(self.model.graph, inferred.graph, distinct)
                del inferred  # the tables hold their own copies (one per distinct type)
            release_freed_memory()  # onnx's C++ inference freed ~1 KB per node into the heap
        except Exception:  # noqa: BLE001 - inference fails on odd models: declarations alone serve
            pass
        renames = _symbol_renames(previous, self._tables)
        for graph, old in previous.items():
            self._tables[graph] = _kept(graph, old, _renamed(self._tables.get(graph, {}), renames))

    @staticmethod
    def _shared(t: TypeProto, tag: str, distinct: dict) -> TypeProto:
        """``t`` with its made-up symbols marked ``tag``, as the one TypeProto of its kind.
        ``distinct`` maps (tag, serialized type) and marked serialized types to it: a model's
        values have few distinct types, so nearly every call is one serialization and one lookup."""
        raw = t.SerializeToString()
        shared = distinct.get((tag, raw))
        if shared is None:
            key = _run_local(t, tag).SerializeToString()
            shared = distinct.get(key)
            if shared is None:
                shared = distinct[key] = TypeProto.FromString(key)
            distinct[(tag, raw)] = shared
        return shared

    def _collect(self, graph: Graph, proto: GraphProto, distinct: dict) -> None:
        """Fill ``graph``'s table (and its subgraphs') from the inferred ``proto``. Values of the
        same type share one TypeProto of their own (``distinct``, by serialized type): the table
        does not keep the inferred model alive (on a million-node chain that was 1.5 KB per value,
        all the parsed nodes and value infos), and a model's values have few distinct types."""
        table: dict[str, TypeProto] = {}
        for infos in (proto.input, proto.output, proto.value_info):
            for info in infos:
                if info.HasField("type") and info.name not in table:
                    table[info.name] = self._shared(info.type, f"run{self.runs}", distinct)
        self._tables[graph] = table
        if not any(True for _ in graph.subgraphs()):
            return  # nothing below to collect: no walk of every node (and of every NodeProto)
        nodes = graph.topological_order()
        if len(nodes) != len(proto.node):
            return
        for node, node_proto in zip(nodes, proto.node):
            if node.op_type != node_proto.op_type:
                return
            subs = {a.name: a for a in node_proto.attribute}
            for key, value in node._data["attrs"].items():
                attr = subs.get(key)
                if isinstance(value, Graph) and attr is not None and attr.HasField("g"):
                    self._collect(value, attr.g, distinct)
                elif isinstance(value, list) and attr is not None and len(attr.graphs) == len(value):
                    for sub, sub_proto in zip(value, attr.graphs):
                        self._collect(sub, sub_proto, distinct)


def release_freed_memory() -> None:
    """Give the C heap's free memory back to the system (glibc's ``malloc_trim``; elsewhere a
    no-op). onnx's C++ shape inference frees as much as the model's protobuf is big, in pieces
    glibc keeps for later ``malloc``s — which Python's object allocator never makes, so without
    this the process stays that much bigger for the rest of its run."""
    global _TRIM
    if _TRIM is None:
        try:
            import ctypes

            _TRIM = ctypes.CDLL("libc.so.6").malloc_trim
        except (OSError, AttributeError):
            _TRIM = False
    if _TRIM:
        _TRIM(0)


_TRIM = None


def _inferred(model: Model) -> ModelProto:
    """``infer`` of the model (weightless), from its serialized form. Without subgraphs the result
    is parsed without its nodes (``_collect`` reads only value infos then): the parsed nodes were
    ~350 bytes each, beside the IR."""
    data = _without_made_up_dims(model_bytes(model, write_tensor=weightless))
    if model.ir_version < 4:
        return infer(ModelProto.FromString(data))
    out = infer_serialized(data)
    graph = None if any(True for _ in model.graph.subgraphs()) else graph_without_nodes(out)
    return ModelProto.FromString(out) if graph is None else ModelProto(graph=GraphProto.FromString(graph))


def declared_dims(graph: Graph, value: str) -> list[Dim] | None:
    """``graph.declared_shape(value)`` with the dims another tool's inference made up (``unk__N``)
    unknown, except on graph inputs and outputs (the model's interface): such a symbol named one
    size only within that tool's run, on a graph that may have changed since (onnxruntime's float16
    converter keeps every value_info its inference made). Inference fills them again
    (``_without_made_up_dims``)."""
    dims = graph.declared_shape(value)
    if dims is None or value in graph.inputs or value in graph.outputs:
        return dims
    return [None if isinstance(d, str) and _made_up(d) else d for d in dims]


def _without_made_up_dims(data: bytes) -> bytes:
    """The serialized model with the main graph's value_info dims named ``unk__N`` made unknown.

    Another tool's shape inference wrote them (onnxruntime's float16 converter keeps every
    value_info its inference made): given to inference as declarations, they stay where it would
    derive a dim now — a head split's ``[B, S, N, 16]`` stayed ``[unk__1, unk__2, unk__3, unk__19]``,
    and rotary refused "the rotated size unk__19 is not a static even number". Unknown, inference
    recomputes them. Graph inputs and outputs keep theirs (the model's interface); a model without
    any such dim is passed through untouched (one substring search)."""
    if b"unk__" not in data:
        return data
    proto = ModelProto.FromString(data)
    changed = False
    for info in proto.graph.value_info:
        if not info.type.HasField("tensor_type"):
            continue
        for d in info.type.tensor_type.shape.dim:
            if d.HasField("dim_param") and _made_up(d.dim_param):
                d.ClearField("dim_param")
                changed = True
    return proto.SerializeToString() if changed else data


def _made_up(symbol: str) -> bool:
    return symbol.startswith("unk__") and "@" not in symbol  # marked ones came in declared


def _run_local(t: TypeProto, tag: str) -> TypeProto:
    """``t`` with the symbols inference made up (``unk__N``) marked with their run (and segment,
    graphtool.shapes.segments): they name one size only within one inference, so symbols of two
    must never compare equal."""
    if not t.HasField("tensor_type") or not any(_made_up(d.dim_param) for d in t.tensor_type.shape.dim):
        return t
    t = TypeProto.FromString(t.SerializeToString())
    for d in t.tensor_type.shape.dim:
        if _made_up(d.dim_param):
            d.dim_param = f"{d.dim_param}@{tag}"
    return t


def _symbol_renames(old: Mapping[Graph, dict[str, TypeProto]],
                    new: Mapping[Graph, dict[str, TypeProto]]) -> dict[str, str]:
    """New-run symbols that stand where an earlier run had another symbol, on the same dim of the
    same value: the new one is renamed to the old, so values made since compare equal to values
    that lived through both runs. A new symbol facing two old ones (the new run proved equal what
    the old one could not) takes the first: sound, as it only forgoes equalities."""
    renames: dict[str, str] = {}
    for graph, table in new.items():
        before = old.get(graph, {})
        for name, t in table.items():
            earlier = before.get(name)
            if earlier is None:
                continue
            a, b = dims_of(t), dims_of(earlier)
            if a is None or b is None or len(a) != len(b):
                continue
            for x, y in zip(a, b):
                if isinstance(x, str) and "@run" in x and isinstance(y, str) and x != y:
                    renames.setdefault(x, y)
    return renames


def _renamed(table: dict[str, TypeProto], renames: dict[str, str]) -> dict[str, TypeProto]:
    if not renames:
        return table
    out = {}
    for name, t in table.items():
        if t.HasField("tensor_type") and any(d.dim_param in renames for d in t.tensor_type.shape.dim):
            t = TypeProto.FromString(t.SerializeToString())
            for d in t.tensor_type.shape.dim:
                if d.dim_param in renames:
                    d.dim_param = renames[d.dim_param]
        out[name] = t
    return out


def _kept(graph: Graph, old: dict[str, TypeProto], new: dict[str, TypeProto]) -> dict[str, TypeProto]:
    """The new run's types, merged with what earlier runs knew of values that still exist.

    A later run can know less: inference stops at ops it has no schema for (the com.microsoft
    ops a fusion just made), and everything downstream loses its dims. The value still has the
    shape the earlier run proved, since rewrites give a new shape a new name. Per dim, what the
    new run found wins (its symbols already renamed to the earlier run's where they correspond);
    the earlier run's dim fills only what the new run left unknown."""
    for name, before in old.items():
        now = new.get(name)
        if now is None:
            if graph.has_value(name):
                new[name] = before
            continue
        a, b = dims_of(now), dims_of(before)
        if b is None or (a is not None and len(a) != len(b)) or not now.HasField("tensor_type"):
            continue
        merged = TypeProto.FromString(now.SerializeToString())
        if a is None:
            merged.tensor_type.shape.CopyFrom(before.tensor_type.shape)
        else:
            for dim, old_dim in zip(merged.tensor_type.shape.dim, before.tensor_type.shape.dim):
                if not dim.HasField("dim_value") and not dim.dim_param:
                    dim.CopyFrom(old_dim)
        new[name] = merged
    return new
