"""Conv (+ residual Add) (+ activation) → com.microsoft FusedConv (``--target ort``), as rules.

onnxruntime's CPU FusedConv applies the activation — and adds an optional same-shaped ``Z`` — while
the convolution's output is still in cache, instead of re-reading it for every following op.
ORT's own extended level fuses Conv+activation only; residual blocks (Conv → Add → Relu, the whole
of ResNet) keep two extra ops per block there. This pass takes both::

    c = Conv(x, W, B?, attrs)
    s = Add(c, z) | Sum(c, z)          (optional; z provably has c's exact shape)
    y = act(s | c)                     (optional; one of the kernel's activations)
    ⇒  y = FusedConv(x, W, B?, z?, attrs, activation=act, activation_params=[...])

Activations (``_activation_parts``): Relu, Sigmoid, Tanh, LeakyRelu(alpha), HardSigmoid(alpha,
beta), HardSwish, Clip(min, max) with constant float32 bounds. The check refuses when x is not
float32, or z is a constant or could broadcast (its shape is not provably c's); the engine
refuses when an intermediate value has another reader or is a graph output. A Conv alone has
nothing to fuse: every rule is rooted at the activation or the Add.
"""

from __future__ import annotations

from graphtool.ir.graph import Graph
from graphtool.pass_manager import PassContext, register
from graphtool.passes import _activation_parts as acts
from graphtool.passes._fuse_common import attr_protos
from graphtool.passes._ort_common import MS_DOMAIN, contrib_allowed, record_shape, use_ms_domain
from graphtool.rewrite import Match, Rewrite, Rule, RulePass, Var, either, op

x, w, b, z = Var("x"), Var("w"), Var("b"), Var("z")
conv = either(op.Conv(x, w, b, _name="conv"), op.Conv(x, w, _name="conv"))
summed = either(op.Add(conv, z, _name="sum"), op.Sum(conv, z, _name="sum"))
s = either(summed, conv)
activation = either(op.Relu(s, _types=acts.CONV_ACTIVATIONS, _name="act"),
                    # bounds: inputs from opset 11 (either may be left out), attributes before
                    op.Clip(s, Var("lo", omittable=True), Var("hi", omittable=True), _name="act"))


def check(m: Match) -> str | None:
    if not m.facts.shapes.is_float(m["x"]):
        return "x is not float32 (FusedConv's type)"
    c = m.node("conv").outputs[0]
    if m.get("z"):
        if m["z"] == c:
            return "the Add adds the Conv's output to itself"
        if m.graph.const(m["z"]) is not None:
            return "z is a constant (a bias, not a residual)"
        if not m.facts.same_shape(c, m["z"]):
            return "z does not provably have the Conv output's shape (it could broadcast)"
    act = m.node("act")
    if act is not None:
        bounds = acts.clip_bounds(m.graph, act, m.facts.opset) if act.op_type == "Clip" else None
        if isinstance(bounds, str):
            return bounds
        m.extra["act"] = (act.op_type, bounds if bounds is not None else [v for _, v in acts.params(act)])
    return None


def emit(m: Match, rw: Rewrite) -> str:
    conv_node = m.node("conv")
    inputs = list(conv_node.inputs)
    if m.get("z"):  # X, W, B ('' when the Conv has none), Z
        inputs = (inputs + ["", ""])[:3] + [m["z"]]
    attrs = attr_protos(conv_node)
    if "act" in m.extra:
        attrs["activation"], params = m.extra["act"]
        if params:
            attrs["activation_params"] = params
    use_ms_domain(m.ctx)
    out = rw.add("FusedConv", inputs, attrs=attrs, domain=MS_DOMAIN).outputs[0]
    record_shape(m.graph, m.facts.shapes, out, m.facts.shapes.shape(conv_node.outputs[0]), 1)
    return out


CONV_ACTIVATION = Rule("conv-activation", activation, emit, check, emits="FusedConv")
CONV_ADD = Rule("conv-add", summed, emit, check, emits="FusedConv")  # after: an Add no activation took


@register(level=2, target="ort", priority=75)
class OrtFusedConv(RulePass):
    """Conv + optional same-shaped Add + activation → com.microsoft FusedConv."""

    rules = (CONV_ACTIVATION, CONV_ADD)

    def applies(self, graph: Graph, ctx: PassContext) -> bool:
        return contrib_allowed(graph, ctx, "FusedConv")

    def facts(self, graph: Graph, ctx: PassContext) -> acts.Facts:
        return acts.Facts(graph, ctx)
