"""Diff two models: match their nodes, then say what was added, removed or changed.

Matching runs in phases, each a handful of dict lookups per node (no all-pairs comparison):

1. Structure. Every node gets a forward hash (op type, domain, attributes, and the hashes of
   what feeds each input slot, computed in topological order from the graph inputs and from
   initializers, which hash by dtype + shape + content) and a backward hash (the same over its
   consumers, from the graph outputs back). Equal forward hashes mean the same computation from
   the same sources; equal backward hashes mean the same use. Hashes unique on both sides match;
   so do nodes equal in both hashes (paired in topological order). Names play no part, so a
   renamed, re-numbered or reordered copy matches completely.
2. Names: node names unique on both sides; then nodes that produce a value of the same name with
   the same op type (optimizers keep value names).
3. Neighbours: from every matched pair, walk to producers and consumers of the same op type at
   the same slot (linear propagation); leftovers find a node of their op type near the same
   matched ancestors (or descendants), and last a node reading exactly the same inputs (which is
   how an op-type change shows).

Structure goes before names on purpose: exporters number their nodes ("Conv_12"), so one
inserted op renumbers everything after it, and name-first matching would pair the wrong nodes.

Subgraphs (If/Loop/Scan bodies) are diffed recursively, paired by owner node + attribute name;
model-local functions are paired by (domain, name, overload). Renaming internal values or nodes
is never a change; renaming a main-graph input or output is (callers feed inputs by name).
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import numpy as np
from onnx import AttributeProto, TensorProto, helper, numpy_helper

from graphtool.ir.graph import Graph, Node, constant_node_value
from graphtool.ir.model import Model
from graphtool.ir.tensor import Tensor, dtype_name

ADDED, REMOVED, CHANGED = "added", "removed", "changed"
_RADIUS = 10  # hops through unmatched nodes when looking for a leftover's matched neighbours
_MAX_VISIT = 64  # nodes one such local search may look at (keeps high fan-out values cheap)


# ---------------------------------------------------------------------------------- results


@dataclass
class NodeDiff:
    """One added, removed or changed node; ``a``/``b`` are the node in each model (or None)."""

    change: str
    scope: str
    a: Node | None
    b: Node | None
    details: list[dict[str, Any]] = field(default_factory=list)

    @property
    def node(self) -> Node:
        return self.b if self.b is not None else self.a  # type: ignore[return-value]

    def as_dict(self) -> dict[str, Any]:
        node = self.node
        return {
            "change": self.change,
            "scope": self.scope,
            "op_type": node.op_type,
            "domain": node.domain,
            "name": node.name,
            "outputs": node.outputs,
            "old": describe(self.a) if self.a is not None and self.change == CHANGED else None,
            "details": self.details,
        }


@dataclass
class GraphDiff:
    """The diff of one pair of graphs (either side None when the whole graph came or went)."""

    scope: str
    a: Graph | None
    b: Graph | None
    matches: dict[int, int] = field(default_factory=dict)  # a node id -> b node id
    nodes: list[NodeDiff] = field(default_factory=list)
    unchanged: int = 0
    graph_changes: list[dict[str, Any]] = field(default_factory=list)
    matched_by: Counter = field(default_factory=Counter)

    def count(self, change: str) -> int:
        return sum(1 for n in self.nodes if n.change == change)

    def as_dict(self) -> dict[str, Any]:
        return {
            "scope": self.scope,
            "counts": {
                ADDED: self.count(ADDED),
                REMOVED: self.count(REMOVED),
                CHANGED: self.count(CHANGED),
                "unchanged": self.unchanged,
            },
            "matched_by": dict(sorted(self.matched_by.items())),
            "graph_changes": self.graph_changes,
            "nodes": [n.as_dict() for n in self.nodes],
        }


@dataclass
class DiffResult:
    """Everything ``diff`` found. ``graphs[0]`` is the main graph; subgraphs and functions follow."""

    a: Model
    b: Model
    graphs: list[GraphDiff]
    model_changes: list[dict[str, Any]]

    @property
    def counts(self) -> dict[str, int]:
        counts = {ADDED: 0, REMOVED: 0, CHANGED: 0, "unchanged": 0}
        for g in self.graphs:
            for change in (ADDED, REMOVED, CHANGED):
                counts[change] += g.count(change)
            counts["unchanged"] += g.unchanged
        counts["graph_changes"] = len(self.model_changes) + sum(len(g.graph_changes) for g in self.graphs)
        return counts

    @property
    def equal(self) -> bool:
        c = self.counts
        return c[ADDED] == c[REMOVED] == c[CHANGED] == c["graph_changes"] == 0

    def node_diffs(self) -> Iterable[NodeDiff]:
        for g in self.graphs:
            yield from g.nodes

    def as_dict(self) -> dict[str, Any]:
        return {
            "equal": self.equal,
            "counts": self.counts,
            "nodes": {"a": self.a.node_count(), "b": self.b.node_count()},
            "model_changes": self.model_changes,
            "graphs": [g.as_dict() for g in self.graphs],
        }


# ---------------------------------------------------------------------------------- values


def describe(node: Node) -> str:
    """How a node is named in reports: its name, else the first value it produces."""
    if node.name:
        return node.name
    outputs = [o for o in node.outputs if o]
    return f"-> {outputs[0]}" if outputs else f"#{node.id}"


def _digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def tensor_key(tensor: Tensor | TensorProto) -> tuple:
    """(dtype, dims, content digest): equal keys mean equal values, whatever the tensor's name."""
    if isinstance(tensor, Tensor):
        if tensor.data_type == TensorProto.STRING:
            return array_key(tensor.numpy())
        return (tensor.data_type, tensor.dims, _digest(tensor.raw_bytes()))
    return array_key(numpy_helper.to_array(tensor))


def array_key(array: np.ndarray) -> tuple:
    """The same key for a numpy value (a Constant node's), so that a Constant op and an
    initializer holding the same value are the same thing to the diff."""
    array = np.asarray(array)
    if array.dtype.kind in "OUS":
        content = _digest(b"\0".join(str(v).encode() for v in array.ravel()))
        return (TensorProto.STRING, tuple(array.shape), content)
    data_type = helper.np_dtype_to_tensor_dtype(array.dtype)
    return (data_type, tuple(array.shape), _digest(np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<")).tobytes()))


def _constant_key(node: Node) -> tuple | None:
    if node.op_type != "Constant" or node.domain not in ("", "ai.onnx"):
        return None
    value = constant_node_value(node)
    return None if value is None else array_key(value)


def _canon(value: Any) -> Any:
    """A hashable, name-independent form of an attribute value (subgraphs are hashed apart)."""
    if isinstance(value, TensorProto):
        return ("tensor", *tensor_key(value))
    if isinstance(value, AttributeProto):  # a function body's reference to a caller attribute
        return ("ref", value.ref_attr_name, value.type)
    if isinstance(value, (list, tuple)):
        return tuple(_canon(v) for v in value)
    if isinstance(value, float):
        return ("nan",) if math.isnan(value) else value
    if isinstance(value, (int, str, bytes)) or value is None:
        return value
    if hasattr(value, "SerializeToString"):
        return (type(value).__name__, value.SerializeToString(deterministic=True))
    return repr(value)


def format_value(value: Any, limit: int = 80) -> str:
    """A short human form of an attribute value."""
    if isinstance(value, Graph):
        text = f"<graph {value.name}>"
    elif isinstance(value, bytes):
        text = value.decode("utf-8", "replace")
    elif isinstance(value, TensorProto):
        text = f"tensor {dtype_name(value.data_type)} {list(value.dims)}"
        if math.prod(value.dims) <= 8:
            text += " " + np.array2string(numpy_helper.to_array(value).ravel(), separator=",")
    elif isinstance(value, float):
        text = f"{value:g}"
    elif isinstance(value, list):
        text = "[" + ", ".join(format_value(v, limit) for v in value) + "]"
    elif isinstance(value, AttributeProto):
        text = f"@{value.ref_attr_name}"
    else:
        text = str(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _json_number(x: float) -> float | str:
    return x if math.isfinite(x) else str(x)


def value_change(old: np.ndarray, new: np.ndarray) -> dict[str, Any]:
    """Shape, dtype and largest absolute difference of two constant values."""
    out: dict[str, Any] = {
        "shape_old": list(old.shape),
        "shape_new": list(new.shape),
        "dtype_old": str(old.dtype),
        "dtype_new": str(new.dtype),
        "max_abs_diff": None,
    }
    numeric = all(np.issubdtype(x.dtype, np.number) or x.dtype == np.bool_ for x in (old, new))
    if numeric and old.shape == new.shape and old.size:
        diff = np.abs(old.astype(np.float64) - new.astype(np.float64))
        out["max_abs_diff"] = _json_number(float(np.nanmax(diff)) if not np.isnan(diff).all() else math.nan)
    return out


def type_string(graph: Graph, value: str) -> str:
    dtype = graph.dtype(value)
    shape = graph.shape(value)
    text = dtype_name(dtype) if dtype else "?"
    if shape is not None:
        text += "[" + ",".join("?" if d is None else str(d) for d in shape) + "]"
    return text


# ---------------------------------------------------------------------------------- hashing


class _Hashes:
    """Forward and backward structural hashes of every node of one graph.

    ``input_tokens`` gives the graph inputs their identity (paired inputs share a token);
    values read from an enclosing scope take the enclosing graph's hash.
    """

    def __init__(self, graph: Graph, input_tokens: dict[str, int], outer: "_Hashes | None" = None):
        self.graph = graph
        self.outer = outer
        self.input_tokens = input_tokens
        self.order = graph.topological_order()
        self.index = {n.id: i for i, n in enumerate(self.order)}
        self.attrs: dict[int, dict[str, Any]] = {}
        self.canon: dict[int, dict[str, Any]] = {}
        self.subgraphs: dict[int, list[tuple[str, int, Graph]]] = {}
        self.forward: dict[int, int] = {}
        self.backward: dict[int, int] = {}
        self.value_hash: dict[str, int] = {}
        self.constants: dict[int, tuple] = {}  # Constant node id -> content key
        self._init_keys: dict[str, tuple] = {}
        self._forward()
        self._backward()

    def init_key(self, name: str) -> tuple:
        key = self._init_keys.get(name)
        if key is None:
            key = self._init_keys[name] = tensor_key(self.graph.initializers[name])
        return key

    def source(self, value: str) -> int:
        """The hash of a value no node of this graph produces."""
        g = self.graph
        if value in g.initializers:
            return hash(("init", self.init_key(value)))
        if value in self.input_tokens:
            return self.input_tokens[value]
        if value in g.sparse_initializers:
            return hash(("sparse", value))
        if self.outer is not None and g.is_free(value):
            return self.outer.hash_of(value)
        return hash(("unbound", value))

    def hash_of(self, value: str) -> int:
        if not value:
            return 0
        h = self.value_hash.get(value)
        return self.source(value) if h is None else h

    def _forward(self) -> None:
        for node in self.order:
            attrs = node.attrs
            subs: list[tuple[str, int, Graph]] = []
            canon: dict[str, Any] = {}
            for key, value in attrs.items():
                if isinstance(value, Graph):
                    subs.append((key, 0, value))
                elif isinstance(value, list) and value and isinstance(value[0], Graph):
                    subs.extend((key, k, sub) for k, sub in enumerate(value))
                else:
                    canon[key] = _canon(value)
            self.attrs[node.id], self.canon[node.id], self.subgraphs[node.id] = attrs, canon, subs
            sub_hashes = tuple(sorted((key, k, self.subgraph_hash(sub)) for key, k, sub in subs))
            h = hash((
                node.op_type,
                node.domain,
                tuple(sorted(canon.items())),
                tuple(self.hash_of(v) for v in node.inputs),
                sub_hashes,
            ))
            self.forward[node.id] = h
            constant = _constant_key(node)
            if constant is not None:
                self.constants[node.id] = constant
            for slot, value in enumerate(node.outputs):
                if value:  # a Constant's value hashes like an initializer of the same content
                    self.value_hash[value] = hash(("init", constant)) if constant else hash((h, slot))

    def subgraph_hash(self, sub: Graph) -> int:
        inner = _Hashes(sub, positional_tokens(sub), self)
        return hash((tuple(inner.hash_of(o) for o in sub.outputs), len(sub.inputs)))

    def _backward(self) -> None:
        g = self.graph
        out_pos = {name: k for k, name in enumerate(g.outputs)}
        for node in reversed(self.order):
            outs = []
            for value in node.outputs:
                if not value:
                    outs.append(0)
                    continue
                uses = sorted((self.backward[c.id], slot) for c, slot in g.uses(value))
                outs.append(hash((tuple(uses), out_pos.get(value, -1))))
            self.backward[node.id] = hash((
                node.op_type,
                node.domain,
                tuple(sorted(self.canon[node.id].items())),
                tuple(outs),
                len(node.inputs),
            ))


def positional_tokens(graph: Graph) -> dict[str, int]:
    """Subgraph and function inputs are positional (Loop/Scan bodies, function signatures)."""
    return {name: hash(("input", k)) for k, name in enumerate(graph.inputs) if name not in graph.initializers}


def _real_inputs(graph: Graph) -> list[str]:
    """Inputs a caller feeds (IR < 4 lists every initializer as an input too)."""
    return [v for v in graph.inputs if v not in graph.initializers]


def pair_names(a: list[str], b: list[str], by_name: bool) -> tuple[list[tuple[str, str]], list[str], list[str]]:
    """Pair two name lists: equal names first (when ``by_name``), the rest by position."""
    pairs: list[tuple[str, str]] = []
    left_a, left_b = list(a), list(b)
    if by_name:
        common = set(a) & set(b)
        pairs = [(n, n) for n in a if n in common]
        left_a = [n for n in a if n not in common]
        left_b = [n for n in b if n not in common]
    k = min(len(left_a), len(left_b))
    pairs += list(zip(left_a[:k], left_b[:k]))
    return pairs, left_a[k:], left_b[k:]


# ---------------------------------------------------------------------------------- matching


class _Match:
    """Matches the nodes of one pair of graphs and classifies them."""

    def __init__(self, ga: Graph, gb: Graph, by_name: bool, parent: "_Match | None" = None):
        self.ga, self.gb, self.parent = ga, gb, parent
        self.input_pairs, self.inputs_only_a, self.inputs_only_b = pair_names(
            _real_inputs(ga), _real_inputs(gb), by_name
        )
        tokens_a: dict[str, int] = {}
        tokens_b: dict[str, int] = {}
        for k, (va, vb) in enumerate(self.input_pairs):
            tokens_a[va] = tokens_b[vb] = hash(("input", k))
        for v in self.inputs_only_a:
            tokens_a[v] = hash(("input-a", v))
        for v in self.inputs_only_b:
            tokens_b[v] = hash(("input-b", v))
        self.a_input_to_b = dict(self.input_pairs)
        self.ha = _Hashes(ga, tokens_a, parent.ha if parent else None)
        self.hb = _Hashes(gb, tokens_b, parent.hb if parent else None)
        self.a2b: dict[int, int] = {}
        self.b2a: dict[int, int] = {}
        self.how: Counter = Counter()
        self._seen_values: set[tuple[str, str]] = set()
        self._work: list[tuple[str, str]] = []

    # -- value identity across the two graphs

    def token_a(self, value: str) -> tuple:
        ga = self.ga
        if not value:
            return ("none",)
        producer = ga.producer(value)
        if producer is not None:
            constant = self.ha.constants.get(producer.id)
            if constant is not None:
                return ("init", constant)
            b = self.a2b.get(producer.id)
            if b is None:
                return ("a", value)
            slot = producer.outputs.index(value)
            outputs = self.gb.node(b).outputs
            return ("v", outputs[slot]) if slot < len(outputs) and outputs[slot] else ("a", value)
        if value in ga.initializers:
            return ("init", self.ha.init_key(value))
        if value in self.a_input_to_b:
            return ("v", self.a_input_to_b[value])
        if self.parent is not None and ga.is_free(value):
            return self.parent.token_a(value)
        return ("a", value)

    def token_b(self, value: str) -> tuple:
        gb = self.gb
        if not value:
            return ("none",)
        producer = gb.producer(value)
        if producer is not None:
            constant = self.hb.constants.get(producer.id)
            if constant is not None:
                return ("init", constant)
        else:
            if value in gb.initializers:
                return ("init", self.hb.init_key(value))
            if self.parent is not None and gb.is_free(value):
                return self.parent.token_b(value)
        return ("v", value)

    # -- phases

    def pair(self, a: int, b: int, how: str) -> None:
        self.a2b[a], self.b2a[b] = b, a
        self.how[how] += 1
        na, nb = self.ga.node(a), self.gb.node(b)
        for va, vb in zip(na.inputs, nb.inputs):
            self._push(va, vb)
        for va, vb in zip(na.outputs, nb.outputs):
            self._push(va, vb)

    def _push(self, va: str, vb: str) -> None:
        if va and vb and (va, vb) not in self._seen_values:
            self._seen_values.add((va, vb))
            self._work.append((va, vb))

    def run(self) -> None:
        ha, hb = self.ha, self.hb
        self._by_key(lambda h, n: h.forward[n], unique=True)
        self._by_key(lambda h, n: (h.forward[n], h.backward[n]), unique=False)
        self._by_key(lambda h, n: h.backward[n], unique=True)
        self._by_names()
        for va, vb in self.input_pairs:
            self._push(va, vb)
        for va, vb in pair_names(list(self.ga.outputs), list(self.gb.outputs), self.parent is None)[0]:
            self._push(va, vb)
        self._propagate()
        self._sweep(ha.order, upstream=True)
        self._sweep(ha.order[::-1], upstream=False)
        self._same_inputs()

    def _by_key(self, key: Callable[[_Hashes, int], Any], unique: bool) -> None:
        groups_a: dict[Any, list[int]] = defaultdict(list)
        groups_b: dict[Any, list[int]] = defaultdict(list)
        for n in self.ha.order:
            if n.id not in self.a2b:
                groups_a[key(self.ha, n.id)].append(n.id)
        for n in self.hb.order:
            if n.id not in self.b2a:
                groups_b[key(self.hb, n.id)].append(n.id)
        for k, ids_a in groups_a.items():
            ids_b = groups_b.get(k)
            if not ids_b or (unique and (len(ids_a) > 1 or len(ids_b) > 1)):
                continue
            for a, b in zip(ids_a, ids_b):
                self.pair(a, b, "structure")

    def _by_names(self) -> None:
        def unique_names(graph: Graph) -> dict[str, int]:
            seen: Counter = Counter(n.name for n in graph.nodes() if n.name)
            return {n.name: n.id for n in graph.nodes() if n.name and seen[n.name] == 1}

        names_b = unique_names(self.gb)
        for name, a in unique_names(self.ga).items():
            b = names_b.get(name)
            if b is not None and a not in self.a2b and b not in self.b2a:
                self.pair(a, b, "name")
        gb = self.gb
        for node in self.ha.order:
            if node.id in self.a2b:
                continue
            for value in node.outputs:
                other = gb.producer(value) if value else None
                if (
                    other is not None
                    and other.id not in self.b2a
                    and (other.op_type, other.domain) == (node.op_type, node.domain)
                ):
                    self.pair(node.id, other.id, "value name")
                    break

    def _propagate(self) -> None:
        """From matched values to their unmatched producers and consumers of the same op type."""
        ga, gb = self.ga, self.gb
        while self._work:
            va, vb = self._work.pop()
            pa, pb = ga.producer(va), gb.producer(vb)
            if (
                pa is not None
                and pb is not None
                and pa.id not in self.a2b
                and pb.id not in self.b2a
                and (pa.op_type, pa.domain) == (pb.op_type, pb.domain)
                and pa.outputs.index(va) == pb.outputs.index(vb)
            ):
                self.pair(pa.id, pb.id, "neighbours")
            users_a: dict[tuple, list[int]] = defaultdict(list)
            users_b: dict[tuple, list[int]] = defaultdict(list)
            for c, slot in ga.uses(va):
                if c.id not in self.a2b:
                    users_a[(c.op_type, c.domain, slot)].append(c.id)
            if not users_a:
                continue
            for c, slot in gb.uses(vb):
                if c.id not in self.b2a:
                    users_b[(c.op_type, c.domain, slot)].append(c.id)
            for key, ids_a in users_a.items():
                ids_b = users_b.get(key)
                if not ids_b:
                    continue
                if len(ids_a) == len(ids_b) == 1:
                    self.pair(ids_a[0], ids_b[0], "neighbours")
                    continue
                self._pair_group(ids_a, ids_b)

    def _pair_group(self, ids_a: list[int], ids_b: list[int]) -> None:
        """Several same-type consumers of one value: pair equal attributes, then by order."""
        left_b = sorted(ids_b, key=self.hb.index.__getitem__)
        for a in sorted(ids_a, key=self.ha.index.__getitem__):
            attrs = self.ha.canon[a]
            for b in left_b:
                if self.hb.canon[b] == attrs:
                    self.pair(a, b, "neighbours")
                    left_b.remove(b)
                    break

    def _sweep(self, order: list[Node], upstream: bool) -> None:
        """Leftovers: a node of the same op type near the same matched ancestors (descendants)."""
        for node in order:
            if node.id in self.a2b:
                continue
            anchors = self._anchors(self.ga, node, self.a2b, upstream)
            if not anchors:
                continue
            score: Counter = Counter()
            depth: dict[int, int] = {}
            for anchor in anchors:
                for cand, d in self._near(self.gb.node(anchor), node, upstream):
                    score[cand] += 1
                    depth[cand] = min(depth.get(cand, d), d)
            kinds = self._kinds(self.ga, node)
            ranked = []
            for cand in score:
                other = self.gb.node(cand)
                if self._kinds(self.gb, other) != kinds:
                    continue
                shared = self._shared(node, other)
                # a candidate next to the anchor is evidence enough (a removed node in between);
                # farther away it must also read something the same (a weight, a matched value)
                if depth[cand] > 1 and shared == 0:
                    continue
                ranked.append(((shared, score[cand], -depth[cand], -self.hb.index[cand]), cand))
            if ranked:
                self.pair(node.id, max(ranked)[1], "neighbours")
                self._propagate()

    def _kinds(self, graph: Graph, node: Node) -> tuple[str, ...]:
        """Per input slot: absent, a constant (initializer or Constant op), or a computed value."""
        kinds = []
        for value in node.inputs:
            if not value:
                kinds.append("")
                continue
            producer = graph.producer(value)
            constant = producer.op_type == "Constant" if producer is not None else value not in graph.inputs or value in graph.initializers
            kinds.append("c" if constant else "v")
        return tuple(kinds)

    def _shared(self, a: Node, b: Node) -> int:
        """Input slots that read the same thing (same constant content, or matched values)."""
        return sum(
            1 for va, vb in zip(a.inputs, b.inputs)
            if va and vb and self.token_a(va) == self.token_b(vb)
        )

    def _neighbours(self, graph: Graph, node: Node, upstream: bool) -> list[Node]:
        if upstream:
            found = [graph.producer(v) for v in node.inputs]
            return [p for p in found if p is not None]
        return [c for v in node.outputs for c in graph.consumers(v)]

    def _anchors(self, graph: Graph, node: Node, matched: dict[int, int], upstream: bool) -> set[int]:
        """Matched nodes (as ids of the other graph) within _RADIUS hops through unmatched ones."""
        anchors: set[int] = set()
        frontier, seen = [node], {node.id}
        for _ in range(_RADIUS):
            nxt = []
            for n in frontier:
                for m in self._neighbours(graph, n, upstream):
                    if m.id in seen or len(seen) > _MAX_VISIT:
                        continue
                    seen.add(m.id)
                    if m.id in matched:
                        anchors.add(matched[m.id])
                    else:
                        nxt.append(m)
            frontier = nxt
        return anchors

    def _near(self, anchor: Node, like: Node, upstream: bool) -> Iterable[tuple[int, int]]:
        """Unmatched B nodes of ``like``'s op type within _RADIUS hops of ``anchor`` (away from it)."""
        frontier, seen = [anchor], {anchor.id}
        for d in range(1, _RADIUS + 1):
            nxt = []
            for n in frontier:
                for m in self._neighbours(self.gb, n, not upstream):
                    if m.id in seen or m.id in self.b2a or len(seen) > _MAX_VISIT:
                        continue
                    seen.add(m.id)
                    if (m.op_type, m.domain) == (like.op_type, like.domain):
                        yield m.id, d
                    nxt.append(m)
            frontier = nxt

    def _same_inputs(self) -> None:
        """A leftover reading exactly what one leftover of the other side reads: an op change."""
        index: dict[tuple, list[int]] = defaultdict(list)
        for node in self.hb.order:
            if node.id not in self.b2a:
                key = tuple(self.token_b(v) for v in node.inputs)
                if any(t[0] != "none" for t in key):
                    index[key].append(node.id)
        for node in self.ha.order:
            if node.id in self.a2b:
                continue
            key = tuple(self.token_a(v) for v in node.inputs)
            cands = [b for b in index.get(key, ()) if b not in self.b2a]
            if len(cands) == 1 and len(self.gb.node(cands[0]).outputs) == len(node.outputs):
                self.pair(node.id, cands[0], "same inputs")

    # -- classification

    def node_changes(self, a: Node, b: Node) -> list[dict[str, Any]]:
        details: list[dict[str, Any]] = []
        if (a.op_type, a.domain) != (b.op_type, b.domain):
            details.append({"what": "op_type", "old": _qualified(a), "new": _qualified(b)})
        ca, cb = self.ha.canon[a.id], self.hb.canon[b.id]
        for key in sorted(set(ca) | set(cb)):
            if ca.get(key) == cb.get(key):
                continue
            old, new = self.ha.attrs[a.id].get(key), self.hb.attrs[b.id].get(key)
            entry: dict[str, Any] = {
                "what": "attribute",
                "name": key,
                "old": None if key not in ca else format_value(old),
                "new": None if key not in cb else format_value(new),
            }
            if isinstance(old, TensorProto) and isinstance(new, TensorProto):
                entry.update(value_change(numpy_helper.to_array(old), numpy_helper.to_array(new)))
            details.append(entry)
        ins_a, ins_b = a.inputs, b.inputs
        for slot in range(max(len(ins_a), len(ins_b))):
            va = ins_a[slot] if slot < len(ins_a) else ""
            vb = ins_b[slot] if slot < len(ins_b) else ""
            if self.token_a(va) == self.token_b(vb):
                continue
            const_a = self.ga.const(va) if va else None
            const_b = self.gb.const(vb) if vb else None
            if const_a is not None and const_b is not None:
                if _same_array(const_a, const_b):
                    continue  # e.g. a Constant node became an initializer: the value is what counts
                both_init = self._initializer(self.ga, va) is not None and self._initializer(self.gb, vb) is not None
                entry = {"what": "initializer" if both_init else "constant", "slot": slot, "old": va, "new": vb}
                entry.update(value_change(const_a, const_b))
                details.append(entry)
            else:
                details.append({"what": "input", "slot": slot, "old": va or None, "new": vb or None})
        if len(a.outputs) != len(b.outputs):
            details.append({"what": "outputs", "old": len(a.outputs), "new": len(b.outputs)})
        return details

    @staticmethod
    def _initializer(graph: Graph, value: str) -> Tensor | None:
        g: Graph | None = graph
        while g is not None and value:
            if value in g.initializers:
                return g.initializers[value]
            if g.producer(value) is not None or value in g.inputs:
                return None
            g = g.parent
        return None

    def graph_changes(self, main: bool) -> list[dict[str, Any]]:
        ga, gb = self.ga, self.gb
        changes: list[dict[str, Any]] = []
        out_pairs, outs_a, outs_b = pair_names(list(ga.outputs), list(gb.outputs), main)
        for kind, pairs, only_a, only_b in (
            ("input", self.input_pairs, self.inputs_only_a, self.inputs_only_b),
            ("output", out_pairs, outs_a, outs_b),
        ):
            for va, vb in pairs:
                if main and va != vb:
                    changes.append({"what": f"{kind} renamed", "old": va, "new": vb})
                ta, tb = type_string(ga, va), type_string(gb, vb)
                if ta != tb:
                    changes.append({"what": f"{kind} type", "name": vb, "old": ta, "new": tb})
            changes += [{"what": f"{kind} removed", "name": v, "type": type_string(ga, v)} for v in only_a]
            changes += [{"what": f"{kind} added", "name": v, "type": type_string(gb, v)} for v in only_b]
        return changes + self._initializer_changes()

    def _initializer_changes(self) -> list[dict[str, Any]]:
        """Initializers no node reads. Used ones show up in their consumers' changes; unused
        ones would go unnoticed: dead weight that appeared, disappeared, or was left behind."""
        ga, gb = self.ga, self.gb
        unused_a = {n: self.ha.init_key(n) for n in ga.initializers if not ga.uses(n) and not ga.is_output(n)}
        unused_b = {n: self.hb.init_key(n) for n in gb.initializers if not gb.uses(n) and not gb.is_output(n)}
        if not unused_a and not unused_b:
            return []
        all_a = Counter(self.ha.init_key(n) for n in ga.initializers)
        all_b = Counter(self.hb.init_key(n) for n in gb.initializers)
        still_unused = Counter(unused_a.values())
        changes: list[dict[str, Any]] = []
        for name, key in unused_b.items():
            if all_b[key] > all_a[key]:
                all_b[key] -= 1
                changes.append({"what": "unused initializer added", "name": name})
            elif still_unused[key] > 0:
                still_unused[key] -= 1
            else:
                changes.append({"what": "initializer no longer used", "name": name})
        for name, key in unused_a.items():
            if all_a[key] > all_b[key]:
                all_a[key] -= 1
                changes.append({"what": "unused initializer removed", "name": name})
        return changes


def _same_array(x: np.ndarray, y: np.ndarray) -> bool:
    return x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x, y, equal_nan=x.dtype.kind in "fc")


def _qualified(node: Node) -> str:
    return f"{node.domain}::{node.op_type}" if node.domain not in ("", "ai.onnx") else node.op_type


# ---------------------------------------------------------------------------------- driver


def _whole(graph: Graph, scope: str, change: str) -> list[GraphDiff]:
    """A graph present on one side only: every node (and nested subgraph) added or removed."""
    gd = GraphDiff(scope, graph if change == REMOVED else None, graph if change == ADDED else None)
    out = [gd]
    for node in graph.topological_order():
        side = {"a": node, "b": None} if change == REMOVED else {"a": None, "b": node}
        gd.nodes.append(NodeDiff(change, scope, **side))
        out += _owned_whole(node, scope, change)
    return out


def _owned_whole(node: Node, scope: str, change: str) -> list[GraphDiff]:
    out: list[GraphDiff] = []
    for key, k, sub in _subgraph_attrs(node):
        out += _whole(sub, _sub_scope(scope, node, key, k), change)
    return out


def _subgraph_attrs(node: Node) -> list[tuple[str, int, Graph]]:
    found: list[tuple[str, int, Graph]] = []
    for key, value in node.attrs.items():
        if isinstance(value, Graph):
            found.append((key, 0, value))
        elif isinstance(value, list) and value and isinstance(value[0], Graph):
            found.extend((key, k, sub) for k, sub in enumerate(value))
    return found


def _sub_scope(scope: str, owner: Node, key: str, k: int) -> str:
    suffix = f"[{k}]" if k else ""
    return f"{scope}/{owner.op_type}({describe(owner)}).{key}{suffix}"


def diff_graphs(ga: Graph, gb: Graph, scope: str = "main", main: bool = True, parent: _Match | None = None) -> list[GraphDiff]:
    """Diff two graphs (and, recursively, the subgraphs of their matched nodes)."""
    m = _Match(ga, gb, by_name=main, parent=parent)
    m.run()
    gd = GraphDiff(scope, ga, gb, matches=dict(m.a2b), matched_by=m.how)
    gd.graph_changes = m.graph_changes(main)
    nested: list[GraphDiff] = []
    position_b = m.hb.index
    placed: list[tuple[float, NodeDiff]] = []
    for node in m.hb.order:
        a_id = m.b2a.get(node.id)
        if a_id is None:
            placed.append((position_b[node.id], NodeDiff(ADDED, scope, None, node)))
            nested += _owned_whole(node, scope, ADDED)
            continue
        a = ga.node(a_id)
        details = m.node_changes(a, node)
        if details:
            placed.append((position_b[node.id], NodeDiff(CHANGED, scope, a, node, details)))
        else:
            gd.unchanged += 1
        nested += _diff_owned(a, node, scope, m)
    for node in m.ha.order:
        if node.id in m.a2b:
            continue
        before = [m.a2b[p.id] for p in (ga.producer(v) for v in node.inputs) if p is not None and p.id in m.a2b]
        where = max((position_b[b] for b in before), default=-1) + 0.5
        placed.append((where, NodeDiff(REMOVED, scope, node, None)))
        nested += _owned_whole(node, scope, REMOVED)
    placed.sort(key=lambda item: item[0])
    gd.nodes = [nd for _, nd in placed]
    return [gd, *nested]


def _diff_owned(a: Node, b: Node, scope: str, m: _Match) -> list[GraphDiff]:
    subs_a = {(key, k): sub for key, k, sub in _subgraph_attrs(a)}
    subs_b = {(key, k): sub for key, k, sub in _subgraph_attrs(b)}
    out: list[GraphDiff] = []
    for key, k in sorted(set(subs_a) | set(subs_b)):
        where = _sub_scope(scope, b, key, k)
        if (key, k) not in subs_b:
            out += _whole(subs_a[(key, k)], where, REMOVED)
        elif (key, k) not in subs_a:
            out += _whole(subs_b[(key, k)], where, ADDED)
        else:
            out += diff_graphs(subs_a[(key, k)], subs_b[(key, k)], where, main=False, parent=m)
    return out


def _model_changes(a: Model, b: Model) -> list[dict[str, Any]]:
    changes: list[dict[str, Any]] = []
    if a.ir_version != b.ir_version:
        changes.append({"what": "ir_version", "old": a.ir_version, "new": b.ir_version})
    oa, ob = a.opset_imports, b.opset_imports
    for domain in sorted(set(oa) | set(ob)):
        if oa.get(domain) != ob.get(domain):
            changes.append({"what": "opset", "domain": domain or "ai.onnx", "old": oa.get(domain), "new": ob.get(domain)})
    pa, pb = a.proto_shell, b.proto_shell
    for fld in ("producer_name", "producer_version", "domain", "model_version", "doc_string"):
        if getattr(pa, fld) != getattr(pb, fld):
            changes.append({"what": fld, "old": getattr(pa, fld), "new": getattr(pb, fld)})
    ma = {p.key: p.value for p in pa.metadata_props}
    mb = {p.key: p.value for p in pb.metadata_props}
    for key in sorted(set(ma) | set(mb)):
        if ma.get(key) != mb.get(key):
            changes.append({"what": "metadata", "key": key, "old": ma.get(key), "new": mb.get(key)})
    return changes


def diff(a: Model, b: Model) -> DiffResult:
    """Match and compare two models (see the module docstring for how nodes are matched)."""
    graphs = diff_graphs(a.graph, b.graph)
    changes = _model_changes(a, b)
    funcs_a = {fn.key: fn for fn in a.functions}
    funcs_b = {fn.key: fn for fn in b.functions}
    for key in sorted(set(funcs_a) | set(funcs_b)):
        scope = f"function {key[0]}:{key[1]}" + (f":{key[2]}" if key[2] else "")
        if key not in funcs_b:
            changes.append({"what": "function removed", "name": scope})
            graphs += _whole(funcs_a[key].body, scope, REMOVED)
        elif key not in funcs_a:
            changes.append({"what": "function added", "name": scope})
            graphs += _whole(funcs_b[key].body, scope, ADDED)
        else:
            graphs += diff_graphs(funcs_a[key].body, funcs_b[key].body, scope, main=False)
    return DiffResult(a, b, graphs, changes)


# ---------------------------------------------------------------------------------- text


def detail_text(d: dict[str, Any]) -> str:
    what = d["what"]
    if what in ("initializer", "constant"):
        shape = "x".join(map(str, d["shape_new"])) or "scalar"
        if d["shape_old"] != d["shape_new"]:
            shape = ("x".join(map(str, d["shape_old"])) or "scalar") + " -> " + shape
        delta = f", max |diff| {d['max_abs_diff']:.4g}" if isinstance(d["max_abs_diff"], float) else ""
        return f"{what} in slot {d['slot']} ({d['new']}) values changed: {shape}{delta}"
    if what == "input":
        return f"input {d['slot']}: {d['old'] or '(none)'} -> {d['new'] or '(none)'}"
    if what == "attribute":
        text = f"{d['name']}: {d['old'] if d['old'] is not None else '(unset)'} -> {d['new'] if d['new'] is not None else '(unset)'}"
        if d.get("max_abs_diff") is not None:
            text += f" (max |diff| {d['max_abs_diff']})"
        return text
    if what in ("op_type", "outputs"):
        return f"{what}: {d['old']} -> {d['new']}"
    return ", ".join(f"{k}={v}" for k, v in d.items())


def change_text(d: dict[str, Any]) -> str:
    """One line for a graph- or model-level change."""
    what = d["what"]
    rest = {k: v for k, v in d.items() if k != "what"}
    if "old" in rest and "new" in rest:
        label = rest.get("name") or rest.get("key") or rest.get("domain") or ""
        label = f" {label}" if label else ""
        return f"{what}{label}: {rest['old']} -> {rest['new']}"
    return what + " " + " ".join(str(v) for v in rest.values())


def format_diff(result: DiffResult, label_a: str = "A", label_b: str = "B", limit: int = 200) -> str:
    """The human summary: counts, graph-level changes, then one line per changed node."""
    c = result.counts
    lines = [
        f"A: {label_a} ({result.a.node_count()} nodes)",
        f"B: {label_b} ({result.b.node_count()} nodes)",
    ]
    if result.equal:
        lines.append(f"no differences ({c['unchanged']} nodes matched)")
        return "\n".join(lines)
    lines.append(
        f"{c[REMOVED]} removed, {c[ADDED]} added, {c[CHANGED]} changed, {c['unchanged']} unchanged; "
        f"{c['graph_changes']} graph-level change{'s' if c['graph_changes'] != 1 else ''}"
    )
    if result.model_changes:
        lines.append("model:")
        lines += [f"  * {change_text(d)}" for d in result.model_changes]
    shown = 0
    for g in result.graphs:
        if not g.nodes and not g.graph_changes:
            continue
        lines.append(f"{g.scope}:")
        lines += [f"  * {change_text(d)}" for d in g.graph_changes]
        for nd in g.nodes:
            if shown >= limit:
                break
            shown += 1
            mark = {ADDED: "+", REMOVED: "-", CHANGED: "~"}[nd.change]
            node = nd.node
            head = f"  {mark} {_qualified(node)} {describe(node)}"
            if nd.change != CHANGED:
                lines.append(f"{head} ({nd.change})")
                continue
            lines.append(head + ": " + "; ".join(detail_text(d) for d in nd.details))
    total = sum(len(g.nodes) for g in result.graphs)
    if total > shown:
        lines.append(f"... {total - shown} more node changes (use --format json for all)")
    return "\n".join(lines)
