"""What several rule families share: a check made of checks, per-run shape facts, and whether ``--explain`` is on (gates then explain instead of hiding)."""

from __future__ import annotations

from typing import Callable

from graphtool.ir.graph import Graph
from graphtool.pass_manager import PassContext
from graphtool.passes._ort_common import Dims, Shapes
from graphtool.rewrite import Match


def all_of(*checks: Callable[[Match], str | None]) -> Callable[[Match], str | None]:
    def check(m: Match) -> str | None:
        for one in checks:
            why = one(m)
            if why:
                return why
        return None

    return check


class Facts:
    """Shapes and dim proofs for one pass run of the ort rules."""

    def __init__(self, graph: Graph, ctx: PassContext):
        self.shapes = Shapes(graph, ctx)
        self.dims = Dims(graph, self.shapes)

    def rank(self, value: str) -> int | None:
        return self.shapes.rank(value)


def explaining(ctx: PassContext) -> bool:
    return bool(getattr(ctx, "explain", None))


