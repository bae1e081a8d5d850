"""Verification on models random inputs cannot run: discovery, user inputs, branch coverage.

The fixtures (fixtures/verify/, made by fixtures/make_verify_fixtures.py) fail the way real
exports do: an int64 sample rate that selects an If branch, a model that runs at one image size,
a branch random inputs never take, a model that runs on nothing a search would try.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from graphtool import io
from graphtool.errors import ModelDoesNotRun
from graphtool.optimize import optimize
from graphtool.verify import InputSpec, compared_values, id_bounds, metadata_sizes, shape_plan, verify
from tests.conftest import FIXTURES

VERIFY = os.path.join(FIXTURES, "verify")


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "graphtool", *args], capture_output=True, text=True, timeout=300)


def _path(name: str) -> str:
    return os.path.join(VERIFY, f"{name}.onnx")


def test_int_scalar_compared_with_two_constants_runs_both_branches_without_flags():
    model = io.load(_path("if_sr"))
    optimized, report, _ = optimize(model, level=1)
    assert report.nodes_before > report.nodes_after or optimized.node_count() < model.node_count()
    result = verify(model, optimized)
    assert result.ok
    assert "sr ∈ {16000, 8000}" in result.discovery.how
    srs = sorted(int(s.feeds["sr"]) for s in result.input_sets)
    assert 16000 in srs and 8000 in srs and len(result.input_sets) >= 2
    (site,) = result.coverage.sites
    assert site.then_ran and site.else_ran
    assert result.unverified == []


def test_rewrite_in_branch_no_input_reaches_is_unverified_and_strict_fails(tmp_path):
    model = io.load(_path("if_unreached"))
    optimized, _, _ = optimize(model, level=1)
    result = verify(model, optimized)
    assert result.ok
    (site,) = result.coverage.sites
    assert site.else_ran and not site.then_ran
    assert result.unverified == [f"{site.path} then"]
    out = tmp_path / "out.onnx"
    proc = _cli("optimize", _path("if_unreached"), "-o", str(out), "--strict")
    assert proc.returncode == 1, proc.stderr
    assert "unverified" in proc.stderr and "then" in proc.stderr and not out.exists()
    assert len(proc.stderr.strip().splitlines()) == 1
    assert _cli("optimize", _path("if_unreached"), "-o", str(out)).returncode == 0 and out.exists()


def test_unreached_branch_without_a_rewrite_is_not_unverified():
    model = io.load(_path("if_unreached"))
    optimized, _, _ = optimize(model, level=1, skip=["eliminate-no-ops", "fold-constants"])
    result = verify(model, optimized)
    assert result.ok and not result.coverage.sites[0].then_ran
    assert result.unverified == []


def test_model_that_runs_at_one_image_size_is_found_by_the_size_ladder():
    model = io.load(_path("one_size"))
    result = verify(model, model)
    assert result.ok
    assert result.discovery.how == "size ladder"
    assert list(result.input_sets[0].feeds["image"].shape) == [1, 3, 224, 224]


def test_inputs_from_npz_and_from_pb_folder(tmp_path):
    x = np.random.default_rng(3).standard_normal((2, 5)).astype(np.float32)
    npz = tmp_path / "in.npz"
    np.savez(npz, x=x, sr=np.array(8000, np.int64))
    folder = tmp_path / "test_data_set_0"
    folder.mkdir()
    for i, (name, arr) in enumerate((("x", x), ("sr", np.array(8000, np.int64)))):
        (folder / f"input_{i}.pb").write_bytes(numpy_helper.from_array(arr, name).SerializeToString())
    for given in (npz, folder):
        out = tmp_path / f"out_{given.name}.onnx"
        proc = _cli("optimize", _path("if_sr"), "-o", str(out), "--inputs", str(given), "--json")
        assert proc.returncode == 0, proc.stderr
        ver = json.loads(proc.stdout)["verification"]
        assert ver["ok"] and ver["input_sets"] == ["given set 1"] and ver["inputs_found"] is None
        site = ver["coverage"]["sites"][0]
        assert site["else"] and not site["then"]  # sr = 8000 takes the else branch only


def test_input_value_flag_verifies_on_each_value(tmp_path):
    proc = _cli("optimize", _path("if_sr"), "-o", str(tmp_path / "o.onnx"), "--input-value", "sr=16000", "--json")
    assert proc.returncode == 0, proc.stderr
    ver = json.loads(proc.stdout)["verification"]
    assert all("sr=16000" in label for label in ver["input_sets"])
    assert ver["coverage"]["sites"][0]["then"] and not ver["coverage"]["sites"][0]["else"]


def test_model_that_fails_on_everything_gets_one_line_and_exit_2(tmp_path):
    out = tmp_path / "out.onnx"
    proc = _cli("optimize", _path("never_runs"), "-o", str(out))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "internal error" not in lines[0] and "Traceback" not in proc.stderr
    assert "original model fails in onnxruntime" in lines[0]
    assert "--inputs" in lines[0] and "--input-value" in lines[0] and "--no-verify" in lines[0]
    assert "requested shape" in lines[0]  # onnxruntime's own reason is quoted
    assert not out.exists()
    proc = _cli("optimize", _path("never_runs"), "-o", str(out), "--input-shape", "signal=1001")
    assert proc.returncode == 0, proc.stderr


def test_model_that_ran_before_costs_one_attempt():
    model = io.load(os.path.join(FIXTURES, "conv_bn.onnx"))
    result = verify(model, model)
    assert result.ok and result.discovery.attempts == 1 and len(result.input_sets) >= 2


def test_user_inputs_the_model_rejects_are_a_model_error():
    model = io.load(_path("never_runs"))
    with pytest.raises(ModelDoesNotRun, match="on the inputs given"):
        verify(model, model, feeds={"signal": np.zeros(5, np.float32)})


def test_evidence_readers():
    proto = onnx.load(_path("if_sr"))
    specs = [InputSpec("x", "tensor(float)", ["batch", "samples"]), InputSpec("sr", "tensor(int64)", [])]
    assert compared_values(proto, specs) == {"sr": [16000, 8000]}
    emb = onnx.helper.make_graph(
        [onnx.helper.make_node("Cast", ["ids"], ["ids64"], to=onnx.TensorProto.INT64),
         onnx.helper.make_node("Gather", ["table", "ids64"], ["e"])], "g",
        [onnx.helper.make_tensor_value_info("ids", onnx.TensorProto.INT32, ["n"])],
        [onnx.helper.make_tensor_value_info("e", onnx.TensorProto.FLOAT, ["n", 2])],
        initializer=[numpy_helper.from_array(np.zeros((3, 2), np.float32), "table")])
    assert id_bounds(onnx.helper.make_model(emb), [InputSpec("ids", "tensor(int32)", ["n"])]) == {"ids": 3}
    meta = onnx.helper.make_model(emb)
    onnx.helper.set_model_props(meta, {"imgsz": "[320, 320]"})
    assert metadata_sizes(meta) == [320]
    image = [InputSpec("images", "tensor(float)", ["batch", 3, "h", "w"]), InputSpec("mask", "tensor(bool)", ["batch", "h"])]
    assert shape_plan(image, 64, 1, {}) == {"images": [1, 3, 64, 64], "mask": [1, 64]}
