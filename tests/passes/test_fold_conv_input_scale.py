"""fold-conv-input-scale: Conv(x * s) → Conv(x) with s·W (outputs proven in ORT)."""

from __future__ import annotations

import numpy as np
from onnx import helper

from tests.passes.helpers import const, model, ops, runner, vi

PASS = "fold-conv-input-scale"
run = runner([PASS, "dead-code-elimination"])
W = np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32)


def _scaled_conv(op: str, factor, extra_reader: bool = False):
    nodes = [helper.make_node(op, ["x", "s"], ["xs"]),
             helper.make_node("Conv", ["xs", "w", "b"], ["y"], pads=[1, 1, 1, 1])]
    outputs = [vi("y", [1, 4, 5, 5])]
    if extra_reader:
        nodes.append(helper.make_node("Relu", ["xs"], ["r"]))
        outputs.append(vi("r", [1, 3, 5, 5]))
    return model(nodes, [vi("x", [1, 3, 5, 5])], outputs,
                 [const("s", np.asarray(factor, np.float32)), const("w", W), const("b", np.ones(4, np.float32))])


def test_scalar_mul_and_div_fold_into_the_weights():
    for op in ("Mul", "Div"):
        out, report = run(_scaled_conv(op, 0.37))
        assert ops(out) == ["Conv"]
        assert report.passes[PASS].stats == {"folded": 1}


def test_refusals_keep_the_graph():
    for m in (_scaled_conv("Mul", [0.5, 2.0, 1.0, 1.5, 3.0]),  # not a scalar (varies along the last axis)
              _scaled_conv("Mul", 0.5, extra_reader=True),    # the scaled input is read by a Relu too
              _scaled_conv("Div", 0.0)):                      # a zero divisor
        out, report = run(m)
        assert "Conv" in ops(out) and report.passes[PASS].changed_runs == 0
