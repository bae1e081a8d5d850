"""CLI manners (issue 35): refusals that say what to do, "did you mean", a report without idle rows."""

from __future__ import annotations

import json
import os
import shutil

from tests.conftest import FIXTURES


def test_optimize_refuses_to_overwrite_its_input_unless_forced(run_cli, tmp_path):
    model = tmp_path / "a.onnx"
    shutil.copy(os.path.join(FIXTURES, "conv_bn.onnx"), model)
    before = model.read_bytes()
    r = run_cli("optimize", str(model), "-o", str(model))
    assert r.exit_code == 2 and "is the input model itself" in r.stderr and "--force" in r.stderr
    assert model.read_bytes() == before
    r = run_cli("optimize", str(model), "-o", str(tmp_path / "." / "a.onnx"))  # another spelling
    assert r.exit_code == 2 and model.read_bytes() == before
    r = run_cli("optimize", str(model), "-o", str(model), "--force")
    assert r.exit_code == 0, r.stderr
    assert model.read_bytes() != before and "verification: outputs equal" in r.stdout


def test_level_3_without_target_ort_is_refused_with_a_reason(run_cli, tmp_path):
    r = run_cli("optimize", os.path.join(FIXTURES, "conv_bn.onnx"), "-o", str(tmp_path / "o.onnx"), "--level", "3")
    assert r.exit_code == 2 and not r.stdout
    assert r.stderr.startswith("graphtool: error: --level 3 is onnxruntime's layout level") and "--target ort" in r.stderr
    assert not (tmp_path / "o.onnx").exists()
    r = run_cli("optimize", os.path.join(FIXTURES, "conv_bn.onnx"), "-o", str(tmp_path / "o.onnx"), "--level", "3",
                "--target", "ort")
    assert r.exit_code == 0 and "verification: outputs equal" in r.stdout, r.stderr


def test_did_you_mean_for_passes(run_cli, tmp_path):
    r = run_cli("optimize", os.path.join(FIXTURES, "conv_bn.onnx"), "-o", str(tmp_path / "o.onnx"),
                "--passes", "fold-constant")
    assert r.exit_code == 2 and "did you mean 'fold-constants'?" in r.stderr
    r = run_cli("optimize", os.path.join(FIXTURES, "conv_bn.onnx"), "-o", str(tmp_path / "o.onnx"),
                "--skip", "dead-code-elimnation")
    assert r.exit_code == 2 and "did you mean 'dead-code-elimination'?" in r.stderr


def test_report_hides_idle_passes_unless_all(run_cli, tmp_path):
    out = str(tmp_path / "o.onnx")
    r = run_cli("optimize", os.path.join(FIXTURES, "conv_bn.onnx"), "-o", out)
    assert r.exit_code == 0, r.stderr
    table = r.stdout.split("\n\n")[0].splitlines()[2:]
    rows = [line for line in table if not line.startswith("(")]
    assert rows and all(line.split()[0] == "fuse-conv-batch-norm" for line in rows)
    assert "more passes ran and changed nothing; --all lists them" in r.stdout
    full = run_cli("optimize", os.path.join(FIXTURES, "conv_bn.onnx"), "-o", out, "--all")
    assert "dead-code-elimination" in full.stdout and "--all lists them" not in full.stdout
    doc = json.loads(run_cli("optimize", os.path.join(FIXTURES, "conv_bn.onnx"), "-o", out, "--json").stdout)
    assert len(doc["report"]["passes"]) > len(rows)  # --json keeps every row


def test_verification_input_shapes_are_in_the_text_report(run_cli, tmp_path):
    r = run_cli("optimize", os.path.join(FIXTURES, "conv_bn.onnx"), "-o", str(tmp_path / "o.onnx"))
    assert "  set 1: seed 0, defaults: input=2x3x16x16" in r.stdout


def test_inspect_counts_weights_held_in_constant_nodes(run_cli, tmp_path):
    """Exporters such as tf2onnx and paddle write weights as Constant nodes: they are parameters."""
    import onnx
    from onnx import helper

    model = onnx.load(os.path.join(FIXTURES, "conv_bn.onnx"))
    plain = json.loads(run_cli("inspect", os.path.join(FIXTURES, "conv_bn.onnx"), "--json").stdout)["parameters"]
    consts = [helper.make_node("Constant", [], [t.name], value=t) for t in model.graph.initializer]
    nodes = consts + list(model.graph.node)
    del model.graph.initializer[:]
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    path = str(tmp_path / "constants.onnx")
    onnx.save(model, path)
    doc = json.loads(run_cli("inspect", path, "--json").stdout)["parameters"]
    assert doc["initializers"] == 0 and doc["constant_nodes"] == len(consts) > 0
    assert doc["elements"] == plain["elements"] > 0 and doc["bytes"] == plain["bytes"]
    text = run_cli("inspect", path).stdout
    assert f"{plain['elements']:,} in 0 initializers and {len(consts)} Constant nodes" in text


def test_a_picture_format_that_contradicts_the_file_name_is_refused(run_cli, tmp_path):
    model = os.path.join(FIXTURES, "conv_bn.onnx")
    out = tmp_path / "d.svg"
    r = run_cli("diff", model, model, "--format", "html", "-o", str(out))
    assert r.exit_code == 2 and "--format html but -o" in r.stderr and not out.exists()
    r = run_cli("viz", model, "--format", "html", "-o", str(out))
    assert r.exit_code == 2 and not out.exists()
    r = run_cli("diff", model, model, "--format", "html", "-o", str(tmp_path / "d.html"))
    assert r.exit_code == 0 and (tmp_path / "d.html").read_text().lstrip().lower().startswith("<!doctype html")


def test_around_says_what_was_meant(run_cli, tmp_path):
    model = os.path.join(FIXTURES, "torch", "cnn_ts.onnx")
    r = run_cli("viz", model, "--around", "Relu", "-o", str(tmp_path / "x.svg"))
    assert r.exit_code == 2 and "Relu is an op type (5 nodes): give a node name, e.g. '/stem/stem.2/Relu'" in r.stderr
    r = run_cli("viz", model, "--around", "stem.2/Relux", "-o", str(tmp_path / "x.svg"))
    assert r.exit_code == 2 and "did you mean '/stem/stem.2/Relu'?" in r.stderr


def test_memory_limit_errors_name_the_variable_that_set_it(tmp_path):
    import subprocess
    import sys

    env = dict(os.environ, GRAPHTOOL_MEMORY_LIMIT="12x")
    proc = subprocess.run([sys.executable, "-m", "graphtool", "inspect", os.path.join(FIXTURES, "conv_bn.onnx")],
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "graphtool: error: GRAPHTOOL_MEMORY_LIMIT=12x: expected a size such as 8G or 512M"
    from graphtool.runtime import sandbox

    saved = (sandbox.CONFIG.memory_source, sandbox.CONFIG.time_source)
    try:
        sandbox.CONFIG.memory_source = "GRAPHTOOL_MEMORY_LIMIT=300M"
        assert sandbox.CONFIG.raise_hint("memory") == "GRAPHTOOL_MEMORY_LIMIT=300M set it: raise it (or pass --memory-limit)"
        sandbox.CONFIG.memory_source = "--memory-limit"
        assert sandbox.CONFIG.raise_hint("memory") == "--memory-limit raises it"
    finally:
        sandbox.CONFIG.memory_source, sandbox.CONFIG.time_source = saved
