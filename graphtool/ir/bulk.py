"""The bulk loader: a whole graph's ops into the NetworkX dicts in one tight loop.

``Graph.add_node`` (``edit.py``) is the general verb; a load of a million ops through it would
spend most of its time in per-call checks that a fresh graph does not need. This loop does the
same work once per op, and builds each inner adjacency in its final shape (``adjacency.One``
for one neighbor, the common case) instead of growing dicts that are then replaced.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable

from graphtool.ir.adjacency import NO_NEIGHBORS, One, put
from graphtool.ir.records import _ONE_SLOT, NO_ATTRS, NO_DATA, Node, OpData, _has_subgraph, _key_dict, _one_slot

if TYPE_CHECKING:
    from graphtool.ir.graph import Graph

Record = tuple[str, str, str, Any, Any, tuple[str, ...], tuple[str, ...]]


def load_ops(graph: "Graph", records: Iterable[Record]) -> None:
    """``_new_op`` + ``_connect`` for a loader's ops, in file order (this is most of a load's
    time): records are (op_type, domain, name, attrs, template, inputs, outputs). Notes whether
    the file's order was topological (then ``topological_ids`` needs no sort), and gives a
    consumer the producer's string for a value name (not a second copy of it).
    """
    node, succ, pred, by_type_all, owners = graph._node, graph._succ, graph._pred, graph._by_type, graph._owners
    ids, one_slot, no_attrs, empty = graph._ids, _ONE_SLOT, NO_ATTRS, NO_NEIGHBORS
    in_order = graph._in_order
    sources: dict[str, str] = {}
    for op_type, domain, name, attrs, template, inputs, outputs in records:
        i = next(ids)
        data = OpData(op_type, domain, name, attrs, template, None)
        node[i] = data
        by_type = by_type_all.get(op_type)
        if by_type is None:
            by_type = by_type_all[op_type] = {}
        by_type[i] = None
        canonical = list(inputs)
        pred[i] = empty  # this op's pred: grown by ``put`` to a One, then a dict from two values
        for slot, value in enumerate(inputs):
            if not value:
                continue
            readers = succ.get(value)
            if readers is None:
                node[value] = NO_DATA
                pred[value] = empty
                keys = one_slot.get(slot) or _one_slot(slot)
                succ[value] = One(i, keys)
            else:
                producers = pred[value]
                if producers:  # a One: a value has one producer; its string is the producer's
                    record = node[producers.key]
                    for out_slot in producers.keys_:
                        value = canonical[slot] = record.io[record.n_in + out_slot]
                else:  # a graph input or initializer: one string for all its readers
                    value = canonical[slot] = sources.setdefault(value, value)
                keys = pred[i].get(value)
                if keys is None:
                    keys = one_slot.get(slot) or _one_slot(slot)
                elif slot not in keys:
                    keys = _key_dict([*keys, slot])
                put(succ, value, i, keys)
            put(pred, i, value, keys)
        succ[i] = empty  # this op's succ: its outputs, grown by ``put`` as its pred was
        for slot, value in enumerate(outputs):
            if not value:
                continue
            producers = pred.get(value)
            if producers is None:
                node[value] = NO_DATA
                succ[value] = empty
            elif producers or value in succ[i]:
                raise ValueError(f"value '{value}' is produced by more than one node")
            elif succ[value]:
                in_order = False  # read before it is produced: the file's order is not topological
            keys = one_slot.get(slot) or _one_slot(slot)
            pred[value] = One(i, keys)
            put(succ, i, value, keys)
        data.io = (*canonical, *outputs)
        data.n_in = len(canonical)
        if attrs is not None and attrs is not no_attrs and _has_subgraph(attrs):
            owners[i] = None
            for sub in Node(graph, i).subgraphs():
                sub.parent, sub.owner = graph, i
                for free in sub.free_values():
                    if i in pred.get(free, ()):
                        in_order = False  # a body reading its owner's own output: a cycle
                    graph.add_capture(i, free)  # (one produced later clears in_order there)
    graph._in_order = in_order
    graph._pristine = True
    if graph._loaded_only:
        graph._loaded_count = len(graph)
