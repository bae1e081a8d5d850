"""The pattern language: a fusion's subgraph written as the ops it is made of.

    x, w, b = Var("x"), Const("w"), Const("b")
    linear  = op.Add(op.MatMul(x, w), b)               # Add and Mul match either operand order
    scaled  = opt(op.Mul(linear, Scalar("s")))         # the Mul may be there or not
    scores  = either(op.Div(s, Scalar("c")), op.Mul(s, Scalar("c")))
    split   = op.Split(linear, Var("sizes"), _name="split"); q = split.output(0)

A pattern is a tree of producers: the matcher (``graphtool.rewrite.match``) starts at a node of
the root's op type and walks *up* the graph, so a candidate costs O(pattern size) whatever the
graph's size. The same ``Var`` name (or the same op-pattern object) used twice must bind the same
value (node): that is how "q, k and v project one x" or "Where(IsNaN(p), 0, p)" are written.
Patterns are plain data, built once at import; variants are more data, not more code.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

COMMUTATIVE = frozenset({"Add", "Mul", "Max", "Min", "Sum", "And", "Or", "Xor", "Equal"})

# (match, value) -> None when fine, else the reason it is not
ValueCheck = Callable[[Any, str], "str | None"]
# (match, node) -> None when fine, else the reason it is not
NodeCheck = Callable[[Any, Any], "str | None"]


class Pattern:
    """Base of every pattern element."""

    def describe(self) -> str:  # pragma: no cover - overridden
        raise NotImplementedError


@dataclass(eq=False)
class Var(Pattern):
    """Any value; binds ``name`` to it. ``const``: must be a constant; ``scalar``: one element.
    ``omittable``: an optional input the node may leave out (Clip's min); then nothing is bound."""

    name: str
    const: bool = False
    scalar: bool = False
    rank: int | None = None
    where: ValueCheck | None = None
    omittable: bool = False

    def describe(self) -> str:
        """How ``--explain`` names this element."""
        return self.name


def Const(name: str, rank: int | None = None, where: ValueCheck | None = None) -> Var:  # noqa: N802
    """A provably constant value, bound to ``name`` (``rank``: its rank; ``where``: a check on it)."""
    return Var(name, const=True, rank=rank, where=where)


def Scalar(name: str, where: ValueCheck | None = None, omittable: bool = False) -> Var:  # noqa: N802
    """A constant of one element, bound to ``name``; ``omittable``: an optional input that may be left out."""
    return Var(name, const=True, scalar=True, where=where, omittable=omittable)


@dataclass(frozen=True)
class OneOf:
    """An attribute constraint that accepts several values: ``axis=OneOf(-1, 3)``."""

    values: tuple[Any, ...]

    def __init__(self, *values: Any):
        object.__setattr__(self, "values", values)

    def __repr__(self) -> str:  # what --explain prints: "axis=2, the pattern wants one of -1, 3"
        return "one of " + ", ".join("absent" if v is None else repr(v) for v in self.values)


@dataclass(eq=False)
class OpPattern(Pattern):
    """One op: its type(s), its input patterns, attribute constraints and an optional check.

    ``shared``: its outputs may also be read outside the pattern (the node then stays in the
    graph); by default every value inside a match must be read only by the match.
    """

    op_types: tuple[str, ...]
    inputs: tuple[Pattern, ...]
    attrs: dict[str, Any] = field(default_factory=dict)
    domain: str = ""
    name: str | None = None
    where: NodeCheck | None = None
    shared: bool = False
    commutative: bool = False

    def output(self, index: int) -> "OutputOf":
        return OutputOf(self, index)

    def describe(self) -> str:
        return "|".join(self.op_types)


@dataclass(eq=False)
class OutputOf(Pattern):
    """Output ``index`` of a multi-output op (``split.output(1)``)."""

    op: OpPattern
    index: int

    def describe(self) -> str:
        return f"{self.op.describe()}[{self.index}]"


@dataclass(eq=False)
class Optional(Pattern):
    """The op, or — when it is absent — its input ``through`` in its place."""

    op: OpPattern
    through: int = 0

    def describe(self) -> str:
        return f"{self.op.describe()}?"


@dataclass(eq=False)
class Either(Pattern):
    """The first alternative that matches (each is tried, in order, on backtracking)."""

    options: tuple[Pattern, ...]

    def describe(self) -> str:
        return " or ".join(o.describe() for o in self.options)


def opt(pattern: OpPattern, through: int = 0) -> Optional:
    """``pattern`` may be there or not (absent: its input ``through`` stands in its place)."""
    return Optional(pattern, through)


def either(*options: Pattern) -> Either:
    """Any one of ``options`` (tried in order): an exporter's variants of one fusion."""
    return Either(tuple(options))


class _Ops:
    """``op.MatMul(a, b, _name="mm", transB=1)``: an OpPattern for any op type of one domain.

    ``op.Div_Mul(...)`` is not a thing; alternatives of op type are ``_types=("Div", "Mul")``.
    """

    def __init__(self, domain: str = ""):
        self._domain = domain

    def __getattr__(self, op_type: str) -> Callable[..., OpPattern]:
        if op_type.startswith("_"):
            raise AttributeError(op_type)

        def build(*inputs: Pattern, _name: str | None = None, _where: NodeCheck | None = None,
                  _shared: bool = False, _types: tuple[str, ...] | None = None, **attrs: Any) -> OpPattern:
            types = _types or (op_type,)
            return OpPattern(types, tuple(inputs), attrs, self._domain, _name, _where, _shared,
                             commutative=all(t in COMMUTATIVE for t in types))

        return build


op = _Ops()
ms = _Ops("com.microsoft")


def size(pattern: Pattern, seen: set[int] | None = None) -> int:
    """Number of op patterns reachable from ``pattern`` (each counted once)."""
    seen = set() if seen is None else seen
    if isinstance(pattern, OutputOf):
        return size(pattern.op, seen)
    if isinstance(pattern, Optional):
        return size(pattern.op, seen)
    if isinstance(pattern, Either):
        return max(size(o, set(seen)) for o in pattern.options)
    if isinstance(pattern, OpPattern):
        if id(pattern) in seen:
            return 0
        seen.add(id(pattern))
        return 1 + sum(size(p, seen) for p in pattern.inputs)
    return 0


def root_types(pattern: Pattern) -> tuple[str, ...]:
    """The op types a match can start from (the anchor)."""
    if isinstance(pattern, OpPattern):
        return pattern.op_types
    if isinstance(pattern, Either):
        return tuple(dict.fromkeys(t for o in pattern.options for t in root_types(o)))
    raise ValueError("a rule's pattern must be rooted at an op (or a choice of ops)")


def required_types(pattern: Pattern) -> list[frozenset[str]]:
    """Op types every match needs: each set names types of which the graph must hold at least
    one. A rule whose needs the graph cannot meet is skipped before any candidate is tried — a
    GELU rule rooted at a Mul costs nothing on a graph without Erf."""
    if isinstance(pattern, OutputOf):
        return required_types(pattern.op)
    if isinstance(pattern, OpPattern):
        return [frozenset(pattern.op_types)] + [s for p in pattern.inputs for s in required_types(p)]
    if isinstance(pattern, Either):  # one of the alternatives' roots, and what every alternative needs
        needs = [required_types(o) for o in pattern.options]
        common = [s for s in dict.fromkeys(needs[0]) if all(s in n for n in needs[1:])]
        return ([frozenset().union(*(n[0] for n in needs))] if all(needs) else []) + common
    if isinstance(pattern, Optional):  # present or not, what it passes through is needed
        return required_types(pattern.op.inputs[pattern.through])
    return []  # Var: nothing
