"""--upgrade-opset: onnx.version_converter behind graphtool's IR, then level-2 standard fusions."""

from __future__ import annotations

import os

import numpy as np
import pytest

from graphtool import io
from graphtool.errors import UsageError
from graphtool.opset_upgrade import upgrade_opset
from graphtool.optimize import optimize
from graphtool.verify import verify
from tests.conftest import FIXTURES, light_model


def test_upgrade_keeps_outputs_and_unlocks_onnx_attention():
    path = os.path.join(FIXTURES, "torch", "bert_dynamo.onnx")
    model = io.load(path)
    upgraded = upgrade_opset(model, 23)
    assert upgraded.opset("") == 23 and upgraded.ir_version >= 10
    feeds = dict(np.load(path[:-5] + ".inputs.npz"))
    assert verify(model, upgraded, feeds=feeds).ok
    fused, _, _ = optimize(upgraded, level=2, target="onnx")
    kinds = {n.op_type for n in fused.graph.nodes()}
    assert {"Attention", "LayerNormalization", "Gelu"} <= kinds
    assert all(n.domain in ("", "ai.onnx") for n in fused.graph.nodes())
    check = verify(model, fused, feeds=feeds)
    assert check.ok, check.summary()


def test_pre_ir4_initializers_stay_constants():
    """Old models list every initializer as an input; from IR 4 on that would make them overridable."""
    model = io.load(light_model("squeezenet"))
    assert model.ir_version < 4
    upgraded = upgrade_opset(model, 17)
    graph = upgraded.graph
    assert not set(graph.inputs) & set(graph.initializers)
    optimized, _, _ = optimize(upgraded, level=1)
    assert not optimized.graph.nodes("ConstantOfShape")  # the weights' ConstantOfShape still fold
    assert all(optimized.graph.const(conv.inputs[1]) is not None for conv in optimized.graph.nodes("Conv"))
    assert verify(model, optimized).ok


def test_same_version_is_a_no_op_and_downgrade_is_refused():
    model = io.load(os.path.join(FIXTURES, "torch", "cnn_dynamo.onnx"))
    assert upgrade_opset(model, model.opset("")) is model
    with pytest.raises(UsageError):
        upgrade_opset(model, 13)
