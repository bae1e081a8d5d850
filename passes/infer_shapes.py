"""Record the static shapes ONNX shape inference proves, so every pass can rely on them.

Exporters often declare shapes only for graph inputs and outputs. Passes that must prove a rank
or a shape before rewriting (MatMul+Add → Gemm needs 2-D operands, a Reshape is a no-op only if
the input already has the target shape) then refuse. onnxsim keeps inferred shapes for the same
reason. This pass reads the shape oracle (graphtool.shapes.oracle) and writes a value_info entry
for each value that has none yet, but only when every dim is a known number: symbolic dims from
inference (``unk__N``) are guesses about equality that other passes must not trust.

Only models whose graph inputs are fully static get it. With symbolic inputs, recording the
static facts as declarations changed the level-2 matchers' decisions (declared dims win over the
oracle's symbolic ones: the TorchScript GPT-2 lost its attention fusion); they ask the oracle.

It runs once per optimization, in the first iteration (after constant folding): one inference
over the whole model, so the cost stays linear. Values a pass later rewrites keep their shape (passes give new shapes new names).
"""

from __future__ import annotations

from onnx import TypeProto

from graphtool.ir.graph import Graph
from graphtool.ir.value_infos import TypeOnly
from graphtool.pass_manager import Pass, PassContext, PassResult, register

MAX_RUNS = 1


def _static(t: TypeProto) -> bool:
    if not t.HasField("tensor_type"):
        return False
    tt = t.tensor_type
    return bool(tt.elem_type) and tt.HasField("shape") and all(d.HasField("dim_value") for d in tt.shape.dim)


def _static_inputs(graph: Graph) -> bool:
    infos = [info for name, info in graph.inputs.items() if name not in graph.initializers]
    return bool(infos) and all(info is not None and _static(info.type) for info in infos)


@register(level=1, priority=12)
class InferShapes(Pass):
    """Record statically known shapes from ONNX shape inference as value_info (main graph)."""

    def __init__(self) -> None:
        self.runs = 0

    def run(self, graph: Graph, ctx: PassContext) -> PassResult:
        if graph is not ctx.model.graph or self.runs >= MAX_RUNS or not _static_inputs(graph):
            return PassResult(False)
        self.runs += 1
        recorded = 0
        # A recorded fact shares the oracle's TypeProto (graphtool.ir.value_infos): a ValueInfoProto
        # of its own per value cost ~890 bytes on a million-value graph.
        static: dict[int, bool] = {}  # the oracle shares one TypeProto per distinct type: judge each once
        for name, inferred in ctx.shapes.table(graph).items():
            known = static.get(id(inferred))
            if known is None:
                known = static[id(inferred)] = _static(inferred)
            if known and graph.has_value(name) and graph.value_type(name) is None:
                graph.value_info[name] = TypeOnly(name, inferred)
                recorded += 1
        # Recording shapes changes no computation: it must not keep the fixed point iterating.
        return PassResult(False, {"recorded": recorded} if recorded else {})
