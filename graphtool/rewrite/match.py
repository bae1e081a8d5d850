"""The anchored matcher: does the subgraph above one node have a pattern's shape?

It walks producers only, backtracking over commutative operand orders, optional ops and
alternatives, so one candidate root costs O(pattern size × choices) — independent of the graph.
Every refusal is kept with how far the match had got; the furthest one is the answer to "why
did this not fuse?" (``--explain``): the deepest point is where pattern and graph part ways.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable, Iterator, Protocol

import numpy as np
import onnx

from graphtool.ir.graph import Graph, Node
from graphtool.rewrite.pattern import Either, OneOf, OpPattern, Optional, OutputOf, Pattern, Var

STANDARD = ("", "ai.onnx")
MAX_SOLUTIONS = 16  # complete matches tried per root before giving up (checks may refuse each)


class Facts(Protocol):
    """What the matcher may ask about a value's type (``passes._ort_common.Shapes`` is one)."""

    def rank(self, value: str) -> int | None: ...


@dataclass
class _State:
    binds: dict[str, str]
    nodes: dict[int, Node]  # id(op pattern) -> node
    order: list[Node]  # matched nodes, root first (discovery order)
    names: dict[str, Node]
    shared: frozenset[int] = frozenset()  # ids of nodes whose pattern lets outside readers in

    def with_node(self, pattern: OpPattern, node: Node) -> "_State":
        names = {**self.names, pattern.name: node} if pattern.name else self.names
        shared = self.shared | {node.id} if pattern.shared else self.shared
        order = self.order if any(n == node for n in self.order) else [*self.order, node]
        return _State(self.binds, {**self.nodes, id(pattern): node}, order, names, shared)

    def with_value(self, name: str, value: str) -> "_State":
        return _State({**self.binds, name: value}, self.nodes, self.order, self.names, self.shared)


@dataclass
class Match:
    """A complete match: bound values by name, bound nodes by name, and every matched node."""

    graph: Graph
    root: Node
    binds: dict[str, str]
    named: dict[str, Node]
    nodes: list[Node]
    facts: Any = None
    ctx: Any = None
    extra: dict[str, Any] = field(default_factory=dict)  # what a check learned, for the replacement
    # Shapes a check proved for values inside the match, a piece per dim: an int, or (value, axis)
    # of a value that outlives the match. The engine answers those values' Shape readers from them.
    dims: dict[str, list[Any]] = field(default_factory=dict)
    shared: frozenset[int] = frozenset()  # ids of matched nodes the pattern lets outside readers read

    def unanswered_shape_reader(self) -> str | None:
        """A Shape reading a value inside the match whose dims the check did not prove: the
        matched ops would stay in the graph for it and run beside the fused op."""
        inside = {n.id for n in self.nodes}
        for node in self.nodes[1:]:
            if node.id in self.shared:
                continue
            for out in node.outputs:
                for user in self.graph.consumers(out) if out and out not in self.dims else ():
                    if user.id not in inside and user.op_type == "Shape":
                        return f"'{out}' ({label(node)}) is read by {label(user)} and its shape is not proven"
        return None

    def __getitem__(self, name: str) -> str:
        return self.binds[name]

    def get(self, name: str) -> str | None:
        """The value bound to ``name``, or None."""
        return self.binds.get(name)

    def node(self, name: str) -> Node | None:
        """The node bound by ``_name=name`` in the pattern, or None."""
        return self.named.get(name)

    def const(self, name: str) -> np.ndarray | None:
        """The constant value bound to ``name`` as numpy, or None."""
        value = self.binds.get(name)
        return None if value is None else self.graph.const(value)

    def scalar(self, name: str) -> float | None:
        """The one-element constant bound to ``name`` as a float, or None."""
        array = self.const(name)
        if array is None or array.size != 1 or array.dtype.kind not in "fiub":
            return None
        number = float(array.reshape(-1)[0])
        return number if not np.isnan(number) else None


@dataclass
class Refusal:
    # matched op nodes when it failed: bigger = nearer a match. A node of the right op type that
    # fails an attribute or input constraint counts itself: that beats "the pattern has another op"
    # at the same place, so Softmax(axis=2) is explained by its axis, not by the alternatives.
    depth: int
    why: str | Callable[[], str]  # built only when someone reads it: most refusals never are
    check: bool = False  # a rule's check refused a complete match

    @property
    def reason(self) -> str:
        if callable(self.why):
            self.why = self.why()
        return self.why


def label(node: Node) -> str:
    return f"{node.op_type} '{node.name}'" if node.name else f"{node.op_type} #{node.id}"


@lru_cache(maxsize=None)
def _attr_default(op_type: str, domain: str, name: str, opset: int) -> Any:
    """The schema default of an attribute the node leaves out (e.g. Softmax axis: 1, then -1)."""
    try:
        schema = onnx.defs.get_schema(op_type, opset, domain if domain not in STANDARD else "")
    except Exception:
        return None
    attr = schema.attributes.get(name)
    if attr is None or not attr.default_value.name:
        return None
    value = onnx.helper.get_attribute_value(attr.default_value)
    return value.decode() if isinstance(value, bytes) else value


def _same(actual: Any, wanted: Any) -> bool:
    if isinstance(wanted, OneOf):
        return any(_same(actual, w) for w in wanted.values)
    if callable(wanted):
        return bool(wanted(actual))
    if isinstance(wanted, (list, tuple)):
        return actual is not None and list(actual) == list(wanted)
    return actual == wanted


class Matcher:
    """Matches patterns at candidate roots of one graph; keeps the best refusal of the last try."""

    def __init__(self, graph: Graph, facts: Facts | None = None, ctx: Any = None, opset: int = 0):
        self.graph = graph
        self.facts = facts
        self.ctx = ctx
        self.opset = opset
        self.refusal: Refusal | None = None

    # -------------------------------------------------------------- entry point

    def matches(self, pattern: Pattern, root: Node) -> Iterator[Match]:
        """Complete matches of ``pattern`` whose root is ``root`` (inside values read by the
        match only), at most ``MAX_SOLUTIONS`` of them."""
        self.refusal = None
        if not root.outputs:
            self._refuse(0, lambda: f"{label(root)} has no outputs")
            return
        start = _State({}, {}, [], {})
        for count, state in enumerate(self._value(pattern, root.outputs[0], start)):
            if count >= MAX_SOLUTIONS:
                return
            if not state.order or state.order[0] != root:
                continue
            leak = self._leak(state)
            if leak:
                self._refuse(len(state.order), leak)
                continue
            yield Match(self.graph, root, state.binds, state.names, state.order, self.facts, self.ctx,
                        shared=state.shared)

    def refuse(self, match: Match, reason: str) -> None:
        """A check's refusal of a complete match counts as the deepest failure there is: deeper than
        any alternative that failed on the way, even one that walked more ops before failing than
        the complete match has (a Var binding the value another alternative walked into: BLOOM's
        keys as a 4-D value vs a cache Concat of a head split). The first check's refusal stands."""
        if self.refusal is not None and self.refusal.check:
            return
        depth = max(len(match.nodes), self.refusal.depth if self.refusal is not None else 0) + 1
        self.refusal = Refusal(depth, lambda: f"check: {reason}", check=True)

    # -------------------------------------------------------------- internals

    def _refuse(self, depth: int, reason: str | Callable[[], str]) -> None:
        if self.refusal is None or depth > self.refusal.depth:
            self.refusal = Refusal(depth, reason)

    def _value(self, pattern: Pattern, value: str, st: _State) -> Iterator[_State]:
        if isinstance(pattern, Var):
            yield from self._var(pattern, value, st)
        elif isinstance(pattern, OpPattern):
            yield from self._op(pattern, value, st, 0)
        elif isinstance(pattern, OutputOf):
            yield from self._op(pattern.op, value, st, pattern.index)
        elif isinstance(pattern, Optional):
            yield from self._op(pattern.op, value, st, 0)
            yield from self._value(pattern.op.inputs[pattern.through], value, st)
        elif isinstance(pattern, Either):
            for option in pattern.options:
                yield from self._value(option, value, st)
        else:  # pragma: no cover - a new pattern kind without a matcher
            raise TypeError(f"unknown pattern element {pattern!r}")

    def _var(self, var: Var, value: str, st: _State) -> Iterator[_State]:
        depth = len(st.order)
        bound = st.binds.get(var.name)
        if bound is not None:
            if bound == value:
                yield st
            else:
                self._refuse(depth, lambda: f"{var.name} is '{bound}' in one place and '{value}' in another")
            return
        if not value:
            if var.omittable:
                yield st
            else:
                self._refuse(depth, lambda: f"{var.name}: the input is omitted")
            return
        if var.const or var.scalar:
            array = self.graph.const(value)
            if array is None:
                self._refuse(depth, lambda: f"{var.name} ('{value}') is not a constant")
                return
            if var.scalar and array.size != 1:
                self._refuse(depth, lambda: f"{var.name} ('{value}') has {array.size} elements, not 1")
                return
        if var.rank is not None:
            r = self.facts.rank(value) if self.facts is not None else None
            if r != var.rank:
                self._refuse(depth, lambda: f"{var.name} ('{value}') has rank {r}, not {var.rank}")
                return
        if var.where is not None:
            why = var.where(self, value)
            if why:
                self._refuse(depth, lambda: f"{var.name} ('{value}'): {why}")
                return
        yield st.with_value(var.name, value)

    def _op(self, pattern: OpPattern, value: str, st: _State, index: int) -> Iterator[_State]:
        depth = len(st.order)
        want = pattern.describe()
        node = self.graph.producer(value)
        if node is None:
            self._refuse(depth, lambda: f"'{value}' is a graph input or initializer where the pattern has {want}")
            return
        seen = st.nodes.get(id(pattern))
        if seen is not None:  # the same op pattern reached twice: it must be the same node
            if seen == node and node.outputs[index] == value:
                yield st
            else:
                self._refuse(depth, lambda: f"{label(node)} should be {label(seen)} (one {want} used twice)")
            return
        domain_ok = node.domain in STANDARD if pattern.domain in STANDARD else node.domain == pattern.domain
        if node.op_type not in pattern.op_types or not domain_ok:
            self._refuse(depth, lambda: f"'{value}' comes from {label(node)}, the pattern has {want}")
            return
        # A node already matched at another place of the pattern may fill this one too (onnxruntime's
        # test models share one MatMul/Add/Reshape between q and k when their weights are equal, and
        # CSE merges them): the pattern is a function of its leaves, and one node computing the value of
        # two places computes it for both, so the replacement (built from the bindings) stays exact.
        if index >= len(node.outputs) or node.outputs[index] != value:
            self._refuse(depth, lambda: f"'{value}' is not output {index} of {label(node)}")
            return
        for name, wanted in pattern.attrs.items():
            actual = node.attr(name)
            if actual is None:
                actual = _attr_default(node.op_type, node.domain, name, self.opset)
            if not _same(actual, wanted):
                self._refuse(depth + 1, lambda: f"{label(node)}: {name}={actual!r}, the pattern wants {wanted!r}")
                return
        inputs = list(node.inputs)
        while len(inputs) > len(pattern.inputs) and not inputs[-1]:
            inputs.pop()  # trailing omitted optional inputs
        while len(inputs) < len(pattern.inputs) and getattr(pattern.inputs[len(inputs)], "omittable", False):
            inputs.append("")  # an optional input the node leaves out, the pattern allows
        if len(inputs) != len(pattern.inputs):
            self._refuse(depth + 1, lambda: f"{label(node)} has {len(inputs)} inputs, the pattern {len(pattern.inputs)}")
            return
        if pattern.where is not None:
            why = pattern.where(self, node)
            if why:
                self._refuse(depth + 1, lambda: f"{label(node)}: {why}")
                return
        st = st.with_node(pattern, node)
        orders = [inputs]
        if pattern.commutative and len(inputs) == 2 and inputs[0] != inputs[1]:
            orders.append(inputs[::-1])
        for order in orders:
            yield from self._inputs(pattern.inputs, order, 0, st)

    def _inputs(self, patterns: tuple[Pattern, ...], values: list[str], i: int, st: _State) -> Iterator[_State]:
        if i == len(patterns):
            yield st
            return
        for nxt in self._value(patterns[i], values[i], st):
            yield from self._inputs(patterns, values, i + 1, nxt)

    def _leak(self, st: _State) -> str | None:
        """A value inside the match that something outside reads (a graph output, another op).

        ``Shape`` readers are let through: they only need the value's shape, and the producer
        stays in the graph for as long as such a reader is alive.
        """
        inside = {n.id for n in st.order}
        for node in st.order[1:]:
            if node.id in st.shared:
                continue
            for out in node.outputs:
                if not out:
                    continue
                if self.graph.is_output(out):
                    return f"'{out}' ({label(node)}) is a graph output"
                for user in self.graph.consumers(out):
                    if user.id not in inside and not (user.op_type == "Shape" and user.domain in STANDARD):
                        return f"'{out}' ({label(node)}) is also read by {label(user)}, outside the pattern"
        return None
