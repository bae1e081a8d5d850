"""graphtool check on the command line: exit codes, the table, --json, --runtime; inspect's line."""

from __future__ import annotations

import json
import os

from tests.conftest import FIXTURES, light_model

BROKEN = os.path.join(FIXTURES, "broken")


def test_clean_model_exits_0(run_cli):
    r = run_cli("check", f"{FIXTURES}/conv_bn.onnx")
    assert r.exit_code == 0, r.stderr
    assert r.stdout.strip() == "check (onnxruntime CPU): 0 errors, 0 warnings"


def test_info_findings_do_not_fail(run_cli):
    r = run_cli("check", light_model("resnet50"))
    assert r.exit_code == 0
    assert "info      ir-version" in r.stdout and r.stdout.rstrip().endswith("0 errors, 0 warnings, 1 info")


def test_errors_exit_1_with_a_row_per_finding(run_cli):
    r = run_cli("check", f"{BROKEN}/bad_attributes.onnx")
    assert r.exit_code == 1 and r.stderr == ""
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["severity", "kind", "node", "message", "hint"]
    rows = [line for line in lines[2:] if line.startswith("error")]
    assert [row.split()[2] for row in rows] == ["relu_alpha", "softmax_float_axis", "cast_no_to"]
    assert "Cast at ai.onnx opset 17 requires attribute 'to'" in r.stdout
    assert lines[-1] == "check (onnxruntime CPU): 3 errors, 0 warnings"


def test_warnings_alone_exit_1(run_cli):
    r = run_cli("check", f"{BROKEN}/duplicate_import.onnx")
    assert r.exit_code == 1 and "0 errors, 1 warning" in r.stdout


def test_json_document(run_cli):
    r = run_cli("check", "--json", f"{BROKEN}/gelu_in_subgraph.onnx")
    assert r.exit_code == 1
    report = json.loads(r.stdout)
    assert report["errors"] == 1 and report["warnings"] == 0 and report["runtime"] == "ort"
    [f] = report["findings"]
    assert f == {
        "severity": "error", "kind": "op-not-in-opset", "node": "then_branch_gelu", "scope": "main/then_branch",
        "op": "ai.onnx:Gelu", "message": "Gelu does not exist at ai.onnx opset 17; it needs opset ≥ 20",
        "hint": f["hint"],
    }


def test_runtime_none_skips_kernel_checks(run_cli):
    r = run_cli("check", "--json", f"{BROKEN}/bfloat16_add.onnx")
    assert r.exit_code == 1 and json.loads(r.stdout)["findings"][0]["kind"] == "no-kernel"
    r = run_cli("check", "--runtime", "none", f"{BROKEN}/bfloat16_add.onnx")
    assert r.exit_code == 0 and "ONNX standard only" in r.stdout


def test_many_identical_findings_share_a_row(run_cli, tmp_path):
    from onnx import TensorProto, helper, save

    nodes = [helper.make_node("Gelu", [f"v{i}"], [f"v{i + 1}"], name=f"g{i}") for i in range(5)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("v0", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("v5", TensorProto.FLOAT, [2])])
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "m.onnx")
    r = run_cli("check", str(tmp_path / "m.onnx"))
    assert r.exit_code == 1
    assert "g0 (+4 more)" in r.stdout and r.stdout.count("Gelu does not exist") == 1
    assert len(json.loads(run_cli("check", "--json", str(tmp_path / "m.onnx")).stdout)["findings"]) == 5


def test_bad_input_and_usage_exit_2(run_cli, tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    for args in (("check", str(bad)), ("check", "/nonexistent.onnx"), ("check", "--runtime", "tensorrt", f"{FIXTURES}/conv_bn.onnx")):
        r = run_cli(*args)
        assert r.exit_code == 2, args
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


def test_inspect_shows_the_check_line(run_cli):
    r = run_cli("inspect", f"{BROKEN}/upsample_opset10.onnx")
    assert r.exit_code == 0
    assert r.stdout.rstrip().endswith("check: 1 error, 0 warnings")
    report = json.loads(run_cli("inspect", "--json", light_model("resnet50")).stdout)
    assert report["check"] == "0 errors, 0 warnings, 1 info"
