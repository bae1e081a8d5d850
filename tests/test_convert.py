"""graphtool convert --opset: onnx's converter plus what it forgets (functions, IR version),
pinning of adapter-less ops, a validity check and numeric verification through onnxruntime."""

from __future__ import annotations

import glob
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from graphtool import io
from graphtool.check import check
from graphtool.convert import ConversionRefused, convert
from graphtool.ir.to_onnx import to_onnx
from graphtool.runtime import make_session
from graphtool.verify import verify
from tests.conftest import BACKEND_DATA, FIXTURES, light_model

F = TensorProto.FLOAT


def _checker_ok(model) -> None:
    onnx.checker.check_model(to_onnx(model), full_check=True)


def test_upgrade_and_back_down_keeps_outputs():
    original = io.load(light_model("squeezenet"))
    up13 = convert(original, 13)
    up17 = convert(up13.model, 17)
    down13 = convert(up17.model, 13)
    for result, target in ((up13, 13), (up17, 17), (down13, 13)):
        assert result.ok and result.target == target and result.model.opset("") == target
        assert verify(original, result.model).ok  # against the original, not only the previous step
        _checker_ok(result.model)
    assert (up13.ir_version, up17.ir_version) == ((3, 7), (7, 8))  # raised to what the opset needs
    assert down13.ir_version == (8, 8)  # never lowered
    # onnx has no down adapters for Relu-14, Reshape-14, Shape-15: their use here is unchanged at 13
    assert set(down13.pinned) == {"Relu", "Reshape", "Shape"}
    assert not to_onnx(up17.model).graph.value_info  # no inferred value_info smuggled in


def test_pinning_needs_verification():
    proto = helper.make_model(
        helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "g",
                          [helper.make_tensor_value_info("x", F, [2, 3])], [helper.make_tensor_value_info("y", F, [2, 3])]),
        opset_imports=[helper.make_opsetid("", 14)])
    model = io.load_proto(proto)
    result = convert(model, 13)
    assert result.pinned == ["Relu"] and result.ok and result.model.graph.nodes()[0].op_type == "Relu"
    with pytest.raises(ConversionRefused, match="No Adapter From Version \\$14 for Relu"):
        convert(model, 13, verify_outputs=False)


def test_pin_refused_when_the_node_relies_on_what_changed():
    """Reshape allowzero=1 has no meaning at opset 13: keeping the node would change the model."""
    proto = helper.make_model(
        helper.make_graph([helper.make_node("Reshape", ["x", "s"], ["y"], name="reshape", allowzero=1)], "g",
                          [helper.make_tensor_value_info("x", F, [2, 3])], [helper.make_tensor_value_info("y", F, [3, 2])],
                          [helper.make_tensor("s", TensorProto.INT64, [2], [3, 2])]),
        opset_imports=[helper.make_opsetid("", 14)])
    with pytest.raises(ConversionRefused, match="Reshape.*allowzero"):
        convert(io.load_proto(proto), 13)


def test_functions_metadata_and_doc_survive_and_bodies_are_converted():
    proto = onnx.load(f"{FIXTURES}/local_function.onnx")
    proto.metadata_props.add(key="author", value="graphtool")
    proto.doc_string = "kept"
    model = io.load_proto(proto)
    result = convert(model, 18)
    out = to_onnx(result.model)
    assert result.functions == {"custom:Standardize": "converted"}
    [fn] = out.functions
    means = [n for n in fn.node if n.op_type == "ReduceMean"]
    assert len(means) == 2 and all(len(n.input) == 2 for n in means)  # axes moved to an input at 18
    assert [(o.domain, o.version) for o in fn.opset_import] == [("", 18)]
    assert {p.key: p.value for p in out.metadata_props} == {"author": "graphtool"} and out.doc_string == "kept"
    assert out.producer_name == proto.producer_name
    assert result.ok and result.verification.max_abs < 1e-5
    _checker_ok(result.model)
    assert not check(result.model).failed


def test_function_body_that_only_needs_its_import_bumped():
    fn = helper.make_function("local", "Act", ["X"], ["Y"], [helper.make_node("Sigmoid", ["X"], ["Y"])],
                              opset_imports=[helper.make_opsetid("", 17)])
    proto = helper.make_model(
        helper.make_graph([helper.make_node("Act", ["x"], ["y"], domain="local")], "g",
                          [helper.make_tensor_value_info("x", F, [2, 3])], [helper.make_tensor_value_info("y", F, [2, 3])]),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)], functions=[fn])
    result = convert(io.load_proto(proto), 18)
    assert result.functions == {"local:Act": "import bumped"} and result.ok
    _checker_ok(result.model)


def test_function_node_reading_a_caller_attribute_is_refused():
    node = helper.make_node("ReduceMean", ["X"], ["Y"], axes=[-1])
    node.attribute.append(onnx.AttributeProto(name="keepdims", ref_attr_name="kd", type=onnx.AttributeProto.INT))
    fn = helper.make_function("local", "Mean", ["X"], ["Y"], [node], opset_imports=[helper.make_opsetid("", 17)],
                              attributes=["kd"])
    call = helper.make_node("Mean", ["x"], ["y"], domain="local", kd=1)
    proto = helper.make_model(
        helper.make_graph([call], "g", [helper.make_tensor_value_info("x", F, [2, 3])], [helper.make_tensor_value_info("y", F, [2, 1])]),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)], functions=[fn])
    with pytest.raises(ConversionRefused, match="function local:Mean.*caller attribute"):
        convert(io.load_proto(proto), 18)


def test_subgraphs_are_converted_and_both_branches_agree():
    def branch(name, op):
        return helper.make_graph([helper.make_node(op, ["x"], [f"{name}_out"], axes=[1], keepdims=1)], name, [],
                                 [helper.make_tensor_value_info(f"{name}_out", F, [2, 1])])

    proto = helper.make_model(
        helper.make_graph([helper.make_node("If", ["c"], ["y"], then_branch=branch("then", "ReduceMean"),
                                            else_branch=branch("else", "ReduceMax"))], "g",
                          [helper.make_tensor_value_info("x", F, [2, 3]), helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
                          [helper.make_tensor_value_info("y", F, [2, 1])]),
        opset_imports=[helper.make_opsetid("", 17)])
    model = io.load_proto(proto)
    result = convert(model, 18)
    assert result.ok
    [if_node] = result.model.graph.nodes("If")
    for sub in if_node.subgraphs():
        [reduce] = [n for n in sub.nodes() if n.op_type.startswith("Reduce")]
        assert len(reduce.inputs) == 2 and reduce.attr("axes") is None
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    for cond in (True, False):
        feeds = {"x": x, "c": np.array(cond)}
        assert verify(model, result.model, feeds=feeds).ok


def test_converter_refusals_name_the_op(run_cli, tmp_path):
    with pytest.raises(ConversionRefused, match="No Previous Version of Gelu exists"):
        convert(io.load(f"{FIXTURES}/torch/vit_dynamo.onnx"), 17)
    out = tmp_path / "gpt2.onnx"
    r = run_cli("convert", f"{FIXTURES}/torch/gpt2_dynamo.onnx", "--opset", "17", "-o", str(out))
    assert r.exit_code == 2 and not out.exists()
    assert r.stderr.startswith("graphtool: error: cannot convert the model from opset 20 to 17: No Adapter From Version $18 for Split")
    assert len(r.stderr.strip().splitlines()) == 1


def test_op_without_schema_is_named_not_printf_noise():
    # onnx's converter raises "Op '%s' has no registered schema ... %lld" unformatted, the op glued on the end
    graph = helper.make_graph([helper.make_node("Frobnicate", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", F, [2])], [helper.make_tensor_value_info("y", F, [2])])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    proto.ir_version = 8
    with pytest.raises(ConversionRefused) as refused:
        convert(io.load_proto(proto), 18)
    assert str(refused.value) == ("cannot convert the model from opset 17 to 18: "
                                  "op 'Frobnicate' has no registered schema, so onnx's converter cannot convert it")


def test_invalid_converter_output_is_refused(monkeypatch):
    real = onnx.version_converter.convert_version

    def sloppy(model, target):
        out = real(model, target)
        out.graph.node[0].attribute.append(helper.make_attribute("bogus", 1))
        return out

    monkeypatch.setattr(onnx.version_converter, "convert_version", sloppy)
    with pytest.raises(ConversionRefused, match="produced an invalid model at opset 18.*bogus"):
        convert(io.load(f"{FIXTURES}/conv_bn.onnx"), 18)


def test_converter_that_drops_metadata_cannot_lose_it(monkeypatch):
    real = onnx.version_converter.convert_version

    def forgetful(model, target):
        out = real(model, target)
        del out.metadata_props[:]
        out.doc_string = ""
        return out

    monkeypatch.setattr(onnx.version_converter, "convert_version", forgetful)
    original = io.load(f"{FIXTURES}/conv_bn.onnx")
    assert len(original.proto_shell.metadata_props) == 2
    out = to_onnx(convert(original, 18).model)
    assert list(out.metadata_props) == list(original.proto_shell.metadata_props)


def test_mismatch_exits_1_and_writes_nothing(run_cli, monkeypatch, tmp_path):
    real = onnx.version_converter.convert_version

    def wrong(model, target):
        out = real(model, target)
        for node in out.graph.node:
            if node.op_type == "Relu":
                node.op_type = "Sigmoid"
        return out

    monkeypatch.setattr(onnx.version_converter, "convert_version", wrong)
    out = tmp_path / "out.onnx"
    r = run_cli("convert", f"{FIXTURES}/conv_bn.onnx", "--opset", "18", "-o", str(out))
    assert r.exit_code == 1 and not out.exists() and os.listdir(tmp_path) == []
    assert r.stderr.startswith("graphtool: error: the converted model differs from the original: output")
    assert len(r.stderr.strip().splitlines()) == 1


def test_cli_writes_verified_model_with_external_data(run_cli, tmp_path):
    out = tmp_path / "out.onnx"
    r = run_cli("convert", f"{FIXTURES}/external_data.onnx", "--opset", "18", "-o", str(out))
    assert r.exit_code == 0, r.stderr
    assert "ai.onnx opset 17 → 18" in r.stdout and "verified with onnxruntime: outputs equal" in r.stdout
    assert (tmp_path / "out.onnx.data").exists()
    converted = io.load(out)
    assert converted.opset("") == 18
    assert verify(io.load(f"{FIXTURES}/external_data.onnx"), converted).ok


def test_cli_json_and_usage_errors(run_cli, tmp_path):
    import json

    out = tmp_path / "r.onnx"
    r = run_cli("convert", "--json", light_model("squeezenet"), "--opset", "13", "-o", str(out))
    report = json.loads(r.stdout)
    assert r.exit_code == 0 and report["ok"] and report["from_opset"] == 9 and report["to_opset"] == 13
    assert report["ir_version"] == {"before": 3, "after": 7} and report["verification"]["ok"]
    r = run_cli("convert", light_model("squeezenet"), "--opset", "99", "-o", str(out))
    assert r.exit_code == 2 and "not an ai.onnx opset" in r.stderr
    r = run_cli("convert", light_model("squeezenet"), "--opset", "13", "-o", str(tmp_path / "no" / "x.onnx"))
    assert r.exit_code == 2 and "folder does not exist" in r.stderr
    r = run_cli("convert", light_model("squeezenet"), "-o", str(out))
    assert r.exit_code == 2  # --opset is required
    same = tmp_path / "same.onnx"
    r = run_cli("convert", f"{FIXTURES}/conv_bn.onnx", "--opset", "17", "-o", str(same))
    assert r.exit_code == 0 and "already at that opset" in r.stdout
    assert io.to_bytes(io.load(same)) == io.to_bytes(io.load(f"{FIXTURES}/conv_bn.onnx"))


def test_no_verify_skips_onnxruntime(run_cli, tmp_path):
    out = tmp_path / "out.onnx"
    r = run_cli("convert", f"{FIXTURES}/if_subgraph.onnx", "--opset", "18", "-o", str(out), "--no-verify")
    assert r.exit_code == 0 and "not verified" in r.stdout
    make_session(str(out))


# ---------------------------------------------------------------- every light model, up and down (slow)

LIGHT = sorted(glob.glob(os.path.join(BACKEND_DATA, "light", "*.onnx")))
CHAIN = (13, 17, 13, 9)


@pytest.mark.slow
@pytest.mark.parametrize("path", LIGHT, ids=[os.path.basename(p)[6:-5] for p in LIGHT])
def test_light_models_up_and_down(path):
    """9 → 13 → 17 always works; back down to 13 works thanks to pinning; to 9 only Dropout
    (its ratio became an input at 12, which onnx cannot move back) stops some models."""
    original = io.load(path)
    current = original
    for target in CHAIN:
        try:
            result = convert(current, target)
        except ConversionRefused as err:
            assert target == 9 and "for Dropout" in str(err), str(err)
            return
        assert result.ok, result.verification.summary()
        assert verify(original, result.model).ok
        current = result.model
    assert current.opset("") == 9
