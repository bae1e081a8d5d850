"""``tune``: find the fastest verified (rewrite set, onnxruntime settings) pair on this machine.

Which rewrite pays depends on the runtime version, the execution provider and the CPU (on
onnxruntime 1.32's CPU provider the contrib SkipLayerNormalization kernel is slower than the Add,
Add, LayerNormalization it replaces), so no rule can decide it: only a measurement here can.
This module is the search, and only the search: every measurement comes from an injected
``Timer`` and every verdict on a rewritten model from an injected verifier, and the time spent is
read from an injected clock, so the logic is tested with a fake timer and no real timing
(graphtool.tune_ort is the onnxruntime timer).

The search, each stage bounded by its share of ``--budget``:

0. kernels — each fused op the level-2 rewrite makes, against the subgraph it replaced, at the
   model's shapes. A family whose fused kernels all measured faster is not tried "off" (pruned);
   fused ops that measured slower are switched off together in one extra rewrite set, and their
   onnxruntime counterparts (SkipLayerNormalization → SkipLayerNormFusion) are disabled in stage 2.
1. rewrite sets at onnxruntime's defaults less its fusions whose kernels measured slower (else it
   re-fuses what a set left unfused): the original, levels 1 and 2, level 2 with each family off;
   the best verified few go on.
2. onnxruntime settings on those: levels, and ``disabled_optimizers`` for its fusions that fire on
   the model and that a kernel or a whole-model measurement found slower.
3. threads (1 and the default, one per core) for the best, with the runners-up.

Every whole-model batch runs the candidates interleaved with the baseline (the original under
onnxruntime's defaults), so each speed-up is a ratio within one batch, immune to drift between
batches. "Faster" is a median comparison with a bootstrap confidence over the interleaved rounds,
and by more than the A/A control shows: a second session of the baseline in every batch, whose gap
to the first is the session-to-session noise the bootstrap over one batch's rounds cannot see.
"""

from __future__ import annotations

import random
import statistics
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Protocol, Sequence

# Fusion families of graphtool's rewrite set (pass names); "level 2 with the family off" skips them.
FAMILIES: dict[str, tuple[str, ...]] = {
    "attention": ("fuse-attention-ort", "fuse-attention"),
    "skip/layer norm": ("ort-skip-layer-norm", "ort-embed-layer-norm", "fuse-layer-norm", "fuse-rms-norm",
                        "ort-rms-norm"),
    "GELU": ("fuse-gelu", "ort-gelu", "ort-bias-gelu", "ort-quick-gelu"),
    "conv/gemm activation": ("ort-fused-conv", "ort-fused-gemm"),
    "MatMul scale": ("ort-fused-matmul",),
}
# A fused op → (its family, the passes that make it, onnxruntime's fusion that makes it too).
FUSED_OPS: dict[str, tuple[str, tuple[str, ...], str | None]] = {
    "Attention": ("attention", ("fuse-attention-ort", "fuse-attention"), "AttentionFusion"),
    "MultiHeadAttention": ("attention", ("fuse-attention-ort",), "AttentionFusion"),
    "SkipLayerNormalization": ("skip/layer norm", ("ort-skip-layer-norm",), "SkipLayerNormFusion"),
    "SkipSimplifiedLayerNormalization": ("skip/layer norm", ("ort-skip-layer-norm",), "SkipLayerNormFusion"),
    "EmbedLayerNormalization": ("skip/layer norm", ("ort-embed-layer-norm",), "EmbedLayerNormFusion"),
    "LayerNormalization": ("skip/layer norm", ("fuse-layer-norm",), "LayerNormFusion"),
    "SimplifiedLayerNormalization": ("skip/layer norm", ("fuse-rms-norm", "ort-rms-norm"), "SimplifiedLayerNormFusion"),
    "RMSNormalization": ("skip/layer norm", ("fuse-rms-norm",), None),
    "Gelu": ("GELU", ("fuse-gelu", "ort-gelu"), "GeluFusion"),
    "BiasGelu": ("GELU", ("ort-bias-gelu",), "BiasGeluFusion"),
    "FastGelu": ("GELU", ("ort-gelu",), "FastGeluFusion"),
    "QuickGelu": ("GELU", ("ort-quick-gelu",), "QuickGeluFusion"),
    "FusedConv": ("conv/gemm activation", ("ort-fused-conv",), "ConvActivationFusion"),
    "FusedGemm": ("conv/gemm activation", ("ort-fused-gemm",), "GemmActivationFusion"),
    "FusedMatMul": ("MatMul scale", ("ort-fused-matmul",), "MatMulScaleFusion"),
}
# onnxruntime's own fusions (names its disabled_optimizers accepts) → the op each one makes.
ORT_FUSIONS: dict[str, str] = {
    "AttentionFusion": "Attention", "SkipLayerNormFusion": "SkipLayerNormalization",
    "EmbedLayerNormFusion": "EmbedLayerNormalization", "LayerNormFusion": "LayerNormalization",
    "SimplifiedLayerNormFusion": "SimplifiedLayerNormalization", "GeluFusion": "Gelu",
    "BiasGeluFusion": "BiasGelu", "FastGeluFusion": "FastGelu", "QuickGeluFusion": "QuickGelu",
    "MatMulScaleFusion": "FusedMatMul", "ConvActivationFusion": "FusedConv", "GemmActivationFusion": "FusedGemm",
}
# The names onnxruntime registers some fusions under differ by version (1.32 has GeluFusionL1/L2 and
# LayerNormFusionL1/L2, not GeluFusion); names it does not know it ignores, so all of them are passed.
ORT_ALIASES: dict[str, tuple[str, ...]] = {
    "GeluFusion": ("GeluFusion", "GeluFusionL1", "GeluFusionL2"),
    "LayerNormFusion": ("LayerNormFusion", "LayerNormFusionL1", "LayerNormFusionL2"),
    "SkipLayerNormFusion": ("SkipLayerNormFusion", "BiasSkipLayerNormFusion"),
}
CONFIDENT = 0.95  # a difference counts when the bootstrap puts it on one side this often
MARGIN = 0.03  # a kernel verdict needs this much difference too: 1% at 95% confidence decides nothing
SETUP_RUNS = 3  # what opening a session and its warm-up runs cost, in runs
CHEAP_ROUNDS = 30  # rounds every batch gets when they take under a quarter of the stage's time
KEEP_REWRITE_SETS = 2  # how many rewrite sets stage 2 explores
# Each stage's share: kernels of the whole budget, the others of what is left when they start, so
# a stage that overran (building and verifying big models) narrows the next ones instead of ending them.
STAGE_SHARES = {"kernels": 0.15, "rewrite sets": 0.55, "onnxruntime settings": 0.65, "threads": 1.0}


@dataclass(frozen=True)
class RewriteSet:
    """A graphtool rewrite of the model: ``level`` 0 is the original, ``skip`` the passes left out."""

    name: str
    level: int = 0
    skip: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "level": self.level, "skip": list(self.skip)}


@dataclass(frozen=True)
class OrtSettings:
    """The onnxruntime session settings tune chooses; ``threads`` 0 is onnxruntime's default (one per core)."""

    level: str = "all"
    disabled: tuple[str, ...] = ()
    threads: int = 0

    def label(self) -> str:
        text = f"ORT {self.level}"
        if self.disabled:
            text += " -" + ",-".join(self.disabled)
        return text + f", {self.threads or 'default'} thr"

    def optimizer_names(self) -> list[str]:
        """``disabled`` as the names onnxruntime's ``disabled_optimizers`` takes (aliases expanded)."""
        return list(dict.fromkeys(n for name in self.disabled for n in ORT_ALIASES.get(name, (name,))))

    def as_dict(self) -> dict[str, Any]:
        return {"graph_optimization_level": self.level, "disabled_optimizers": self.optimizer_names(),
                "intra_op_num_threads": self.threads}


@dataclass(frozen=True)
class Candidate:
    rewrite: RewriteSet
    ort: OrtSettings
    replica: int = 0  # 1: the A/A control, a second session of the same model and settings

    def label(self) -> str:
        return f"{self.rewrite.name} | {self.ort.label()}" + (" (A/A control: a 2nd session)" if self.replica else "")


class Timer(Protocol):
    """Where measurements come from (graphtool.tune_ort.OrtTimer, or a fake in tests)."""

    wall_per_run: float  # elapsed seconds per run in the last ``time`` call's timed rounds

    def kernels(self, threads: int, seconds: float) -> dict[str, tuple[str, list[float], list[float]]]:
        """Fused op type → (shapes, fused samples, unfused samples): one instance of each fused op
        the level-2 rewrite makes, against the subgraph it replaced, interleaved, for ``seconds``."""
        ...

    def ort_fusions(self, rewrite: RewriteSet) -> list[str]:
        """onnxruntime fusions (``ORT_FUSIONS`` names) that fire on this rewrite set's model."""
        ...

    def time(self, candidates: Sequence[Candidate], rounds: int) -> dict[Candidate, list[float]]:
        """Seconds per run of each candidate, ``rounds`` rounds, candidates interleaved in each."""
        ...

    def ops(self, candidate: Candidate) -> set[str]:
        """The op types onnxruntime runs for ``candidate`` (its model after ORT's own optimizations)."""
        ...


Verifier = Callable[[RewriteSet], "str | None"]  # None when the rewrite set's model is verified, else why not


def confidence(a: Sequence[float], b: Sequence[float], draws: int = 500, seed: int = 0) -> float:
    """How often a bootstrap resample of the rounds puts ``a``'s median below ``b``'s.

    Rounds are paired (same index, same interleaved round) when the lengths match, so load that
    hits one round hits both samples of the pair."""
    if not a or not b:
        return 0.5
    rng = random.Random(seed)
    wins = 0.0
    paired = len(a) == len(b)
    for _ in range(draws):
        if paired:
            idx = [rng.randrange(len(a)) for _ in a]
            ma, mb = statistics.median(a[i] for i in idx), statistics.median(b[i] for i in idx)
        else:
            ma = statistics.median(rng.choice(a) for _ in a)
            mb = statistics.median(rng.choice(b) for _ in b)
        wins += 1.0 if ma < mb else 0.5 if ma == mb else 0.0
    return wins / draws


def spread(samples: Sequence[float]) -> float:
    """Half the interquartile range over the median: the run-to-run noise, as a fraction."""
    if len(samples) < 4:
        return 0.0
    q = statistics.quantiles(samples, n=4, method="inclusive")
    return (q[2] - q[0]) / 2 / statistics.median(samples)


@dataclass
class Row:
    """One candidate in one batch, against the baseline measured in the same batch."""

    candidate: Candidate
    stage: str
    median: float
    baseline: float
    spread: float
    rounds: int
    confidence: float  # that it is faster than the baseline
    status: str = "measured"

    @property
    def speedup(self) -> float:
        return self.baseline / self.median if self.median > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"rewrite": self.candidate.rewrite.as_dict(), "ort": self.candidate.ort.as_dict(),
                "label": self.candidate.label(), "stage": self.stage, "median_ms": round(self.median * 1000, 4),
                "baseline_ms": round(self.baseline * 1000, 4), "speedup": round(self.speedup, 4),
                "spread": round(self.spread, 4), "rounds": self.rounds,
                "confidence_faster_than_baseline": round(self.confidence, 3), "status": self.status}


@dataclass
class Kernel:
    """A fused op's micro-benchmark against the subgraph it replaces."""

    op: str
    shapes: str
    fused: float
    unfused: float
    confidence: float  # that the fused kernel is the faster one
    verdict: str  # "faster", "slower" or "within noise"

    def as_dict(self) -> dict[str, Any]:
        return {"op": self.op, "shapes": self.shapes, "fused_us": round(self.fused * 1e6, 2),
                "unfused_us": round(self.unfused * 1e6, 2), "ratio": round(self.fused / self.unfused, 3),
                "confidence_fused_faster": round(self.confidence, 3), "verdict": self.verdict}


@dataclass
class TuneResult:
    winner: Candidate
    baseline: Candidate
    speedup: float
    confidence: float  # that the winner is faster than the baseline
    runner_up_confidence: float | None  # that the winner beats the runner-up of its batch
    rows: list[Row] = field(default_factory=list)
    kernels: list[Kernel] = field(default_factory=list)
    findings: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # rewrite set → why verification refused it
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"winner": {"rewrite": self.winner.rewrite.as_dict(), "ort": self.winner.ort.as_dict(),
                           "label": self.winner.label()},
                "baseline": self.baseline.label(), "speedup": round(self.speedup, 4),
                "confidence": round(self.confidence, 3),
                "runner_up_confidence": None if self.runner_up_confidence is None else round(self.runner_up_confidence, 3),
                "tried": [r.as_dict() for r in self.rows], "kernels": [k.as_dict() for k in self.kernels],
                "findings": self.findings, "skipped": self.skipped, "verification_failed": self.failed,
                "seconds": round(self.seconds, 2)}


class _Search:
    """One tune run: the state the stages share (samples, verdicts, the clock)."""

    def __init__(self, timer: Timer, verifier: Verifier, clock: Callable[[], float], budget: float,
                 threads: int | None, cores: int, progress: Callable[[str], None], min_rounds: int,
                 max_rounds: int) -> None:
        self.timer, self.verifier, self.clock, self.budget = timer, verifier, clock, budget
        self.fixed_threads, self.cores, self.progress = threads, cores, progress
        self.min_rounds, self.max_rounds = min_rounds, max_rounds
        self.start = clock()
        self.threads = threads if threads is not None else 0
        self.baseline = Candidate(RewriteSet("original"), OrtSettings("all", (), self.threads))
        self.control = replace(self.baseline, replica=1)
        self.aa_gap: dict[str, float] = {}  # stage → |control / baseline - 1| in its last batch
        self.rows: list[Row] = []
        self.kernels: list[Kernel] = []
        self.findings: list[str] = []
        self.skipped: list[str] = []
        self.failed: dict[str, str] = {}
        self.verified: set[RewriteSet] = {self.baseline.rewrite}
        self.run_cost: float | None = None  # seconds per candidate run, from the batches so far
        self.last_samples: dict[Candidate, list[float]] = {}
        self.ends: dict[str, float] = {}
        self.combos: list[Candidate] = []
        self.firing: dict[RewriteSet, list[str]] = {}
        self.slower: set[str] = set()

    def stage_end(self, stage: str) -> float:
        """When ``stage`` must stop (fixed the first time it is asked, at the stage's start)."""
        if stage not in self.ends:
            end = self.start + self.budget
            now = self.clock()
            self.ends[stage] = now + self.budget * STAGE_SHARES[stage] if stage == "kernels" else \
                now + (end - now) * STAGE_SHARES[stage]
        return self.ends[stage]

    def fit(self, stage: str, pool: list[Candidate]) -> list[Candidate]:
        """The head of ``pool`` (the baseline and the candidates in priority order) that
        ``min_rounds`` rounds fit in the stage's time, from the run cost measured so far."""
        left = self.stage_end(stage) - self.clock()
        if self.run_cost is None or self.run_cost <= 0:
            return pool
        count = int(left / (self.run_cost * (self.min_rounds + SETUP_RUNS)))
        return pool[:count] if count >= 2 else []

    def measure(self, stage: str, candidates: list[Candidate]) -> list[Row]:
        """Interleaved rounds of ``candidates`` plus the baseline, more rounds until the leader is
        separated from the runner-up (or the stage's time or ``max_rounds`` runs out)."""
        # The baseline runs in two sessions: the second (the A/A control) shows how far two sessions of
        # one model and settings differ in this batch — memory placement, run order — which the
        # bootstrap over rounds cannot see (BERT-base: 1.2% between two identical sessions).
        wanted = [self.baseline, self.control] + [c for c in dict.fromkeys(candidates)
                                                  if c not in (self.baseline, self.control)]
        pool = self.fit(stage, wanted) if self.clock() < self.stage_end(stage) else []
        seen = {r.candidate for r in self.rows}
        real = pool[2:]
        if real and all(c in seen for c in real) and len(pool) == len(wanted):
            self.skipped.append(f"{stage}: nothing new to measure (every candidate was measured in an earlier batch)")
            return []
        if all(c in seen for c in real):  # only what an earlier batch measured fits: nothing to learn
            pool = []
        if len(pool) < 3:
            self.skipped.append(f"{stage}: {len(wanted) - 2} candidate(s) not measured (budget spent)")
            return []
        if len(pool) < len(wanted):
            self.skipped.append(f"{stage}: " + "; ".join(c.label() for c in wanted[len(pool):])
                                + " not measured (budget spent)")
        self.progress(f"{stage}: {len(pool)} candidates")
        samples: dict[Candidate, list[float]] = {c: [] for c in pool}
        rounds = required = self.min_rounds
        while True:
            batch = self.timer.time(pool, rounds)
            for cand, got in batch.items():
                samples[cand].extend(got)
            runs = [x for got in batch.values() for x in got]
            # what a run costs the budget: the samples may be CPU time, which leaves out the time other
            # processes held the core, so the timer's elapsed time per timed run bounds it from below
            # (not the batch's: that includes building the rewrite sets and opening their sessions)
            cost = max(sum(runs) / len(runs), self.timer.wall_per_run) if runs else 0.0
            self.run_cost = cost or self.run_cost
            done = len(samples[self.baseline])
            if done == rounds and cost > 0 and cost * len(pool) * CHEAP_ROUNDS < (self.stage_end(stage) - self.clock()) / 4:
                required = min(CHEAP_ROUNDS, self.max_rounds)  # cheap runs: more rounds before believing a gap
            ranked = sorted((c for c in pool if c != self.control), key=lambda c: statistics.median(samples[c]))
            separated = confidence(samples[ranked[0]], samples[ranked[1]]) >= CONFIDENT if len(ranked) > 1 else True
            if (separated and done >= required) or done >= self.max_rounds:
                break
            rounds = min(max(done, required - done), self.max_rounds - done)
            left = self.stage_end(stage) - self.clock()
            if self.run_cost and self.run_cost > 0:
                rounds = min(rounds, int(left / (self.run_cost * len(pool))))
            if rounds < 2:
                break
        self.last_samples = samples
        base = samples[self.baseline]
        self.aa_gap[stage] = abs(statistics.median(samples[self.control]) / statistics.median(base) - 1)
        rows = [Row(c, stage, statistics.median(s), statistics.median(base), spread(s), len(s),
                    confidence(s, base) if c != self.baseline else 0.5)
                for c, s in samples.items()]
        self.rows.extend(rows)
        return sorted(rows, key=lambda r: -r.speedup)

    # ----------------------------------------------------------------------------------- stages

    def kernel_stage(self) -> tuple[set[str], set[str]]:
        """Micro-benchmarks; returns (fused ops measured slower, families whose every fused op was faster)."""
        left = self.stage_end("kernels") - self.clock()
        if left <= 0:
            self.skipped.append("kernels: no micro-benchmarks (budget spent)")
            return set(), set()
        self.progress("kernels")
        for op, (shapes, fused, unfused) in self.timer.kernels(self.threads, left).items():
            if not fused or not unfused:
                continue
            conf = confidence(fused, unfused)
            ratio = statistics.median(fused) / statistics.median(unfused)
            verdict = "faster" if conf >= CONFIDENT and ratio <= 1 - MARGIN else \
                "slower" if conf <= 1 - CONFIDENT and ratio >= 1 + MARGIN else "within noise"
            kernel = Kernel(op, shapes, statistics.median(fused), statistics.median(unfused), conf, verdict)
            self.kernels.append(kernel)
            if verdict == "slower":
                ort_name = FUSED_OPS.get(op, ("", (), None))[2]
                self.findings.append(
                    f"{op} is {kernel.fused / kernel.unfused:.2f}x slower than the subgraph it replaces at {shapes} "
                    f"(confidence {1 - conf:.0%}): tried with graphtool's fusion off"
                    + (f" and onnxruntime's {ort_name} disabled" if ort_name else ""))
        slower = {k.op for k in self.kernels if k.verdict == "slower"}
        self.slower = slower
        by_family: dict[str, list[Kernel]] = {}
        for k in self.kernels:
            by_family.setdefault(FUSED_OPS.get(k.op, ("",))[0], []).append(k)
        faster = {f for f, ks in by_family.items() if ks and all(k.verdict == "faster" for k in ks)}
        return slower, faster

    def rewrite_stage(self, slower: set[str], faster_families: set[str]) -> list[RewriteSet]:
        """Stage 1; returns the verified rewrite sets ranked best first (at most KEEP_REWRITE_SETS)."""
        present = {FUSED_OPS[k.op][0] for k in self.kernels if k.op in FUSED_OPS}
        sets = [RewriteSet("original"), RewriteSet("level 1", 1), RewriteSet("level 2", 2)]
        for family, passes in FAMILIES.items():
            if self.kernels and family not in present:
                continue  # the rewrite makes no op of this family: "off" is level 2 itself
            if family in faster_families:
                self.skipped.append(f"level 2, {family} off: pruned (its fused kernels measured faster)")
                continue
            sets.append(RewriteSet(f"level 2, {family} off", 2, passes))
        if slower:
            skip = tuple(sorted({p for op in slower for p in FUSED_OPS.get(op, ("", (), None))[1]}))
            sets.append(RewriteSet("level 2, slower kernels off (" + ", ".join(sorted(slower)) + ")", 2, skip))
        unique: dict[tuple[int, tuple[str, ...]], RewriteSet] = {}
        for s in sets:
            unique.setdefault((s.level, tuple(sorted(s.skip))), s)
        # Rank the rewrite sets under onnxruntime's defaults less its fusions whose kernels measured
        # slower: else ORT re-fuses what the set left unfused (SkipLayerNormFusion at extended) and
        # the set that avoids the slow kernel is ranked by that kernel. Stage 2 re-tries them enabled.
        off = tuple(sorted({FUSED_OPS[op][2] for op in slower if op in FUSED_OPS and FUSED_OPS[op][2]}))
        ort = replace(self.baseline.ort, disabled=off)
        if off:
            self.findings.append("rewrite sets ranked at ORT all with " + ", ".join(off) + " disabled "
                                 "(its kernel measured slower); stage 2 tries them with it enabled too")
        rows = self.measure("rewrite sets", [Candidate(s, ort) for s in unique.values()])
        ranked = list(dict.fromkeys(r.candidate.rewrite for r in rows)) or [self.baseline.rewrite]
        kept: list[RewriteSet] = []
        for rewrite in ranked:
            if len(kept) >= KEEP_REWRITE_SETS:
                break
            if rewrite not in self.verified:
                self.progress(f"verifying {rewrite.name}")
                why = self.verifier(rewrite)
                if why is not None:
                    self.failed[rewrite.name] = why
                    for r in self.rows:
                        if r.candidate.rewrite == rewrite:
                            r.status = "verification failed"
                    continue
                self.verified.add(rewrite)
            kept.append(rewrite)
        return kept

    def ort_stage(self, kept: list[RewriteSet], slower: set[str]) -> None:
        """Stage 2: onnxruntime levels and disabled fusions on the kept rewrite sets."""
        slower_ort = {FUSED_OPS[op][2] for op in slower if op in FUSED_OPS and FUSED_OPS[op][2]}
        verdict_by_ort = {FUSED_OPS[k.op][2]: k.verdict for k in self.kernels if k.op in FUSED_OPS}
        candidates: list[Candidate] = []  # in priority order: what the budget may cut comes last
        for rewrite in kept:
            self.progress(f"onnxruntime fusions on {rewrite.name}")
            firing = self.timer.ort_fusions(rewrite)
            self.firing[rewrite] = firing
            t = self.threads
            off = tuple(sorted(slower_ort & set(firing)))
            candidates.append(Candidate(rewrite, OrtSettings("all", (), t)))
            if off:
                candidates += [Candidate(rewrite, OrtSettings("all", off, t)), Candidate(rewrite, OrtSettings("extended", off, t))]
            candidates.append(Candidate(rewrite, OrtSettings("extended", (), t)))
            for name in firing:
                if name in off:
                    continue
                if verdict_by_ort.get(name) == "faster":
                    self.skipped.append(f"{rewrite.name}: ORT -{name} pruned (its kernel measured faster)")
                    continue
                candidates.append(Candidate(rewrite, OrtSettings("all", (name,), t)))
            candidates.append(Candidate(rewrite, OrtSettings("basic", (), t)))
        rows = self.measure("onnxruntime settings", candidates)
        by_cand = {r.candidate: r for r in rows}
        combos = []
        for rewrite in kept:  # the single disables that beat the same rewrite set at ORT all, together
            ref = by_cand.get(Candidate(rewrite, OrtSettings("all", (), self.threads)))
            winners = sorted({n for r in rows if r.candidate.rewrite == rewrite and len(r.candidate.ort.disabled) == 1
                              and r.candidate.ort.level == "all" and ref is not None and r.median < ref.median
                              for n in r.candidate.ort.disabled})
            if len(winners) > 1:
                combos.append(Candidate(rewrite, OrtSettings("all", tuple(winners), self.threads)))
        self.combos = combos

    def thread_stage(self) -> None:
        """Stage 3: threads for the best so far, with the runners-up, in one final batch."""
        best = self.best_rows(3)
        pool = [r.candidate for r in best[:1]]
        if self.fixed_threads is None and self.cores > 1 and best:
            top = best[0].candidate
            pool += [replace(top, ort=replace(top.ort, threads=1)), replace(top, ort=replace(top.ort, threads=0))]
        pool += self.combos + [r.candidate for r in best[1:]]
        if len(set(pool) - {self.baseline}) >= 1:
            self.measure("threads", pool)

    def best_rows(self, count: int) -> list[Row]:
        """The verified candidates with the best speed-up, one row each (their latest batch)."""
        latest: dict[Candidate, Row] = {}
        for row in self.rows:
            if row.status == "measured" and row.candidate.rewrite in self.verified and row.candidate != self.control:
                latest[row.candidate] = row
        return sorted(latest.values(), key=lambda r: -r.speedup)[:count]

    def result(self) -> TuneResult:
        final_stage = self.rows[-1].stage if self.rows else None
        final = [r for r in self.rows if r.stage == final_stage and r.status == "measured"
                 and r.candidate.rewrite in self.verified and r.candidate != self.control]
        pick = sorted(final, key=lambda r: r.median)  # the last batch decides: everything in it ran together
        if not pick:
            return TuneResult(self.baseline, self.baseline, 1.0, 0.5, None, self.rows, self.kernels,
                              self.findings, self.skipped, self.failed, self.clock() - self.start)
        win = pick[0]
        gap = self.aa_gap.get(final_stage or "", 0.0)
        if gap:
            self.findings.append(f"A/A control: two sessions of the original under ORT's defaults differed by "
                                 f"{gap:.1%} in the final batch; a win must be larger")
        if win.candidate != self.baseline and (win.confidence < CONFIDENT or win.speedup - 1 <= gap):
            base = [r for r in pick if r.candidate == self.baseline]
            if base:  # never trade the original for a guess: a win inside the noise is not one
                why = f"at {win.confidence:.0%}" if win.confidence < CONFIDENT else \
                    f"inside the {gap:.1%} two sessions of the original differ by"
                self.findings.append(f"no candidate was confidently faster than the original "
                                     f"({win.candidate.label()}: {win.speedup:.3f}x, {why}); keeping it")
                win, pick = base[0], base + [r for r in pick if r is not base[0]]
        runner_conf = self._pair_confidence(pick) if len(pick) > 1 else None
        self._avoided(win.candidate)
        if win.candidate.ort.disabled:
            self.findings.append("onnxruntime fusions disabled in the winner: " + ", ".join(win.candidate.ort.disabled))
        return TuneResult(win.candidate, self.baseline, win.speedup, win.confidence, runner_conf, self.rows,
                          self.kernels, self.findings, self.skipped, self.failed, self.clock() - self.start)

    def _avoided(self, winner: Candidate) -> None:
        """Say, for each fused kernel measured slower, whether the winner still runs it and why not."""
        if not self.slower:
            return
        try:
            ran = self.timer.ops(winner)
        except Exception as err:  # noqa: BLE001 - the report says it could not check, the result stands
            self.findings.append(f"could not list the winner's ops after onnxruntime's optimizations ({type(err).__name__})")
            return
        for op in sorted(self.slower):
            _family, passes, ort_name = FUSED_OPS.get(op, ("", (), None))
            if op in ran:
                self.findings.append(f"the winner still runs {op} (its kernel measured slower; as a whole the "
                                     "model measured fastest with it)")
                continue
            if winner.rewrite.level == 0:
                ours = "the original, no graphtool rewrite"
            elif any(p in winner.rewrite.skip for p in passes):
                ours = "graphtool's " + ", ".join(p for p in passes if p in winner.rewrite.skip) + " off"
            else:
                ours = f"graphtool's level-{winner.rewrite.level} rewrite does not make it here"
            if ort_name is None:
                theirs = ""
            elif ort_name in winner.ort.disabled:
                theirs = f"; onnxruntime's {ort_name} disabled"
            elif winner.ort.level in ("off", "basic"):
                theirs = f"; ORT {winner.ort.level} does not run {ort_name}"
            else:
                theirs = f"; onnxruntime's {ort_name} does not fire on it"
            self.findings.append(f"the winner runs no {op} (measured slower): {ours}{theirs}")

    def _pair_confidence(self, pick: list[Row]) -> float:
        """Confidence that the winner beats the runner-up, from their batch's samples."""
        samples = self.last_samples
        if pick[0].candidate not in samples or pick[1].candidate not in samples:
            return 0.5
        return confidence(samples[pick[0].candidate], samples[pick[1].candidate])


def tune(timer: Timer, verifier: Verifier, clock: Callable[[], float], budget: float = 300.0,
         threads: int | None = None, cores: int = 1, progress: Callable[[str], None] = lambda _s: None,
         min_rounds: int = 5, max_rounds: int = 60) -> TuneResult:
    """Run the staged search; ``threads`` pins onnxruntime's intra-op threads (no thread stage)."""
    search = _Search(timer, verifier, clock, budget, threads, cores, progress, min_rounds, max_rounds)
    slower, faster_families = search.kernel_stage()
    kept = search.rewrite_stage(slower, faster_families)
    if kept:
        search.ort_stage(kept, slower)
    search.thread_stage()
    return search.result()
