"""Run the ONNX node tests (model + inputs + expected outputs) through onnxruntime."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable

import numpy as np

from graphtool import io
from graphtool.ir.model import Model
from graphtool.runtime import make_session


@functools.lru_cache(maxsize=1)
def node_testcases():
    from onnx.backend.test.case.node import collect_testcases

    return collect_testcases()


@dataclass
class Outcome:
    ok: bool
    reason: str = ""


def run_case(model: Model | bytes, case) -> Outcome:
    """Does ``model`` reproduce every data set of ``case`` within the case's tolerance?"""
    try:
        sess = make_session(model)
    except Exception as err:
        return Outcome(False, f"load: {str(err).splitlines()[0][:160]}")
    names = [i.name for i in sess.get_inputs()]
    for inputs, expected in case.data_sets:
        feeds = {}
        for name, value in zip(names, inputs):
            feeds[name] = value
        try:
            got = sess.run(None, feeds)
        except Exception as err:
            return Outcome(False, f"run: {str(err).splitlines()[0][:160]}")
        for ref, out in zip(expected, got):
            try:
                if isinstance(ref, list) or isinstance(out, list):
                    ok = len(ref) == len(out) and all(
                        np.allclose(np.asarray(a, dtype=float), np.asarray(b, dtype=float), rtol=case.rtol, atol=case.atol, equal_nan=True)
                        for a, b in zip(ref, out))
                else:
                    ref_a, out_a = np.asarray(ref), np.asarray(out)
                    if ref_a.dtype.kind in "OUS":
                        ok = ref_a.shape == out_a.shape and bool(np.all(ref_a == out_a))
                    else:
                        ok = ref_a.shape == out_a.shape and np.allclose(
                            ref_a.astype(np.float64), out_a.astype(np.float64), rtol=case.rtol, atol=case.atol, equal_nan=True)
            except (TypeError, ValueError) as err:
                return Outcome(False, f"compare: {err}")
            if not ok:
                return Outcome(False, "outputs differ from expected")
    return Outcome(True)


def original_bytes(case) -> bytes:
    return case.model.SerializeToString()


def load(case) -> Model:
    return io.load_proto(case.model)


def optimize_cases(cases, optimize_model: Callable[[Model], Model]) -> tuple[int, list[str]]:
    """Run ``optimize_model`` on every case onnxruntime itself reproduces; returns (cases counted, failures).

    A crash of the optimizer is a failure too, reported with its reason, so one bad case does not hide the rest."""
    counted = 0
    failures = []
    for case in cases:
        if not run_case(original_bytes(case), case).ok:
            continue  # onnxruntime itself cannot run or match this case: nothing to preserve
        counted += 1
        try:
            optimized = optimize_model(load(case))
        except Exception as err:
            failures.append(f"{case.name}: optimize raised {type(err).__name__}: {err}")
            continue
        outcome = run_case(optimized, case)
        if not outcome.ok:
            failures.append(f"{case.name}: {outcome.reason}")
    return counted, failures
