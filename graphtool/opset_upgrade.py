"""``--upgrade-opset``: raise a model's default-domain opset with ``onnx.version_converter``.

Newer opsets have fused ops the old ones lack — LayerNormalization (17), Gelu (20), Attention and
RMSNormalization (23) — so a model exported at opset 14 can only get them after an upgrade. The
converter rewrites every op whose semantics changed between the versions (Softmax axis rules,
Reduce* axes moving to inputs, Split sizes, ...); graphtool then optimizes the upgraded model.

Refusals (``UsageError``/``BadModel``, never a silently half-converted model):

* a target below the model's current opset (downgrades are lossy) or above what the installed
  onnx knows;
* a model whose conversion fails, or whose converted form onnxruntime cannot load.

Weights are not read: external tensors keep their references, and the IR version is raised to the
minimum the new opset requires (initializers of a pre-IR-4 model, which it also lists as inputs,
stay constants: their input entries are dropped).
"""

from __future__ import annotations

import onnx
from onnx import helper, version_converter

from graphtool.errors import BadModel, UsageError
from graphtool.ir.from_onnx import from_onnx
from graphtool.ir.model import Model
from graphtool.ir.to_onnx import to_onnx


def upgrade_opset(model: Model, target: int) -> Model:
    """A new Model with the default domain at opset ``target`` (the model itself if already there)."""
    current = model.opset("") or 0
    newest = onnx.defs.onnx_opset_version()
    if target > newest:
        raise UsageError(f"opset {target} is newer than the installed onnx supports ({newest})")
    if target < current:
        raise UsageError(f"the model is at opset {current}; --upgrade-opset {target} would downgrade it")
    if target == current:
        return model
    proto = to_onnx(model)
    try:
        converted = version_converter.convert_version(proto, target)
    except Exception as err:  # noqa: BLE001 - the converter raises bare RuntimeErrors
        text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise BadModel(f"cannot upgrade from opset {current} to {target}: {text[:200]}") from None
    needed = helper.find_min_ir_version_for([helper.make_opsetid("", target)], ignore_unknown=True)
    if converted.ir_version < needed:
        if converted.ir_version < 4:
            _pin_initializers(converted.graph)
        converted.ir_version = needed
    return from_onnx(converted, model.base_dir)


def _pin_initializers(graph: onnx.GraphProto) -> None:
    """Below IR 4 every initializer is also listed as an input, yet is a constant; from IR 4 on
    such an input could be overridden by the caller. Keep them constants: drop the input entries."""
    weights = {t.name for t in graph.initializer}
    kept = [i for i in graph.input if i.name not in weights]
    del graph.input[:]
    graph.input.extend(kept)
