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
                 kernels: dict | None = None, fusions: Sequence[str] = (),
                 ops: Callable[[Candidate], set[str]] = lambda _c: set(), capacity: int = 100) -> None:
        self.clock, self.latency, self.run_cost = clock, latency, run_cost
        self._kernels, self._fusions, self._ops = kernels or {}, list(fusions), ops
        self.timed: list[Candidate] = []
        self.wall_per_run = 0.0
        self._capacity = capacity
        self.open: set[Candidate] = set()  # sessions alive, as OrtTimer keeps them
        self.most_open = 0
        self.released: list[Candidate] = []

    def capacity(self) -> int:
        return self._capacity

    def release(self, candidates: Sequence[Candidate]) -> None:
        self.released += candidates
        self.open -= set(candidates)

    def ops(self, candidate: Candidate) -> set[str]:
        return self._ops(candidate)

    def kernels(self, threads: int, seconds: float) -> dict:
        self.clock.now += 0.1
        return self._kernels

    def ort_fusions(self, rewrite: RewriteSet) -> list[str]:
        return [] if rewrite.level == 0 else list(self._fusions)

    def time(self, candidates: Sequence[Candidate], rounds: int) -> dict[Candidate, list[float]]:
        self.open = (self.open & set(candidates)) | set(candidates)  # stale sessions close, as in OrtTimer
        self.most_open = max(self.most_open, len(self.open))
        out: dict[Candidate, list[float]] = {c: [] for c in candidates}
        for r in range(rounds):
            for i, cand in enumerate(candidates):
                jitter = 1 + 0.01 * (((r * 7 + i * 3) % 5) - 2)
                out[cand].append(self.latency(cand) * jitter)
                self.clock.now += self.latency(cand) * jitter + self.run_cost
                self.timed.append(cand)
        runs = rounds * len(candidates)
        self.wall_per_run = sum(self.latency(c) + self.run_cost for c in candidates) / len(candidates) if runs else 0.0
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
    assert {r.stage for r in result.rows} == {"rewrite sets", "onnxruntime settings", "threads", "confirmation"}
    assert result.confirmation is not None and result.confirmation.kept


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
    assert any("SkipLayerNormalization is 4.40x slower" in f for f in result.findings)
    assert not any("attention off" in c.rewrite.name for c in timer.timed)
    assert any("attention off: pruned" in s for s in result.skipped)


def test_budget_stops_the_search() -> None:
    clock = FakeClock()
    timer = FakeTimer(clock, lambda c: 2.0 / (1 + c.rewrite.level), run_cost=0.0)
    result = tune(timer, _always_ok, clock, budget=60, cores=4, min_rounds=5)
    assert clock.now < 60 * 1.25  # the first batch may overrun its share; no stage starts past the budget
    assert any(s.startswith("onnxruntime settings") for s in result.skipped)
    assert any(s.startswith("threads") for s in result.skipped)
    # the best of what was measured is level 2, 3x faster, but over the 5 rounds the budget allowed:
    # too few to replace the original (a bootstrap over 5 rounds calls any 5-for-5 result certain)
    assert result.winner == result.baseline
    assert any(f.startswith("level 2 | ORT all") and "over only 5 paired rounds: a win needs 10" in f for f in result.findings)


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
    final = [r for r in result.rows if r.stage == result.rows[-1].stage and r.candidate != result.baseline
             and not r.candidate.replica]
    assert all(r.speedup <= 1 or "keeping it" in " ".join(result.findings) for r in final)


def _runs_skip_layer_norm(c: Candidate) -> bool:
    """The fake model runs the slow kernel when graphtool's level 2 made it, or when ORT's
    SkipLayerNormFusion re-fuses a rewritten model that still has LayerNormalization ops."""
    made = c.rewrite.level == 2 and "ort-skip-layer-norm" not in c.rewrite.skip
    refused = c.rewrite.level >= 1 and "fuse-layer-norm" not in c.rewrite.skip \
        and c.ort.level in ("all", "extended") and "SkipLayerNormFusion" not in c.ort.disabled
    return made or refused


def test_rewrite_sets_are_ranked_with_the_slow_ort_fusion_off() -> None:
    """ORT re-fuses SkipLayerNormalization in every rewritten model at its defaults: ranked there,
    the set that leaves it out looks as slow as level 2 and is dropped before stage 2 could switch
    ORT's fusion off. Ranked with SkipLayerNormFusion disabled (its kernel measured slower), it wins,
    and the report says the winner runs no SkipLayerNormalization and why."""
    clock = FakeClock()

    def latency(c: Candidate) -> float:
        if c.rewrite.level == 0:
            ms = 10.0
        elif "fuse-layer-norm" in c.rewrite.skip:
            ms = 9.8  # no LayerNorm fusion at all: nothing for ORT to re-fuse, but slower norms
        else:
            ms = {1: 9.4, 2: 9.0}[c.rewrite.level]
        return (ms + (1.5 if _runs_skip_layer_norm(c) else 0.0)) / 1000

    def ops(c: Candidate) -> set[str]:
        return {"MatMul", "LayerNormalization"} | ({"SkipLayerNormalization"} if _runs_skip_layer_norm(c) else set())

    kernels = {"SkipLayerNormalization": _kernel(5.6e-4, 1e-4)}
    timer = FakeTimer(clock, latency, kernels=kernels, fusions=["SkipLayerNormFusion"], ops=ops)
    result = tune(timer, _always_ok, clock, budget=1000, threads=1, cores=2)
    assert result.winner.rewrite.skip == ("ort-skip-layer-norm",)
    assert "SkipLayerNormFusion" in result.winner.ort.disabled
    assert result.speedup == pytest.approx(10 / 9.0, rel=0.02)
    first = [r for r in result.rows if r.stage == "rewrite sets" and r.candidate.rewrite != result.baseline.rewrite]
    assert first and all(r.candidate.ort.disabled == ("SkipLayerNormFusion",) for r in first)
    assert any("the winner runs no SkipLayerNormalization (measured slower): graphtool's ort-skip-layer-norm off; "
               "onnxruntime's SkipLayerNormFusion disabled" in f for f in result.findings)


def test_a_winner_that_keeps_a_slow_kernel_says_so() -> None:
    """The micro-benchmark is a hint, the whole model decides: when the model that still runs the
    slower kernel is fastest as a whole, it wins and the report says it still runs it."""
    clock = FakeClock()

    def latency(c: Candidate) -> float:
        return {0: 10.0, 1: 9.5, 2: 8.0}[c.rewrite.level] / 1000 + (0.5e-3 if "ort-skip-layer-norm" in c.rewrite.skip else 0)

    kernels = {"SkipLayerNormalization": _kernel(5.6e-4, 1e-4)}
    timer = FakeTimer(clock, latency, kernels=kernels, ops=lambda c: {"SkipLayerNormalization"} if c.rewrite.level == 2
                      and "ort-skip-layer-norm" not in c.rewrite.skip else set())
    result = tune(timer, _always_ok, clock, budget=1000, threads=1, cores=1)
    assert result.winner.rewrite == RewriteSet("level 2", 2)
    assert any("the winner still runs SkipLayerNormalization" in f for f in result.findings)


def test_one_thread_batches_are_timed_in_cpu_time() -> None:
    """CPU time leaves other processes' load out, but adds up a multi-threaded run's threads."""
    import time

    from graphtool.tune import clock_for

    assert clock_for([1, 1]) == ("CPU time", time.process_time)
    assert clock_for([1, 0]) == ("wall time", time.perf_counter)
    assert clock_for([2]) == ("wall time", time.perf_counter)


def test_budget_counts_the_wall_time_cpu_samples_leave_out() -> None:
    """On a shared core CPU time is a fraction of the elapsed time: the plan goes by the elapsed."""

    class CpuTimer(FakeTimer):
        def time(self, candidates, rounds):
            return {c: [v * 0.4 for v in vs] for c, vs in super().time(candidates, rounds).items()}

    for budget in (60, 120, 400):  # planned by the CPU samples alone, 120 s ran to 123 s
        clock = FakeClock()
        timer = CpuTimer(clock, lambda c: 2.0 / (1 + c.rewrite.level), run_cost=0.0)
        result = tune(timer, _always_ok, clock, budget=budget, cores=4, min_rounds=5)
        assert clock.now <= budget
        if budget == 60:  # one batch of 5 rounds fits: too few for the 3x-faster level 2 to replace the original
            assert result.winner == result.baseline and any("over only 5 paired rounds" in f for f in result.findings)
        elif budget == 120:  # 2 s runs: the confirmation's 4 fresh sessions x 13 runs no longer fit
            assert result.winner == result.baseline and any("cannot fit the confirmation" in f for f in result.findings)
        else:
            assert result.winner.rewrite.level == 2


def test_stage_two_explores_two_different_rewrite_sets() -> None:
    """The original is measured twice in stage 1 (ORT's defaults, and with the slow fusion off):
    it still takes one of the two places stage 2 explores, not both."""
    clock = FakeClock()
    timer = FakeTimer(clock, lambda c: ({0: 9.0, 1: 9.5, 2: 10.0}[c.rewrite.level]
                                        - (0.5 if c.ort.disabled else 0)) / 1000,
                      kernels={"SkipLayerNormalization": _kernel(5.6e-4, 1e-4)}, fusions=["SkipLayerNormFusion"])
    result = tune(timer, _always_ok, clock, budget=1000, threads=1, cores=1)
    explored = {r.candidate.rewrite.name for r in result.rows if r.stage == "onnxruntime settings"}
    assert len(explored) == 2 and "original" in explored


def test_a_win_inside_the_a_a_gap_keeps_the_original() -> None:
    """Two sessions of the original differ by 2% (memory placement, run order); a candidate 1%
    faster with a tight bootstrap is still no win: the report says so and keeps the original."""
    clock = FakeClock()

    def latency(c: Candidate) -> float:
        if c.replica:
            return 10.2e-3
        return (10.0 - 0.1 * (c.rewrite.level == 1)) / 1000  # level 1: 1% faster

    result = tune(FakeTimer(clock, latency), _always_ok, clock, budget=1000, threads=1, cores=1)
    assert result.winner == result.baseline
    assert any("A/A control" in f and "2.0%" in f for f in result.findings)
    assert any("inside the 2.0% two sessions of the original differ by" in f for f in result.findings)
    assert any(r.candidate.replica for r in result.rows)  # the control is measured and shown


def test_a_win_beyond_the_a_a_gap_stands() -> None:
    clock = FakeClock()

    def latency(c: Candidate) -> float:
        return (10.05 if c.replica == 1 else 10.0 - 0.5 * (c.rewrite.level == 1)) / 1000

    result = tune(FakeTimer(clock, latency), _always_ok, clock, budget=1000, threads=1, cores=1)
    assert result.winner.rewrite.level == 1


def test_a_win_needs_ten_paired_rounds() -> None:
    """A candidate 5% faster in every round: over 5 rounds the bootstrap says 100%, which is no
    evidence. When no candidate may run the rounds a win needs (here 20, each at most 15) it may
    not replace the original; by default (10) it does, and its deciding row has them."""
    def latency(c: Candidate) -> float:
        return (10.0 - 0.5 * (c.rewrite.level == 1)) / 1000

    clock = FakeClock()
    short = tune(FakeTimer(clock, latency), _always_ok, clock, budget=1000, threads=1, cores=1, max_rounds=15,
                 replace_rounds=20)
    assert short.winner == short.baseline
    assert any("paired rounds: a win needs 20" in f for f in short.findings)
    clock = FakeClock()
    result = tune(FakeTimer(clock, latency), _always_ok, clock, budget=1000, threads=1, cores=1)
    assert result.winner.rewrite.level == 1
    races = [r for r in result.rows if r.stage != "confirmation"]
    deciding = [r for r in races if r.candidate == result.winner and r.stage == races[-1].stage]
    assert deciding and deciding[0].rounds >= 10
    assert result.confirmation is not None and result.confirmation.rounds >= 10


def test_sessions_alive_are_bounded_and_the_slower_are_closed() -> None:
    """Memory holds 4 sessions: the race never has more open, drops (and releases) the candidates
    the leader clearly beats, lets the waiting ones in, and every candidate still gets its row."""
    clock = FakeClock()

    def latency(c: Candidate) -> float:
        ms = 10.0 - 0.5 * c.rewrite.level - 0.1 * len(c.rewrite.skip)
        return (ms + (2.0 if c.ort.level == "basic" else 0.0)) / 1000

    timer = FakeTimer(clock, latency, capacity=4, fusions=["SkipLayerNormFusion", "BiasGeluFusion", "GeluFusion"])
    result = tune(timer, _always_ok, clock, budget=1000, threads=1, cores=1)
    assert timer.most_open <= 4
    assert any(r.left.startswith("dropped") for r in result.rows)
    assert {c for c in timer.released} >= {r.candidate for r in result.rows if r.left}
    settings = [r for r in result.rows if r.stage == "onnxruntime settings"]
    assert len({r.candidate for r in settings}) > 4  # more candidates than places, all measured
    assert all(r.rounds >= 5 for r in settings)
    assert result.winner.rewrite.level == 2 and result.winner.ort.level != "basic"
    assert any("at most 4 onnxruntime sessions were open at once" in f for f in result.findings)


def test_attention_as_multi_head_attention_is_a_rewrite_set() -> None:
    """The unpacked form (fuse-attention-mha instead of fuse-attention-ort) is tried when the
    level-2 rewrite makes an attention op, and wins when it measures fastest."""
    clock = FakeClock()

    def latency(c: Candidate) -> float:
        ms = {0: 10.0, 1: 9.8, 2: 10.2}[c.rewrite.level]
        return (ms - (1.0 if "fuse-attention-mha" in c.rewrite.extra else 0.0)) / 1000

    kernels = {"Attention": _kernel(1e-4, 1e-4)}
    result = tune(FakeTimer(clock, latency, kernels=kernels), _always_ok, clock, budget=1000, threads=1, cores=1)
    assert result.winner.rewrite == RewriteSet("level 2, attention as MultiHeadAttention", 2,
                                               ("fuse-attention-ort",), ("fuse-attention-mha",))
    assert result.winner.rewrite.as_dict()["extra"] == ["fuse-attention-mha"]
    clock = FakeClock()
    timer = FakeTimer(clock, latency, kernels={"SkipLayerNormalization": _kernel(1e-4, 1e-4)})
    tune(timer, _always_ok, clock, budget=1000, threads=1, cores=1)
    assert not any(c.rewrite.extra for c in timer.timed)  # no attention op made: nothing to re-form


def test_the_multi_head_attention_set_leaves_the_slower_kernels_out_too() -> None:
    """SkipLayerNormalization measured slower: the unpacked-attention set skips its pass as well,
    or the slow kernel, not the attention form, would decide how that set measures."""
    clock = FakeClock()
    kernels = {"Attention": _kernel(1e-4, 1e-4), "SkipLayerNormalization": _kernel(5.6e-4, 1e-4)}
    timer = FakeTimer(clock, lambda c: 10e-3, kernels=kernels)
    tune(timer, _always_ok, clock, budget=1000, threads=1, cores=1)
    mha = {c.rewrite for c in timer.timed if c.rewrite.extra}
    assert mha == {RewriteSet("level 2, attention as MultiHeadAttention, slower kernels off", 2,
                              ("fuse-attention-ort", "ort-skip-layer-norm"), ("fuse-attention-mha",))}


def test_stage_two_gives_both_kept_rewrite_sets_their_turns() -> None:
    """Stage 1 ranks the two kept rewrite sets within noise as often as not: stage 2 takes their
    onnxruntime settings in turns, so a short budget cuts each set's least likely settings rather
    than every setting of the second set."""
    clock = FakeClock()
    timer = FakeTimer(clock, lambda c: {0: 10.0, 1: 9.0, 2: 9.05}[c.rewrite.level] / 1000, capacity=4,
                      fusions=["SkipLayerNormFusion", "GeluFusion"])
    tune(timer, _always_ok, clock, budget=1000, threads=1, cores=1)
    first_seen = [c for c in dict.fromkeys(timer.timed) if c.rewrite.level and c.ort.level != "all" or c.ort.disabled]
    levels = [c.rewrite.level for c in first_seen[:4]]
    assert sorted(levels) == [1, 1, 2, 2] and levels[0] != levels[1]


def test_onnxruntime_fusions_are_not_inspected_past_the_budget() -> None:
    """Each inspection of ORT's fusions builds sessions (minutes on a huge graph): once one has spent
    the stage's time, the next kept set is not inspected and the report says so."""
    clock = FakeClock()

    class SlowInspection(FakeTimer):
        inspected: list[str] = []

        def ort_fusions(self, rewrite: RewriteSet) -> list[str]:
            self.inspected.append(rewrite.name)
            self.clock.now += 1000.0  # far past the whole budget
            return super().ort_fusions(rewrite)

    timer = SlowInspection(clock, lambda c: (10.0 - c.rewrite.level) / 1000, fusions=["SkipLayerNormFusion"])
    result = tune(timer, _always_ok, clock, budget=60, cores=1)
    assert len(timer.inspected) == 1
    assert any("onnxruntime's fusions not inspected (budget spent)" in s for s in result.skipped)


def test_no_attention_variant_where_level_2_makes_no_packed_attention() -> None:
    """A decoder's level 2 makes MultiHeadAttention (its cached attention), no packed Attention:
    the unpacked form has nothing to re-form, so it is not raced as a set of its own."""
    clock = FakeClock()
    timer = FakeTimer(clock, lambda c: 10e-3, kernels={"MultiHeadAttention": _kernel(1e-4, 1e-4)})
    tune(timer, _always_ok, clock, budget=1000, threads=1, cores=1)
    assert not any(c.rewrite.extra for c in timer.timed)


def test_a_setting_that_wins_by_less_than_the_session_noise_gives_way_to_the_defaults() -> None:
    """Level 2 at ORT extended 0.3 % ahead of level 2 at ORT all: inside any A/A gap, so the
    defaults are what tune hands over (a non-default setting must earn its place)."""
    clock = FakeClock()

    def latency(c: Candidate) -> float:
        ms = {0: 10.0, 1: 9.0, 2: 8.0}[c.rewrite.level]
        ms *= 0.997 if c.ort.level == "extended" else 1.0
        ms += 1.0 if c.ort.level == "basic" else 0.0
        return ms / 1000

    result = tune(FakeTimer(clock, latency), _always_ok, clock, budget=1000, threads=1, cores=1)
    assert result.winner.rewrite.level == 2 and result.winner.ort == OrtSettings("all", (), 1)
    assert any("the plainer choice kept" in f for f in result.findings)


def test_a_family_switched_off_by_less_than_the_session_noise_gives_way_to_the_plain_level() -> None:
    """Level 2 with GELU off 0.2 % ahead of level 2 (both at ORT all): a tie, so plain level 2."""
    clock = FakeClock()

    def latency(c: Candidate) -> float:
        ms = {0: 10.0, 1: 9.0, 2: 8.0}[c.rewrite.level]
        ms *= 0.998 if "ort-quick-gelu" in c.rewrite.skip else 1.0
        ms += 1.0 if c.ort.level != "all" else 0.0
        return ms / 1000

    kernels = {"QuickGelu": _kernel(1.1e-4, 1e-4)}  # measured within noise: "GELU off" is raced
    result = tune(FakeTimer(clock, latency, kernels=kernels), _always_ok, clock, budget=1000, threads=1, cores=1)
    assert result.winner.rewrite.level == 2 and not result.winner.rewrite.skip, result.winner.label()
    assert result.winner.ort == OrtSettings("all", (), 1)


def test_an_ort_level_that_runs_the_same_graph_is_not_raced() -> None:
    """ORT extended runs what ORT all runs (a decoder: nothing to lay out): only the defaults race."""
    clock = FakeClock()

    def latency(c: Candidate) -> float:
        return ({0: 10.0, 1: 9.0, 2: 8.0}[c.rewrite.level] * (0.99 if c.ort.level == "extended" else 1.0)) / 1000

    timer = FakeTimer(clock, latency)
    timer.same_graph = lambda a, b: a.rewrite == b.rewrite and {a.ort.level, b.ort.level} <= {"all", "extended"}
    result = tune(timer, _always_ok, clock, budget=1000, threads=1, cores=1)
    assert not any(c.ort.level == "extended" for c in timer.timed)
    assert result.winner.ort == OrtSettings("all", (), 1) and result.winner.rewrite.level == 2
    assert any("ORT extended not raced" in s for s in result.skipped)


def test_a_variant_that_won_its_race_by_its_session_must_beat_the_plain_level_in_fresh_sessions() -> None:
    """"GELU off" ran 3 % faster in its race session (replica 0) and 2 % slower in every fresh one:
    the race's winner's curse; the fresh sessions against plain level 2 catch it."""
    clock = FakeClock()

    def latency(c: Candidate) -> float:
        ms = {0: 10.0, 1: 9.0, 2: 8.0}[c.rewrite.level]
        if "ort-quick-gelu" in c.rewrite.skip:
            ms *= 0.97 if c.replica == 0 else 1.02
        ms += 1.0 if c.ort.level != "all" else 0.0
        return ms / 1000

    kernels = {"QuickGelu": _kernel(1.1e-4, 1e-4)}
    result = tune(FakeTimer(clock, latency, kernels=kernels), _always_ok, clock, budget=1000, threads=1, cores=1)
    assert result.winner.rewrite.level == 2 and not result.winner.rewrite.skip, result.winner.label()
    assert any("in fresh sessions" in f and "the plain level goes on" in f for f in result.findings), result.findings


def test_level_3_is_raced_where_it_writes_another_model_and_can_win() -> None:
    """The channels-last layout (level 3, --target ort) is a rewrite set only where the timer says it
    differs from level 2; where it is faster it wins. Likewise a family switched off is raced only
    where that changes the graph."""
    clock = FakeClock()

    def latency(c: Candidate) -> float:
        return {0: 10.0, 1: 9.5, 2: 9.0, 3: 6.0}[c.rewrite.level] / 1000

    differs = FakeTimer(clock, latency)
    differs.same_rewrite = lambda a, b: False
    result = tune(differs, _always_ok, clock, budget=1000, cores=1)
    assert result.winner.rewrite == RewriteSet("level 3", 3)
    same = FakeTimer(clock, latency)
    same.same_rewrite = lambda a, b: True
    result = tune(same, _always_ok, clock, budget=1000, cores=1)
    assert result.winner.rewrite.level == 2 and not any(c.rewrite.level == 3 for c in same.timed)
    # a family-off set that writes level 2's graph (a CNN has no attention to switch off) is not raced
    assert not any(c.rewrite.skip or c.rewrite.extra for c in same.timed)
    assert any(s.endswith("off: writes the same graph as level 2") for s in result.skipped)


def test_ort_timer_tells_level_3_from_level_2_by_the_model_it_writes(tmp_path) -> None:
    from graphtool import io
    from graphtool.tune.ort import OrtTimer
    from tests.passes import qdq_models

    path = qdq_models.quantized_cnn(str(tmp_path), per_channel=False, pointwise=True)
    level2, level3 = RewriteSet("level 2", 2), RewriteSet("level 3", 3)
    for target, same in (("ort", False), ("onnx", True)):
        work = tmp_path / target
        work.mkdir()
        timer = OrtTimer(io.load(path), path, {}, target, str(work))
        assert timer.same_rewrite(level3, level2) is same
        assert timer.same_rewrite(level2, RewriteSet("level 2, again", 2)) is True
    assert not timer.paths  # --target onnx: level 3 runs level 2's passes, nothing is built
    fp32 = os.path.join(FIXTURES, "conv_bn.onnx")
    timer = OrtTimer(io.load(fp32), fp32, {}, "ort", str(tmp_path))
    assert timer.same_rewrite(level3, level2) is True  # nothing quantized: no layout to change
