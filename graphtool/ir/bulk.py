"""The bulk loader: a whole graph's ops into the NetworkX dicts in one tight loop.

``Graph.add_node`` (``edit.py``) is the general verb; a load of a million ops through it would
spend most of its time in per-call checks that a fresh graph does not need. This loop does the
same work once per op, and builds each inner adjacency in its final shape (``adjacency.One``
for one neighbor, the common case) instead of growing dicts that are then replaced.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable

from graphtool.ir.adjacency import NO_NEIGHBORS, One
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
        # this op's pred: a dict from the start when it may read two values (MatMul, Add...),
        # shrunk to its final shape below; else empty, then a One
        read: Any = {} if len(inputs) > 1 else empty
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
                keys = read.get(value)
                if keys is None:
                    keys = one_slot.get(slot) or _one_slot(slot)
                elif slot not in keys:
                    keys = _key_dict([*keys, slot])
                if type(readers) is dict:
                    readers[i] = keys
                elif not readers or readers.key == i:
                    succ[value] = One(i, keys)
                else:
                    succ[value] = {readers.key: readers.keys_, i: keys}
            if type(read) is dict:
                read[value] = keys
            elif not read or read.key == value:
                read = One(value, keys)
            else:
                read = {read.key: read.keys_, value: keys}
        if type(read) is dict and len(read) < 2:
            read = One(*next(iter(read.items()))) if read else empty
        pred[i] = read
        wrote: Any = empty
        for slot, value in enumerate(outputs):
            if not value:
                continue
            producers = pred.get(value)
            if producers is None:
                node[value] = NO_DATA
                succ[value] = empty
            elif producers or value in wrote:
                raise ValueError(f"value '{value}' is produced by more than one node")
            elif succ[value]:
                in_order = False  # read before it is produced: the file's order is not topological
            keys = one_slot.get(slot) or _one_slot(slot)
            pred[value] = One(i, keys)
            if not wrote:
                wrote = One(value, keys)
            elif type(wrote) is dict:
                wrote[value] = keys
            else:  # (no repeated output: refused above)
                wrote = {wrote.key: wrote.keys_, value: keys}
        succ[i] = wrote
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
