"""Hand-written GELU → one Gelu (opset >= 20).

Exporters spell GELU as five to nine elementwise ops; ``Gelu`` is one kernel (and the operator
the ORT transformer fusions look for). Two forms, anchored on their ``Erf`` / ``Tanh`` and matched
by walking producers and consumers only:

* exact:  ``x * 0.5 * (1 + Erf(x / sqrt(2)))`` → ``Gelu(x)``
  (``x / 1.41421`` or ``x * 0.70711``);
* tanh:   ``0.5 * x * (1 + Tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))`` → ``Gelu(x, approximate="tanh")``
  (``Pow(x, 3)``, ``x * (x * x)`` or ``(x * x) * x``).

The outer product is accepted in every association exporters produce — ``(x * 0.5) * (1 + e)``,
``(x * (1 + e)) * 0.5``, ``x * ((1 + e) * 0.5)``, a Div by 2 in place of a Mul by 0.5 — and every
commutative operand order. It refuses when:

1. the opset is below 20 (Gelu does not exist there — e.g. the TorchScript ViT export at 17);
2. any constant differs from its expected value by more than 1e-4 relative, is not a one-element
   constant, or has a higher rank than ``x`` could be proven to have (it would broadcast the result);
3. the ``x`` of the inner expression and of the outer product are not the same value;
4. an intermediate value has another reader or is a graph output.

Gelu writes the chain's final value under its name.
"""

from __future__ import annotations

import math

from graphtool.ir.graph import Graph, Node
from graphtool.pass_manager import Pass, PassContext, PassResult, register
from graphtool.passes._fuse_common import (
    Namer,
    close,
    drop_dead_constants,
    graph_opset,
    is_op,
    only_feeds,
    other_input,
    rank,
    replace_chain,
    scalar_const,
    sole_user,
)

SQRT2 = math.sqrt(2.0)
SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
TANH_CUBIC = 0.044715


class _Walk:
    """The state of one match: the chain so far, the constants it used, and ``x``'s rank bound."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.chain: list[Node] = []
        self.consts: list[str] = []
        self.x = ""
        self.max_rank: int | None = 0  # the rank a constant may have (x's rank once x is known)

    def set_x(self, x: str) -> None:
        self.x = x
        r = rank(self.graph, x)
        self.max_rank = 0 if r is None else r

    def const_is(self, value: str | None, expected: float) -> bool:
        if value is None or not close(scalar_const(self.graph, value, self.max_rank), expected):
            return False
        self.consts.append(value)
        return True

    def times_const(self, node: Node | None, value: str, expected: float) -> bool:
        """``node`` is ``value * expected`` (Mul, either order) or ``value / (1/expected)`` (Div)."""
        if is_op(node, "Mul"):
            return self.const_is(other_input(node, value), expected)
        if is_op(node, "Div") and len(node.inputs) == 2 and node.inputs[0] == value:
            return self.const_is(node.inputs[1], 1.0 / expected)
        return False

    def single_reader(self, value: str) -> Node | None:
        return sole_user(self.graph, value)


def _match_tail(walk: _Walk, one_plus: str) -> str | None:
    """From ``1 + e``, match the outer ``x * 0.5 * (1 + e)``; returns the final value."""
    graph, x = walk.graph, walk.x
    m1 = walk.single_reader(one_plus)
    if not is_op(m1, "Mul"):
        return None
    other = other_input(m1, one_plus)
    if other is None:
        return None
    if other == x:  # (x * (1 + e)) * 0.5
        m2 = walk.single_reader(m1.outputs[0])
        if not walk.times_const(m2, m1.outputs[0], 0.5):
            return None
        walk.chain += [m1, m2]
        return m2.outputs[0]
    if walk.const_is(other, 0.5):  # x * ((1 + e) * 0.5)
        m2 = walk.single_reader(m1.outputs[0])
        if not is_op(m2, "Mul") or other_input(m2, m1.outputs[0]) != x:
            return None
        walk.chain += [m1, m2]
        return m2.outputs[0]
    half = graph.producer(other)  # (x * 0.5) * (1 + e)
    if half is None or not only_feeds(graph, other, m1) or not walk.times_const(half, x, 0.5):
        return None
    walk.chain += [half, m1]
    return m1.outputs[0]


def _one_plus(walk: _Walk, value: str) -> str | None:
    """``value`` → Add(value, 1) (either order); returns the sum."""
    add = walk.single_reader(value)
    if not is_op(add, "Add") or not walk.const_is(other_input(add, value), 1.0):
        return None
    walk.chain.append(add)
    return add.outputs[0]


def match_erf(graph: Graph, erf: Node) -> tuple[_Walk, str] | None:
    """Erf(x / sqrt2) or Erf(x * (1/sqrt2)) … → (walk, final value)."""
    walk = _Walk(graph)
    scaled = erf.inputs[0]
    inner = graph.producer(scaled)
    if inner is None or not only_feeds(graph, scaled, erf) or len(inner.inputs) != 2:
        return None
    for x in (inner.inputs if inner.op_type == "Mul" else inner.inputs[:1]):
        walk.set_x(x)
        if walk.times_const(inner, x, 1.0 / SQRT2):
            break
    else:
        return None
    walk.chain += [inner, erf]
    one_plus = _one_plus(walk, erf.outputs[0])
    final = _match_tail(walk, one_plus) if one_plus else None
    return (walk, final) if final else None


def _match_cube(walk: _Walk, value: str) -> bool:
    """``value`` is x³ as Pow(x, 3), x * (x * x) or (x * x) * x, read only by its consumer."""
    graph, x = walk.graph, walk.x
    node = graph.producer(value)
    if is_op(node, "Pow") and len(node.inputs) == 2 and node.inputs[0] == x and walk.const_is(node.inputs[1], 3.0):
        walk.chain.append(node)
        return True
    if not is_op(node, "Mul"):
        return False
    square = other_input(node, x)
    sq_node = graph.producer(square) if square else None
    if not is_op(sq_node, "Mul") or sq_node.inputs != [x, x] or not only_feeds(graph, square, node):
        return False
    walk.chain += [sq_node, node]
    return True


def _match_cubic(walk: _Walk, x: str, cubic: str, reader: Node) -> Node | None:
    """``cubic`` is 0.044715 * x³ (either order), read only by ``reader``; returns its Mul."""
    graph = walk.graph
    node = graph.producer(cubic)
    if not is_op(node, "Mul") or not only_feeds(graph, cubic, reader) or len(node.inputs) != 2:
        return None
    walk.set_x(x)
    for cube, coeff in (node.inputs, node.inputs[::-1]):
        if walk.const_is(coeff, TANH_CUBIC) and only_feeds(graph, cube, node) and _match_cube(walk, cube):
            return node
    return None


def match_tanh(graph: Graph, tanh: Node) -> tuple[_Walk, str] | None:
    """Tanh(sqrt(2/pi) * (x + 0.044715 * x³)) … → (walk, final value)."""
    walk = _Walk(graph)
    arg = tanh.inputs[0]
    scale = graph.producer(arg)
    if not is_op(scale, "Mul") or not only_feeds(graph, arg, tanh) or len(scale.inputs) != 2:
        return None
    for inner_value, const in (scale.inputs, scale.inputs[::-1]):
        inner = graph.producer(inner_value)
        if is_op(inner, "Add") and only_feeds(graph, inner_value, scale) and len(inner.inputs) == 2:
            break
    else:
        return None
    for x, cubic in (inner.inputs, inner.inputs[::-1]):
        cubic_node = _match_cubic(walk, x, cubic, inner)
        if cubic_node is not None:
            break
    else:
        return None
    if not walk.const_is(const, SQRT_2_OVER_PI):
        return None
    walk.chain += [cubic_node, inner, scale, tanh]
    one_plus = _one_plus(walk, tanh.outputs[0])
    final = _match_tail(walk, one_plus) if one_plus else None
    return (walk, final) if final else None


@register(level=1, priority=58)
class FuseGelu(Pass):
    """Fuse the erf and tanh spellings of GELU into one Gelu op (opset >= 20)."""

    def run(self, graph: Graph, ctx: PassContext) -> PassResult:
        if graph_opset(graph, ctx) < 20:
            return PassResult(False, {"erf": 0, "tanh": 0})
        counts = {"erf": 0, "tanh": 0}
        namer = Namer(graph)
        for op_type, matcher, kind in (("Erf", match_erf, "erf"), ("Tanh", match_tanh, "tanh")):
            for anchor in graph.nodes(op_type):
                if not graph.has_node(anchor) or anchor.domain not in ("", "ai.onnx"):
                    continue
                found = matcher(graph, anchor)
                if found is None:
                    continue
                walk, final = found
                attrs = {"approximate": "tanh"} if kind == "tanh" else {}
                name = namer(walk.chain, "Gelu", fallback=walk.chain[-1].name)
                absorbed = [n.name or n.op_type for n in walk.chain]
                node = replace_chain(graph, walk.chain, "Gelu", [walk.x], final, attrs, name=name)
                ctx.absorbed(node, absorbed)
                drop_dead_constants(graph, walk.consts)
                counts[kind] += 1
        return PassResult(sum(counts.values()) > 0, counts)
