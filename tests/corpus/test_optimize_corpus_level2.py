"""Level-2 fusions (both targets) keep every ONNX node test's expected outputs (wherever ORT runs it)."""

from __future__ import annotations

import pytest

from graphtool.optimize import optimize
from tests.corpus.node_cases import node_testcases, optimize_cases

SHARDS = 4


@pytest.mark.slow
@pytest.mark.parametrize("target", ["onnx", "ort"])
@pytest.mark.parametrize("shard", range(SHARDS))
def test_level2_keeps_node_test_outputs(shard, target):
    cases = node_testcases()[shard::SHARDS]
    counted, failures = optimize_cases(cases, lambda model: optimize(model, level=2, target=target)[0])
    print(f"shard {shard} ({target}): {len(cases)} cases, {counted} run in ORT, {len(failures)} broken by level 2")
    assert counted > 300
    assert failures == [], "\n".join(failures)
