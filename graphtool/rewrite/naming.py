"""Names for fused nodes, so a fused graph still reads like the model it came from."""

from __future__ import annotations

import os
from typing import Iterable

from graphtool.ir.graph import Graph, Node


class Namer:
    """Names for fused nodes: the absorbed nodes' common scope + the new op type, made unique.

    "/layers.0/LayerNorm/Sub", "/layers.0/LayerNorm/Div" ... → "/layers.0/LayerNorm/LayerNormalization".
    The set of taken names is built once per pass run, on the first fusion (one linear walk).
    """

    def __init__(self, graph: Graph):
        self.graph = graph
        self.taken: set[str] | None = None

    def __call__(self, nodes: Iterable[Node], op_type: str, fallback: str = "") -> str:
        names = [n.name for n in nodes if n.name]
        prefix = os.path.commonprefix(names) if names else ""
        prefix = prefix[: prefix.rfind("/") + 1] if "/" in prefix else ""
        base = f"{prefix}{op_type}" if prefix else (fallback or (names[-1] if names else ""))
        if not base:
            return ""
        if self.taken is None:
            self.taken = {n.name for n in self.graph.nodes() if n.name}
        self.taken.difference_update(names)  # the absorbed nodes are going away
        name, k = base, 1
        while name in self.taken:
            name, k = f"{base}_{k}", k + 1
        self.taken.add(name)
        return name
