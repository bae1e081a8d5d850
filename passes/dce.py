"""Dead-code elimination: drop every op and initializer that no graph output depends on.

One reverse walk from the graph's outputs marks what is live: a live value makes its producer
live, a live op makes all its inputs live — including the outer values its subgraphs read
(capture edges), so an If/Loop body keeps what it uses from the enclosing scope. Everything not
reached is removed, whatever its domain (ONNX ops are pure; a dead If is as dead as a dead Add).
Cost: O(nodes + edges) per graph.

Graph inputs are the public interface and are kept, used or not. The one exception: models with
IR version < 4 list every initializer as a graph input too (``overridable_initializers`` is False);
such an input never was a real input, so an unused one leaves both lists.

Subgraphs and function bodies are handled the same way (the pass manager calls ``run`` per graph,
children first): their roots are their own outputs.
"""

from __future__ import annotations

from graphtool.ir.graph import Graph, Node
from graphtool.ir.surgery import live_nodes  # the reverse walk, shared with Graph.cleanup()
from graphtool.pass_manager import Pass, PassContext, PassResult, register




def dead_initializers(graph: Graph, read: set[str]) -> list[str]:
    """Initializers no live op reads, except those that are real (overridable) graph inputs."""
    dead = []
    for name in graph.initializers:
        if name in read or graph.is_output(name):
            continue
        if graph.is_input(name) and graph.overridable_initializers:
            continue
        dead.append(name)
    return dead


@register(level=1, priority=90)
class DeadCodeElimination(Pass):
    """Remove ops and initializers that no graph output depends on (graph inputs stay)."""

    idempotent = True  # one reverse walk marks everything live

    def run(self, graph: Graph, ctx: PassContext) -> PassResult:
        live, read = live_nodes(graph)
        dead: list[Node] = [n for n in graph.nodes() if n.id not in live]
        if dead:
            graph.remove_nodes(dead)
        unused = dead_initializers(graph, read)
        for name in unused:
            if graph.is_input(name):  # IR < 4: the initializer was listed as an input too
                graph.remove_input(name)
            graph.remove_initializer(name)
        stats = {"nodes": len(dead), "initializers": len(unused)}
        return PassResult(changed=bool(dead or unused), stats=stats)
