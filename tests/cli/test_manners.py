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


def test_level_3_is_refused_with_a_reason(run_cli, tmp_path):
    r = run_cli("optimize", os.path.join(FIXTURES, "conv_bn.onnx"), "-o", str(tmp_path / "o.onnx"), "--level", "3")
    assert r.exit_code == 2 and "compare-only" not in r.stdout
    assert r.stderr.startswith("graphtool: error: --level 3 is onnxruntime's layout level") and "--level 2" in r.stderr
    assert not (tmp_path / "o.onnx").exists()


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
    assert "verified on: input [2, 3, 16, 16] float32 | input [2, 3, 16, 16] float32" in r.stdout
