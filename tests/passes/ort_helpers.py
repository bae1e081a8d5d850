"""Helpers for the level-2 fusion tests: run chosen passes, count ops, compare through ORT."""

from __future__ import annotations

import collections

import numpy as np
import onnx

from graphtool import io
from graphtool.optimize import optimize
from graphtool.runtime import make_session
from graphtool.verify import verify


def run(proto: onnx.ModelProto, passes: list[str] | None = None, level: int = 2, target: str = "ort"):
    """Optimize a ModelProto with only ``passes`` (or the whole level); returns (original, result, report)."""
    original = io.load_proto(proto)
    result, report, _ = optimize(original, level=level, target=target, passes=passes)
    return original, result, report


def ops(model) -> collections.Counter:
    """Op histogram of the main graph, contrib ops as 'com.microsoft:Op'."""
    return collections.Counter(
        f"{n.domain}:{n.op_type}" if n.domain not in ("", "ai.onnx") else n.op_type for n in model.graph.nodes()
    )


def assert_same_outputs(original, result, feeds: dict[str, np.ndarray] | None = None, atol: float = 1e-4) -> None:
    """Both models run in onnxruntime (optimizations off) and agree; with ``feeds`` on those inputs."""
    if feeds is None:
        check = verify(original, result)
        assert check.ok, check.summary()
        return
    a = make_session(original).run(None, feeds)
    b = make_session(result).run(None, feeds)
    for x, y in zip(a, b):
        np.testing.assert_allclose(y, x, atol=atol, rtol=1e-3)


def const(name: str, array) -> onnx.NodeProto:
    return onnx.helper.make_node("Constant", [], [name], value=onnx.numpy_helper.from_array(np.asarray(array), name))
