"""Level-1 optimization keeps every ONNX node test's expected outputs (wherever ORT runs it)."""

from __future__ import annotations

import pytest

from graphtool.optimize import optimize
from tests.corpus.node_cases import node_testcases, optimize_cases

SHARDS = 6


@pytest.mark.slow
@pytest.mark.parametrize("shard", range(SHARDS))
def test_level1_keeps_node_test_outputs(shard):
    cases = node_testcases()[shard::SHARDS]
    counted, failures = optimize_cases(cases, lambda model: optimize(model, level=1)[0])
    print(f"shard {shard}: {len(cases)} cases, {counted} run in ORT, {len(failures)} broken by level 1")
    assert counted > 200
    assert failures == [], "\n".join(failures)
