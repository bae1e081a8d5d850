"""``my-identity-remover``: remove ``Identity`` ops, a pass written against graphtool's Graph.

1. ``y = Identity(x)``: every reader of ``y`` reads ``x``; the Identity goes.
2. ``y`` is a graph output and ``x`` is made by an op of this graph (and is not an output itself):
   ``x`` is renamed to ``y``, so the model's output keeps its name.
3. Refused: ``y`` is a graph output and ``x`` is a graph input, an initializer or another output
   (both names are the model's interface).
"""

from __future__ import annotations

from graphtool.ir.graph import Graph
from graphtool.pass_manager import Pass, PassContext, PassResult


class RemoveIdentity(Pass):
    """Remove Identity ops (keeping graph-output names)."""

    level = 1  # which --level pipeline it belongs to when opted in with --plugins

    def run(self, graph: Graph, ctx: PassContext) -> PassResult:
        removed = 0
        for node in graph.nodes("Identity"):  # a snapshot: safe to edit while iterating
            x, y = node.inputs[0], node.outputs[0]
            if graph.is_output(y):
                if graph.producer(x) is None or graph.is_output(x):
                    continue  # case 3
                graph.remove_nodes([node])
                graph.rename_value(x, y)  # case 2
            else:
                graph.replace_all_uses(y, x)  # case 1
                graph.remove_nodes([node])
            removed += 1
        return PassResult(changed=removed > 0, stats={"removed": removed})
