"""Matching the nodes of two graphs: structural hashes, then names, then neighbours.

See graphtool.diff.run's docstring for the phases and why structure goes before names; the hashes
(and the value ids the pair checks read) are graphtool.diff.hashes's. ``Matcher``
pairs the nodes of one pair of graphs (``diff_changes`` then says how each pair differs);
graphtool.diff.run drives it over the main graph, subgraphs and functions.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any, Callable, Iterable

import numpy as np

from graphtool.diff.hashes import NONE, Hashes
from graphtool.ir.graph import Graph, Node

_RADIUS = 10  # hops through unmatched nodes when looking for a leftover's matched neighbours
_MAX_VISIT = 64  # nodes one such local search may look at (keeps high fan-out values cheap)


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


def _read_at(h: Hashes, node_id: int, slot: int, by_name: Callable[[str], tuple]) -> tuple[tuple | None, int, int]:
    """What input ``slot`` of op ``node_id`` reads: its token when that needs no pairing (nothing,
    a source, a Constant's output), else None with the value's id and its producer's id."""
    feed = h.feeds[node_id]
    vid = feed[slot] if slot < len(feed) else NONE
    if vid == NONE:
        return ("none",), vid, -1
    producer = h.producers[vid]
    if producer < 0:  # a source: an initializer's key is at hand, the rest asks by name
        key = h.init_keys.get(vid)
        return (("init", key) if key is not None else by_name(h.names[vid])), vid, producer
    constant = h.constants.get(producer)
    return (("init", constant) if constant is not None else None), vid, producer


class Matcher:
    """Matches the nodes of one pair of graphs and classifies them."""

    def __init__(self, ga: Graph, gb: Graph, by_name: bool, parent: "Matcher | None" = None):
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
        self.ha = Hashes(ga, tokens_a, parent.ha if parent else None)
        self.hb = Hashes(gb, tokens_b, parent.hb if parent else None)
        self.a2b: dict[int, int] = {}
        self.b2a: dict[int, int] = {}
        self.how: Counter = Counter()
        self._seen_values: set[tuple[str, str]] = set()
        self._work: list[tuple[str, str]] = []
        self._holding = False  # the values of new pairs wait to be queued (``run``)

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

    def token_a_at(self, node_id: int, slot: int) -> tuple:
        """``token_a`` of what input ``slot`` of op ``node_id`` of side a reads, from the value ids
        of ``Hashes.feeds``: a produced value's producer without a lookup by name (issue 19)."""
        ha = self.ha
        token, vid, producer = _read_at(ha, node_id, slot, self.token_a)
        if token is not None:
            return token
        b = self.a2b.get(producer)
        if b is None:
            return ("a", ha.names[vid])
        hb = self.hb
        other = hb.first_out[b] + vid - ha.first_out[producer]  # the same output slot of b
        if other < len(hb.producers) and hb.producers[other] == b and other not in hb.omitted:
            return ("v", hb.names[other])
        return ("a", ha.names[vid])

    def token_b_at(self, node_id: int, slot: int) -> tuple:
        """``token_b`` of input ``slot`` of op ``node_id`` of side b (see ``token_a_at``)."""
        token, vid, _ = _read_at(self.hb, node_id, slot, self.token_b)
        return token if token is not None else ("v", self.hb.names[vid])

    # -- phases

    def pair(self, a: int, b: int, how: str) -> None:
        self.a2b[a], self.b2a[b] = b, a
        self.how[how] += 1
        if not self._holding:
            self._push_values(a, b)

    def _push_values(self, a: int, b: int) -> None:
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
        """The phases in order, until one side has no unmatched node left (every phase pairs
        unmatched nodes of both sides, so nothing after could change the result): a graph
        against an unchanged or a purely grown copy stops after the structural hashes."""
        ha = self.ha
        size_a, size_b = len(self.ga), len(self.gb)

        def complete() -> bool:
            return len(self.a2b) == size_a or len(self.b2a) == size_b

        # the values of the pairs the first phases make are queued for propagation only if it runs
        # (then from ``a2b``, which holds those pairs in the order they were made: no list of a
        # million pairs kept on the side for a diff that stops here)
        self._holding = True
        for phase in (
            lambda: self._by_unique_key(lambda h: h.forward),
            lambda: self._by_key(lambda h, n: (h.forward[n], h.backward[n])),
            lambda: self._by_unique_key(lambda h: h.backward),
            self._by_names,
        ):
            if complete():
                return
            phase()
        if complete():
            return
        self._holding = False
        for a, b in list(self.a2b.items()):
            self._push_values(a, b)
        for va, vb in self.input_pairs:
            self._push(va, vb)
        for va, vb in pair_names(list(self.ga.outputs), list(self.gb.outputs), self.parent is None)[0]:
            self._push(va, vb)
        self._propagate()
        self._sweep(ha.order, upstream=True)
        self._sweep(ha.order[::-1], upstream=False)
        self._same_inputs()

    def _by_key(self, key: Callable[[Hashes, int], Any]) -> None:
        """Pair the unmatched nodes of equal ``key``, in order within each key."""
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
            if not ids_b:
                continue
            for a, b in zip(ids_a, ids_b):
                self.pair(a, b, "structure")

    def _by_unique_key(self, table: Callable[[Hashes], Any]) -> None:
        """Pair the unmatched nodes whose hash (in ``table``: ``forward`` or ``backward``) is
        unique on both sides, in side a's order. Sorted with numpy, not counted in dicts: a dict
        of a million hashes is a million cache misses to fill and as many to read, which made
        this phase cost 14x at 10x the nodes (issue 19); a sort reads its arrays in order."""
        def once(hashes: Hashes, paired: dict[int, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            """The keys found once on this side (sorted), their ids, and their places in order."""
            ids = np.array([n.id for n in hashes.order if n.id not in paired], dtype=np.int64)
            keys = np.frombuffer(table(hashes), dtype=np.int64)[ids]
            sorted_keys, first, counts = np.unique(keys, return_index=True, return_counts=True)
            single = counts == 1
            return sorted_keys[single], ids[first[single]], first[single]

        keys_a, ids_a, places_a = once(self.ha, self.a2b)
        keys_b, ids_b, _ = once(self.hb, self.b2a)
        _, in_a, in_b = np.intersect1d(keys_a, keys_b, assume_unique=True, return_indices=True)
        by_place = np.argsort(places_a[in_a], kind="stable")
        for a, b in zip(ids_a[in_a][by_place].tolist(), ids_b[in_b][by_place].tolist()):
            self.pair(a, b, "structure")

    def _by_names(self) -> None:
        """Names unique on both sides pair unmatched nodes; then value names (optimizers keep them).

        Only names some unmatched node carries on both sides are counted over the graphs: most
        nodes matched by structure, and counting a million names to pair none cost a
        million-node diff 12% of its time (issue 19)."""
        def unmatched(order: list[Node], matched: dict[int, int]) -> dict[str, int]:
            return {n.name: n.id for n in order if n.id not in matched and n.name}

        left_a, left_b = unmatched(self.ha.order, self.a2b), unmatched(self.hb.order, self.b2a)
        wanted = left_a.keys() & left_b.keys()
        if wanted:
            def repeated(graph: Graph) -> set[str]:
                seen: Counter = Counter(name for name in (n.name for n in graph.nodes()) if name in wanted)
                return {name for name, count in seen.items() if count > 1}

            shared = wanted - repeated(self.ga) - repeated(self.gb)
            ga = self.ga
            for a in sorted((left_a[name] for name in shared), key=lambda i: ga.node(i).order):  # graph order
                b = left_b[ga.node(a).name]
                if a not in self.a2b and b not in self.b2a:
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
            attrs = self.ha.canon_key[a]
            for b in left_b:
                if self.hb.canon_key[b] == attrs:
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
