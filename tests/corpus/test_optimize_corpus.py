"""Level-1 optimization keeps every ONNX node test's expected outputs (wherever ORT runs it)."""

from __future__ import annotations

import pytest

from graphtool.optimize import optimize
from tests.corpus.node_cases import load, node_testcases, original_bytes, run_case

SHARDS = 6


@pytest.mark.slow
@pytest.mark.parametrize("shard", range(SHARDS))
def test_level1_keeps_node_test_outputs(shard):
    cases = node_testcases()[shard::SHARDS]
    counted = 0
    failures = []
    for case in cases:
        if not run_case(original_bytes(case), case).ok:
            continue  # onnxruntime itself cannot run or match this case: nothing to preserve
        counted += 1
        try:
            optimized, _, _ = optimize(load(case), level=1)
        except Exception as err:
            failures.append(f"{case.name}: optimize raised {type(err).__name__}: {err}")
            continue
        outcome = run_case(optimized, case)
        if not outcome.ok:
            failures.append(f"{case.name}: {outcome.reason}")
    print(f"shard {shard}: {len(cases)} cases, {counted} run in ORT, {len(failures)} broken by level 1")
    assert counted > 200
    assert failures == [], "\n".join(failures)
