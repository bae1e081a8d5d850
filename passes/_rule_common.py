"""What several rule families share: a check made of checks, the fused op named after the root,
per-run shape facts, and whether ``--explain`` is on (gates then explain instead of hiding)."""

from __future__ import annotations

import os
from typing import Callable

from graphtool.ir.graph import Graph
from graphtool.pass_manager import PassContext
from graphtool.passes._ort_common import Dims, Shapes
from graphtool.rewrite import Match, Rewrite


def all_of(*checks: Callable[[Match], str | None]) -> Callable[[Match], str | None]:
    def check(m: Match) -> str | None:
        for one in checks:
            why = one(m)
            if why:
                return why
        return None

    return check


def keep_root_name(m: Match, rw: Rewrite) -> None:
    """Unscoped chains: the fused op takes the name of the node it stands for (the root), not of
    the last node matched (the engine's fallback), as the hand-written passes named it."""
    prefix = os.path.commonprefix([n.name for n in m.nodes if n.name])
    if "/" not in prefix and m.root.name:
        rw.name = m.root.name


class Facts:
    """Shapes and dim proofs for one pass run of the ort rules."""

    def __init__(self, graph: Graph, ctx: PassContext):
        self.shapes = Shapes(graph, ctx)
        self.dims = Dims(graph, self.shapes)

    def rank(self, value: str) -> int | None:
        return self.shapes.rank(value)


def explaining(ctx: PassContext) -> bool:
    return bool(getattr(ctx, "explain", None))


