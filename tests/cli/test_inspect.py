"""graphtool inspect on real models: JSON fields and the human table."""

from __future__ import annotations

import json
import resource

from tests.conftest import FIXTURES, light_model


def test_inspect_json_resnet50(run_cli):
    r = run_cli("inspect", "--json", light_model("resnet50"))
    assert r.exit_code == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["ir_version"] == 3 and report["opset_imports"] == {"ai.onnx": 9}
    assert report["nodes"]["total"] == 415
    assert report["op_histogram"]["ai.onnx"]["Conv"] == 53
    assert report["op_histogram"]["ai.onnx"]["BatchNormalization"] == 53
    assert report["inputs"] == [{"name": "gpu_0/data_0", "dtype": "float", "shape": [1, 3, 224, 224]}]
    assert report["checker"] == "ok"
    assert report["ort_missing_kernels"] == []


def test_inspect_json_counts_subgraph_nodes(run_cli):
    r = run_cli("inspect", "--json", f"{FIXTURES}/if_subgraph.onnx")
    report = json.loads(r.stdout)
    assert report["nodes"] == {"total": 10, "main_graph": 4, "in_subgraphs": 6}
    assert {s["name"]: s["nodes"] for s in report["subgraphs"]} == {"then_branch": 2, "else_branch": 4}
    assert sorted(report["subgraphs"][0]["captures"] + report["subgraphs"][1]["captures"]) == ["bias", "x_scaled", "x_scaled"]


def test_inspect_functions_and_external_params(run_cli):
    report = json.loads(run_cli("inspect", "--json", f"{FIXTURES}/local_function.onnx").stdout)
    assert report["functions"][0]["name"] == "Standardize" and report["functions"][0]["nodes"] == 7
    report = json.loads(run_cli("inspect", "--json", f"{FIXTURES}/external_data.onnx").stdout)
    assert report["parameters"]["elements"] == 64 * 64 + 64 * 32 + 32
    assert report["parameters"]["external_bytes"] == report["parameters"]["bytes"]


def test_inspect_human_table(run_cli):
    r = run_cli("inspect", light_model("resnet50"))
    assert r.exit_code == 0
    assert "IR version  3" in r.stdout
    assert "BatchNormalization  53" in r.stdout
    assert "gpu_0/data_0" in r.stdout and "[1, 3, 224, 224]" in r.stdout


def test_inspect_flags_ops_without_cpu_kernel(run_cli, tmp_path):
    import onnx
    from onnx import TensorProto, helper

    node = helper.make_node("NoSuchOp", ["x"], ["y"], domain="acme")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("acme", 1)])
    onnx.save(model, tmp_path / "m.onnx")
    report = json.loads(run_cli("inspect", "--json", str(tmp_path / "m.onnx")).stdout)
    assert report["ort_missing_kernels"] == [{"domain": "acme", "op_type": "NoSuchOp", "opset": 1, "reason": "no CPU kernel"}]
