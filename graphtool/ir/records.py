"""What the NetworkX graph of the IR holds per node and per edge: the op record (``OpData``),
the ``Node`` handle passes use, and the shared read-only dicts that edges and value nodes carry.

Split out of ``graph.py`` (issue 19) so the record's memory layout reads on its own. Per op:

* ``nx._node[id]`` holds an ``OpData`` record (``__slots__``): op type, domain, name,
  attributes, the original NodeProto *serialized* (``template``: bytes until a pass reads the
  attributes), load order, and the input/output names by slot (``io``, kept in step with the
  edges by every edit, so ``Node.inputs`` is a slice, not a walk of the adjacency);
* value nodes share one empty read-only attribute dict; edges share one empty read-only data
  dict, and a value→op pair with one slot shares the read-only key dict ``{slot: {}}`` of that
  slot. Edits never mutate a key dict: they replace it, so NetworkX's reading API sees an
  ordinary MultiDiGraph while its writing API would raise on a shared dict instead of
  corrupting it.

Nothing here imports ``Graph``: a subgraph attribute is recognized as the one attribute value
that is neither an ``AttributeProto`` nor a list (a list holds the bodies of a GRAPHS attribute).
"""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Mapping

import numpy as np
from onnx import AttributeProto, NodeProto, helper, numpy_helper

if TYPE_CHECKING:
    from graphtool.ir.graph import Graph

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




def _attr_table(proto: NodeProto) -> Mapping[str, Any]:
    """name -> AttributeProto of a parsed NodeProto (the shared empty table when it has none)."""
    return {a.name: a for a in proto.attribute} if len(proto.attribute) else NO_ATTRS


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
            attrs = self._attrs = _attr_table(proto) if proto is not None else NO_ATTRS
        return attrs

    def peek_attrs(self) -> Mapping[str, Any]:
        """``attrs`` without keeping them: an op whose attributes nobody parsed yet is parsed for
        the caller alone and stays serialized. For whole-graph readers that only look (the
        schema check: keeping 173k parsed NodeProtos cost +268 MB on a million-op graph)."""
        template = self.template
        if self._attrs is not None or not isinstance(template, bytes):
            return self.attrs
        return _attr_table(NodeProto.FromString(template))

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
                if isinstance(value, AttributeProto):
                    proto = AttributeProto()
                    proto.CopyFrom(value)
                    copied_attrs[name] = proto
                elif isinstance(value, list):
                    copied_attrs[name] = [sub.copy(graph) for sub in value]
                else:  # a subgraph
                    copied_attrs[name] = value.copy(graph)
            attrs = copied_attrs
        out = OpData(self.op_type, self.domain, self.name, attrs, template, self.order)
        out.io, out.n_in, out.dirty = self.io, self.n_in, self.dirty
        return out

    def editable_attrs(self) -> dict[str, Any]:
        """The attribute dict, made this record's own first (copy-on-write)."""
        attrs = self.attrs
        if not isinstance(attrs, dict):
            attrs = self._attrs = dict(attrs)
        return attrs

    @property
    def inputs(self) -> tuple[str, ...]:
        """Input names by slot."""
        return self.io[: self.n_in]

    @property
    def outputs(self) -> tuple[str, ...]:
        """Output names by slot."""
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
        """``dict.get`` over op_type, domain, name, attrs (NetworkX reads node data so)."""
        return self[key] if key in self._KEYS else default

    def __contains__(self, key: object) -> bool:
        return key in self._KEYS

    def __iter__(self) -> Iterator[str]:
        return iter(self._KEYS)

    def __len__(self) -> int:
        return len(self._KEYS)

    def keys(self) -> tuple[str, ...]:
        """The keys this record answers as a dict: op_type, domain, name, attrs."""
        return self._KEYS

    def items(self) -> list[tuple[str, Any]]:
        """(key, value) pairs, as a dict's."""
        return [(k, self[k]) for k in self._KEYS]

    def values(self) -> list[Any]:
        """The values, as a dict's."""
        return [self[k] for k in self._KEYS]

    def update(self, *args: Any, **kwargs: Any) -> None:  # NetworkX's add_node on an existing op
        """Accepts only an empty update (NetworkX's ``add_node`` of an existing op); edits go through Graph."""
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
        """The op type (``"Conv"``, ``"MatMul"``...)."""
        return self.graph._node[self.id].op_type

    @property
    def domain(self) -> str:
        """The op's domain ('' for standard ONNX ops, 'com.microsoft' for contrib ops)."""
        return self.graph._node[self.id].domain

    @property
    def name(self) -> str:
        """The ONNX node name (may be empty or repeated; ``id`` is the unique key)."""
        return self.graph._node[self.id].name

    @property
    def order(self) -> tuple[int, int]:
        """The node's place in the saved order: (major, minor), compared as a tuple."""
        order = self.graph._node[self.id].order
        return (self.id, 0) if order is None else divmod(order, 1 << ORDER_SHIFT)

    @property
    def inputs(self) -> list[str]:
        """Input names by slot; '' marks an omitted optional input."""
        data = self.graph._node[self.id]
        return list(data.io[: data.n_in])

    @property
    def outputs(self) -> list[str]:
        """Output names by slot ('' marks an unused optional output)."""
        data = self.graph._node[self.id]
        return list(data.io[data.n_in:])

    @property
    def wiring(self) -> tuple[int, tuple[bool, ...]]:
        """(input count, whether each input and then each output slot names a value): all a
        schema check reads of the edges, without building the name lists."""
        data = self.graph._node[self.id]
        return data.n_in, tuple(map(bool, data.io))

    @property
    def attrs(self) -> dict[str, Any]:
        """Attribute values as Python objects; subgraph attributes are ``Graph`` objects."""
        return {k: _attr_value(v) for k, v in self.graph._node[self.id].attrs.items()}

    def peek_attrs(self) -> Mapping[str, Any]:
        """name -> AttributeProto (or subgraph) without keeping a serialized op's attributes parsed
        (``OpData.peek_attrs``): for whole-graph readers that only look."""
        return self.graph._node[self.id].peek_attrs()

    def attr(self, name: str, default: Any = None) -> Any:
        """Attribute ``name`` as a Python value (int, float, str, list, numpy array, Graph), or ``default``."""
        value = self.graph._node[self.id].attrs.get(name)
        return default if value is None else _attr_value(value)

    def attr_proto(self, name: str) -> AttributeProto | None:
        """Attribute ``name`` as its AttributeProto (None when absent or a subgraph)."""
        value = self.graph._node[self.id].attrs.get(name)
        return value if isinstance(value, AttributeProto) else None

    def subgraphs(self) -> list["Graph"]:
        """The graphs held in this op's attributes (If branches, Loop/Scan bodies)."""
        found: list[Graph] = []
        if self.id not in self.graph._owners:
            return found
        for value in self.graph._node[self.id].attrs.values():
            if isinstance(value, list):
                found.extend(value)
            elif not isinstance(value, AttributeProto):  # a subgraph
                found.append(value)
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
    """Whether any attribute is a body: its value is a Graph or a non-empty list of Graphs."""
    return any(not isinstance(v, (AttributeProto, list)) or (isinstance(v, list) and v) for v in attrs.values())



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

