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
"""

from __future__ import annotations

import heapq
import itertools
from typing import Any, Iterable, Iterator

import networkx as nx
import numpy as np
from onnx import AttributeProto, NodeProto, TypeProto, ValueInfoProto, helper, numpy_helper

from graphtool.ir.tensor import Tensor

CAPTURE = -1
_DEFAULT_ORDER_MAJOR = 1 << 62


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
    def _data(self) -> dict[str, Any]:
        return self.graph.nx._node[self.id]

    @property
    def op_type(self) -> str:
        return self._data["op_type"]

    @property
    def domain(self) -> str:
        return self._data["domain"]

    @property
    def name(self) -> str:
        return self._data["name"]

    @property
    def order(self) -> tuple[int, int]:
        return self._data["order"]

    @property
    def inputs(self) -> list[str]:
        """Input names by slot; '' marks an omitted optional input."""
        return self.graph._slots(self.id, self._data["n_in"], incoming=True)

    @property
    def outputs(self) -> list[str]:
        return self.graph._slots(self.id, self._data["n_out"], incoming=False)

    @property
    def attrs(self) -> dict[str, Any]:
        """Attribute values as Python objects; subgraph attributes are ``Graph`` objects."""
        return {k: _attr_value(v) for k, v in self._data["attrs"].items()}

    def attr(self, name: str, default: Any = None) -> Any:
        value = self._data["attrs"].get(name)
        return default if value is None else _attr_value(value)

    def attr_proto(self, name: str) -> AttributeProto | None:
        value = self._data["attrs"].get(name)
        return value if isinstance(value, AttributeProto) else None

    def subgraphs(self) -> list["Graph"]:
        found: list[Graph] = []
        for value in self._data["attrs"].values():
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


class Graph:
    """One ONNX graph: the main graph, an If/Loop/Scan body, or a function body."""

    def __init__(self, name: str = "", parent: "Graph | None" = None):
        self.nx = nx.MultiDiGraph()
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

    # ------------------------------------------------------------------ reading

    def __len__(self) -> int:
        return sum(len(ids) for ids in self._by_type.values())

    def node(self, node_id: int) -> Node:
        return Node(self, node_id)

    def nodes(self, op_type: str | None = None) -> list[Node]:
        """Op nodes (of one type), in load/insertion order. A snapshot: safe to edit while iterating."""
        if op_type is not None:
            return [Node(self, i) for i in self._by_type.get(op_type, ())]
        ids = [i for by_type in self._by_type.values() for i in by_type]
        ids.sort(key=lambda i: self.nx.nodes[i]["order"])
        return [Node(self, i) for i in ids]

    def has_op(self, op_type: str) -> bool:
        """Whether any op of this type is in this graph (O(1): the per-type index)."""
        return bool(self._by_type.get(op_type))

    def has_node(self, node: Node) -> bool:
        return node.graph is self and node.id in self.nx

    def has_value(self, name: str) -> bool:
        return name in self.nx

    def values(self) -> list[str]:
        return [n for n in self.nx if isinstance(n, str)]

    # The four lookups below are what every pass calls per node: they read NetworkX's adjacency
    # dicts (value -> {op: {slot: {}}}) directly; its edge views cost several times more per call.

    def producer(self, value: str) -> Node | None:
        pred = self.nx._pred.get(value) if value else None
        if pred:
            for op in pred:
                return Node(self, op)
        return None

    def uses(self, value: str) -> list[tuple[Node, int]]:
        """(consumer, slot) pairs; slot is CAPTURE where a subgraph of the consumer reads it."""
        succ = self.nx._succ.get(value) if value else None
        if not succ:
            return []
        return [(Node(self, op), slot) for op, slots in succ.items() for slot in slots]

    def consumers(self, value: str) -> list[Node]:
        succ = self.nx._succ.get(value) if value else None
        return [Node(self, op) for op in succ] if succ else []

    def has_other_uses(self, value: str, node: Node) -> bool:
        """True when something besides ``node`` reads ``value`` (another op or a graph output)."""
        if self.is_output(value):
            return True
        return any(op != node.id for op in self.nx._succ.get(value, ()))

    def is_input(self, value: str) -> bool:
        return value in self.inputs

    def is_output(self, value: str) -> bool:
        return value in self.outputs

    def is_initializer(self, value: str) -> bool:
        return value in self.initializers

    def is_free(self, value: str) -> bool:
        """A name this graph reads from an enclosing scope."""
        return (
            value in self.nx
            and not self.nx._pred[value]  # no producer (the dict, not in_degree: hot at load)
            and value not in self.initializers
            and value not in self.sparse_initializers
            and not self.is_input(value)
        )

    def free_values(self) -> list[str]:
        return [v for v in self.values() if self.is_free(v)]

    def const(self, value: str) -> np.ndarray | None:
        """The value if it is provably constant (initializer or Constant node), else None."""
        if not value or value not in self.nx:
            return None
        tensor = self.initializers.get(value)
        if tensor is not None:
            if self.overridable_initializers and self.is_input(value):
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
        data = self.nx._node
        rank = {op_type: k for k, op_type in enumerate(self._by_type)}
        live = [i for i in self._owners if i in data]
        for i in sorted(live, key=lambda i: (rank[data[i]["op_type"]], i)):  # = _by_type order
            for key, value in list(data[i]["attrs"].items()):
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
        g = self.nx
        # The adjacency dicts themselves (not the NetworkX views): this runs on every load and
        # save, and the views cost ~4x more per edge at 100k+ nodes.
        pred, succ, data = g._pred, g._succ, g._node
        pending: dict[int, int] = {}
        heap: list[tuple[tuple[int, int], int]] = []
        for ids in self._by_type.values():
            for i in ids:
                count = 0
                for value, keys in pred[i].items():
                    if pred[value]:
                        count += len(keys)
                pending[i] = count
                if count == 0:
                    heap.append((data[i]["order"], i))
        heapq.heapify(heap)
        order: list[Node] = []
        while heap:
            _, i = heapq.heappop(heap)
            order.append(Node(self, i))
            for value in succ[i]:
                for consumer, keys in succ[value].items():
                    left = pending[consumer] - len(keys)
                    pending[consumer] = left
                    if left == 0:
                        heapq.heappush(heap, (data[consumer]["order"], consumer))
        if len(order) != len(pending):
            stuck = next(i for i, n in pending.items() if n > 0)
            data = g.nodes[stuck]
            raise ValueError(f"the graph has a cycle through node '{data['name'] or data['op_type']}'")
        return order

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
            if name in graph.nx:
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
        node_id = self._new_op(op_type, domain, name, attr_map, None, (major, next(self._minor)))
        self._connect(node_id, list(inputs), list(outputs))
        return Node(self, node_id)

    def _new_op(
        self,
        op_type: str,
        domain: str,
        name: str,
        attrs: dict[str, Any],
        proto: NodeProto | None,
        order: tuple[int, int],
    ) -> int:
        node_id = next(self._ids)
        self.nx.add_node(
            node_id,
            op_type=op_type,
            domain=domain,
            name=name,
            attrs=attrs,
            proto=proto,
            order=order,
            n_in=0,
            n_out=0,
            attrs_dirty=proto is None,
        )
        self._by_type.setdefault(op_type, {})[node_id] = None
        return node_id

    def _connect(self, node_id: int, inputs: list[str], outputs: list[str]) -> None:
        g = self.nx
        data = g.nodes[node_id]
        data["n_in"], data["n_out"] = len(inputs), len(outputs)
        for slot, value in enumerate(inputs):
            if value:
                if value not in g:
                    g.add_node(value)
                g.add_edge(value, node_id, key=slot)
        for slot, value in enumerate(outputs):
            if value:
                if value not in g:
                    g.add_node(value)
                elif g.in_degree(value):
                    raise ValueError(f"value '{value}' is produced by more than one node")
                g.add_edge(node_id, value, key=slot)
        for sub in Node(self, node_id).subgraphs():
            self._owners[node_id] = None
            sub.parent, sub.owner = self, node_id
            for free in sub.free_values():
                self.add_capture(node_id, free)

    def add_capture(self, node_id: int, value: str) -> None:
        if value not in self.nx:
            self.nx.add_node(value)
        if not self.nx.has_edge(value, node_id, key=CAPTURE):
            self.nx.add_edge(value, node_id, key=CAPTURE)

    def refresh_captures(self, node: Node) -> None:
        """Recompute which outer values ``node``'s subgraphs read (after a pass edited them)."""
        wanted = {v for sub in node.subgraphs() for v in sub.free_values()}
        for value in [v for v, _, k in self.nx.in_edges(node.id, keys=True) if k == CAPTURE]:
            if value not in wanted:
                self.nx.remove_edge(value, node.id, key=CAPTURE)
                self._drop_if_orphan(value)
        for value in wanted:
            self.add_capture(node.id, value)

    def set_input(self, node: Node, slot: int, value: str) -> None:
        """Point input ``slot`` of ``node`` at ``value`` ('' to omit it)."""
        g = self.nx
        data = g.nodes[node.id]
        old = self._slot_value(node.id, slot, incoming=True)
        if old == value:
            return
        if old:
            g.remove_edge(old, node.id, key=slot)
            self._drop_if_orphan(old)
        if value:
            if value not in g:
                g.add_node(value)
            g.add_edge(value, node.id, key=slot)
        data["n_in"] = max(data["n_in"], slot + 1)
        if not value:
            while data["n_in"] and not self._slot_value(node.id, data["n_in"] - 1, incoming=True):
                data["n_in"] -= 1

    def set_inputs(self, node: Node, values: list[str]) -> None:
        data = self.nx.nodes[node.id]
        for slot in range(len(values), data["n_in"]):
            self.set_input(node, slot, "")
        for slot, value in enumerate(values):
            self.set_input(node, slot, value)
        data["n_in"] = len(values)

    def set_attr(self, node: Node, name: str, value: Any) -> None:
        data = self.nx.nodes[node.id]
        subgraphs = [value] if isinstance(value, Graph) else value if isinstance(value, list) and value and isinstance(value[0], Graph) else []
        data["attrs"][name] = value if isinstance(value, (Graph, AttributeProto)) or subgraphs else helper.make_attribute(name, value)
        data["attrs_dirty"] = True
        if subgraphs:  # a new body: it belongs here now, and reads what it reads through captures
            self._owners[node.id] = None
            for sub in subgraphs:
                sub.parent, sub.owner = self, node.id
            self.refresh_captures(node)

    def del_attr(self, node: Node, name: str) -> None:
        data = self.nx.nodes[node.id]
        if data["attrs"].pop(name, None) is not None:
            data["attrs_dirty"] = True

    def replace_all_uses(self, old: str, new: str) -> None:
        """Every op that reads ``old`` (also inside subgraphs) reads ``new`` instead.

        Graph outputs are not consumers: a pass that removes the producer of a graph output
        keeps the output's name with ``rename_value``.
        """
        if old == new or old not in self.nx:
            return
        g = self.nx
        if new not in g:
            g.add_node(new)
        for _, op, slot in list(g.out_edges(old, keys=True)):
            g.remove_edge(old, op, key=slot)
            if not g.has_edge(new, op, key=slot):
                g.add_edge(new, op, key=slot)
            if slot == CAPTURE:
                for sub in Node(self, op).subgraphs():
                    sub._rename_free(old, new)
        self._drop_if_orphan(old)

    def _rename_free(self, old: str, new: str) -> None:
        if old in self.nx and self.is_free(old):
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
        g = self.nx
        if new in g:
            # The one name that may be reused: a graph output whose producer was just removed.
            if g.in_degree(new) or new in self.initializers or self.is_input(new):
                raise ValueError(f"cannot rename '{old}' to '{new}': the name is taken")
        else:
            g.add_node(new)
        for op, _, slot in list(g.in_edges(old, keys=True)):
            g.add_edge(op, new, key=slot)
        for _, op, slot in list(g.out_edges(old, keys=True)):
            g.add_edge(new, op, key=slot)
            if slot == CAPTURE:
                for sub in Node(self, op).subgraphs():
                    sub._rename_free(old, new)
        g.remove_node(old)
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
        g = self.nx
        touched: list[str] = []
        for node in nodes:
            if node.id not in g:
                continue
            data = g.nodes[node.id]
            touched.extend(g.predecessors(node.id))
            produced = list(g.successors(node.id))
            self._by_type[data["op_type"]].pop(node.id, None)
            self._owners.pop(node.id, None)
            if not self._by_type[data["op_type"]]:
                del self._by_type[data["op_type"]]
            g.remove_node(node.id)
            for value in produced:
                if not g._pred[value] and not g._succ[value] and not self.is_output(value):
                    g.remove_node(value)
                    self.value_info.pop(value, None)
        for value in touched:
            self._drop_if_orphan(value)

    def _drop_if_orphan(self, value: str) -> None:
        g = self.nx
        if (
            value in g
            and not g._pred[value]  # isolated; not g.degree(): O(consumers), quadratic on shared
            and not g._succ[value]  # values like a Reshape target read by 10k nodes
            and value not in self.initializers
            and value not in self.sparse_initializers
            and not self.is_input(value)
            and not self.is_output(value)
        ):
            g.remove_node(value)
            self.value_info.pop(value, None)

    def add_initializer(self, array: np.ndarray, hint: str = "const") -> str:
        name = self.fresh_name(hint)
        self.set_initializer(name, Tensor.from_numpy(np.asarray(array), name))
        return name

    def set_initializer(self, name: str, tensor: Tensor) -> None:
        if tensor.name != name:
            tensor = tensor.renamed(name)
        self.initializers[name] = tensor
        if name not in self.nx:
            self.nx.add_node(name)

    def remove_initializer(self, name: str) -> None:
        self.initializers.pop(name, None)
        self._drop_if_orphan(name)

    def remove_input(self, name: str) -> None:
        self.inputs.pop(name, None)
        self._drop_if_orphan(name)

    def set_value_info(self, name: str, info: ValueInfoProto) -> None:
        self.value_info[name] = info

    # ------------------------------------------------------------------ internals

    def _slots(self, node_id: int, count: int, incoming: bool) -> list[str]:
        names = [""] * count
        adjacent = (self.nx._pred if incoming else self.nx._succ)[node_id]
        for value, keys in adjacent.items():
            for slot in keys:
                if slot >= 0:
                    if slot >= len(names):
                        names.extend([""] * (slot + 1 - len(names)))
                    names[slot] = value
        return names

    def _slot_value(self, node_id: int, slot: int, incoming: bool) -> str:
        adjacent = (self.nx._pred if incoming else self.nx._succ)[node_id]
        for value, keys in adjacent.items():
            if slot in keys:
                return value
        return ""


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
    for key, proto in node._data["attrs"].items():
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
