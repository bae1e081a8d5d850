"""The graph IR: one ``networkx.MultiDiGraph`` of op nodes and value nodes.

Op nodes are keyed by an ``int`` id given at load (ONNX node names may be empty or repeated);
value nodes by their tensor name (a ``str``, unique by SSA), so the two kinds never collide.
Edges run value → op and op → value; the edge *key* is the slot (input or output index), so
Mul(x, x) is two parallel edges and removing one input is O(1). A subgraph's use of an
enclosing-scope value is a *capture* edge with key ``CAPTURE`` (-1) into the op that owns the
subgraph: dead-code elimination and topological order then see it like any other use.

Pass code uses the small vocabulary of ``Graph`` and never the NetworkX graph itself. Every
helper costs O(degree) of the nodes it touches; the only whole-graph walks are ``nodes()``
(served from a per-op-type index) and ``topological_order()``.

The IR is four modules, one job each (issue 19 split them; this one re-exports their names):

* ``records.py``: what a node holds (``OpData``, the op record in ``nx._node``), the ``Node``
  handle, the shared read-only key and data dicts of edges;
* ``adjacency.py``: NetworkX's inner adjacency dicts in their compact shapes (``One``);
* ``bulk.py``: the loader's one-pass build of a whole graph;
* ``edit.py``: the edit verbs (``GraphEdits``, which ``Graph`` extends);
* ``surgery.py``: the hand-editing verbs of onnx-graphsurgeon users (``find``, ``insert_after``,
  ``bypass``, ``replace_node``, ``set_graph_inputs/outputs``, ``cleanup``, ``toposort``);
* here: reading (producers, consumers, constants, types), topological order and copying.

Memory (issue 19: a million nodes must fit in well under 2 GB): an op with its output value
costs ~750 bytes — the op record and its serialized template, its id and value name, and their
entries in NetworkX's three node-keyed dicts; the four inner adjacencies are mostly 48-byte
``One``s (see ``adjacency.py``).
"""

from __future__ import annotations

import heapq
import itertools
from typing import Any, Iterable, Iterator

import numpy as np
from onnx import GraphProto, TypeProto, ValueInfoProto, helper

from graphtool.ir.adjacency import Adjacency, One, own_copy
from graphtool.ir.bulk import Record, load_ops
from graphtool.ir.surgery import GraphSurgery
from graphtool.ir.records import (CAPTURE, EDITED, IO_EDITED, NO_ATTRS, NO_DATA, ORDER_SHIFT, Node, OpData,
                                  constant_node_value)
from graphtool.ir.tensor import Tensor
from graphtool.ir.value_infos import TypeOnly, ValueInfo

__all__ = ["CAPTURE", "EDITED", "IO_EDITED", "NO_ATTRS", "NO_DATA", "ORDER_SHIFT", "Graph", "Node", "OpData",
           "constant_node_value"]


class Graph(GraphSurgery):
    """One ONNX graph: the main graph, an If/Loop/Scan body, or a function body.

    Op nodes are ``Node`` handles; values are their names (``str``). ``g.nx`` is the underlying
    ``networkx.MultiDiGraph`` (read it, never edit it: the verbs keep it consistent)::

        for conv in g.nodes("Conv"):
            print(conv.name, g.shape(conv.outputs[0]), [r.op_type for r in g.consumers(conv.outputs[0])])
    """

    def __init__(self, name: str = "", parent: "Graph | None" = None):
        self.nx = Adjacency()
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
        self.value_info: dict[str, ValueInfo] = {}
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
        self._loaded_count = 0  # ops the loader numbered 0, 1, ...: while all remain, their ids
        self._edits = 0  # bumped by every edit verb (``GraphEdits._edited``)
        self._model_ref: Any = None  # weakref to the Model whose main graph or function body this is
        self._model_of: Any = None  # Model.of_graph, set by Model (the IR's graph floor cannot import it)

    def __repr__(self) -> str:
        counts = sorted(((len(ids), t) for t, ids in self._by_type.items() if ids), reverse=True)
        ops = ", ".join(f"{t} ×{n}" for n, t in counts[:4]) + (", …" if len(counts) > 4 else "")
        kind = "subgraph " if self.parent is not None else ""
        return (f"<Graph {kind}{self.name!r}: {len(self)} ops ({ops}), inputs {_names(self.inputs)}, "
                f"outputs {_names(self.outputs)}, {len(self.initializers)} initializers>")

    # ------------------------------------------------------------------ reading

    def __len__(self) -> int:
        return sum(len(ids) for ids in self._by_type.values())

    def node(self, node_id: int) -> Node:
        """The handle of op ``node_id`` (ids are assigned at load; ``Node.id``)."""
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
        """Whether ``node`` is an op of this graph (False once removed)."""
        return node.graph is self and node.id in self._node

    def has_value(self, name: str) -> bool:
        """Whether ``name`` is a value (tensor) of this graph."""
        return name in self._node

    def values(self) -> list[str]:
        """Every value name of this graph (a walk of all nodes)."""
        return [n for n in self._node if isinstance(n, str)]

    # The four lookups below are what every pass calls per node: they read NetworkX's adjacency
    # dicts (value -> {op: {slot: {}}}) directly; its edge views cost several times more per call.
    # The one-neighbor shape (``adjacency.One``, nearly every value) is read off its fields.

    def producer(self, value: str) -> Node | None:
        """The op that makes ``value``; None for graph inputs, initializers and outer values."""
        pred = self._pred.get(value) if value else None
        if type(pred) is One:  # a value has at most one producer: this or empty
            return Node(self, pred.key)
        if pred:
            for op in pred:
                return Node(self, op)
        return None

    def uses(self, value: str) -> list[tuple[Node, int]]:
        """(consumer, slot) pairs; slot is CAPTURE where a subgraph of the consumer reads it."""
        succ = self._succ.get(value) if value else None
        if type(succ) is One:
            return [(Node(self, succ.key), slot) for slot in succ.keys_]
        if not succ:
            return []
        return [(Node(self, op), slot) for op, slots in succ.items() for slot in slots]

    def consumers(self, value: str) -> list[Node]:
        """The ops that read ``value`` (each once, whatever the number of slots)."""
        succ = self._succ.get(value) if value else None
        if type(succ) is One:
            return [Node(self, succ.key)]
        return [Node(self, op) for op in succ] if succ else []

    def has_other_uses(self, value: str, node: Node) -> bool:
        """True when something besides ``node`` reads ``value`` (another op or a graph output)."""
        if value in self.outputs:
            return True
        succ = self._succ.get(value)
        if type(succ) is One:
            return succ.key != node.id
        return any(op != node.id for op in succ or ())

    def is_input(self, value: str) -> bool:
        """Whether ``value`` is a graph input."""
        return value in self.inputs

    def is_output(self, value: str) -> bool:
        """Whether ``value`` is a graph output."""
        return value in self.outputs

    def is_initializer(self, value: str) -> bool:
        """Whether ``value`` is an initializer (a weight stored in the file)."""
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
        """The names this graph reads from enclosing scopes."""
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
        pred = self._pred[value]
        if pred:  # made by an op: constant only if that op is a Constant (asked of every input, so
            # the record is read before any handle is made)
            op = pred.key if type(pred) is One else next(iter(pred))
            data = self._node[op]
            if data.op_type == "Constant" and data.domain in ("", "ai.onnx"):
                return constant_node_value(Node(self, op))
            return None
        if self.parent is not None and self.is_free(value):
            return self.parent.const(value)
        return None

    def declared_type(self, value: str) -> TypeProto | None:
        """The type the graph declares for ``value`` (input, output or value_info), if any."""
        for table in (self.inputs, self.outputs, self.value_info):
            info = table.get(value)
            if info is not None and info.HasField("type"):
                return info.type
        return None

    def value_type(self, value: str) -> TypeProto | None:
        """The declared type of ``value``, or an initializer's; None when the file does not say."""
        declared = self.declared_type(value)
        if declared is not None:
            return declared
        tensor = self.initializers.get(value)
        if tensor is not None:
            return helper.make_tensor_type_proto(tensor.data_type, tensor.dims)
        return None

    def dtype(self, value: str) -> int | None:
        """The declared element type (``onnx.TensorProto.FLOAT``...) of ``value``, or None."""
        t = self.value_type(value)
        if t is not None and t.HasField("tensor_type") and t.tensor_type.elem_type:
            return t.tensor_type.elem_type
        return None

    def declared_shape(self, value: str) -> list[int | str | None] | None:
        """The shape the file declares (input, output, value_info, initializer), without inference:
        what passes ask (O(1)). Dims as ints, strs (symbolic) or None; None when rank is unknown."""
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

    def shape(self, value: str) -> list[int | str | None] | None:
        """The shape of ``value``: declared, else inferred (ONNX shape inference over the whole
        model, run once and reused until the model is edited). Dims are ints (static), strs
        (symbolic) or None (unknown); None when even the rank is unknown.

        >>> m.graph.set_shape("input", [1, 3, 224, 224])
        >>> m.graph.shape(m.graph.find(op_type="Conv")[0].outputs[0])
        [1, 64, 112, 112]
        """
        declared = self.declared_shape(value)
        if declared is not None:
            return declared
        t = self.inferred_type(value)
        if t is None or not t.HasField("tensor_type") or not t.tensor_type.HasField("shape"):
            return None
        return [d.dim_value if d.HasField("dim_value") else d.dim_param if d.HasField("dim_param") else None
                for d in t.tensor_type.shape.dim]

    def inferred_type(self, value: str) -> TypeProto | None:
        """The type ONNX shape inference gives ``value`` (``Model.inferred_type``), or None for a
        graph that belongs to no Model."""
        root: Graph = self
        while root.parent is not None:
            root = root.parent
        model = root._model_of(root) if root._model_of is not None else None
        return model.inferred_type(self, value) if model is not None else None

    def set_shape(self, value: str, dims: Iterable[int | str | None] | None, elem_type: int | None = None) -> None:
        """Declare ``value``'s shape (and element type): a graph input's or output's declaration,
        else its value_info. ``dims`` None: unknown rank.

        >>> g.set_shape("input", [1, 3, 224, 224])   # fix a dynamic batch
        """
        if not self.has_value(value):
            raise ValueError(f"no value named '{value}' in this graph")
        elem = elem_type or self.dtype(value) or (
            self.inferred_type(value).tensor_type.elem_type if self.inferred_type(value) is not None else 0)
        info = helper.make_tensor_value_info(value, elem, None if dims is None else list(dims))
        if value in self.inputs:
            self.inputs = {k: info if k == value else v for k, v in self.inputs.items()}
        elif value in self.outputs:
            self.outputs = {k: info if k == value else v for k, v in self.outputs.items()}
        else:
            self.value_info[value] = info
        self._edited()

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
        if len(self) == self._loaded_count:  # none removed either: 0 .. n-1 (a sort of a million
            return list(range(self._loaded_count))  # ids gathered from the type index cost 18x 100k's)
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

    def _load_ops(self, records: Iterable[Record]) -> None:
        """A loader's ops, in file order (``bulk.load_ops``)."""
        load_ops(self, records)

    # ------------------------------------------------------------------ copying

    def copy(self, parent: "Graph | None" = None) -> "Graph":
        """An independent copy with the same op ids and order (``Model.copy``).

        NetworkX's dicts are copied one level deep (inner adjacencies of one neighbor, key dicts
        and value attributes are shared: nothing writes them), op records are new, with their templates as bytes (immutable, so
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
        out._loaded_count = self._loaded_count
        out._by_type = {op_type: dict(ids) for op_type, ids in self._by_type.items()}
        out._owners = dict(self._owners)
        # value infos: one C-level copy into a fresh message, then its views (a TypeOnly is shared)
        own = GraphProto()
        tables = (self.inputs, self.outputs, self.value_info)
        for field, table in zip((own.input, own.output, own.value_info), tables):
            field.extend(v for v in table.values() if v is not None and type(v) is not TypeOnly)
        for field, table, into in zip((own.input, own.output, own.value_info), tables,
                                      (out.inputs, out.outputs, out.value_info)):
            copies = iter(field)
            for name, info in table.items():
                into[name] = info if info is None or type(info) is TypeOnly else next(copies)
        out.initializers = {name: t.copy() for name, t in self.initializers.items()}
        node, succ, pred = out._node, out._succ, out._pred
        src_succ, src_pred = self._succ, self._pred
        for key, data in self._node.items():
            node[key] = data if data is NO_DATA else data.copy(out)
            succ[key] = own_copy(src_succ[key])
            pred[key] = own_copy(src_pred[key])
        return out

def _names(table: dict[str, Any], limit: int = 3) -> str:
    names = list(table)
    return "[" + ", ".join(repr(n) for n in names[:limit]) + (f", … {len(names) - limit} more" if len(names) > limit else "") + "]"


def _fork(counter: "itertools.count[int]") -> tuple["itertools.count[int]", "itertools.count[int]"]:
    """Two counters that both continue where ``counter`` stood."""
    start = next(counter)
    return itertools.count(start), itertools.count(start)
