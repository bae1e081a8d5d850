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

from graphtool.convert import convert
from graphtool.errors import UsageError
from graphtool.ir.model import Model


def upgrade_opset(model: Model, target: int) -> Model:
    """A new Model with the default domain at opset ``target`` (the model itself if already there).

    The conversion itself is ``graphtool.convert`` (functions, metadata and IR version handled
    there); this adds the refusal of downgrades and keeps pre-IR-4 weights constant."""
    current = model.opset("") or 0
    newest = onnx.defs.onnx_opset_version()
    if target > newest:
        raise UsageError(f"opset {target} is newer than the installed onnx supports ({newest})")
    if target < current:
        raise UsageError(f"the model is at opset {current}; --upgrade-opset {target} would downgrade it")
    if target == current:
        return model
    upgraded = convert(model, target, verify_outputs=False).model
    if model.ir_version < 4:
        # Below IR 4 every initializer is also listed as an input, yet is a constant; from IR 4 on
        # such an input could be overridden by the caller. Keep them constants: drop the entries.
        graph = upgraded.graph
        for name in [n for n in graph.inputs if n in graph.initializers]:
            graph.remove_input(name)
    return upgraded
