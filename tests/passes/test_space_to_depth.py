"""focus-to-space-to-depth: YOLOv5's Focus (four strided Slices + Concat) → SpaceToDepth (+ Gather)."""

from __future__ import annotations

import numpy as np
from onnx import helper

from tests.passes.helpers import const, model, ops, runner, vi

PASS = "focus-to-space-to-depth"
run = runner([PASS, "dead-code-elimination"])
BIG = 2**63 - 1


def _focus(order):
    nodes, inits = [], [const("ends", np.array([BIG, BIG], np.int64)), const("axes", np.array([2, 3], np.int64)),
                        const("steps", np.array([2, 2], np.int64))]
    for k, (a, b) in enumerate(order):
        inits.append(const(f"s{k}", np.array([a, b], np.int64)))
        nodes.append(helper.make_node("Slice", ["x", f"s{k}", "ends", "axes", "steps"], [f"p{k}"]))
    nodes.append(helper.make_node("Concat", [f"p{k}" for k in range(4)], ["y"], axis=1))
    return model(nodes, [vi("x", [1, 3, 8, 6])], [vi("y", [1, 12, 4, 3])], inits)


def test_yolov5_order_needs_a_channel_gather():
    out, report = run(_focus([(0, 0), (1, 0), (0, 1), (1, 1)]))
    assert ops(out) == ["SpaceToDepth", "Gather"] and report.passes[PASS].stats == {"fused": 1}


def test_dcr_order_is_one_op():
    out, _ = run(_focus([(0, 0), (0, 1), (1, 0), (1, 1)]))
    assert ops(out) == ["SpaceToDepth"]


def test_a_repeated_phase_is_not_space_to_depth():
    out, report = run(_focus([(0, 0), (1, 0), (0, 1), (0, 1)]))
    assert ops(out).count("Slice") == 4 and report.passes[PASS].changed_runs == 0
