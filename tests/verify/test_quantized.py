"""Quantization-aware tolerance: a quantized output may move by steps of its own grid, read from
the model; a planted mutation in a QDQ model is still caught, and float models keep theirs.

The QDQ models are the small CNN and ResNet block of tests/passes/qdq_models.py, quantized at test
time by onnxruntime's own ``quantize_static``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphtool import io
from graphtool.ir.from_onnx import from_onnx
from graphtool.optimize import optimize
from graphtool.runtime import make_session
from graphtool.verify import compare_arrays, quantized_outputs, verify
from tests.passes import qdq_models


@pytest.fixture(scope="module")
def qdq(tmp_path_factory):
    folder = str(tmp_path_factory.mktemp("qdq"))
    return {"cnn": qdq_models.quantized_cnn(folder, per_channel=False),
            "resnet": qdq_models.quantized_cnn(folder, per_channel=True, resnet=True)}


def _dq_scale(model, output: str) -> float:
    node = model.graph.producer(output)
    assert node.op_type == "DequantizeLinear"
    return float(model.graph.const(node.inputs[1]))


def test_grid_is_read_from_the_models_own_dequantize(qdq):
    for path in qdq.values():
        model = io.load(path)
        (name, grid), = quantized_outputs(model).items()
        assert name == "y" and not grid.integer and grid.steps == 2
        assert float(grid.scale) == pytest.approx(_dq_scale(model, "y"), rel=1e-7)
        assert grid.atol((1, 10)) == pytest.approx(2 * _dq_scale(model, "y"), rel=1e-5)


def test_level2_ort_is_judged_by_the_grid_where_fp32_tolerances_call_it_a_mismatch(qdq):
    original = io.load(qdq["cnn"])
    fused, _, _ = optimize(original, level=2, target="ort")
    result = verify(original, fused)
    (out,) = result.outputs
    step = _dq_scale(original, "y")
    # the fused integer kernels land one grid step away from the float-then-round original
    assert out.max_abs == pytest.approx(step, rel=1e-5)
    feeds = result.input_sets[0].feeds
    ref, got = (make_session(m).run(None, feeds)[0] for m in (original, fused))
    assert not compare_arrays("y", ref, got).ok  # the fp32 default would report a mismatch
    assert result.ok and out.quantized and out.noise is None  # the grid decided, not the noise floor
    assert f"'y' quantized output: 2 steps of scale {step:.3g} (DequantizeLinear)" in result.summary()


def test_a_per_channel_dequantized_output_gets_a_step_per_channel():
    rng = np.random.default_rng(0)
    scales = np.array([0.5, 0.01, 0.2], np.float32)
    q = helper.make_tensor_value_info("q", TensorProto.UINT8, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    graph = helper.make_graph([helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], axis=1)], "g", [q], [y],
                              [numpy_helper.from_array(scales, "s"), numpy_helper.from_array(np.zeros(3, np.uint8), "z")])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    proto.ir_version = 8
    grid = quantized_outputs(from_onnx(proto))["y"]
    atol = grid.atol((2, 3))
    assert atol.shape == (1, 3) and np.allclose(atol.ravel(), 2 * scales, rtol=1e-5)
    ref = rng.integers(0, 50, (2, 3)).astype(np.float32) * scales
    one_step = ref + scales  # one step of each channel's own scale: fine
    assert compare_arrays("y", ref, one_step, 1e-3, atol).ok
    # three steps of the fine channel are less than one of the coarse one: still caught
    assert not compare_arrays("y", ref, ref + np.array([0, 3, 0], np.float32) * scales, 1e-3, atol).ok


def test_integer_output_may_differ_by_one_unit_only():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    y = helper.make_tensor_value_info("y", TensorProto.UINT8, [4])
    graph = helper.make_graph([helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"])], "g", [x], [y],
                              [numpy_helper.from_array(np.array(0.1, np.float32), "s"),
                               numpy_helper.from_array(np.array(128, np.uint8), "z")])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    proto.ir_version = 8
    grid = quantized_outputs(from_onnx(proto))["y"]
    assert grid.integer and grid.atol((4,)) == 1.0 and "1 unit" in grid.describe()
    a = np.array([1, 2, 3, 4], np.uint8)
    assert compare_arrays("y", a, a + np.array([0, 1, 0, 1], np.uint8), int_atol=1.0).ok
    assert not compare_arrays("y", a, a + np.array([0, 2, 0, 0], np.uint8), int_atol=1.0).ok
    assert not compare_arrays("y", a, a + np.array([0, 1, 0, 0], np.uint8)).ok  # no grid: exact


def test_float_model_keeps_float_tolerances():
    float_model = io.load(_float_resnet())
    assert quantized_outputs(float_model) == {}
    result = verify(float_model, float_model)
    assert result.ok and not result.outputs[0].quantized and "quantized" not in result.summary()
    assert result.outputs[0].rtol is None  # the user's fp32 rtol/atol, untouched


_FLOAT = {}


def _float_resnet() -> str:
    import tempfile

    if "path" not in _FLOAT:
        _FLOAT["path"] = qdq_models.float_resnet(os.path.join(tempfile.mkdtemp(), "float_resnet.onnx"))
    return _FLOAT["path"]


# --------------------------------------------------------------------------- planted mutations

MUTATIONS = textwrap.dedent('''
    """Wrong QDQ rewrites a quantization pass could make, planted for verification's tests."""
    import numpy as np
    from graphtool.pass_manager import Pass, PassResult

    def _weight_dqs(graph, ndim):
        return [n for n in graph.nodes("DequantizeLinear")
                if graph.const(n.inputs[0]) is not None and graph.const(n.inputs[0]).ndim == ndim]

    class RoundedWeightScale(Pass):
        """Folds the classifier's weight DequantizeLinear with its scale off by 5 % (a scale
        rounded to a power of two's neighbourhood, a wrong per-tensor merge)."""
        level = 1
        priority = 1

        def run(self, graph, ctx):
            if getattr(ctx, "_mutated", False):
                return PassResult(False, {"mutated": 0})
            dqs = _weight_dqs(graph, 2)  # the Gemm's
            if not dqs:
                return PassResult(False, {"mutated": 0})
            dq = dqs[-1]
            scale = graph.const(dq.inputs[1])
            graph.set_input(dq, 1, graph.add_initializer((scale * 1.05).astype(np.float32), "mut_scale"))
            ctx._mutated = True
            return PassResult(True, {"mutated": 1})

    class ChannelScalesReversed(Pass):
        """Reads a per-channel weight scale on the wrong end (the channel order reversed)."""
        level = 1
        priority = 1

        def run(self, graph, ctx):
            if getattr(ctx, "_mutated", False):
                return PassResult(False, {"mutated": 0})
            for dq in _weight_dqs(graph, 4):  # a Conv's
                scale = graph.const(dq.inputs[1])
                if scale.size > 1:
                    graph.set_input(dq, 1, graph.add_initializer(scale[::-1].copy(), "mut_scale"))
                    ctx._mutated = True
                    return PassResult(True, {"mutated": 1})
            return PassResult(False, {"mutated": 0})
''')


@pytest.fixture(scope="module")
def mutations(tmp_path_factory):
    site = tmp_path_factory.mktemp("site")
    (site / "gt_qmutations").mkdir()
    (site / "gt_qmutations" / "__init__.py").write_text(MUTATIONS)
    info = site / "gt_qmutations-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: gt-qmutations\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[graphtool.passes]\n"
                                           "rounded-weight-scale = gt_qmutations:RoundedWeightScale\n"
                                           "channel-scales-reversed = gt_qmutations:ChannelScalesReversed\n")
    return str(site)


def _optimize(path: str, out: str, site: str, *flags: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=site + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "graphtool", "optimize", path, "-o", out, *flags],
                          capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.parametrize("model,pass_name", [("cnn", "rounded-weight-scale"), ("resnet", "rounded-weight-scale"),
                                             ("resnet", "channel-scales-reversed")])
def test_a_planted_qdq_mutation_is_caught_at_level2_ort(qdq, mutations, tmp_path, model, pass_name):
    out = str(tmp_path / "out.onnx")
    flags = ("--level", "2", "--target", "ort")
    clean = _optimize(qdq[model], out, mutations, *flags)
    assert clean.returncode == 0 and "quantized output: 2 steps of scale" in clean.stdout, clean.stderr
    os.remove(out)
    proc = _optimize(qdq[model], out, mutations, *flags, "--plugins", pass_name)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "verification failed" in proc.stderr and pass_name in proc.stderr and "quantized output" in proc.stderr
    assert not os.path.exists(out)


def test_compare_judges_quantized_outputs_by_the_same_grid(qdq):
    from graphtool.compare import output_diffs

    original = io.load(qdq["cnn"])
    fused, _, _ = optimize(original, level=2, target="ort")
    feeds = {"x": np.random.default_rng(1).standard_normal(qdq_models.SHAPE).astype(np.float32)}
    diffs = output_diffs({"original": original, "graphtool": fused}, feeds=feeds)
    (out,) = diffs["graphtool_vs_original"]["outputs"]
    assert diffs["graphtool_vs_original"]["ok"] and out["quantized"].startswith("quantized output: 2 steps")
    # the planted classifier-scale error is still a MISMATCH there
    wrong = io.load(qdq["cnn"])
    dq = [n for n in wrong.graph.nodes("DequantizeLinear") if getattr(wrong.graph.const(n.inputs[0]), "ndim", 0) == 2][-1]
    wrong.graph.set_input(dq, 1, wrong.graph.add_initializer(wrong.graph.const(dq.inputs[1]) * np.float32(1.1), "s"))
    assert not output_diffs({"original": original, "graphtool": wrong}, feeds=feeds)["graphtool_vs_original"]["ok"]
