"""Where a segmented session cuts a big graph (``graphtool.segmented``), worked out from the IR.

The sandbox child that opens the session knows the model only as bytes, and finding the cuts
there means reading every node's input and output names out of protobuf: ~5 µs a node, a
second of a 200,000-node session's build, on the core onnxruntime's own optimizer needs
(``compare``). graphtool already holds those names in its op records and reads them in a
fraction of that, so the caller sends the cuts along with the bytes.

The plan describes the nodes in the order the model's bytes list them: for bytes from
``io.to_bytes`` that is ``Graph.topological_ids()``, which the serializer walks; for a file read
as it is, only a ``pristine()`` model's (its ids are then the file's order). Graphs with
subgraphs get no plan: their capture reads are the child's to find.
"""

from __future__ import annotations

from typing import Any

from graphtool.ir.graph import Graph
from graphtool.ir.model import Model
from graphtool.segmented import MIN_NODES, SEGMENT_NODES, Plan


def segment_plan(model: Model, segment_nodes: int = SEGMENT_NODES) -> Plan | None:
    """The cuts ``SegmentedSession`` would find in ``model``'s bytes, or None (too small, has
    subgraphs, or not cuttable: the child then decides itself)."""
    graph = model.graph
    if len(graph) < MIN_NODES or any(True for _ in graph.subgraphs()):
        return None
    return _plan(graph, graph.topological_ids(), segment_nodes)


def _plan(graph: Graph, order: list[int], segment_nodes: int) -> Plan | None:
    # comprehensions over the op records' name tuples: a statement-per-node loop cost 4 µs a node
    records = graph._node  # graphtool.ir.records.OpData: io holds inputs, then outputs
    ops = [records[i] for i in order]
    reads = [op.io[:op.n_in] for op in ops]
    made = [op.io[op.n_in:] for op in ops]
    produced_at = {v: p for p, names in enumerate(made) for v in names if v}
    last_read = {v: p for p, names in enumerate(reads) for v in names if v}
    first_read = {v: p for p in range(len(reads) - 1, -1, -1) for v in reads[p] if v}
    inits = graph.initializers
    outer = set(graph.inputs) | set(inits)
    if any(v not in outer and produced_at.get(v, p) >= p for v, p in first_read.items()):
        return None  # read before any node makes it: the child would refuse to cut too
    if any(v not in produced_at and v not in graph.inputs for v in graph.outputs):
        return None
    last_read.update(dict.fromkeys(graph.outputs, len(order)))
    segments: list[tuple[int, int, list[str], list[str], list[str], list[str]]] = []
    for start in range(0, len(order), segment_nodes):
        stop = min(start + segment_nodes, len(order))
        read = dict.fromkeys(v for names in reads[start:stop] for v in names if v)
        initializers = [v for v in read if v in inits]
        inputs = [v for v in read if v not in inits and produced_at.get(v, -1) < start]
        outputs = [v for v in dict.fromkeys(v for names in made[start:stop] for v in names if v)
                   if last_read.get(v, -1) >= stop]
        done_with = [v for v in inputs if last_read[v] < stop]
        segments.append((start, stop, inputs, initializers, outputs, done_with))
    return {"nodes": len(order), "segments": segments}


def plan_for(source: Any, model: Model | None) -> Plan | None:
    """The plan to send with ``source`` (bytes ``io.to_bytes`` made of ``model``, or the file
    ``model`` was loaded from, untouched since), or None."""
    if model is None or (isinstance(source, str) and not model.pristine()):
        return None
    return segment_plan(model)
