"""slices-to-split: Slices tiling one axis of one tensor become one Split (outputs proven in ORT)."""

from __future__ import annotations

import numpy as np
from onnx import helper

from tests.passes.helpers import const, model, ops, runner, vi

PASS = "slices-to-split"
run = runner([PASS])
INT_MAX = np.iinfo(np.int64).max


def _slices(bounds, size=258, axis=1, dims=("n", 258, "t"), extra=()):
    """x[dims] cut by one Slice per (start, end) on ``axis``; each piece goes through a Relu."""
    nodes, inits, outs = [], [], []
    for k, (start, end) in enumerate(bounds):
        inits += [const(f"s{k}", np.array([start], np.int64)), const(f"e{k}", np.array([end], np.int64))]
        nodes += [helper.make_node("Slice", ["x", f"s{k}", f"e{k}", "ax", *extra], [f"p{k}"]),
                  helper.make_node("Relu", [f"p{k}"], [f"y{k}"])]
        outs.append(vi(f"y{k}", ["n", None, "t"]))
    inits += [const("ax", np.array([axis], np.int64)), const("one", np.array([1], np.int64))]
    return model(nodes, [vi("x", list(dims))], outs, inits, check=False)


def _feeds(n=2, c=258, t=3):
    return {"x": np.random.default_rng(0).standard_normal((n, c, t)).astype(np.float32)}


def test_two_halves_of_an_stft_become_one_split():
    out, report = run(_slices([(0, 129), (129, INT_MAX)]), feeds=_feeds())
    assert ops(out).count("Split") == 1 and "Slice" not in ops(out)
    split = out.graph.nodes("Split")[0]
    np.testing.assert_array_equal(out.graph.const(split.inputs[1]), [129, 129])
    assert split.outputs == ["p0", "p1"] and report.passes[PASS].stats == {"fused": 1}


def test_pieces_in_any_order_with_negative_bounds_and_unit_steps():
    out, _ = run(_slices([(-58, 258), (0, 100), (100, -58)], extra=("one",)), feeds=_feeds())
    split = out.graph.nodes("Split")[0]
    np.testing.assert_array_equal(out.graph.const(split.inputs[1]), [100, 100, 58])
    assert split.outputs == ["p1", "p2", "p0"]


def test_a_gap_an_overlap_or_an_unknown_axis_size_refuses():
    for bounds, dims in (([(0, 100), (129, INT_MAX)], ("n", 258, "t")),   # gap
                         ([(0, 130), (129, INT_MAX)], ("n", 258, "t")),   # overlap
                         ([(0, 129), (129, INT_MAX)], ("n", "c", "t"))):  # size of the axis unknown
        out, report = run(_slices(bounds, dims=dims), feeds=_feeds())
        assert "Split" not in ops(out) and ops(out).count("Slice") == 2, (bounds, dims)


def test_one_slice_alone_is_not_a_split():
    out, _ = run(_slices([(0, 258)]), feeds=_feeds())
    assert ops(out).count("Slice") == 1
