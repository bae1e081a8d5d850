"""The graph IR: one ``networkx.MultiDiGraph`` of op nodes and value nodes.

Op nodes are keyed by an ``int`` id given at load (ONNX node names may be empty or repeated);
value nodes by their tensor name (a ``str``, unique by SSA), so the two kinds never collide.
Edges run value → op and op → value; the edge *key* is the slot (input or output index), so
Mul(x, x) is two parallel edges and removing one input is O(1). A subgraph's use of an
enclosing-scope value is a *capture* edge with key ``CAPTURE`` (-1) into the op that owns the
subgraph: dead-code elimination and topological order then see it like any other use.

Pass code uses the small vocabulary below and never the NetworkX graph itself. Every helper costs
O(degree) of the nodes it touches; the only whole-graph walks are ``nodes()`` (served from a
per-op-type index) and ``topological_order()``.

Memory (issue 19: a million nodes must fit in well under 2 GB). NetworkX's own ``add_node`` /
``add_edge`` give every node an attribute dict and every edge a key dict plus a data dict —
about 2.4 KB per op with its output value. Here:

* an op node's attribute slot in NetworkX (``nx._node[id]``) holds an ``OpData`` record
  (``__slots__``): op type, domain, name, attributes, the original NodeProto *serialized*
  (``template``: bytes until a pass reads the attributes), load order, and the input/output
  names by slot (``io``, kept in step with the edges by every edit, so ``Node.inputs`` is a
  slice, not a walk of the adjacency);
* value nodes share one empty read-only attribute dict; edges share one empty read-only data
  dict, and a value→op pair with one slot shares the read-only key dict ``{slot: {}}`` of that
  slot. Edits never mutate a key dict: they replace it (``_link`` / ``_unlink``), so NetworkX's
  reading API (``in_edges``, ``has_edge``, views, algorithms) sees an ordinary MultiDiGraph,
  while its writing API would raise on a shared dict instead of corrupting it.

That leaves the four adjacency dicts of an op and its value (NetworkX's structure itself) as the
bulk: ~1.3 KB per op in a chain.
"""

from __future__ import annotations

import heapq
import itertools
from types import MappingProxyType
from typing import Any, Iterable, Iterator, Mapping

import networkx as nx
import numpy as np
from onnx import AttributeProto, GraphProto, NodeProto, TypeProto, ValueInfoProto, helper, numpy_helper

from graphtool.ir.tensor import Tensor

CAPTURE = -1
_DEFAULT_ORDER_MAJOR = 1 << 62
# An op's place in the saved order, (major, minor), is one int: major << 32 | minor. Loaded ops
# store None for it, meaning (their id, 0): loaders give ids in file order, so the int is free.
ORDER_SHIFT = 32
IO_EDITED, EDITED = 1, 2  # OpData.dirty: what changed since the template was read


class _Shared(dict):
    """A dict shared by many owners (edge data, value attributes, one-slot key dicts). Reading
    is a plain dict read; writing raises, since it would change every owner at once."""

    __slots__ = ()

    def _refuse(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("graphtool IR: this NetworkX dict is shared; edit the graph through Graph's methods")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = _refuse  # type: ignore[assignment]

    def update(self, *args: Any, **kwargs: Any) -> None:  # NetworkX calls update({}) on re-adds
        if (args and args[0]) or kwargs:
            self._refuse()

    def __reduce__(self) -> tuple:
        return (_Shared, (dict(self),))

    def __copy__(self) -> "_Shared":
        return self

    def __deepcopy__(self, memo: dict) -> "_Shared":
        return self


NO_DATA = _Shared()  # every edge's data dict, and every value node's attribute dict
_ONE_SLOT: dict[int, _Shared] = {}  # slot -> the shared key dict {slot: NO_DATA}
NO_ATTRS: Mapping[str, Any] = MappingProxyType({})  # attrs of an op that has none (copy-on-write)


def _one_slot(slot: int) -> _Shared:
    keys = _ONE_SLOT.get(slot)
    if keys is None:
        keys = _ONE_SLOT[slot] = _Shared({slot: NO_DATA})
    return keys


def _key_dict(slots: Iterable[int]) -> _Shared:
    slots = list(slots)
    return _one_slot(slots[0]) if len(slots) == 1 else _Shared(dict.fromkeys(slots, NO_DATA))


class _Adjacency(nx.MultiDiGraph):
    """The NetworkX graph of one ``Graph``: a MultiDiGraph whose edges carry no data."""

    def edge_attr_dict_factory(self) -> dict:  # type: ignore[override]
        return NO_DATA


class OpData:
    """The record of one op node: what ``nx._node[id]`` holds for an op (see the module doc).

    ``order`` is None for a loaded op (its place is (id, 0)); see ``ORDER_SHIFT``.
    ``template`` is the NodeProto the op was loaded from — serialized bytes until something
    reads the attributes (then the parsed NodeProto, whose AttributeProtos ``attrs`` holds) — or
    None for ops a pass added. ``dirty`` says what was edited since: 0 nothing (``to_onnx``
    writes the template as it is), ``IO_EDITED`` only inputs/outputs (the template's other
    fields are reused as bytes), ``EDITED`` attributes too, or an op a pass made.
    Reads like the attribute dict it replaces (``data["attrs"]``, ``data["op_type"]``).
    """

    __slots__ = ("op_type", "domain", "name", "_attrs", "template", "order", "io", "n_in", "dirty")

    def __init__(self, op_type: str, domain: str, name: str, attrs: Mapping[str, Any] | None,
                 template: bytes | NodeProto | None, order: int | None) -> None:
        self.op_type = op_type
        self.domain = domain
        self.name = name
        self._attrs = attrs  # None: still inside the serialized template
        self.template = template
        self.order = order
        self.io: tuple[str, ...] = ()
        self.n_in = 0
        self.dirty = EDITED if template is None else 0

    @property
    def attrs(self) -> Mapping[str, Any]:
        """name -> AttributeProto (or Graph / list of Graphs for subgraph attributes)."""
        attrs = self._attrs
        if attrs is None:
            proto = self.template
            if isinstance(proto, bytes):
                proto = self.template = NodeProto.FromString(proto)
            attrs = self._attrs = {a.name: a for a in proto.attribute} if proto is not None and len(proto.attribute) \
                else NO_ATTRS
        return attrs

    def copy(self, graph: "Graph") -> "OpData":
        """This record for a copy of its graph (``Graph.copy``): subgraphs are copied into
        ``graph``; an untouched op goes back to its template bytes and lazy attributes."""
        template, attrs = self.template, self._attrs
        if isinstance(template, NodeProto):
            if self.dirty or (attrs and _has_subgraph(attrs)):
                copied = NodeProto()
                copied.CopyFrom(template)
                template = copied
            else:
                template, attrs = template.SerializeToString(), None
        if attrs is not None and attrs is not NO_ATTRS:
            copied_attrs: dict[str, Any] = {}
            for name, value in attrs.items():
                if isinstance(value, Graph):
                    copied_attrs[name] = value.copy(graph)
                elif isinstance(value, list):
                    copied_attrs[name] = [sub.copy(graph) for sub in value]
                else:
                    proto = AttributeProto()
                    proto.CopyFrom(value)
                    copied_attrs[name] = proto
            attrs = copied_attrs
        out = OpData(self.op_type, self.domain, self.name, attrs, template, self.order)
        out.io, out.n_in, out.dirty = self.io, self.n_in, self.dirty
        return out

    def editable_attrs(self) -> dict[str, Any]:
        attrs = self.attrs
        if not isinstance(attrs, dict):
            attrs = self._attrs = dict(attrs)
        return attrs

    @property
    def inputs(self) -> tuple[str, ...]:
        return self.io[: self.n_in]

    @property
    def outputs(self) -> tuple[str, ...]:
        return self.io[self.n_in:]

    # --- read like the attribute dict this record replaces
    _KEYS = ("op_type", "domain", "name", "attrs")

    def __getitem__(self, key: str) -> Any:
        if key == "order":
            raise KeyError("order: ask Node.order (a loaded op's order is its id)")
        if key in self._KEYS:
            return getattr(self, key)
        raise KeyError(key)

    def get(self, key: str, default: Any = None) -> Any:
        return self[key] if key in self._KEYS else default

    def __contains__(self, key: object) -> bool:
        return key in self._KEYS

    def __iter__(self) -> Iterator[str]:
        return iter(self._KEYS)

    def __len__(self) -> int:
        return len(self._KEYS)

    def keys(self) -> tuple[str, ...]:
        return self._KEYS

    def items(self) -> list[tuple[str, Any]]:
        return [(k, self[k]) for k in self._KEYS]

    def values(self) -> list[Any]:
        return [self[k] for k in self._KEYS]

    def update(self, *args: Any, **kwargs: Any) -> None:  # NetworkX's add_node on an existing op
        if (args and args[0]) or kwargs:
            raise TypeError("graphtool IR: op records are edited through Graph's methods")


class Node:
    """A handle on one op node: cheap to create, compares by identity of (graph, id)."""

    __slots__ = ("graph", "id")

    def __init__(self, graph: "Graph", node_id: int):
        self.graph = graph
        self.id = node_id

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Node) and other.graph is self.graph and other.id == self.id

    def __hash__(self) -> int:
        return hash((id(self.graph), self.id))

    def __repr__(self) -> str:
        return f"<{self.op_type} #{self.id} {self.name!r}: {self.inputs} -> {self.outputs}>"

    @property
    def _data(self) -> OpData:
        return self.graph._node[self.id]

    @property
    def op_type(self) -> str:
        return self.graph._node[self.id].op_type

    @property
    def domain(self) -> str:
        return self.graph._node[self.id].domain

    @property
    def name(self) -> str:
        return self.graph._node[self.id].name

    @property
    def order(self) -> tuple[int, int]:
        order = self.graph._node[self.id].order
        return (self.id, 0) if order is None else divmod(order, 1 << ORDER_SHIFT)

    @property
    def inputs(self) -> list[str]:
        """Input names by slot; '' marks an omitted optional input."""
        data = self.graph._node[self.id]
        return list(data.io[: data.n_in])

    @property
    def outputs(self) -> list[str]:
        data = self.graph._node[self.id]
        return list(data.io[data.n_in:])

    @property
    def attrs(self) -> dict[str, Any]:
        """Attribute values as Python objects; subgraph attributes are ``Graph`` objects."""
        return {k: _attr_value(v) for k, v in self.graph._node[self.id].attrs.items()}

    def attr(self, name: str, default: Any = None) -> Any:
        value = self.graph._node[self.id].attrs.get(name)
        return default if value is None else _attr_value(value)

    def attr_proto(self, name: str) -> AttributeProto | None:
        value = self.graph._node[self.id].attrs.get(name)
        return value if isinstance(value, AttributeProto) else None

    def subgraphs(self) -> list["Graph"]:
        found: list[Graph] = []
        if self.id not in self.graph._owners:
            return found
        for value in self.graph._node[self.id].attrs.values():
            if isinstance(value, Graph):
                found.append(value)
            elif isinstance(value, list):
                found.extend(value)
        return found


def _attr_value(value: Any) -> Any:
    if isinstance(value, AttributeProto):
        if value.ref_attr_name:
            return value  # a function-body reference to a caller's attribute: not a value
        if value.type == AttributeProto.STRING:
            return value.s.decode("utf-8", errors="replace")  # ONNX strings are UTF-8 text
        if value.type == AttributeProto.STRINGS:
            return [s.decode("utf-8", errors="replace") for s in value.strings]
        return helper.get_attribute_value(value)
    return value


def _has_subgraph(attrs: Mapping[str, Any]) -> bool:
    return any(isinstance(v, Graph) or (isinstance(v, list) and v and isinstance(v[0], Graph))
               for v in attrs.values())


class Graph:
    """One ONNX graph: the main graph, an If/Loop/Scan body, or a function body."""

    def __init__(self, name: str = "", parent: "Graph | None" = None):
        self.nx = _Adjacency()
        # NetworkX's own dicts (never replaced by it): node -> attributes, and the two adjacencies
        self._node: dict[Any, Any] = self.nx._node
        self._succ: dict[Any, dict] = self.nx._succ
        self._pred: dict[Any, dict] = self.nx._pred
        self.name = name
        self.parent = parent
        self.owner: int | None = None  # id of the op in ``parent`` whose attribute this graph is
        # Ordered name -> ValueInfoProto (None in function bodies, whose inputs are bare names).
        self.inputs: dict[str, ValueInfoProto | None] = {}
        self.outputs: dict[str, ValueInfoProto | None] = {}
        self.initializers: dict[str, Tensor] = {}
        self.value_info: dict[str, ValueInfoProto] = {}
        self.sparse_initializers: set[str] = set()  # kept in proto_shell; names only here
        # False for IR < 4 models, where every initializer is also listed as an input yet is a constant.
        self.overridable_initializers = True
        self.proto_shell: Any = None  # GraphProto/FunctionProto minus what the IR holds (to_onnx)
        self._ids = itertools.count()
        self._minor = itertools.count(1)
        self._by_type: dict[str, dict[int, None]] = {}
        # Ids of ops that have (or had) subgraph attributes: ``subgraphs()`` and so ``walk()`` /
        # ``Model.graphs()`` run per pass, and must not scan 100k ops to find the few If/Loop.
        self._owners: dict[int, None] = {}
        self._fresh = itertools.count()
        # Fast paths while the graph is as loaded: ``_loaded_only`` until an op is added (then
        # ``nodes()`` must sort by order), ``_in_order`` while the load order is also a valid
        # topological order (cleared by any edit of edges other than removal).
        self._loaded_only = True
        self._in_order = True
        self._pristine = True  # no op added or removed and no edge edited since load (``copy``)

    # ------------------------------------------------------------------ reading

    def __len__(self) -> int:
        return sum(len(ids) for ids in self._by_type.values())

    def node(self, node_id: int) -> Node:
        return Node(self, node_id)

    def nodes(self, op_type: str | None = None) -> list[Node]:
        """Op nodes (of one type), in load/insertion order. A snapshot: safe to edit while iterating."""
        if op_type is not None:
            return [Node(self, i) for i in self._by_type.get(op_type, ())]
        if self._loaded_only:  # no op added since load: ids are the file order
            return [Node(self, i) for i in self._loaded_ids()]
        data = self._node
        keyed = [(i << ORDER_SHIFT if data[i].order is None else data[i].order, i)
                 for by_type in self._by_type.values() for i in by_type]
        keyed.sort()
        return [Node(self, i) for _, i in keyed]

    def has_op(self, op_type: str) -> bool:
        """Whether any op of this type is in this graph (O(1): the per-type index)."""
        return bool(self._by_type.get(op_type))

    def has_node(self, node: Node) -> bool:
        return node.graph is self and node.id in self._node

    def has_value(self, name: str) -> bool:
        return name in self._node

    def values(self) -> list[str]:
        return [n for n in self._node if isinstance(n, str)]

    # The four lookups below are what every pass calls per node: they read NetworkX's adjacency
    # dicts (value -> {op: {slot: {}}}) directly; its edge views cost several times more per call.

    def producer(self, value: str) -> Node | None:
        pred = self._pred.get(value) if value else None
        if pred:
            for op in pred:
                return Node(self, op)
        return None

    def uses(self, value: str) -> list[tuple[Node, int]]:
        """(consumer, slot) pairs; slot is CAPTURE where a subgraph of the consumer reads it."""
        succ = self._succ.get(value) if value else None
        if not succ:
            return []
        return [(Node(self, op), slot) for op, slots in succ.items() for slot in slots]

    def consumers(self, value: str) -> list[Node]:
        succ = self._succ.get(value) if value else None
        return [Node(self, op) for op in succ] if succ else []

    def has_other_uses(self, value: str, node: Node) -> bool:
        """True when something besides ``node`` reads ``value`` (another op or a graph output)."""
        if value in self.outputs:
            return True
        return any(op != node.id for op in self._succ.get(value, ()))

    def is_input(self, value: str) -> bool:
        return value in self.inputs

    def is_output(self, value: str) -> bool:
        return value in self.outputs

    def is_initializer(self, value: str) -> bool:
        return value in self.initializers

    def is_free(self, value: str) -> bool:
        """A name this graph reads from an enclosing scope."""
        return (
            value in self._node
            and not self._pred[value]  # no producer
            and value not in self.initializers
            and value not in self.sparse_initializers
            and value not in self.inputs
        )

    def free_values(self) -> list[str]:
        return [v for v in self.values() if self.is_free(v)]

    def const(self, value: str) -> np.ndarray | None:
        """The value if it is provably constant (initializer or Constant node), else None."""
        if not value or value not in self._node:
            return None
        tensor = self.initializers.get(value)
        if tensor is not None:
            if self.overridable_initializers and value in self.inputs:
                return None
            return tensor.numpy()
        producer = self.producer(value)
        if producer is not None:
            if producer.op_type == "Constant" and producer.domain in ("", "ai.onnx"):
                return constant_node_value(producer)
            return None
        if self.parent is not None and self.is_free(value):
            return self.parent.const(value)
        return None

    def value_type(self, value: str) -> TypeProto | None:
        for table in (self.inputs, self.outputs, self.value_info):
            info = table.get(value)
            if info is not None and info.HasField("type"):
                return info.type
        tensor = self.initializers.get(value)
        if tensor is not None:
            return helper.make_tensor_type_proto(tensor.data_type, tensor.dims)
        return None

    def dtype(self, value: str) -> int | None:
        t = self.value_type(value)
        if t is not None and t.HasField("tensor_type") and t.tensor_type.elem_type:
            return t.tensor_type.elem_type
        return None

    def shape(self, value: str) -> list[int | str | None] | None:
        """Dims as ints (static), strs (symbolic) or None (unknown); None when rank is unknown."""
        t = self.value_type(value)
        if t is None or not t.HasField("tensor_type") or not t.tensor_type.HasField("shape"):
            return None
        dims: list[int | str | None] = []
        for d in t.tensor_type.shape.dim:
            if d.HasField("dim_value"):
                dims.append(d.dim_value)
            elif d.HasField("dim_param"):
                dims.append(d.dim_param)
            else:
                dims.append(None)
        return dims

    def subgraphs(self) -> Iterator[tuple[Node, str, "Graph"]]:
        """(owner node, attribute name, subgraph) for the direct subgraphs of this graph."""
        data = self._node
        if not self._owners:
            return
        rank = {op_type: k for k, op_type in enumerate(self._by_type)}
        live = [i for i in self._owners if i in data]
        for i in sorted(live, key=lambda i: (rank[data[i].op_type], i)):  # = _by_type order
            for key, value in list(data[i].attrs.items()):
                if isinstance(value, Graph):
                    yield Node(self, i), key, value
                elif isinstance(value, list):
                    for sub in value:
                        yield Node(self, i), key, sub

    def walk(self) -> Iterator["Graph"]:
        """This graph and every nested subgraph, depth first, children before parents."""
        for _, _, sub in self.subgraphs():
            yield from sub.walk()
        yield self

    def topological_order(self) -> list[Node]:
        """Op nodes in an order valid for ONNX, keeping the original order wherever it still is.

        Kahn's algorithm with the load order as tie-break: for an untouched graph this returns the
        file's order exactly. Raises ValueError on a cycle.
        """
        return [Node(self, i) for i in self.topological_ids()]

    def _loaded_ids(self) -> list[int]:
        """All op ids in file order, for a graph no op was added to (loaders number ops in order)."""
        ids = [i for by_type in self._by_type.values() for i in by_type]
        ids.sort()
        return ids

    def topological_ids(self) -> list[int]:
        """``topological_order()`` as op ids (what the serializer walks).

        While the load order is known to be topological (the file's order was, and no edit since
        could have broken it) that order is the answer, read off NetworkX's node dict; otherwise
        Kahn's algorithm runs.
        """
        if self._in_order:
            return self._loaded_ids()
        # The adjacency dicts themselves (not the NetworkX views): this runs on every load and
        # save, and the views cost ~4x more per edge at 100k+ nodes.
        pred, succ, data = self._pred, self._succ, self._node
        shift = ORDER_SHIFT
        pending: dict[int, int] = {}
        heap: list[tuple[int, int]] = []
        for ids in self._by_type.values():
            for i in ids:
                count = 0
                for value, keys in pred[i].items():
                    if pred[value]:
                        count += len(keys)
                pending[i] = count
                if count == 0:
                    order = data[i].order
                    heap.append((i << shift if order is None else order, i))
        heapq.heapify(heap)
        result: list[int] = []
        pop, push = heapq.heappop, heapq.heappush
        while heap:
            _, i = pop(heap)
            result.append(i)
            for value in succ[i]:
                for consumer, keys in succ[value].items():
                    left = pending[consumer] - len(keys)
                    pending[consumer] = left
                    if left == 0:
                        order = data[consumer].order
                        push(heap, (consumer << shift if order is None else order, consumer))
        if len(result) != len(pending):
            stuck = next(i for i, n in pending.items() if n > 0)
            record = data[stuck]
            raise ValueError(f"the graph has a cycle through node '{record.name or record.op_type}'")
        return result

    # ------------------------------------------------------------------ copying

    def copy(self, parent: "Graph | None" = None) -> "Graph":
        """An independent copy with the same op ids and order (``Model.copy``).

        NetworkX's dicts are copied one level deep (key dicts and value attributes are shared:
        nothing writes them), op records are new, with their templates as bytes (immutable, so
        shared); edited attributes and everything else proto-valued are copied, so no edit of the
        copy reaches the original. Tensors share their TensorProto (never edited in place) but not
        a cached array.
        """
        out = Graph(self.name, parent)
        out.owner = self.owner
        out.overridable_initializers = self.overridable_initializers
        out.sparse_initializers = set(self.sparse_initializers)
        if self.proto_shell is not None:
            out.proto_shell = type(self.proto_shell)()
            out.proto_shell.CopyFrom(self.proto_shell)
        out._ids, self._ids = _fork(self._ids)
        out._minor, self._minor = _fork(self._minor)
        out._fresh, self._fresh = _fork(self._fresh)
        out._loaded_only, out._in_order, out._pristine = self._loaded_only, self._in_order, self._pristine
        out._by_type = {op_type: dict(ids) for op_type, ids in self._by_type.items()}
        out._owners = dict(self._owners)
        # value infos: one C-level copy into a fresh message, then its views
        own = GraphProto()
        tables = (self.inputs, self.outputs, self.value_info)
        for field, table in zip((own.input, own.output, own.value_info), tables):
            field.extend(v for v in table.values() if v is not None)
        for field, table, into in zip((own.input, own.output, own.value_info), tables,
                                      (out.inputs, out.outputs, out.value_info)):
            copies = iter(field)
            for name, info in table.items():
                into[name] = None if info is None else next(copies)
        out.initializers = {name: t.copy() for name, t in self.initializers.items()}
        node, succ, pred = out._node, out._succ, out._pred
        src_succ, src_pred = self._succ, self._pred
        for key, data in self._node.items():
            node[key] = data if data is NO_DATA else data.copy(out)
            succ[key] = src_succ[key].copy()
            pred[key] = src_pred[key].copy()
        return out

    # ------------------------------------------------------------------ editing

    def fresh_name(self, hint: str) -> str:
        """A value name not used in this graph or any enclosing one."""
        base = hint or "v"
        while True:
            name = f"{base}_gt{next(self._fresh)}"
            if not self._name_in_scope(name):
                return name

    def _name_in_scope(self, name: str) -> bool:
        graph: Graph | None = self
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
        if isinstance(outputs, int):
            outputs = [self.fresh_name(f"{name or op_type}_out{k}") for k in range(outputs)]
        attr_map: dict[str, Any] = {}
        for key, value in (attrs or {}).items():
            if isinstance(value, (AttributeProto, Graph)) or (
                isinstance(value, list) and value and isinstance(value[0], Graph)
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
        self._succ[node_id] = {}
        self._pred[node_id] = {}
        by_type = self._by_type.get(op_type)
        if by_type is None:
            by_type = self._by_type[op_type] = {}
        by_type[node_id] = None
        return node_id

    def _add_value(self, value: str) -> None:
        if value not in self._node:
            self._node[value] = NO_DATA
            self._succ[value] = {}
            self._pred[value] = {}

    def _link(self, u: Any, v: Any, slot: int) -> None:
        """Add edge u -> v with key ``slot`` (both nodes exist). Key dicts are replaced, never edited."""
        self._in_order = self._pristine = False
        su = self._succ[u]
        keys = su.get(v)
        if keys is None:
            keys = _one_slot(slot)
        elif slot in keys:
            return
        else:
            keys = _key_dict([*keys, slot])
        su[v] = keys
        self._pred[v][u] = keys

    def _unlink(self, u: Any, v: Any, slot: int) -> None:
        self._pristine = False
        su = self._succ[u]
        keys = su[v]
        if slot not in keys:
            raise KeyError(f"no edge {u!r} -> {v!r} with key {slot}")
        if len(keys) == 1:
            del su[v]
            del self._pred[v][u]
        else:
            rest = _key_dict(k for k in keys if k != slot)
            su[v] = rest
            self._pred[v][u] = rest

    def _remove_node(self, n: Any) -> None:
        succ, pred = self._succ, self._pred
        for v in succ[n]:
            del pred[v][n]
        for u in pred[n]:
            del succ[u][n]
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
                    succ[value] = {}
                    pred[value] = {}
                keys = succ[value].get(node_id)
                if keys is None:
                    keys = _one_slot(slot)
                elif slot not in keys:
                    keys = _key_dict([*keys, slot])
                succ[value][node_id] = keys
                pred[node_id][value] = keys
        for slot, value in enumerate(outputs):
            if value:
                if value not in node:
                    node[value] = NO_DATA
                    succ[value] = {}
                    pred[value] = {}
                elif pred[value]:
                    raise ValueError(f"value '{value}' is produced by more than one node")
                keys = succ[node_id].get(value)
                if keys is None:
                    keys = _one_slot(slot)
                else:  # the same name twice among one op's outputs
                    raise ValueError(f"value '{value}' is produced by more than one node")
                succ[node_id][value] = keys
                pred[value][node_id] = keys
        attrs = data._attrs
        if attrs is not None and attrs is not NO_ATTRS and _has_subgraph(attrs):
            self._owners[node_id] = None
            for sub in Node(self, node_id).subgraphs():
                sub.parent, sub.owner = self, node_id
                for free in sub.free_values():
                    self.add_capture(node_id, free)

    def _load_ops(self, records: Iterable[tuple[str, str, str, Any, Any, tuple[str, ...], tuple[str, ...]]]) -> None:
        """``_new_op`` + ``_connect`` for a loader's ops, in file order, in one tight loop (this is
        most of a load's time): records are (op_type, domain, name, attrs, template, inputs,
        outputs). Notes whether the file's order was topological (then ``topological_ids`` needs
        no sort), and gives a consumer the producer's string for a value name (not a second copy).
        """
        node, succ, pred, by_type_all, owners = self._node, self._succ, self._pred, self._by_type, self._owners
        ids, one_slot, no_attrs = self._ids, _ONE_SLOT, NO_ATTRS
        in_order = self._in_order
        sources: dict[str, str] = {}
        for op_type, domain, name, attrs, template, inputs, outputs in records:
            i = next(ids)
            data = OpData(op_type, domain, name, attrs, template, None)
            node[i] = data
            succ_i = succ[i] = {}
            pred_i = pred[i] = {}
            by_type = by_type_all.get(op_type)
            if by_type is None:
                by_type = by_type_all[op_type] = {}
            by_type[i] = None
            canonical = list(inputs)
            for slot, value in enumerate(inputs):
                if not value:
                    continue
                readers = succ.get(value)
                if readers is None:
                    node[value] = NO_DATA
                    readers = succ[value] = {}
                    pred[value] = {}
                else:
                    producers = pred[value]
                    if producers:
                        for producer, out_slots in producers.items():
                            record = node[producer]
                            for out_slot in out_slots:
                                value = canonical[slot] = record.io[record.n_in + out_slot]
                    else:  # a graph input or initializer: one string for all its readers
                        value = canonical[slot] = sources.setdefault(value, value)
                keys = readers.get(i)
                if keys is None:
                    keys = one_slot.get(slot) or _one_slot(slot)
                elif slot not in keys:
                    keys = _key_dict([*keys, slot])
                readers[i] = keys
                pred_i[value] = keys
            for slot, value in enumerate(outputs):
                if not value:
                    continue
                producers = pred.get(value)
                if producers is None:
                    node[value] = NO_DATA
                    succ[value] = {}
                    producers = pred[value] = {}
                elif producers or value in succ_i:
                    raise ValueError(f"value '{value}' is produced by more than one node")
                elif succ[value]:
                    in_order = False  # read before it is produced: the file's order is not topological
                keys = one_slot.get(slot) or _one_slot(slot)
                succ_i[value] = keys
                producers[i] = keys
            data.io = (*canonical, *outputs)
            data.n_in = len(canonical)
            if attrs is not None and attrs is not no_attrs and _has_subgraph(attrs):
                owners[i] = None
                for sub in Node(self, i).subgraphs():
                    sub.parent, sub.owner = self, i
                    for free in sub.free_values():
                        if i in pred.get(free, ()):
                            in_order = False  # a body reading its owner's own output: a cycle
                        self.add_capture(i, free)  # (one produced later clears in_order there)
        self._in_order = in_order
        self._pristine = True

    def add_capture(self, node_id: int, value: str) -> None:
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
        data = self._node[node.id]
        subgraphs = [value] if isinstance(value, Graph) else value if isinstance(value, list) and value and isinstance(value[0], Graph) else []
        data.editable_attrs()[name] = value if isinstance(value, (Graph, AttributeProto)) or subgraphs else helper.make_attribute(name, value)
        data.dirty = EDITED
        if subgraphs:  # a new body: it belongs here now, and reads what it reads through captures
            self._owners[node.id] = None
            for sub in subgraphs:
                sub.parent, sub.owner = self, node.id
            self.refresh_captures(node)

    def del_attr(self, node: Node, name: str) -> None:
        data = self._node[node.id]
        if name in data.attrs:
            data.editable_attrs().pop(name)
            data.dirty = EDITED

    def _move_uses(self, old: str, new: str) -> None:
        """Every edge old -> op becomes new -> op, and the ops' input slots follow."""
        node = self._node
        for op, keys in list(self._succ[old].items()):
            data = node[op]
            io = list(data.io)
            for slot in keys:
                self._unlink(old, op, slot)
                self._link(new, op, slot)
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
        name = self.fresh_name(hint)
        self.set_initializer(name, Tensor.from_numpy(np.asarray(array), name))
        return name

    def set_initializer(self, name: str, tensor: Tensor) -> None:
        if tensor.name != name:
            tensor = tensor.renamed(name)
        self.initializers[name] = tensor
        self._add_value(name)

    def remove_initializer(self, name: str) -> None:
        self.initializers.pop(name, None)
        self._drop_if_orphan(name)

    def remove_input(self, name: str) -> None:
        self.inputs.pop(name, None)
        self._drop_if_orphan(name)

    def set_value_info(self, name: str, info: ValueInfoProto) -> None:
        self.value_info[name] = info


def _fork(counter: "itertools.count[int]") -> tuple["itertools.count[int]", "itertools.count[int]"]:
    """Two counters that both continue where ``counter`` stood."""
    start = next(counter)
    return itertools.count(start), itertools.count(start)


def _renamed(table: dict[str, Any], old: str, new: str) -> dict[str, Any]:
    """The same ordered table (graph inputs or outputs, whose order is the model's signature)
    with key ``old`` (and a ValueInfoProto's name) changed to ``new``."""
    if old not in table:
        return table
    return {new if key == old else key: _with_name(info, new) if key == old else info for key, info in table.items()}


def _with_name(info: ValueInfoProto | None, name: str) -> ValueInfoProto | None:
    if info is None:
        return None
    copy = ValueInfoProto()
    copy.CopyFrom(info)
    copy.name = name
    return copy


def constant_node_value(node: Node) -> np.ndarray | None:
    """The value of a Constant op, or None for forms that are not plain dense tensors."""
    for key, proto in node._data.attrs.items():
        if not isinstance(proto, AttributeProto) or proto.ref_attr_name:
            return None
        if key == "value":
            if proto.t.data_location == proto.t.EXTERNAL:
                return None
            return numpy_helper.to_array(proto.t)
        if key == "value_float":
            return np.array(proto.f, dtype=np.float32)
        if key == "value_floats":
            return np.array(list(proto.floats), dtype=np.float32)
        if key == "value_int":
            return np.array(proto.i, dtype=np.int64)
        if key == "value_ints":
            return np.array(list(proto.ints), dtype=np.int64)
        return None
    return None
