"""Level-2 fusions (both targets) keep every ONNX node test's expected outputs (wherever ORT runs it)."""

from __future__ import annotations

import pytest

from graphtool.optimize import optimize
from tests.corpus.node_cases import load, node_testcases, original_bytes, run_case

SHARDS = 4


@pytest.mark.slow
@pytest.mark.parametrize("target", ["onnx", "ort"])
@pytest.mark.parametrize("shard", range(SHARDS))
def test_level2_keeps_node_test_outputs(shard, target):
    cases = node_testcases()[shard::SHARDS]
    counted = 0
    failures = []
    for case in cases:
        if not run_case(original_bytes(case), case).ok:
            continue  # onnxruntime itself cannot run or match this case: nothing to preserve
        counted += 1
        try:
            optimized, _, _ = optimize(load(case), level=2, target=target)
        except Exception as err:
            failures.append(f"{case.name}: optimize raised {type(err).__name__}: {err}")
            continue
        outcome = run_case(optimized, case)
        if not outcome.ok:
            failures.append(f"{case.name}: {outcome.reason}")
    print(f"shard {shard} ({target}): {len(cases)} cases, {counted} run in ORT, {len(failures)} broken by level 2")
    assert counted > 300
    assert failures == [], "\n".join(failures)
