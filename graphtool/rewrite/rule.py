"""A rule = a pattern + a check + a replacement; ``RulePass`` runs a family of rules as a pass.

The check says, in words, what a pattern cannot (shapes agree, a constant is 1/sqrt(d), a mask
has a rank the kernel takes); it returns None to accept or the reason it refuses. The
replacement builds the new nodes with ``Rewrite.add`` and returns the value that takes the
place of the root's output. The engine then does what every fusion would otherwise repeat:
reroute readers (the root's output keeps its name and value_info), remove the matched nodes
nothing reads any more, drop constants left unread, and record provenance and, for
``--explain``, why each candidate did or did not fuse.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, Callable, ClassVar

import numpy as np

from graphtool.ir.graph import Graph, Node
from graphtool.pass_manager import Pass, PassContext, PassResult
from graphtool.rewrite.match import Match, Matcher, label
from graphtool.rewrite.naming import Namer
from graphtool.rewrite.pattern import Pattern, required_types, root_types

Check = Callable[[Match], "str | None"]


@dataclass
class Rule:
    """One fusion variant. ``name`` is what ``--explain`` and the pass stats call it."""

    name: str
    pattern: Pattern
    replace: Callable[[Match, "Rewrite"], str]
    check: Check | None = None
    emits: str = ""  # the op type the replacement writes: fused nodes are named after it

    @property
    def anchors(self) -> tuple[str, ...]:
        """The op types a match can start at (the pattern's root)."""
        return root_types(self.pattern)

    @cached_property
    def needs(self) -> list[frozenset[str]]:
        return required_types(self.pattern)

    def possible(self, graph: Graph) -> bool:
        """False when the graph lacks an op every match needs (the rule then costs nothing)."""
        return all(any(graph.has_op(t) for t in types) for types in self.needs)


class Rewrite:
    """What a replacement may do: add nodes near the match, under a name from its scope."""

    def __init__(self, graph: Graph, ctx: PassContext, match: Match, namer: Namer, op_type: str):
        self.graph, self.ctx, self.match = graph, ctx, match
        self.name = namer(match.nodes, op_type, fallback=match.root.name)  # unscoped: the node it stands for
        self.op_type = op_type
        self.near = min(match.nodes, key=lambda n: n.order)
        self.added: list[Node] = []
        self.taken: dict[str, str] = {}  # a value inside the match -> the new output that takes its place

    def take_over(self, value: str) -> str:
        """A name for a new node's output that stands in for ``value``, a matched value outside
        readers may still read (SkipLayerNormalization's sum output): after the commit they
        read it, and it carries ``value``'s name."""
        self.taken[value] = self.graph.fresh_name(f"{value}_fused")
        return self.taken[value]

    def add(self, op_type: str, inputs: list[str], outputs: int | list[str] = 1, attrs: dict[str, Any] | None = None,
            domain: str = "", suffix: str = "") -> Node:
        """Add a node near the match, named after it (``suffix`` tells several apart)."""
        name = f"{self.name}/{suffix}" if suffix else self.name
        if name and suffix:  # a replacement may add several nodes of one suffix (a "dim" per shape reader)
            used = {n.name for n in self.added}
            base, k = name, 1
            while name in used:
                name, k = f"{base}_{k}", k + 1
        node = self.graph.add_node(op_type, inputs, outputs, attrs or {}, domain=domain, name=name, near=self.near)
        self.added.append(node)
        return node

    def initializer(self, array: Any, hint: str) -> str:
        """A new initializer holding ``array``; returns its name."""
        return self.graph.add_initializer(array, f"{self.name or 'fused'}_{hint}")


def apply(graph: Graph, ctx: PassContext, rules: list[Rule], facts: Any = None, pass_name: str = "") -> dict[str, int]:
    """Try every rule at every node of its anchor type; returns fusions per rule."""
    matcher = Matcher(graph, facts, ctx, ctx.opset(""))
    namer = Namer(graph)
    counts = {rule.name: 0 for rule in rules}
    explain = _explaining(ctx, pass_name, rules)
    for rule in rules:
        if not (explain and rule.name in explain) and not rule.possible(graph):
            continue
        for root in [n for t in rule.anchors for n in graph.nodes(t)]:
            if not graph.has_node(root):
                continue
            match = _first_accepted(matcher, rule, root)
            if match is None:
                if explain and rule.name in explain and matcher.refusal is not None:
                    _note(ctx, pass_name, rule, root, matcher.refusal.depth, matcher.refusal.reason)
                continue
            if explain and rule.name in explain:  # before the commit removes the root
                _note(ctx, pass_name, rule, root, len(match.nodes), "fused", fused=True)
            _commit(graph, ctx, rule, match, namer)
            counts[rule.name] += 1
    return counts


def _first_accepted(matcher: Matcher, rule: Rule, root: Node) -> Match | None:
    for match in matcher.matches(rule.pattern, root):
        why = (rule.check(match) if rule.check is not None else None) or match.unanswered_shape_reader()
        if not why:
            return match
        matcher.refuse(match, why)
    return None


def _commit(graph: Graph, ctx: PassContext, rule: Rule, match: Match, namer: Namer) -> None:
    root_out = match.root.outputs[0]
    info = graph.value_info.get(root_out)
    rewrite = Rewrite(graph, ctx, match, namer, rule.emits or rule.name)
    new_value = rule.replace(match, rewrite)
    constants = [v for v in match.binds.values() if graph.const(v) is not None]
    absorbed = [n.name for n in reversed(match.nodes)]  # producers first, as the graph reads
    graph.replace_all_uses(root_out, new_value)
    for old, new in rewrite.taken.items():
        graph.replace_all_uses(old, new)
    graph.remove_nodes([match.root])  # the root is what the replacement stands for
    _answer_shape_readers(graph, match, rewrite)
    _remove_dead(graph, match.nodes[1:], set(rewrite.taken))
    for old, new in rewrite.taken.items():
        kept = graph.value_info.get(old)
        graph.rename_value(new, old)
        if kept is not None:
            graph.set_value_info(old, kept)
    producer = graph.producer(new_value)
    if producer is not None and producer in rewrite.added:
        graph.rename_value(new_value, root_out)  # readers and graph outputs keep the old name
        if info is not None:
            graph.set_value_info(root_out, info)
    elif graph.is_output(root_out):  # the replacement is a value that already existed
        rewrite.add("Identity", [new_value], [root_out], suffix="out")
    for node in rewrite.added:
        if node.name == rewrite.name:
            ctx.absorbed(node, absorbed)
    _drop_unread_constants(graph, constants)


def _answer_shape_readers(graph: Graph, match: Match, rewrite: Rewrite) -> None:
    """A Shape of a value inside the match would keep the matched nodes alive just for their
    shape: read the proven dims (``Match.dims``) from the values that outlive the match instead."""
    for value, pieces in match.dims.items():
        for reader in [u for u, _ in graph.uses(value) if u.op_type == "Shape" and u not in rewrite.added]:
            start, end = reader.attr("start", 0), reader.attr("end", len(pieces))
            shape, old = _shape_of(rewrite, pieces[slice(start, end)]), reader.outputs[0]
            graph.remove_nodes([reader])
            if graph.producer(shape) in rewrite.added:
                graph.rename_value(shape, old)  # readers and graph outputs keep the old name
            else:
                rewrite.add("Identity", [shape], [old], suffix="shape")


def _shape_of(rw: Rewrite, pieces: list[Any]) -> str:
    """A 1-D int64 tensor of the pieces: constants, and single dims of other values' shapes."""
    if not pieces or all(isinstance(p, int) for p in pieces):
        return rw.initializer(np.array(pieces, np.int64), "shape")
    parts = []
    for piece in pieces:
        if isinstance(piece, int):
            parts.append(rw.initializer(np.array([piece], np.int64), "dim"))
        elif rw.ctx.opset("") >= 15:
            value, axis = piece
            parts.append(rw.add("Shape", [value], attrs={"start": axis, "end": axis + 1}, suffix="dim").outputs[0])
        else:
            value, axis = piece
            shape = rw.add("Shape", [value], suffix="shape").outputs[0]
            index = rw.initializer(np.array([axis], np.int64), "axis")
            parts.append(rw.add("Gather", [shape, index], attrs={"axis": 0}, suffix="dim").outputs[0])
    if len(parts) == 1:
        return parts[0]
    return rw.add("Concat", parts, attrs={"axis": 0}, suffix="shape").outputs[0]


def _remove_dead(graph: Graph, nodes: list[Node], taken: set[str] = frozenset()) -> None:
    """Remove the matched nodes no one reads any more (a shared node, or one a Shape still
    reads, stays); readers come before producers in ``nodes``, so one sweep usually does.
    A graph output the replacement took over (``taken``) no longer keeps its producer."""
    pending = list(nodes)
    while pending:
        dead = [n for n in pending if graph.has_node(n) and not any(
            graph.uses(o) or (graph.is_output(o) and o not in taken) for o in n.outputs if o)]
        if not dead:
            return
        graph.remove_nodes(dead)
        pending = [n for n in pending if graph.has_node(n)]


def _drop_unread_constants(graph: Graph, values: list[str]) -> None:
    for value in dict.fromkeys(values):
        if not graph.has_value(value) or graph.uses(value) or graph.is_output(value) or graph.is_input(value):
            continue
        if graph.is_initializer(value):
            graph.remove_initializer(value)
        else:
            producer = graph.producer(value)
            if producer is not None and producer.op_type == "Constant":
                graph.remove_nodes([producer])


def _explaining(ctx: PassContext, pass_name: str, rules: list[Rule]) -> set[str]:
    wanted = getattr(ctx, "explain", None) or set()
    if pass_name in wanted:
        return {r.name for r in rules}
    return {r.name for r in rules if r.name in wanted}


def _note(ctx: PassContext, pass_name: str, rule: Rule, root: Node, depth: int, reason: str, fused: bool = False) -> None:
    key = (rule.name, root.name or f"#{root.id}")
    book: dict = ctx.explanations
    if key in book and book[key]["fused"]:
        return  # a later iteration cannot un-fuse it
    book[key] = {"pass": pass_name, "rule": rule.name, "node": label(root), "fused": fused, "depth": depth,
                 "reason": reason}


class RulePass(Pass):
    """A pass made of rules. Subclasses list ``rules`` and may override ``facts`` and ``applies``.

    Stats are ``fused`` and ``rule:<name>`` counts, or, with ``stat_keys`` (rule name → key),
    the keys a pass reported before it was written as rules.
    """

    rules: ClassVar[tuple[Rule, ...]] = ()
    stat_keys: ClassVar[dict[str, str]] = {}

    def applies(self, graph: Graph, ctx: PassContext) -> bool:
        """Whether the rules run on this graph at all (default: yes)."""
        return True

    def facts(self, graph: Graph, ctx: PassContext) -> Any:
        """What the checks may ask besides the match (shapes...), per graph."""
        return None

    def run(self, graph: Graph, ctx: PassContext) -> PassResult:
        explaining = _explaining(ctx, self.name, list(self.rules))
        rules = [r for r in self.rules if r.name in explaining or r.possible(graph)]
        counts = apply(graph, ctx, rules, self.facts(graph, ctx), self.name) if rules and self.applies(graph, ctx) else {}
        return PassResult(any(counts.values()), self.stats(counts))

    def stats(self, counts: dict[str, int]) -> dict[str, int]:
        """The report's stats from fusions per rule."""
        if self.stat_keys:
            keyed = dict.fromkeys(self.stat_keys.values(), 0)
            for rule, n in counts.items():
                keyed[self.stat_keys[rule]] += n
            return keyed
        return {"fused": sum(counts.values()), **{f"rule:{k}": v for k, v in counts.items() if v}}
