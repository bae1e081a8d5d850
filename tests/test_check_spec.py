"""Spec rules onnx's checker skips (graphtool/check.py ``spec_findings``): recursion among
model-local functions, functions defined twice, tensors that hold their values twice. The rules
must fire on the smallest models that break them and stay silent on every real model."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from graphtool import io
from graphtool.check import check, spec_findings
from tests.bad_inputs.make_bad_inputs import _good, _model, _recursive, _two_fields, _vi
from tests.conftest import backend_models


def _kinds(proto: onnx.ModelProto) -> list[tuple[str, str]]:
    return [(f.kind, f.message) for f in spec_findings(io.load_proto(proto))]


def test_self_recursion():
    (kind, message), = _kinds(_recursive(False)())
    assert kind == "recursive-function" and "custom:F calls itself (custom:F -> custom:F)" in message


def test_mutual_recursion_is_one_finding_naming_the_cycle():
    (kind, message), = _kinds(_recursive(True)())
    assert kind == "recursive-function" and "(custom:F -> custom:G -> custom:F)" in message


def test_a_function_calling_another_is_fine():
    m = _recursive(True)()
    del m.functions[1].node[:]
    m.functions[1].node.append(helper.make_node("Relu", ["a"], ["b"]))
    assert _kinds(m) == []


def test_function_defined_twice():
    m = _recursive(False)()
    m.functions[0].node[0].op_type = "Relu"
    m.functions[0].node[0].domain = ""
    m.functions.append(m.functions[0])
    assert [k for k, _ in _kinds(m)] == ["duplicate-function"]


def test_initializer_with_raw_and_float_data():
    m = _good()
    m.graph.initializer[0].CopyFrom(_two_fields())
    (kind, message), = _kinds(m)
    assert kind == "tensor-data" and "float_data and raw_data" in message
    report = check(io.load_proto(m))
    assert report.failed and "tensor-data" in {f.kind for f in report.findings}


def test_constant_attribute_with_two_fields_names_the_node():
    t = numpy_helper.from_array(np.ones(3, np.float32), "c")
    t.float_data.extend([1.0, 1.0, 1.0])
    m = _model([helper.make_node("Constant", [], ["c"], value=t, name="const"),
                helper.make_node("Add", ["x", "c"], ["y"])], [_vi("x", shape=[3])], [_vi("y", shape=[3])])
    findings = spec_findings(io.load_proto(m))
    assert [(f.kind, f.node) for f in findings] == [("tensor-data", "const")]


@pytest.mark.parametrize("path", backend_models()[::7], ids=lambda p: p.split("data/")[-1])
def test_silent_on_real_models(path):
    assert spec_findings(io.load(path)) == []
