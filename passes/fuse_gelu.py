"""Hand-written GELU → one Gelu (opset >= 20), as rules (``graphtool.rewrite``).

Exporters spell GELU as five to nine elementwise ops; ``Gelu`` is one kernel (and the operator
the ORT transformer fusions look for). Two forms (patterns in ``_gelu_parts.py``):

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
4. an intermediate value has another reader (a ``Shape`` too) or is a graph output.

Gelu writes the chain's final value under its name.
"""

from __future__ import annotations

from graphtool.ir.graph import Graph
from graphtool.pass_manager import PassContext, register
from graphtool.passes import _gelu_parts as parts
from graphtool.passes import _rule_common as common
from graphtool.passes._fuse_common import graph_opset
from graphtool.rewrite import Rule, RulePass

_check = common.all_of(parts.check_opset(True), parts.check_constants)
GELU_ERF = Rule("gelu-erf", parts.ERF, parts.emit("Gelu", ["x"]), _check, emits="Gelu")
GELU_TANH = Rule("gelu-tanh", parts.TANH, parts.emit("Gelu", ["x"], approximate="tanh"), _check, emits="Gelu")


@register(level=1, priority=58)
class FuseGelu(RulePass):
    """Fuse the erf and tanh spellings of GELU into one Gelu op (opset >= 20)."""

    rules = (GELU_ERF, GELU_TANH)
    stat_keys = {"gelu-erf": "erf", "gelu-tanh": "tanh"}

    def applies(self, graph: Graph, ctx: PassContext) -> bool:  # below 20 only --explain looks (and is told why)
        return graph_opset(graph, ctx) >= 20 or common.explaining(ctx)
