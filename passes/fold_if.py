"""Inline an If whose condition is a constant: the branch that runs replaces the If.

Exporters emit If for things only known at export time in Python, and folding later settles them:
torch's ``squeeze(dim)`` becomes ``If(Equal(Gather(Shape(x), d), 1))``, a VAD picks its 16 kHz or
8 kHz network with ``If(sr == 16000)``, and once shapes or values fold, the condition is a
constant. The If then costs a subgraph call, hides its body from every other pass (CSE, fusions
and shape folding see each branch alone), and keeps a whole dead branch in the file. onnxscript's
optimizer and ORT both inline such Ifs; so does this pass.

Refusals (each keeps the If as it is):
1. the condition is not a provable constant, or has more than one element;
2. the branch's outputs do not match the If's in number;
3. the branch holds sparse initializers (the IR keeps them in the graph's proto shell).
Names defined in the branch that would clash with a name in this graph's scope or in another
subgraph of it are renamed first (ONNX forbids a subgraph name shadowing an outer one).
Cost: O(branch size) per If, plus one walk of the graph's other subgraphs' names per inlining.
"""

from __future__ import annotations

from typing import Any

from graphtool.ir.graph import Graph, Node
from graphtool.pass_manager import Pass, PassContext, PassResult, register


def _defined(graph: Graph) -> set[str]:
    """Names a graph defines itself (node outputs, initializers, inputs), not those it reads."""
    names = set(graph.initializers) | set(graph.inputs)
    for node in graph.nodes():
        names.update(v for v in node.outputs if v)
    return names


def _names_below(graph: Graph, skip: Graph) -> set[str]:
    """Every name defined in ``graph``'s subgraphs (recursively), except inside ``skip``."""
    names: set[str] = set()
    for _, _, sub in graph.subgraphs():
        if sub is skip:
            continue
        for inner in sub.walk():
            names |= _defined(inner)
    return names


def _make_room(graph: Graph, branch: Graph, node: Node) -> None:
    """Rename branch-defined names that would clash once they live in ``graph``."""
    taken = _names_below(graph, branch)
    for name in sorted(_defined(branch)):
        if name in taken or graph.name_in_scope(name):
            branch.rename_value(name, graph.fresh_name(name))


def inline(graph: Graph, node: Node, branch: Graph) -> None:
    """Replace ``node`` (an If) by the nodes of ``branch``."""
    _make_room(graph, branch, node)
    produced: set[str] = set()
    for name, tensor in branch.initializers.items():
        graph.set_initializer(name, tensor)
        produced.add(name)
    for name, info in branch.value_info.items():
        graph.set_value_info(name, info)
    anchor: Node | None = None
    for inner in branch.topological_order():
        raw: dict[str, Any] = dict(inner._data["attrs"])
        added = graph.add_node(inner.op_type, inner.inputs, inner.outputs, attrs=raw, domain=inner.domain,
                               name=inner.name, near=node)
        anchor = anchor or added
        produced.update(v for v in inner.outputs if v)
    pairs = list(zip(node.outputs, branch.outputs))
    if_name = node.name
    graph.remove_nodes([node])
    current: dict[str, str] = {}
    for if_out, b_out in pairs:
        if not if_out or not (graph.consumers(if_out) or graph.is_output(if_out)):
            continue
        source = current.get(b_out, b_out)
        if b_out in produced and b_out not in current and b_out not in graph.initializers \
                and not graph.is_output(b_out):
            graph.rename_value(b_out, if_out)
            current[b_out] = if_out
        else:  # an outer value, an initializer, or a value already given to another output
            graph.add_node("Identity", [source], [if_out], name=f"{if_name}_out" if if_name else "", near=anchor)


@register(level=1, priority=16)
class FoldIf(Pass):
    """Inline an If whose condition folds to a constant (the branch that runs replaces it)."""

    def run(self, graph: Graph, ctx: PassContext) -> PassResult:
        inlined = 0
        for node in graph.nodes("If"):
            if node.domain not in ("", "ai.onnx") or not graph.has_node(node):
                continue
            cond = graph.const(node.inputs[0]) if node.inputs else None
            if cond is None or cond.size != 1:
                continue
            branch = node.attr("then_branch" if bool(cond.reshape(-1)[0]) else "else_branch")
            if not isinstance(branch, Graph) or len(branch.outputs) != len(node.outputs):
                continue
            if branch.sparse_initializers:
                continue
            inline(graph, node, branch)
            inlined += 1
        return PassResult(changed=inlined > 0, stats={"inlined": inlined})
