"""ONNX shape inference over a very large main graph, one segment of ops at a time.

onnx's C++ inference holds the whole parsed model, a value-info entry per value and its own
maps at once: on the 1M-node transformer-like graph of bench/gen_models.py that was 1.6 GB above
the IR for the few seconds it ran — the peak of a whole ``optimize``. Inference is a forward
walk, op by op, that reads only its inputs' types (and, for shape arithmetic, values known as
data), so the graph can be inferred in consecutive segments of its topological order: each
segment is a model whose inputs are declared with the types the earlier segments inferred.

It gives the whole-graph answer only where nothing but a type crosses a cut, so a cut is made
only where that is so, and otherwise the caller infers the whole graph as before:

* data: onnx propagates the values of shape-like int tensors (``Shape → Gather → Concat →
  Reshape``) and reads Constant ops' values; a cut never separates a Constant from a reader,
  and a computed value crossing a cut must have a floating-point type (no shape data there);
* symbols: a dim symbol inference makes up (``unk__N``) is marked with its run and segment by
  ``mark`` (the oracle's), so symbols of two segments never compare equal; crossing values carry
  their marked symbols into the next segment, where they stay what they were;
* only graphs without subgraphs (a captured value would cross cuts unseen).

The tables come back in the order whole-graph inference gives (inputs, outputs, then value
infos in op order), so what infer-shapes records is saved in the same order.
"""

from __future__ import annotations

from typing import Callable

from onnx import GraphProto, TensorProto, TypeProto, ValueInfoProto

from graphtool.ir.graph import Graph
from graphtool.ir.model import Model
from graphtool.ir.protos import graph_field, key, record
from graphtool.ir.to_onnx import TensorWriter, framed, model_frame, node_records, tensor_record
from graphtool.ir.value_infos import ValueInfo, as_proto, records

MIN_NODES = 150_000  # below this one inference costs little enough
SEGMENT_NODES = 50_000
CONSTANT_SLACK = 2_000  # how far past a planned cut to look for one no Constant's value crosses
FLOAT_TYPES = {TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.DOUBLE}
_INPUT_KEY, _OUTPUT_KEY = key(11), key(12)  # GraphProto.input, GraphProto.output

Infer = Callable[[bytes], bytes]  # serialized model → serialized inferred model
Mark = Callable[[TypeProto, int], TypeProto]  # an inferred type, its segment → the table's (shared) type


def segmentable(model: Model) -> bool:
    graph = model.graph
    return (model.ir_version >= 4 and len(graph) >= MIN_NODES and not any(True for _ in graph.subgraphs()))


def infer_in_segments(model: Model, write_tensor: TensorWriter, infer: Infer, mark: Mark,
                      segment_nodes: int | None = None) -> dict[str, TypeProto] | None:
    """The main graph's table (value name → type), inferred segment by segment; None when a cut
    would lose what a whole inference knows (the caller then infers the whole graph)."""
    graph = model.graph
    order = graph.topological_ids()
    cuts = _cuts(graph, order, segment_nodes or SEGMENT_NODES)
    if cuts is None:
        return None
    head, tail = model_frame(model)
    ops = graph._node  # the op records (graphtool.ir.records.OpData): io holds inputs, then outputs
    produced_in: dict[str, int] = {}  # value → segment that computes it
    for segment, (start, stop) in enumerate(zip(cuts, cuts[1:])):
        produced_in.update({v: segment for i in order[start:stop] for v in ops[i].io[ops[i].n_in:] if v})
    infos_of: list[list[ValueInfo]] = [[] for _ in cuts[1:]]  # declared value infos by segment
    for value, info in graph.value_info.items():  # of a value no op computes: the first segment's
        infos_of[produced_in.get(value, 0)].append(info)
    found: dict[str, TypeProto] = {}
    for segment, (start, stop) in enumerate(zip(cuts, cuts[1:])):
        ids = order[start:stop]
        crossing: list[str] = []
        graph_inputs: list[str] = list(graph.inputs) if segment == 0 else []  # all of them, once
        initializers: list[str] = []
        # each value the segment reads, once, in order of first reading (a comprehension: a
        # statement per read cost ~0.4 s on 200,000 nodes)
        for value in dict.fromkeys(v for i in ids for v in ops[i].io[:ops[i].n_in] if v):
            source = produced_in.get(value)
            if source is not None:  # made by an earlier segment (this one's are in order)
                if source == segment:
                    continue
                t = found.get(value)
                if t is None or not t.HasField("tensor_type") or t.tensor_type.elem_type not in FLOAT_TYPES:
                    return None  # an int, untyped or non-tensor value would cross: data may be lost
                crossing.append(value)
                continue
            if value in graph.inputs and segment > 0:
                graph_inputs.append(value)
            if value in graph.initializers:
                initializers.append(value)
        outputs = [v for v in graph.outputs if produced_in.get(v) == segment or (segment == 0 and v not in produced_in)]
        data = _segment_model(graph, head, tail, ids, graph_inputs, crossing, found, initializers, outputs,
                              infos_of[segment],
                              write_tensor)
        inferred = GraphProto()
        inferred.MergeFromString(graph_field(infer(data)) or b"")  # one segment's nodes: parsed in C, cheaply
        for field in (inferred.input, inferred.output, inferred.value_info):
            for info in field:
                if info.HasField("type") and info.name not in found:
                    found[info.name] = mark(info.type, segment)
        del inferred
    # whole-graph order: the graph's inputs, its outputs, then the values ops compute, in op order
    table = {v: found[v] for v in (*graph.inputs, *graph.outputs) if v in found}
    table.update((v, t) for v, t in found.items() if v not in table)
    return table


def _cuts(graph: Graph, order: list[int], segment_nodes: int) -> list[int] | None:
    """Segment boundaries (positions in ``order``): about every ``segment_nodes`` ops, moved on to
    the first place no Constant op's value is read across; None if there is none nearby."""
    ops = graph._node
    last_read: dict[str, int] = {}
    constants: list[tuple[int, str]] = []  # (position, value) of each Constant op's output
    for position, i in enumerate(order):
        data = ops[i]
        for value in data.io[:data.n_in]:
            last_read[value] = position
        if data.op_type == "Constant" and data.domain in ("", "ai.onnx"):
            constants.extend((position, value) for value in data.io[data.n_in:])
    constant_reach = [-1] * (len(order) + 1)  # the farthest a Constant before position p is read
    for position, value in constants:
        constant_reach[position + 1] = max(constant_reach[position + 1], last_read.get(value, -1))
    for p in range(1, len(constant_reach)):
        constant_reach[p] = max(constant_reach[p], constant_reach[p - 1])
    cuts = [0]
    planned = segment_nodes
    while planned < len(order) - segment_nodes // 2:
        cut = next((p for p in range(planned, min(planned + CONSTANT_SLACK, len(order)))
                    if constant_reach[p] < p), None)
        if cut is None:
            return None
        cuts.append(cut)
        planned = cut + segment_nodes
    cuts.append(len(order))
    return cuts


def _segment_model(graph: Graph, head: bytes, tail: bytes, ids: list[int], graph_inputs: list[str],
                   crossing: list[str], found: dict[str, TypeProto], initializers: list[str], outputs: list[str],
                   infos: list[ValueInfo], write_tensor: TensorWriter) -> bytes:
    parts = node_records(graph, ids, write_tensor)
    parts.extend(tensor_record(write_tensor(graph.initializers[v])) for v in initializers)
    declared = [graph.inputs[v] or ValueInfoProto(name=v) for v in graph_inputs]
    declared += [ValueInfoProto(name=v, type=found[v]) for v in crossing]
    parts.extend(record(_INPUT_KEY, as_proto(info).SerializeToString()) for info in declared)
    parts.extend(record(_OUTPUT_KEY, as_proto(graph.outputs[v] or ValueInfoProto(name=v)).SerializeToString())
                 for v in outputs)
    parts.append(records(infos))
    return framed(head, b"".join(parts), tail)
