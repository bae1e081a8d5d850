"""Where a segmented session cuts a big graph (``graphtool.runtime.segmented``), worked out from the IR.

The sandbox child that opens the session knows the model only as bytes, and finding the cuts
there means reading every node's input and output names out of protobuf: ~5 µs a node, a
second of a 200,000-node session's build, on the core onnxruntime's own optimizer needs
(``compare``). graphtool already holds those names in its op records and reads them in a
fraction of that, so ``runtime.source_of`` sends the cuts along with the bytes.

The plan describes the nodes in the order the model's bytes list them: for bytes from
``io.to_bytes`` that is ``Graph.topological_ids()``, which the serializer walks; for a file read
as it is, only a ``pristine()`` model's (its ids are then the file's order). Graphs with
subgraphs get no plan: their capture reads are the child's to find.
"""

from __future__ import annotations

from graphtool.ir.graph import Graph
from graphtool.ir.model import Model
from graphtool.runtime.segmented import MIN_NODES, SEGMENT_NODES, NotSegmentable, Plan, cut


def segment_plan(model: Model, segment_nodes: int = SEGMENT_NODES) -> Plan | None:
    """The cuts ``SegmentedSession`` would find in ``model``'s bytes, or None (too small, has
    subgraphs, or not cuttable: the child then decides itself)."""
    graph = model.graph
    if len(graph) < MIN_NODES or any(True for _ in graph.subgraphs()):
        return None
    return _plan(graph, graph.topological_ids(), segment_nodes)


def _plan(graph: Graph, order: list[int], segment_nodes: int) -> Plan | None:
    records = graph._node  # graphtool.ir.records.OpData: io holds inputs, then outputs
    ops = [records[i] for i in order]
    try:
        cuts = cut([op.io[:op.n_in] for op in ops], [op.io[op.n_in:] for op in ops], graph.initializers,
                   graph.inputs, graph.outputs, segment_nodes)
    except NotSegmentable:
        return None  # the child would refuse to cut too
    return {"nodes": len(order), "segments": cuts}
