"""graphtool compare: exit codes, the text table, --json (schema-checked), --html, --latency."""

from __future__ import annotations

import importlib.util
import json
import re

import onnx

from graphtool.compare import JSON_SCHEMA
from tests.compare.test_compare import conv_relu_model, schema_errors
from tests.conftest import FIXTURES

CONV_BN = f"{FIXTURES}/conv_bn.onnx"


def test_compare_json_is_one_valid_document(run_cli):
    r = run_cli("compare", "--json", "--levels", "1,2", CONV_BN)
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert schema_errors(doc, JSON_SCHEMA) == []
    assert [lv["level"] for lv in doc["levels"]] == [1, 2] and doc["latency"] is None
    assert doc["model"] == CONV_BN and doc["target"] == "onnx"
    level2 = doc["levels"][1]
    assert level2["ort"]["op_histogram"]["com.microsoft"] == {"FusedConv": 2}
    assert level2["fusions"]["ort_only"][0]["pattern"] == "Conv+BatchNormalization+Relu → FusedConv"


def test_compare_text_names_the_fusion(run_cli, tmp_path):
    path = tmp_path / "conv_relu.onnx"
    onnx.save(conv_relu_model(blocks=3), path)
    r = run_cli("compare", "--levels", "2", str(path))
    assert r.exit_code == 0, r.stderr
    assert "Conv+Relu → FusedConv ×3" in r.stdout
    assert "fusions ORT applied that graphtool did not:" in r.stdout
    assert "com.microsoft  FusedConv" in r.stdout  # the side-by-side histogram row
    assert "ORT vs graphtool: max abs" in r.stdout


def test_compare_html_and_latency(run_cli, tmp_path):
    out = tmp_path / "report.html"
    r = run_cli("compare", "--levels", "1,3", "--latency", "--runs", "2", "--warmup", "0", "--html", str(out), CONV_BN)
    assert r.exit_code == 0, r.stderr
    assert "speed-up" in r.stdout
    assert re.search(r"^1\.00x\s+original\s+off\s", r.stdout, re.M)  # the baseline row
    assert len(re.findall(r"^\d+\.\d\dx\s+graphtool L[12]\s+(off|basic|all)\s", r.stdout, re.M)) == 6
    page = out.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and "<table>" in page and "Latency" in page
    assert "<script" not in page
    if importlib.util.find_spec("graphtool.diff.run") is not None:  # the graph diff joins the tables
        assert "Level 3: graph diff, ORT L3 (all) → graphtool" in page


def test_compare_target_ort_is_recorded(run_cli):
    r = run_cli("compare", "--json", "--levels", "1", "--target", "ort", CONV_BN)
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["levels"][0]["target"] == "ort"


def test_compare_bad_levels_and_missing_file_exit_2(run_cli, tmp_path):
    for args in (("--levels", "0,4"), ("--levels", "two")):
        r = run_cli("compare", *args, CONV_BN)
        assert r.exit_code == 2 and r.stderr.startswith("graphtool: error: --levels")
        assert "Traceback" not in r.stderr
    r = run_cli("compare", str(tmp_path / "nope.onnx"))
    assert r.exit_code == 2 and "no such file" in r.stderr
    r = run_cli("compare", "--html", str(tmp_path / "missing" / "x.html"), CONV_BN)
    assert r.exit_code == 2 and "folder does not exist" in r.stderr
    assert not (tmp_path / "missing").exists()


def test_compare_all_three_levels_run_graphtools_graph(run_cli):
    """Levels 2 and 3 share graphtool's level-2 graph, its trace and its session: both must get
    the session (a sandboxed one is handed over once), and both report its outputs."""
    r = run_cli("compare", "--json", CONV_BN)
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [lv["level"] for lv in doc["levels"]] == [1, 2, 3]
    assert [lv["graphtool_level"] for lv in doc["levels"]] == [1, 2, 2]
    for level in doc["levels"]:
        assert level["outputs"]["graphtool_vs_original"]["ok"], level["outputs"]
        assert level["outputs"]["ort_vs_graphtool"]["outputs"], level["outputs"]


def test_ort_starts_on_the_file_bytes_before_the_ir_is_built(run_cli, monkeypatch, tmp_path):
    """compare hands ORT the file's bytes as soon as they parse (its optimizer runs while
    graphtool's IR builds) and uses that job; a model whose bytes may name external data waits."""
    import graphtool.cli.compare_cmd as cmd
    from graphtool import io
    from graphtool.compare import run
    from graphtool.compare.run import ort_job_from_file_bytes
    from graphtool.runtime import sandbox

    seen: list[bool] = []
    load = io.load

    def spy_load(path, **kwargs):
        parsed = kwargs.get("parsed")
        if parsed is not None:
            def hook(data, proto):
                seen.append(data == open(path, "rb").read())  # the very bytes, before from_onnx
                parsed(data, proto)
            kwargs["parsed"] = hook
        return load(path, **kwargs)

    started: list[object] = []

    def spy_job(data, nodes, level):
        job = ort_job_from_file_bytes(data, nodes, level)
        started.append(job)
        return job

    monkeypatch.setattr(cmd.io, "load", spy_load)
    monkeypatch.setattr(run, "ort_job_from_file_bytes", spy_job)
    r = run_cli("compare", "--json", "--levels", "2", CONV_BN)
    assert r.exit_code == 0, r.stderr
    assert seen == [True] and len(started) == 1
    assert (started[0] is not None) == sandbox.enabled()  # the CLI sandboxes sessions unless told not to
    level = json.loads(r.stdout)["levels"][0]
    assert level["ort"]["op_histogram"]["com.microsoft"] == {"FusedConv": 2}
    assert level["outputs"]["ort_vs_original"]["ok"], level["outputs"]
    assert ort_job_from_file_bytes(b"...location...", 1, 1) is None
