"""Run a very large model as consecutive segments, each its own onnxruntime session.

onnxruntime's session build is quadratic in the node count: its allocation planner, deciding
whether a node needs a barrier, looks each producer up with ``std::find`` over the stream's node
list (``core/framework/allocation_planner.cc``, ``BuildExecutionPlan``, step 4), so a chain of
200,000 nodes takes 7.4 s to open and a million-node one about two minutes, nearly all of it in
that search (``perf``: 45 % of the samples in one 4-way unrolled compare loop).

Verification runs models with ORT's optimizations off, where every node runs the same kernel
however the graph is cut. So a graph past ``MIN_NODES`` nodes is cut, in its (topologically
sorted) node order, into segments of ``SEGMENT_NODES``: each segment is a model whose inputs are
the values it reads from earlier segments or the graph's inputs and whose outputs are the values
later segments or the graph's outputs read. The segments run in order, each on the values of the
ones before, and the whole answers like one ``InferenceSession`` (inputs, outputs, overridable
initializers, run). Cost: linear in the node count (~0.2 s per 10,000-node segment).

A value crossing a cut is declared with the element type the session that makes it reports, so
segments open one after another. A model whose nodes are out of order, whose graph inputs are not
all tensors, or with a non-tensor value crossing a cut is not segmented: ``open_segmented``
returns None and the caller opens one session as before.

Runs in the sandbox child, so it imports onnx and nothing of graphtool's IR.
"""

from __future__ import annotations

import os
from types import SimpleNamespace
from typing import Any, Callable, Container, Iterable, Sequence

MIN_NODES = 60_000  # below this one session is cheaper than cutting
# ORT's session build per segment: 10k nodes open ~20% faster than 20k (its planner's quadratic
# term), 5k no faster than 10k (chain, blocks and fan-out graphs of 200k nodes; stop 27)
SEGMENT_NODES = 10_000
# The most nodes whose sessions stay open at once. A session costs ~3.5 KB per node (a 1M-node
# chain held 3.2-3.6 GB per sandbox child with every segment open, two children at once beside
# graphtool's 1.6 GB); past this bound a segment is closed after use and reopened from its bytes
# when the next run reaches it (~0.2 s per 10k-node segment), so a million-node run costs ~10 s
# more per run and ~0.7 GB instead of ~3.5 GB.
MAX_OPEN_NODES = 200_000
MIN_BYTES = 1 << 20  # a model file smaller than this cannot hold MIN_NODES nodes: not even parsed

# (segment model bytes, folder its external data is relative to) -> an onnxruntime session
OpenSession = Callable[[bytes, "str | None"], Any]
# the cuts, found by the caller (graphtool.runtime.plan): {"nodes": how many the model lists,
# "segments": [(start, stop, inputs, initializers, outputs, done_with), ...]}
Plan = dict[str, Any]


class NotSegmentable(Exception):
    """The model cannot be cut safely; one session it is."""


def open_segmented(source: str | bytes, open_session: OpenSession, plan: Plan | None = None) -> "SegmentedSession | None":
    """A SegmentedSession for a model past ``MIN_NODES`` nodes, else None (the caller's one session).
    ``plan``: the cuts, when the caller knows them (its node count must match the model's)."""
    size = len(source) if isinstance(source, bytes) else os.path.getsize(source)
    if size < MIN_BYTES:
        return None
    import onnx

    if isinstance(source, bytes):
        model, folder = onnx.load_from_string(source), None
    else:
        model, folder = onnx.load(source, load_external_data=False), os.path.dirname(os.path.abspath(source))
    if len(model.graph.node) < MIN_NODES:
        return None
    try:
        return SegmentedSession(model, open_session, folder, plan=plan)
    except NotSegmentable:
        return None


def _elem_type(type_string: str) -> int:
    """ORT's ``tensor(float)`` → TensorProto.FLOAT; NotSegmentable for sequences, maps, optionals."""
    from onnx import TensorProto

    if not (type_string.startswith("tensor(") and type_string.endswith(")")):
        raise NotSegmentable(f"a {type_string} value crosses a cut")
    name = type_string[len("tensor("):-1].upper()
    try:
        return TensorProto.DataType.Value(name)
    except ValueError:
        raise NotSegmentable(f"unknown element type {type_string}") from None


def _type_string(elem_type: int) -> str:
    from onnx import TensorProto

    return f"tensor({TensorProto.DataType.Name(elem_type).lower()})"


def _declared(value_info: Any) -> SimpleNamespace:
    """A graph input as ``NodeArg`` shows it: name, type string, dims (int, symbol or None)."""
    if not value_info.type.HasField("tensor_type"):
        raise NotSegmentable(f"graph input '{value_info.name}' is not a tensor")
    t = value_info.type.tensor_type
    dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in t.shape.dim]
    return SimpleNamespace(name=value_info.name, type=_type_string(t.elem_type), shape=dims)


def _subgraph_reads(node: Any, out: set[str]) -> None:
    """Every name a node's subgraphs read: a superset of the outer values they capture."""
    for attr in node.attribute:
        for g in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
            for inner in g.node:
                out.update(n for n in inner.input if n)
                _subgraph_reads(inner, out)


Cut = tuple[int, int, list[str], list[str], list[str], list[str]]  # start, stop, inputs, initializers, outputs, done_with


def cut(reads: Sequence[Sequence[str]], made: Sequence[Sequence[str]], initializers: Container[str],
        declared_inputs: Container[str], outputs: Iterable[str], segment_nodes: int,
        captured: dict[int, list[str]] | None = None) -> list[Cut]:
    """Segments of ``segment_nodes`` consecutive nodes, given what each node reads and makes (in
    the model's node order): what a segment reads from before, which weights, what it hands on
    (read later or a graph output) and which of its inputs no later segment reads.

    ``captured``: names a node's subgraphs read, by node position (a superset: those made by an
    earlier node or outer are kept). Both the sandbox child (from protobuf) and graphtool
    (``graphtool.runtime.plan``, from its IR) cut with this, so they cannot disagree. Raises
    NotSegmentable for a value read before any node makes it, or an output nothing makes."""
    produced_at = {v: p for p, names in enumerate(made) for v in names if v}
    if captured:
        reads = list(reads)
        for p, names in captured.items():
            reads[p] = [*reads[p], *(v for v in names
                                     if produced_at.get(v, p) < p or v in declared_inputs or v in initializers)]
    first_read = {v: p for p in range(len(reads) - 1, -1, -1) for v in reads[p] if v}
    for v, p in first_read.items():
        if v not in declared_inputs and v not in initializers and produced_at.get(v, p) >= p:
            raise NotSegmentable(f"'{v}' is read before a node makes it")
    last_read = {v: p for p, names in enumerate(reads) for v in names if v}
    for v in outputs:
        if v not in produced_at and v not in declared_inputs:
            raise NotSegmentable(f"graph output '{v}' is made by no node")
        last_read[v] = len(reads)
    cuts: list[Cut] = []
    for start in range(0, len(reads), segment_nodes):
        stop = min(start + segment_nodes, len(reads))
        read = dict.fromkeys(v for names in reads[start:stop] for v in names if v)
        weights = [v for v in read if v in initializers]
        inputs = [v for v in read if v not in initializers and produced_at.get(v, -1) < start]
        handed_on = [v for v in dict.fromkeys(v for names in made[start:stop] for v in names if v)
                     if last_read.get(v, -1) >= stop]
        done_with = [v for v in inputs if last_read[v] < stop]
        if not handed_on:
            # nothing it makes is read later or is an output (dead branches: 100k Relus of which one
            # is read): onnxruntime runs no session for no outputs, and nothing needs it to run
            if cuts:
                cuts[-1][5].extend(done_with)
            continue
        cuts.append((start, stop, inputs, weights, handed_on, done_with))
    return cuts


class _Segment:
    def __init__(self, start: int, stop: int) -> None:
        self.start, self.stop = start, stop
        self.inputs: list[str] = []  # read from earlier segments or the graph's inputs
        self.initializers: list[str] = []
        self.outputs: list[str] = []  # read by later segments or graph outputs
        self.done_with: list[str] = []  # values no segment after this one reads
        self.session: Any = None
        self.piece = b""  # the segment as a model, to reopen it once closed (MAX_OPEN_NODES)

    @staticmethod
    def planned(start: int, stop: int, inputs: list[str], initializers: list[str], outputs: list[str],
                done_with: list[str]) -> "_Segment":
        seg = _Segment(start, stop)
        seg.inputs, seg.initializers, seg.outputs, seg.done_with = inputs, initializers, outputs, done_with
        return seg


class SegmentedSession:
    """One model as a pipeline of sessions (see the module's docstring)."""

    def __init__(self, model: Any, open_session: OpenSession, folder: str | None,
                 segment_nodes: int | None = None, plan: Plan | None = None) -> None:
        graph = model.graph
        inits = {t.name: t for t in graph.initializer}
        self._inputs = [_declared(i) for i in graph.input if i.name not in inits]
        self._overridable = [_declared(i) for i in graph.input if i.name in inits]
        self._output_names = [o.name for o in graph.output]
        if plan is not None and plan["nodes"] == len(graph.node):
            self._segments = [_Segment.planned(*cut) for cut in plan["segments"]]
        else:
            self._segments = self._cut(graph, inits, segment_nodes or SEGMENT_NODES)
        self._open_session, self._folder = open_session, folder
        self._open_order: list[_Segment] = []  # open segments, least recently used first
        self._open(model, inits)

    def _cut(self, graph: Any, inits: dict[str, Any], segment_nodes: int) -> list[_Segment]:
        """``cut`` on the names the model's nodes read and make (each field read from protobuf
        once: each read builds a container)."""
        nodes = graph.node
        reads = [[n for n in node.input if n] for node in nodes]
        made = [[n for n in node.output if n] for node in nodes]
        captured: dict[int, list[str]] = {}
        for i, node in enumerate(nodes):
            if len(node.attribute):
                names: set[str] = set()
                _subgraph_reads(node, names)
                if names:
                    captured[i] = sorted(names)
        return [_Segment.planned(*c) for c in cut(reads, made, inits, {i.name for i in graph.input},
                                                  self._output_names, segment_nodes, captured)]

    def _open(self, model: Any, inits: dict[str, Any]) -> None:
        """Open the segments in order: a crossing value's type comes from the session that makes it."""
        from onnx import helper

        graph = model.graph
        declared = {i.name: i.type for i in graph.input}
        self._types = {i.name: i.type for i in self._inputs}
        for seg in self._segments:
            inputs = [helper.make_value_info(n, declared[n]) if n in declared
                      else helper.make_tensor_value_info(n, _elem_type(self._types[n]), None) for n in seg.inputs]
            inputs += [helper.make_value_info(n, declared[n]) for n in seg.initializers if n in declared]
            outputs = [helper.ValueInfoProto(name=n) for n in seg.outputs]  # types: ORT infers them
            part = helper.make_graph(list(graph.node[seg.start:seg.stop]), f"{graph.name}_{seg.start}", inputs,
                                     outputs, [inits[n] for n in seg.initializers])
            piece = helper.make_model(part, opset_imports=list(model.opset_import), ir_version=model.ir_version)
            piece.functions.extend(model.functions)
            seg.piece = piece.SerializeToString()
            for arg in self._session(seg).get_outputs():
                self._types[arg.name] = arg.type

    def _session(self, seg: _Segment) -> Any:
        """``seg``'s session, opened from its bytes if it was closed; the least recently used are
        closed while more than ``MAX_OPEN_NODES`` nodes are open."""
        if seg.session is None:
            seg.session = self._open_session(seg.piece, self._folder)
        else:
            self._open_order.remove(seg)
        self._open_order.append(seg)
        open_nodes = sum(s.stop - s.start for s in self._open_order)
        while open_nodes > MAX_OPEN_NODES and len(self._open_order) > 1:
            oldest = self._open_order.pop(0)
            oldest.session = None
            open_nodes -= oldest.stop - oldest.start
        return seg.session

    # ------------------------------------------------------------------ InferenceSession's surface

    @property
    def segments(self) -> int:
        return len(self._segments)

    def get_inputs(self) -> list[Any]:
        return self._inputs

    def get_outputs(self) -> list[Any]:
        return [SimpleNamespace(name=n, type=self._types.get(n, "tensor(undefined)"), shape=[])
                for n in self._output_names]

    def get_overridable_initializers(self) -> list[Any]:
        return self._overridable

    def run(self, output_names: Iterable[str] | None, input_feed: dict[str, Any], run_options: Any = None) -> list[Any]:
        values = dict(input_feed)
        keep = set(self._output_names)
        for seg in self._segments:
            feeds = {n: values[n] for n in seg.inputs if n in values}
            feeds.update((n, values[n]) for n in seg.initializers if n in values)
            values.update(zip(seg.outputs, self._session(seg).run(seg.outputs, feeds)))
            for n in seg.done_with:
                if n not in keep:
                    values.pop(n, None)
        return [values[n] for n in (list(output_names) if output_names else self._output_names)]
