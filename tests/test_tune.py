"""graphtool tune: the search with a fake timer (no timed tests), the session file, the command."""

from __future__ import annotations

import json
import os
import shutil
from typing import Callable, Sequence

import numpy as np
import pytest

from graphtool.tune import Candidate, OrtSettings, RewriteSet, confidence, tune
from tests.conftest import FIXTURES

BERT = os.path.join(FIXTURES, "torch", "bert_ts.onnx")


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class FakeTimer:
    """Latency from a formula, a little deterministic jitter, and a clock that each run advances."""

    def __init__(self, clock: FakeClock, latency: Callable[[Candidate], float], run_cost: float = 0.001,
                 kernels: dict | None = None, fusions: Sequence[str] = ()) -> None:
        self.clock, self.latency, self.run_cost = clock, latency, run_cost
        self._kernels, self._fusions = kernels or {}, list(fusions)
        self.timed: list[Candidate] = []

    def kernels(self, threads: int, seconds: float) -> dict:
        self.clock.now += 0.1
        return self._kernels

    def ort_fusions(self, rewrite: RewriteSet) -> list[str]:
        return [] if rewrite.level == 0 else list(self._fusions)

    def time(self, candidates: Sequence[Candidate], rounds: int) -> dict[Candidate, list[float]]:
        out: dict[Candidate, list[float]] = {c: [] for c in candidates}
        for r in range(rounds):
            for i, cand in enumerate(candidates):
                jitter = 1 + 0.01 * (((r * 7 + i * 3) % 5) - 2)
                out[cand].append(self.latency(cand) * jitter)
                self.clock.now += self.latency(cand) * jitter + self.run_cost
                self.timed.append(cand)
        return out


def _kernel(fused: float, unfused: float, n: int = 30) -> tuple[str, list[float], list[float]]:
    return ("[2x128x768]", [fused * (1 + 0.01 * (i % 3)) for i in range(n)],
            [unfused * (1 + 0.01 * (i % 3)) for i in range(n)])


def _always_ok(_rewrite: RewriteSet) -> None:
    return None


def test_confidence_separates_and_ties() -> None:
    fast, slow = [1.0 + 0.01 * (i % 4) for i in range(20)], [1.2 + 0.01 * (i % 4) for i in range(20)]
    assert confidence(fast, slow) > 0.99
    assert confidence(slow, fast) < 0.01
    assert 0.3 < confidence(fast, list(fast)) < 0.7


def test_fastest_candidate_wins() -> None:
    clock = FakeClock()

    def latency(c: Candidate) -> float:
        ms = {0: 10.0, 1: 9.0, 2: 8.0}[c.rewrite.level]
        ms -= 1.0 if c.ort.level == "extended" else 0.0
        ms -= 0.5 if c.ort.threads == 1 else 0.0
        return ms / 1000

    result = tune(FakeTimer(clock, latency), _always_ok, clock, budget=1000, cores=4)
    assert result.winner.rewrite.level == 2 and not result.winner.rewrite.skip
    assert result.winner.ort == OrtSettings("extended", (), 1)
    assert result.speedup == pytest.approx(10 / 6.5, rel=0.02)
    assert result.confidence > 0.95
    assert {r.stage for r in result.rows} == {"rewrite sets", "onnxruntime settings", "threads"}


def test_slower_fused_kernel_is_pruned() -> None:
    """SkipLayerNormalization measured 4.4x slower: graphtool's fusion and ORT's both end up off;
    the attention kernel measured faster, so "level 2, attention off" is never timed."""
    clock = FakeClock()

    def latency(c: Candidate) -> float:
        ms = {0: 10.0, 1: 9.0, 2: 8.0}[c.rewrite.level]
        if c.rewrite.level == 2 and "ort-skip-layer-norm" not in c.rewrite.skip:
            ms += 1.0  # the slow contrib kernel
        if c.rewrite.level == 2 and "fuse-attention-ort" in c.rewrite.skip:
            ms += 2.0
        if c.ort.level in ("all", "extended") and "SkipLayerNormFusion" not in c.ort.disabled:
            ms += 0.5  # ORT re-fuses what graphtool left alone
        if c.ort.level == "basic":
            ms += 0.3  # and loses its other fusions
        return ms / 1000

    kernels = {"SkipLayerNormalization": _kernel(4.4e-4, 1e-4), "Attention": _kernel(1e-4, 2e-4)}
    timer = FakeTimer(clock, latency, kernels=kernels, fusions=["SkipLayerNormFusion", "BiasGeluFusion"])
    result = tune(timer, _always_ok, clock, budget=1000, cores=1)
    assert "ort-skip-layer-norm" in result.winner.rewrite.skip
    assert "fuse-attention-ort" not in result.winner.rewrite.skip
    assert "SkipLayerNormFusion" in result.winner.ort.disabled
    verdicts = {k.op: k.verdict for k in result.kernels}
    assert verdicts == {"SkipLayerNormalization": "slower", "Attention": "faster"}
    assert any("SkipLayerNormalization is 4.4x slower" in f for f in result.findings)
    assert not any("attention off" in c.rewrite.name for c in timer.timed)
    assert any("attention off: pruned" in s for s in result.skipped)


def test_budget_stops_the_search() -> None:
    clock = FakeClock()
    timer = FakeTimer(clock, lambda c: 2.0 / (1 + c.rewrite.level), run_cost=0.0)
    result = tune(timer, _always_ok, clock, budget=60, cores=4, min_rounds=5)
    assert clock.now < 60 * 1.25  # the first batch may overrun its share; no stage starts past the budget
    assert any(s.startswith("onnxruntime settings") for s in result.skipped)
    assert any(s.startswith("threads") for s in result.skipped)
    assert result.winner.rewrite.level == 2  # the best of what was measured still wins


def test_a_candidate_that_fails_verification_cannot_win() -> None:
    clock = FakeClock()
    timer = FakeTimer(clock, lambda c: {0: 10.0, 1: 9.0, 2: 5.0}[c.rewrite.level] / 1000)

    def verifier(rewrite: RewriteSet) -> str | None:
        return "output 'y' differs" if rewrite.level == 2 else None

    result = tune(timer, verifier, clock, budget=1000, cores=1)
    assert result.winner.rewrite.level == 1
    assert result.failed["level 2"] == "output 'y' differs"
    assert all(name.startswith("level 2") for name in result.failed)
    assert any(r.status == "verification failed" for r in result.rows)


def test_session_json_round_trip(tmp_path) -> None:
    from graphtool.runtime import session_for

    model = tmp_path / "m.onnx"
    shutil.copy(BERT, model)
    settings = {"graph_optimization_level": "extended", "disabled_optimizers": ["SkipLayerNormFusion"],
                "intra_op_num_threads": 1}
    (tmp_path / "m.onnx.session.json").write_text(json.dumps(settings))
    sess = session_for(str(model))
    opts = sess.get_session_options()
    assert opts.intra_op_num_threads == 1
    assert str(opts.graph_optimization_level).endswith("ORT_ENABLE_EXTENDED")
    feeds = dict(np.load(BERT.replace(".onnx", ".inputs.npz")))
    expected = np.load(BERT.replace(".onnx", ".expected.npz"))
    got = sess.run(None, feeds)
    np.testing.assert_allclose(got[0], expected[expected.files[0]], rtol=1e-3, atol=1e-4)


def test_session_for_without_settings_is_one_clear_error(tmp_path) -> None:
    from graphtool.errors import BadModel
    from graphtool.runtime import session_for

    model = tmp_path / "m.onnx"
    shutil.copy(BERT, model)
    with pytest.raises(BadModel, match="session.json"):
        session_for(str(model))


def test_tune_cli_writes_model_and_settings(run_cli, tmp_path) -> None:
    from graphtool.runtime import session_for

    out = str(tmp_path / "t.onnx")
    result = run_cli("tune", BERT, "-o", out, "--budget", "8", "--json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert os.path.exists(out) and os.path.exists(out + ".session.json")
    for key in ("winner", "baseline", "speedup", "confidence", "tried", "kernels", "skipped", "settings",
                "verification", "timing_inputs"):
        assert key in report
    assert report["tried"] and report["speedup"] > 0
    settings = json.loads(open(out + ".session.json").read())
    assert settings == {**settings, **report["winner"]["ort"]}
    feeds = dict(np.load(BERT.replace(".onnx", ".inputs.npz")))
    assert session_for(out).run(None, feeds)


def test_tune_cli_text_and_bad_flags(run_cli, tmp_path) -> None:
    out = str(tmp_path / "t.onnx")
    result = run_cli("tune", BERT, "-o", out, "--budget", "5", "--threads", "1",
                     "--inputs", BERT.replace(".onnx", ".inputs.npz"))
    assert result.exit_code == 0, result.stderr
    assert "best:" in result.stdout and "session_for" in result.stdout and "vs original" in result.stdout
    assert "input_ids=2x16" in result.stdout
    bad = run_cli("tune", BERT, "-o", out, "--input-shape", "nope=1x2")
    assert bad.exit_code == 2 and bad.stderr.count("\n") == 1


def test_ort_fusion_names_expand_to_the_ones_onnxruntime_registers() -> None:
    """ORT 1.32 registers GeluFusionL1/L2 and LayerNormFusionL1/L2; unknown names it ignores."""
    names = OrtSettings("all", ("GeluFusion", "MatMulScaleFusion")).optimizer_names()
    assert {"GeluFusion", "GeluFusionL2", "MatMulScaleFusion"} <= set(names)
    assert OrtSettings("all", ("GeluFusion",)).as_dict()["disabled_optimizers"] == names[:3]


def test_a_win_inside_the_noise_keeps_the_original() -> None:
    """Every candidate within 0.02% of the original, under 2% noise: none is confidently faster."""
    clock = FakeClock()

    def latency(c: Candidate) -> float:
        return (10.0 - 0.001 * c.rewrite.level) / 1000

    class NoisyTimer(FakeTimer):
        def time(self, candidates, rounds):
            out = super().time(candidates, rounds)
            rng = np.random.default_rng(len(self.timed))
            return {c: [v * (1 + 0.02 * rng.standard_normal()) for v in vs] for c, vs in out.items()}

    result = tune(NoisyTimer(clock, latency), _always_ok, clock, budget=1000, cores=1)
    assert result.winner == result.baseline
    assert any("keeping it" in f for f in result.findings)
