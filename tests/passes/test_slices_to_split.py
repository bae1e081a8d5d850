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


def _gathers(indices, size=4, index_shape=(1,)):
    """x[n, size] read column by column by Gather(x, [i], axis=1) (skl2onnx's OneHotEncoder input), each piece
    through a Relu."""
    nodes, inits, outs = [], [], []
    for k, i in enumerate(indices):
        inits.append(const(f"i{k}", np.array(i, np.int64).reshape(index_shape)))
        nodes += [helper.make_node("Gather", ["x", f"i{k}"], [f"p{k}"], axis=1), helper.make_node("Relu", [f"p{k}"], [f"y{k}"])]
        outs.append(vi(f"y{k}", ["n", 1] if index_shape else ["n"]))
    return model(nodes, [vi("x", ["n", size])], outs, inits, check=False)


def test_one_index_gathers_that_take_every_column_become_one_split():
    feeds = {"x": np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)}
    out, report = run(_gathers([0, 2, 1, -1]), feeds=feeds)  # any order; -1 is the last column
    assert ops(out).count("Split") == 1 and "Gather" not in ops(out)
    split = out.graph.nodes("Split")[0]
    np.testing.assert_array_equal(out.graph.const(split.inputs[1]), [1, 1, 1, 1])
    assert split.outputs == ["p0", "p2", "p1", "p3"] and report.passes[PASS].stats == {"fused": 1}


def test_gathers_missing_a_column_or_with_scalar_indices_stay():
    feeds = {"x": np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)}
    for indices, shape in (([0, 1, 2], (1,)),        # column 3 is not taken: no tiling
                           ([0, 1, 2, 3], ())):      # scalar indices drop the axis: not a Split's pieces
        out, _ = run(_gathers(indices, index_shape=shape), feeds=feeds)
        assert "Split" not in ops(out) and ops(out).count("Gather") == len(indices), (indices, shape)
