"""Record the static shapes ONNX shape inference proves, so every pass can rely on them.

Exporters often declare shapes only for graph inputs and outputs. Passes that must prove a rank
or a shape before rewriting (MatMul+Add → Gemm needs 2-D operands, a Reshape is a no-op only if
the input already has the target shape) then refuse. onnxsim keeps inferred shapes for the same
reason. This pass runs inference on a weightless copy of the model and writes a value_info entry
for each value that has none yet, but only when every dim is a known number: symbolic dims from
inference (``unk__N``) are guesses about equality that other passes must not trust.

Only models whose graph inputs are fully static get it. With symbolic inputs the level-2 matchers
run their own symbolic inference, and mixing recorded static facts into it changed their
decisions (the TorchScript GPT-2 lost its attention fusion); one shared shape oracle for all
passes is the fix, not done yet.

It runs once per optimization, in the first iteration (after constant folding): one inference
over the whole model, so the cost stays linear. Values a pass later rewrites keep their shape (passes give new shapes new names).
"""

from __future__ import annotations

import onnx
from onnx import ValueInfoProto

from graphtool.ir.graph import Graph
from graphtool.ir.to_onnx import to_onnx
from graphtool.pass_manager import Pass, PassContext, PassResult, register
from graphtool.passes.fold_shapes import _metadata_only

MAX_RUNS = 1


def _static(info: ValueInfoProto) -> bool:
    if not info.type.HasField("tensor_type"):
        return False
    tt = info.type.tensor_type
    return bool(tt.elem_type) and tt.HasField("shape") and all(d.HasField("dim_value") for d in tt.shape.dim)


def _static_inputs(graph: Graph) -> bool:
    infos = [info for name, info in graph.inputs.items() if name not in graph.initializers]
    return bool(infos) and all(info is not None and _static(info) for info in infos)


@register(level=1, priority=12)
class InferShapes(Pass):
    """Record statically known shapes from ONNX shape inference as value_info (main graph)."""

    def __init__(self) -> None:
        self.runs = 0

    def run(self, graph: Graph, ctx: PassContext) -> PassResult:
        if graph is not ctx.model.graph or self.runs >= MAX_RUNS or not _static_inputs(graph):
            return PassResult(False)
        self.runs += 1
        try:
            proto = to_onnx(ctx.model, write_tensor=_metadata_only)
            inferred = onnx.shape_inference.infer_shapes(proto, check_type=False, strict_mode=False, data_prop=True)
        except Exception:  # noqa: BLE001 - inference fails on odd models: keep the declared shapes
            return PassResult(False)
        recorded = 0
        for info in inferred.graph.value_info:
            if _static(info) and graph.has_value(info.name) and graph.value_type(info.name) is None:
                graph.value_info[info.name] = info
                recorded += 1
        # Recording shapes changes no computation: it must not keep the fixed point iterating.
        return PassResult(False, {"recorded": recorded} if recorded else {})
