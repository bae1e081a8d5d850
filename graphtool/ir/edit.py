"""The edit verbs of ``Graph``: add and remove ops, rewire inputs, rename values, attributes.

A mixin (``Graph`` is the one subclass) so the reading half of the IR (``graph.py``) and its
writing half each read on their own; both work on the same NetworkX dicts (``self._node``,
``self._succ``, ``self._pred``). Every verb is O(degree) of what it touches. Inner adjacencies
are never edited in place: ``adjacency.put`` / ``drop`` replace them (they are shared between
a graph and its copies), and key dicts likewise (``_link`` / ``_unlink``).
"""

from __future__ import annotations

import itertools
from typing import Any, Iterable, Iterator, Mapping

import numpy as np
from onnx import AttributeProto, NodeProto, ValueInfoProto, helper

from graphtool.ir.adjacency import NO_NEIGHBORS, drop, put
from graphtool.ir.records import (CAPTURE, EDITED, IO_EDITED, NO_ATTRS, NO_DATA, ORDER_SHIFT, _DEFAULT_ORDER_MAJOR,
                                  Node, OpData, _has_subgraph, _key_dict, _one_slot)
from graphtool.ir.tensor import Tensor
from graphtool.ir.value_infos import TypeOnly, ValueInfo


class GraphEdits:
    """The editing verbs of ``Graph`` (see ``graph.py`` for the state they share)."""

    # set by Graph.__init__
    _node: dict[Any, Any]
    _succ: dict[Any, Any]
    _pred: dict[Any, Any]
    parent: "GraphEdits | None"
    inputs: dict[str, ValueInfoProto | None]
    outputs: dict[str, ValueInfoProto | None]
    initializers: dict[str, Tensor]
    value_info: dict[str, ValueInfo]  # a TypeOnly shares its type (graphtool.ir.value_infos)
    sparse_initializers: set[str]
    _by_type: dict[str, dict[int, None]]
    _owners: dict[int, None]
    _ids: Iterator[int]
    _minor: Iterator[int]
    _fresh: Iterator[int]
    _loaded_only: bool
    _in_order: bool
    _pristine: bool
    _edits: int  # bumped by every verb: what the user-facing shape answers are cached against

    def _edited(self) -> None:
        self._edits += 1

    def unique_op_names(self) -> int:
        """Rename ops a pass made whose name another op of this graph already has (onnxruntime
        refuses a graph with two nodes of one name); returns how many. Ops loaded from the file
        keep theirs. O(ops): the pass manager calls it after every pass that changed the graph."""
        data = self._node
        owner: dict[str, int] = {}
        clashes: list[int] = []
        for by_type in self._by_type.values():
            for i in by_type:
                name = data[i].name
                if not name:
                    continue
                j = owner.get(name)
                if j is None:
                    owner[name] = i
                    continue
                loaded_i, loaded_j = data[i].template is not None, data[j].template is not None
                if loaded_i and loaded_j:
                    continue  # both from the file: the model came that way, not ours to change
                # a loaded op keeps its name; of two new ones, the older
                keep, move = (i, j) if loaded_i or (not loaded_j and i < j) else (j, i)
                owner[name] = keep
                clashes.append(move)
        for i in clashes:
            base, k = data[i].name, 1
            while f"{base}_{k}" in owner:
                k += 1
            data[i].name = f"{base}_{k}"
            owner[data[i].name] = i
        return len(clashes)

    def fresh_name(self, hint: str) -> str:
        """A value name not used in this graph or any enclosing one."""
        base = hint or "v"
        while True:
            name = f"{base}_gt{next(self._fresh)}"
            if not self.name_in_scope(name):
                return name

    def name_in_scope(self, name: str) -> bool:
        """Whether ``name`` is a value of this graph or of one enclosing it."""
        graph: GraphEdits | None = self
        while graph is not None:
            if name in graph._node:
                return True
            graph = graph.parent
        return False

    def add_node(
        self,
        op_type: str,
        inputs: Iterable[str],
        outputs: Iterable[str] | int = 1,
        attrs: dict[str, Any] | None = None,
        domain: str = "",
        name: str = "",
        near: Node | None = None,
    ) -> Node:
        """Add an op; ``outputs`` are names or a count of fresh names. ``near`` sets its place in
        the saved node order (just after that node's position, before later originals)."""
        self._edits += 1
        if isinstance(outputs, int):
            outputs = [self.fresh_name(f"{name or op_type}_out{k}") for k in range(outputs)]
        attr_map: dict[str, Any] = {}
        for key, value in (attrs or {}).items():
            if isinstance(value, (AttributeProto, GraphEdits)) or (
                isinstance(value, list) and value and isinstance(value[0], GraphEdits)
            ):
                attr_map[key] = value
            else:
                attr_map[key] = helper.make_attribute(key, value)
        major = near.order[0] if near is not None else _DEFAULT_ORDER_MAJOR
        self._loaded_only = self._in_order = self._pristine = False
        node_id = self._new_op(op_type, domain, name, attr_map, None, (major << ORDER_SHIFT) | next(self._minor))
        self._connect(node_id, list(inputs), list(outputs))
        return Node(self, node_id)

    def _new_op(
        self,
        op_type: str,
        domain: str,
        name: str,
        attrs: Mapping[str, Any] | None,
        template: bytes | NodeProto | None,
        order: int | None,
    ) -> int:
        """A new op without edges. ``attrs`` None: they are still inside ``template`` (bytes).
        ``order`` None: its place is (id, 0), as for loaded ops."""
        node_id = next(self._ids)
        self._node[node_id] = OpData(op_type, domain, name, attrs, template, order)
        self._succ[node_id] = NO_NEIGHBORS
        self._pred[node_id] = NO_NEIGHBORS
        by_type = self._by_type.get(op_type)
        if by_type is None:
            by_type = self._by_type[op_type] = {}
        by_type[node_id] = None
        return node_id

    def _add_value(self, value: str) -> None:
        if value not in self._node:
            self._node[value] = NO_DATA
            self._succ[value] = NO_NEIGHBORS
            self._pred[value] = NO_NEIGHBORS

    def _link(self, u: Any, v: Any, slot: int) -> None:
        """Add edge u -> v with key ``slot`` (both nodes exist). Key dicts are replaced, never edited."""
        if self._in_order and not self._keeps_order(u, v):
            self._in_order = False
        self._pristine = False
        keys = self._succ[u].get(v)
        if keys is None:
            keys = _one_slot(slot)
        elif slot in keys:
            return
        else:
            keys = _key_dict([*keys, slot])
        put(self._succ, u, v, keys)
        put(self._pred, v, u, keys)

    def _keeps_order(self, u: Any, v: Any) -> bool:
        """Whether edge u -> v leaves the load order (op ids ascending) topological: every reader
        of a value must come after the op that makes it. Merging a duplicate into an earlier op
        (CSE, eliminations) keeps it, so later passes and the writer skip Kahn's algorithm."""
        if isinstance(v, int):  # value u read by op v
            return all(maker < v for maker in self._pred[u])
        return all(reader > u for reader in self._succ[v])  # op u makes value v

    def _unlink(self, u: Any, v: Any, slot: int) -> None:
        self._pristine = False
        keys = self._succ[u][v]
        if slot not in keys:
            raise KeyError(f"no edge {u!r} -> {v!r} with key {slot}")
        if len(keys) == 1:
            drop(self._succ, u, v)
            drop(self._pred, v, u)
        else:
            rest = _key_dict(k for k in keys if k != slot)
            put(self._succ, u, v, rest)
            put(self._pred, v, u, rest)

    def _remove_node(self, n: Any) -> None:
        succ, pred = self._succ, self._pred
        for v in succ[n]:
            drop(pred, v, n)
        for u in pred[n]:
            drop(succ, u, n)
        del succ[n]
        del pred[n]
        del self._node[n]

    def _connect(self, node_id: int, inputs: list[str] | tuple[str, ...], outputs: list[str] | tuple[str, ...]) -> None:
        node, succ, pred = self._node, self._succ, self._pred
        data = node[node_id]
        data.io = (*inputs, *outputs)
        data.n_in = len(inputs)
        for slot, value in enumerate(inputs):
            if value:
                if value not in node:
                    node[value] = NO_DATA
                    succ[value] = pred[value] = NO_NEIGHBORS
                keys = succ[value].get(node_id)
                if keys is None:
                    keys = _one_slot(slot)
                elif slot not in keys:
                    keys = _key_dict([*keys, slot])
                put(succ, value, node_id, keys)
                put(pred, node_id, value, keys)
        for slot, value in enumerate(outputs):
            if value:
                if value not in node:
                    node[value] = NO_DATA
                    succ[value] = pred[value] = NO_NEIGHBORS
                elif pred[value]:
                    raise ValueError(f"value '{value}' is produced by more than one node")
                keys = succ[node_id].get(value)
                if keys is None:
                    keys = _one_slot(slot)
                else:  # the same name twice among one op's outputs
                    raise ValueError(f"value '{value}' is produced by more than one node")
                put(succ, node_id, value, keys)
                put(pred, value, node_id, keys)
        attrs = data._attrs
        if attrs is not None and attrs is not NO_ATTRS and _has_subgraph(attrs):
            self._owners[node_id] = None
            for sub in Node(self, node_id).subgraphs():
                sub.parent, sub.owner = self, node_id
                for free in sub.free_values():
                    self.add_capture(node_id, free)

    def add_capture(self, node_id: int, value: str) -> None:
        """Record that a subgraph of op ``node_id`` reads ``value`` from this graph (a capture edge)."""
        self._add_value(value)
        self._link(value, node_id, CAPTURE)

    def refresh_captures(self, node: Node) -> None:
        """Recompute which outer values ``node``'s subgraphs read (after a pass edited them)."""
        wanted = {v for sub in node.subgraphs() for v in sub.free_values()}
        for value in [v for v, keys in self._pred[node.id].items() if CAPTURE in keys]:
            if value not in wanted:
                self._unlink(value, node.id, CAPTURE)
                self._drop_if_orphan(value)
        for value in wanted:
            self.add_capture(node.id, value)

    def _set_io(self, data: OpData, io: tuple[str, ...], n_in: int | None = None) -> None:
        data.io = io
        if n_in is not None:
            data.n_in = n_in
        if not data.dirty:
            data.dirty = IO_EDITED

    def set_input(self, node: Node, slot: int, value: str) -> None:
        """Point input ``slot`` of ``node`` at ``value`` ('' to omit it)."""
        self._edits += 1
        data = self._node[node.id]
        inputs = list(data.io[: data.n_in])
        old = inputs[slot] if slot < len(inputs) else ""
        if old == value:
            return
        if old:
            self._unlink(old, node.id, slot)
            self._drop_if_orphan(old)
        if value:
            self._add_value(value)
            self._link(value, node.id, slot)
        if slot >= len(inputs):
            inputs.extend([""] * (slot + 1 - len(inputs)))
        inputs[slot] = value
        if not value:
            while inputs and not inputs[-1]:
                inputs.pop()
        self._set_io(data, (*inputs, *data.io[data.n_in:]), len(inputs))

    def set_inputs(self, node: Node, values: list[str]) -> None:
        """Replace all inputs of ``node`` by ``values`` ('' for an omitted optional input)."""
        data = self._node[node.id]
        for slot in range(len(values), data.n_in):
            self.set_input(node, slot, "")
        for slot, value in enumerate(values):
            self.set_input(node, slot, value)
        # the list as given, trailing gaps included
        kept = list(data.io[: data.n_in])[: len(values)]
        kept.extend([""] * (len(values) - len(kept)))
        self._set_io(data, (*kept, *data.io[data.n_in:]), len(values))

    def set_attr(self, node: Node, name: str, value: Any) -> None:
        """Set attribute ``name`` of ``node``: a Python value (as ``onnx.helper.make_attribute``
        takes), an AttributeProto, or a ``Graph`` (a subgraph, which then reads through captures)."""
        self._edits += 1
        data = self._node[node.id]
        subgraphs = [value] if isinstance(value, GraphEdits) else value if isinstance(value, list) and value and isinstance(value[0], GraphEdits) else []
        data.editable_attrs()[name] = value if isinstance(value, (GraphEdits, AttributeProto)) or subgraphs else helper.make_attribute(name, value)
        data.dirty = EDITED
        if subgraphs:  # a new body: it belongs here now, and reads what it reads through captures
            self._owners[node.id] = None
            for sub in subgraphs:
                sub.parent, sub.owner = self, node.id
            self.refresh_captures(node)

    def del_attr(self, node: Node, name: str) -> None:
        """Remove attribute ``name`` from ``node`` (nothing when it has none)."""
        self._edits += 1
        data = self._node[node.id]
        if name in data.attrs:
            data.editable_attrs().pop(name)
            data.dirty = EDITED

    def _move_uses(self, old: str, new: str) -> None:
        """Every edge old -> op becomes new -> op, and the ops' input slots follow.

        An edge moves whole, all its slots at once (CSE moves 100k), and leaves what an
        ``_unlink`` + ``_link`` per slot would: ``new`` joins the op's ``pred`` last unless it is
        there already, and its key dict lists its own slots first."""
        node, succ, pred = self._node, self._succ, self._pred
        readers = succ[old]
        if not readers:
            return
        self._pristine = False
        succ[old] = NO_NEIGHBORS
        for op, keys in readers.items():
            if self._in_order and not self._keeps_order(new, op):
                self._in_order = False
            drop(pred, op, old)
            have = succ[new].get(op)
            if have is None:
                put(succ, new, op, keys)
                put(pred, op, new, keys)
            elif any(slot not in have for slot in keys):
                merged = _key_dict([*have, *(slot for slot in keys if slot not in have)])
                put(succ, new, op, merged)
                put(pred, op, new, merged)
            data = node[op]
            io = list(data.io)
            for slot in keys:
                if slot >= 0:
                    io[slot] = new
                else:
                    for sub in Node(self, op).subgraphs():
                        sub._rename_free(old, new)
            self._set_io(data, tuple(io))

    def replace_all_uses(self, old: str, new: str) -> None:
        """Every op that reads ``old`` (also inside subgraphs) reads ``new`` instead.

        Graph outputs are not consumers: a pass that removes the producer of a graph output
        keeps the output's name with ``rename_value``.
        """
        self._edits += 1
        if old == new or old not in self._node:
            return
        self._add_value(new)
        self._move_uses(old, new)
        self._drop_if_orphan(old)

    def _rename_free(self, old: str, new: str) -> None:
        if old in self._node and self.is_free(old):
            self.replace_all_uses(old, new)

    def rename_value(self, old: str, new: str) -> None:
        """Give value ``old`` the name ``new`` everywhere in this graph.

        ``new`` must be unused, or a graph output whose producer was removed (the usual way an
        elimination keeps an output's name: remove the node, then rename its input to the output).
        A value read from an enclosing graph, or a sparse initializer, cannot be renamed here.
        """
        self._edits += 1
        if old == new:
            return
        if (self.parent is not None and self.is_free(old)) or old in self.sparse_initializers:
            raise ValueError(f"cannot rename '{old}' here: it is defined outside this graph's node list")
        if new in self._node:
            # The one name that may be reused: a graph output whose producer was just removed.
            if self._pred[new] or new in self.initializers or self.is_input(new):
                raise ValueError(f"cannot rename '{old}' to '{new}': the name is taken")
        else:
            self._add_value(new)
        for op, keys in list(self._pred[old].items()):
            data = self._node[op]
            io = list(data.io)
            for slot in keys:
                self._link(op, new, slot)
                io[data.n_in + slot] = new
            self._set_io(data, tuple(io))
        self._move_uses(old, new)
        self._remove_node(old)
        self.inputs = _renamed(self.inputs, old, new)
        self.outputs = _renamed(self.outputs, old, new)
        info = self.value_info.pop(old, None)  # O(1): value_info order is not the model's meaning
        if info is not None:
            self.value_info[new] = _with_name(info, new)
        if old in self.initializers:
            self.initializers[new] = self.initializers.pop(old).renamed(new)

    def remove_nodes(self, nodes: Iterable[Node]) -> None:
        """Remove ops and the values they produced; inputs left unused are dropped unless they
        are graph inputs, outputs or initializers (DCE decides about those)."""
        self._edits += 1
        node_data, succ, pred = self._node, self._succ, self._pred
        touched: list[str] = []
        for node in nodes:
            data = node_data.get(node.id)
            if data is None:
                continue
            self._pristine = False
            touched.extend(pred[node.id])
            produced = list(succ[node.id])
            by_type = self._by_type[data.op_type]
            by_type.pop(node.id, None)
            self._owners.pop(node.id, None)
            if not by_type:
                del self._by_type[data.op_type]
            self._remove_node(node.id)
            for value in produced:
                if not pred[value] and not succ[value] and value not in self.outputs:
                    self._remove_node(value)
                    self.value_info.pop(value, None)
        for value in touched:
            self._drop_if_orphan(value)

    def _drop_if_orphan(self, value: str) -> None:
        if (
            value in self._node
            and not self._pred[value]  # isolated; not degree(): O(consumers), quadratic on shared
            and not self._succ[value]  # values like a Reshape target read by 10k nodes
            and value not in self.initializers
            and value not in self.sparse_initializers
            and value not in self.inputs
            and value not in self.outputs
        ):
            self._remove_node(value)
            self.value_info.pop(value, None)

    def add_initializer(self, array: np.ndarray, hint: str = "const") -> str:
        """A new initializer holding ``array``, under a fresh name made from ``hint``; returns the name."""
        name = self.fresh_name(hint)
        self.set_initializer(name, Tensor.from_numpy(np.asarray(array), name))
        return name

    def set_initializer(self, name: str, tensor: Tensor) -> None:
        """Make ``tensor`` the initializer ``name`` (renamed to it if needed)."""
        self._edits += 1
        if tensor.name != name:
            tensor = tensor.renamed(name)
        self.initializers[name] = tensor
        self._add_value(name)

    def remove_initializer(self, name: str) -> None:
        """Drop the initializer ``name`` (the value goes when nothing reads it)."""
        self._edits += 1
        self.initializers.pop(name, None)
        self._drop_if_orphan(name)

    def remove_input(self, name: str) -> None:
        """``name`` stops being a graph input (the value goes when nothing reads it)."""
        self._edits += 1
        self.inputs.pop(name, None)
        self._drop_if_orphan(name)

    def set_value_info(self, name: str, info: ValueInfo) -> None:
        """Record ``info`` (a ValueInfoProto: type and shape) for the value ``name``."""
        self._edits += 1
        self.value_info[name] = info


def _renamed(table: dict[str, Any], old: str, new: str) -> dict[str, Any]:
    """The same ordered table (graph inputs or outputs, whose order is the model's signature)
    with key ``old`` (and a ValueInfoProto's name) changed to ``new``."""
    if old not in table:
        return table
    return {new if key == old else key: _with_name(info, new) if key == old else info for key, info in table.items()}


def _with_name(info: ValueInfo | None, name: str) -> ValueInfo | None:
    if info is None:
        return None
    if type(info) is TypeOnly:
        return info.renamed(name)
    copy = ValueInfoProto()
    copy.CopyFrom(info)
    copy.name = name
    return copy
