"""drop-zero-recurrent-state and reshape-infer-dim: the shape arithmetic torch wraps around an LSTM."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from tests.passes.helpers import const, model, ops, runner, vi

run = runner(["drop-zero-recurrent-state", "reshape-infer-dim", "dead-code-elimination"])
H = 4


def _lstm(fill: float, flatten_dynamic: bool = True):
    """x[T, B, 3] → LSTM with initial_h/c = ConstantOfShape([1, B, H], fill) → view(T * B, H)."""
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("Shape", ["x"], ["sx"]),
        helper.make_node("Gather", ["sx", "one"], ["b"], axis=0),
        helper.make_node("Unsqueeze", ["b", "zero_axis"], ["b1"]),
        helper.make_node("Concat", ["c1", "b1", "ch"], ["state_shape"], axis=0),
        helper.make_node("ConstantOfShape", ["state_shape"], ["h0"],
                         value=helper.make_tensor("v", TensorProto.FLOAT, [1], [fill])),
        helper.make_node("LSTM", ["x", "w", "r", "", "", "h0", "h0"], ["y", "", ""], hidden_size=H),
        helper.make_node("Shape", ["y"], ["sy"]),
        helper.make_node("Gather", ["sy", "zero"], ["t"], axis=0),
        helper.make_node("Gather", ["sy", "two"], ["bb"], axis=0),
        helper.make_node("Mul", ["t", "bb"], ["tb"]),
        helper.make_node("Unsqueeze", ["tb", "zero_axis"], ["tb1"]),
        helper.make_node("Concat", ["tb1", "ch"], ["flat"], axis=0),
        helper.make_node("Reshape", ["y", "flat"], ["out"]),
    ]
    inits = [const("one", np.array(1, np.int64)), const("zero", np.array(0, np.int64)),
             const("two", np.array(2, np.int64)), const("zero_axis", np.array([0], np.int64)),
             const("c1", np.array([1], np.int64)), const("ch", np.array([H], np.int64)),
             const("w", rng.standard_normal((1, 4 * H, 3)).astype(np.float32)),
             const("r", rng.standard_normal((1, 4 * H, H)).astype(np.float32))]
    return model(nodes, [vi("x", ["T", "B", 3])], [vi("out", ["TB", H])], inits)


def test_zero_state_dropped_and_view_target_becomes_constant():
    out, report = run(_lstm(0.0))
    assert ops(out) == ["LSTM", "Reshape"]
    assert out.graph.const(out.graph.producer("out").inputs[1]).tolist() == [-1, H]
    assert report.passes["drop-zero-recurrent-state"].stats == {"dropped": 2}


def test_non_zero_state_is_kept():
    out, report = run(_lstm(0.5))
    assert "ConstantOfShape" in ops(out) and report.passes["drop-zero-recurrent-state"].changed_runs == 0
    assert ops(out)[-1] == "Reshape" and "Mul" not in ops(out)  # the view target still folds


def test_two_run_time_entries_are_not_guessed():
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "zero"], ["a"], axis=0),
             helper.make_node("Gather", ["s", "one"], ["b"], axis=0),
             helper.make_node("Unsqueeze", ["a", "ax"], ["a1"]), helper.make_node("Unsqueeze", ["b", "ax"], ["b1"]),
             helper.make_node("Concat", ["a1", "b1", "k"], ["t"], axis=0),
             helper.make_node("Reshape", ["x", "t"], ["y"])]
    m = model(nodes, [vi("x", ["n", "m", 4])], [vi("y", ["n", "m", 2, 2])],
              [const("zero", np.array(0, np.int64)), const("one", np.array(1, np.int64)),
               const("ax", np.array([0], np.int64)), const("k", np.array([2, 2], np.int64))])
    out, report = run(m)
    assert report.passes["reshape-infer-dim"].changed_runs == 0 and "Concat" in ops(out)


def test_tf2onnx_int32_target_with_a_sliced_shape_entry():
    # magika (keras → tf2onnx): Reshape(x, Cast(Concat(Slice(Cast(Shape(x), int32), [0], [1]), [512], [256])))
    nodes = [helper.make_node("Shape", ["x"], ["s64"]), helper.make_node("Cast", ["s64"], ["s"], to=TensorProto.INT32),
             helper.make_node("Slice", ["s", "z", "o", "z"], ["batch"]),
             helper.make_node("Concat", ["batch", "k1", "k2"], ["t32"], axis=0),
             helper.make_node("Cast", ["t32"], ["t"], to=TensorProto.INT64),
             helper.make_node("Reshape", ["x", "t"], ["y"])]
    m = model(nodes, [vi("x", ["n", 8, 4])], [vi("y", ["n", 16, 2])],
              [const("z", np.array([0], np.int32)), const("o", np.array([1], np.int32)),
               const("k1", np.array([16], np.int32)), const("k2", np.array([2], np.int32))])
    out, report = run(m)
    assert ops(out) == ["Reshape"] and report.passes["reshape-infer-dim"].stats == {"rewritten": 1}
    assert out.graph.const(out.graph.producer("y").inputs[1]).tolist() == [-1, 16, 2]


def _tf2onnx_lstm(fill: float):
    """tf2onnx's Keras LSTM: initial_h = initial_c = Concat(Unsqueeze(Expand(fill, [B, H]))) per direction
    (Shape → Cast → Slice → Concat → Cast for the target shape), a bidirectional LSTM reading it."""
    rng = np.random.default_rng(1)
    nodes = [
        helper.make_node("Shape", ["x"], ["sx"]),
        helper.make_node("Cast", ["sx"], ["sx32"], to=TensorProto.INT32),
        helper.make_node("Slice", ["sx32", "one1", "two1", "zero_axis"], ["b"]),
        helper.make_node("Concat", ["b", "h32"], ["target32"], axis=0),
        helper.make_node("Cast", ["target32"], ["target"], to=TensorProto.INT64),
        helper.make_node("Expand", ["fill", "target"], ["zeros"]),
        helper.make_node("Unsqueeze", ["zeros", "zero_axis"], ["z1"]),
        helper.make_node("Concat", ["z1", "z1"], ["h0"], axis=0),
        helper.make_node("LSTM", ["x", "w", "r", "", "", "h0", "h0"], ["y"], hidden_size=H, direction="bidirectional"),
    ]
    inits = [const("one1", np.array([1], np.int64)), const("two1", np.array([2], np.int64)),
             const("zero_axis", np.array([0], np.int64)), const("h32", np.array([H], np.int32)),
             const("fill", np.array(fill, np.float32)),
             const("w", rng.standard_normal((2, 4 * H, 3)).astype(np.float32)),
             const("r", rng.standard_normal((2, 4 * H, H)).astype(np.float32))]
    return model(nodes, [vi("x", ["T", "B", 3])], [vi("y", ["T", 2, "B", H])], inits)


def test_tf2onnx_expanded_zero_state_dropped_with_its_shape_arithmetic():
    import onnxruntime as ort

    from graphtool.ir.to_onnx import to_onnx

    original = _tf2onnx_lstm(0.0)
    out, report = run(original)
    assert ops(out) == ["LSTM"] and report.passes["drop-zero-recurrent-state"].stats == {"dropped": 2}
    x = np.random.default_rng(2).standard_normal((5, 3, 3)).astype(np.float32)
    a, b = (ort.InferenceSession(to_onnx(m).SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
            for m in (_tf2onnx_lstm(0.0), out))
    assert np.array_equal(a, b)
    out, report = run(_tf2onnx_lstm(0.5))  # Expand of a non-zero fill: the state matters
    assert "Expand" in ops(out) and report.passes["drop-zero-recurrent-state"].changed_runs == 0
