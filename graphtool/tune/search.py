"""``tune``: find the fastest verified (rewrite set, onnxruntime settings) pair on this machine.

Which rewrite pays depends on the runtime version, the execution provider and the CPU (on
onnxruntime 1.32's CPU provider the contrib SkipLayerNormalization kernel is slower than the Add,
Add, LayerNormalization it replaces), so no rule can decide it: only a measurement here can.
This module is the search, and only the search: every measurement comes from an injected
``Timer`` and every verdict on a rewritten model from an injected verifier, and the time spent is
read from an injected clock, so the logic is tested with a fake timer and no real timing
(graphtool.tune.ort is the onnxruntime timer).

The search, each stage bounded by its share of ``--budget``:

0. kernels — each fused op the level-2 rewrite makes, against the subgraph it replaced, at the
   model's shapes. A family whose fused kernels all measured faster is not tried "off" (pruned);
   fused ops that measured slower are switched off together in one extra rewrite set, and their
   onnxruntime counterparts (SkipLayerNormalization → SkipLayerNormFusion) are disabled in stage 2.
1. rewrite sets at onnxruntime's defaults less its fusions whose kernels measured slower (else it
   re-fuses what a set left unfused): the original, levels 1 and 2 (and 3 where it writes another
   model: the channels-last quantized kernels of ``--target ort``), level 2 with each family off,
   level 2 with another form of a family's fusion (``VARIANTS``: attention as MultiHeadAttention
   on the unpacked projections); the best verified few go on.
2. onnxruntime settings on those: levels, and ``disabled_optimizers`` for its fusions that fire on
   the model and that a kernel or a whole-model measurement found slower.
3. threads (1 and the default, one per core) for the best, with the runners-up.

Every stage's whole-model runs are a race (graphtool.tune.race): the candidates interleaved with
the baseline (the original under onnxruntime's defaults), at most ``MAX_SESSIONS`` sessions alive,
the clearly slower dropped, so each speed-up is a ratio over rounds run together, immune to drift
between batches. "Faster" is a median comparison with a paired bootstrap confidence over at least
``replace_rounds`` rounds, and by more than the A/A control shows: a second session of the baseline
in every round, whose gap to the first is the session-to-session noise the bootstrap cannot see.

4. confirmation — a winner with a family off, another fusion form or non-default ORT settings
   must first beat its plain level at ORT's defaults in fresh sessions (``_against_plain``); then
   a winner other than the original must win once more, in sessions none of the
   races opened: the winner and the original under onnxruntime's defaults, two sessions each,
   interleaved (graphtool.tune.race.confirm). One A/A pair does not bound how far sessions of one
   model and settings sit apart, and the winner of a race among many candidates is partly the one
   whose session sat lowest (resnet50, one thread: a "1.006x, A/A 0.0%" winner measured 0.4–0.9%
   behind the original and onnxscript's output at ORT all in bench/tune_table.py's fresh sessions).
   The verdict is a one-sided t-test over the session medians (log scale): the winner is kept when
   the ratio of the two sides' geometric means, minus 1, beats the bar t·SD·√(2/n) — n sessions a
   side, SD the spread of one session's median within its configuration (sessions compared within
   the step that opened them, the races' A/A pair as one more pair), floored at SPREAD_FLOOR/√2, t
   at 97.5% on its degrees of freedom — and the pooled rounds agree (``CONFIDENT``). Why that bar:
   the session, not the round, is what the offset varies by, so only more sessions narrow it.
   Two a side is the cheapest count that sees the offset on both sides in the same rounds, but
   its bar is ~1.9σ at a session SD of σ (t on 3 df): BERT-base's ~1% MultiHeadAttention gain
   against ~0.6–1.4% offsets was confirmed in one run and refused in the next. So while the gain
   is inside the bar but not under half the bar six sessions a side would set, two more sessions a
   side are opened (to six at most: ~1.1σ at four, ~0.8σ at six), and the search stops as soon as
   the test decides either way. Each look tests at 97.5% so that the up-to-three looks together
   keep a wrong win near 5%; the floor keeps a few sessions that happen to agree from declaring a
   0.3% win. The rule errs toward the original: a wrong "keep" misses a gain, a wrong win hands
   the user a slower model. The confirmation's first step is reserved from the stages after the
   first race, one escalation step from the last; when the budget cannot fit the first step, the
   original is kept, and when it cannot fit the next step, the verdict is the test's with the sessions it has
   (which keeps the original when inside the bar); the report says which.
"""

from __future__ import annotations

import statistics
from dataclasses import replace
from typing import Callable

from graphtool.tune.race import (
    CONFIDENT,
    CONFIRM_RESERVED_STEPS,
    MARGIN,
    SETUP_RUNS,
    Limits,
    RunCost,
    confirm,
    confirmation_seconds,
    paired,
    round_means,
    run_race,
)
from graphtool.tune.space import (  # noqa: F401 - the search's vocabulary, re-exported: graphtool.tune is the API
    FAMILIES,
    FUSED_OPS,
    ORT_ALIASES,
    ORT_FUSIONS,
    VARIANTS,
    Candidate,
    Confirmation,
    Kernel,
    OrtSettings,
    RewriteSet,
    Row,
    Timer,
    TuneResult,
    Verifier,
    step_medians,
)
from graphtool.tune.stats import confidence, session_gap, spread  # noqa: F401 - re-exported

# The least gap between two sessions of one configuration a confirmation believes (its t-test
# floors the session SD at SPREAD_FLOOR / sqrt(2)). A few sessions estimate it poorly: resnet50
# (one thread) confirmed a 1.003x win at a measured 0.1% spread that bench/tune_table.py's fresh
# sessions found 0.9975x; same-configuration session groups there measured 0.2-2.4% apart (stop 26).
SPREAD_FLOOR = 0.005
KEEP_REWRITE_SETS = 2  # how many rewrite sets stage 2 explores
# Sessions alive at once, at most (fewer when the timer says memory holds fewer): each holds its own
# weights (BERT-base: 0.44 GB), and more candidates interleaved only spread each round thinner.
MAX_SESSIONS = 6
# Each stage's share: kernels of the whole budget, the others of what is left when they start, so
# a stage that overran (building and verifying big models) narrows the next ones instead of ending them.
STAGE_SHARES = {"kernels": 0.15, "rewrite sets": 0.55, "onnxruntime settings": 0.65, "threads": 1.0}


class _Search:
    """One tune run: the state the stages share (samples, verdicts, the clock)."""

    def __init__(self, timer: Timer, verifier: Verifier, clock: Callable[[], float], budget: float,
                 threads: int | None, cores: int, progress: Callable[[str], None], limits: Limits) -> None:
        self.timer, self.verifier, self.clock, self.budget = timer, verifier, clock, budget
        self.fixed_threads, self.cores, self.progress = threads, cores, progress
        self.limits, self.min_rounds = limits, limits.min_rounds
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
        self.run_cost = RunCost()  # seconds per candidate run, from the batches so far
        self.last_samples: dict[Candidate, dict[int, float]] = {}  # the last race's, by round
        self.max_alive = 0  # the most sessions a batch had open
        self.ends: dict[str, float] = {}
        self.combos: list[Candidate] = []
        self.firing: dict[RewriteSet, list[str]] = {}
        self.slower: set[str] = set()
        self.confirmation: Confirmation | None = None

    def stage_end(self, stage: str) -> float:
        """When ``stage`` must stop (fixed the first time it is asked, at the stage's start); the
        stages after the first race leave the confirmation's first step (at the cost of the runs so
        far), and the last one an escalation step too: stage 2 is the search's widest race, and
        when stage 3 has nothing new to measure its share goes to the confirmation anyway."""
        if stage not in self.ends:
            steps = CONFIRM_RESERVED_STEPS if stage == "threads" else 1
            end = self.start + self.budget - confirmation_seconds(self.limits.confirm_rounds, self.run_cost, steps)
            now = self.clock()
            self.ends[stage] = now + self.budget * STAGE_SHARES[stage] if stage == "kernels" else \
                now + (end - now) * STAGE_SHARES[stage]
        return self.ends[stage]

    def fit(self, stage: str, pool: list[Candidate]) -> list[Candidate]:
        """The head of ``pool`` (the baseline and the candidates in priority order) that
        ``min_rounds`` rounds fit in the stage's time, from the run cost measured so far."""
        left = self.stage_end(stage) - self.clock()
        if not self.run_cost.value:
            return pool
        count = int(left / (self.run_cost.value * (self.min_rounds + SETUP_RUNS)))
        return pool[:count] if count >= 2 else []

    def measure(self, stage: str, candidates: list[Candidate]) -> list[Row]:
        """Race ``candidates`` against the baseline (graphtool.tune.race): interleaved rounds, at most
        ``capacity`` sessions alive, the clearly slower dropped, until the leader is separated."""
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
        capacity = min(MAX_SESSIONS, self.timer.capacity())
        self.progress(f"{stage}: {len(pool)} candidates, at most {max(3, capacity)} sessions at once")
        race = run_race(self.timer, pool, capacity, self.limits, lambda: self.stage_end(stage) - self.clock(),
                        self.run_cost)
        unmeasured = wanted[len(pool):] + race.unmeasured
        if unmeasured:
            self.skipped.append(f"{stage}: " + "; ".join(c.label() for c in unmeasured) + " not measured (budget spent)")
        self.max_alive = max(self.max_alive, race.max_alive)
        samples = {c: s for c, s in race.samples.items() if s}
        self.last_samples = samples
        base = samples[self.baseline]
        self.aa_gap[stage] = race.aa_gap
        rows = []
        for cand, got in samples.items():
            mine, theirs = paired(got, base)
            rows.append(Row(cand, stage, statistics.median(mine), statistics.median(theirs), spread(mine), len(mine),
                            confidence(mine, theirs) if cand != self.baseline else 0.5, left=race.left.get(cand, ""),
                            steps=step_medians(mine)))
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
        if self._rewrites_differ(RewriteSet("level 3", 3), sets[-1], unknown=False):  # --target ort: channels-last
            sets.append(RewriteSet("level 3", 3))
        for family, passes in FAMILIES.items():
            if self.kernels and family not in present:
                continue  # the rewrite makes no op of this family: "off" is level 2 itself
            if family in faster_families:
                self.skipped.append(f"level 2, {family} off: pruned (its fused kernels measured faster)")
                continue
            sets.append(RewriteSet(f"level 2, {family} off", 2, passes))
        slow_passes = tuple(sorted({p for op in slower for p in FUSED_OPS.get(op, ("", (), None))[1]}))
        made = {k.op for k in self.kernels}
        for name, (family, skip, extra, re_forms) in VARIANTS.items():  # another form of the family's fusion
            if not self.kernels or re_forms in made:  # with the slower kernels off too: else they decide
                extra = tuple(p for p in extra if p not in slow_passes)
                sets.append(RewriteSet(f"level 2, {name}" + (", slower kernels off" if slower else ""), 2,
                                       tuple(sorted(set(skip) | set(slow_passes))), extra))
        if slower:
            sets.append(RewriteSet("level 2, slower kernels off (" + ", ".join(sorted(slower)) + ")", 2, slow_passes))
        unique: dict[tuple[int, tuple[str, ...], tuple[str, ...]], RewriteSet] = {}
        for s in sets:
            unique.setdefault((s.level, tuple(sorted(s.skip)), tuple(sorted(s.extra))), s)
        for key, s in list(unique.items()):  # a family the model does not have: "off" is level 2 itself
            if not s.plain and not self._rewrites_differ(s, RewriteSet("level 2", 2)):
                del unique[key]
                self.skipped.append(f"{s.name}: writes the same graph as level 2")
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
        ranked = self._plain_first(ranked, rows)
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

    def _plain_first(self, ranked: list[RewriteSet], rows: list[Row]) -> list[RewriteSet]:
        """``ranked`` with a level as it is (no family off, no variant) moved ahead of the sets that
        beat it by no more than the batch's A/A gap: ties go to the plainer rewrite (``_prefer_defaults``)."""
        if not rows:
            return ranked
        gap = max(self.aa_gap.get("rewrite sets", 0.0), SPREAD_FLOOR)
        best = max(r.speedup for r in rows)
        for row in rows:
            r = row.candidate.rewrite
            if r.level and r.plain and row.speedup * (1 + gap) >= best and r in ranked:
                return [r] + [x for x in ranked if x != r]
        return ranked

    def ort_stage(self, kept: list[RewriteSet], slower: set[str]) -> None:
        """Stage 2: onnxruntime levels and disabled fusions on the kept rewrite sets."""
        slower_ort = {FUSED_OPS[op][2] for op in slower if op in FUSED_OPS and FUSED_OPS[op][2]}
        verdict_by_ort = {FUSED_OPS[k.op][2]: k.verdict for k in self.kernels if k.op in FUSED_OPS}
        per_set: list[list[Candidate]] = []  # each set's in priority order: what the budget may cut comes last
        for rewrite in kept:
            candidates: list[Candidate] = []
            per_set.append(candidates)
            # reading ORT's fusions builds two extended sessions of the set: minutes each on a
            # 100k-node graph, where --budget 60 ran past 30 min; once the stage's time is spent the
            # set keeps its level candidates and is not inspected
            if self.clock() < self.stage_end("onnxruntime settings"):
                self.progress(f"onnxruntime fusions on {rewrite.name}")
                firing = self.timer.ort_fusions(rewrite)
            else:
                firing = []
                self.skipped.append(f"{rewrite.name}: onnxruntime's fusions not inspected (budget spent)")
            self.firing[rewrite] = firing
            t = self.threads
            off = tuple(sorted(slower_ort & set(firing)))
            candidates.append(Candidate(rewrite, OrtSettings("all", (), t)))
            if off:
                candidates += [Candidate(rewrite, OrtSettings("all", off, t)), Candidate(rewrite, OrtSettings("extended", off, t))]
            extended, plain = Candidate(rewrite, OrtSettings("extended", (), t)), Candidate(rewrite, OrtSettings("all", (), t))
            if self._same_graph(extended, plain):
                # a decoder's graph at ORT extended is its graph at all (no convolution to lay out):
                # raced, the two differ by session noise and the race crowns either one
                self.skipped.append(f"{rewrite.name}: ORT extended not raced (onnxruntime runs the same graph at all)")
            else:
                candidates.append(extended)
            for name in firing:
                if name in off:
                    continue
                if verdict_by_ort.get(name) == "faster":
                    self.skipped.append(f"{rewrite.name}: ORT -{name} pruned (its kernel measured faster)")
                    continue
                candidates.append(Candidate(rewrite, OrtSettings("all", (name,), t)))
            candidates.append(Candidate(rewrite, OrtSettings("basic", (), t)))
        # the kept sets take turns: stage 1 ranks them within noise of one another as often as not
        # (BERT-base dynamo, batch 2: 442.2 vs 444.6 ms), so the budget cuts each set's least likely
        # settings, not every setting of the second set
        depth = max(map(len, per_set), default=0)
        turns = [cands[i] for i in range(depth) for cands in per_set if i < len(cands)]
        rows = self.measure("onnxruntime settings", turns)
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

    def _rewrites_differ(self, a: RewriteSet, b: RewriteSet, unknown: bool = True) -> bool:
        """The timer's verdict on whether two rewrite sets write different graphs; ``unknown`` when it
        cannot tell (a timer without the check). A set that fails to build is not raced."""
        check = getattr(self.timer, "same_rewrite", None)
        if check is None:
            return unknown
        try:
            return not check(a, b)
        except Exception:  # noqa: BLE001 - a rewrite that fails to build is not raced
            return False

    def _same_graph(self, a: Candidate, b: Candidate) -> bool:
        """The timer's verdict, False when it cannot tell (a timer without the check, a session that fails)."""
        check = getattr(self.timer, "same_graph", None)
        if check is None or self.clock() >= self.stage_end("onnxruntime settings"):
            return False
        try:
            return bool(check(a, b))
        except Exception:  # noqa: BLE001 - unknown is "not the same": both are raced, as before
            return False

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
        # the last race decides: its rows are each a ratio to the baseline over the rounds they shared
        pick = sorted(final, key=lambda r: -r.speedup)
        if not pick:
            return self._original()
        win = pick[0]
        gap = self.aa_gap.get(final_stage or "", 0.0)
        win, pick = self._prefer_defaults(win, pick, gap)
        if gap:
            self.findings.append(f"A/A control: two sessions of the original under ORT's defaults differed by "
                                 f"{gap:.1%} in the final batch; a win must be larger")
        need = self.limits.replace_rounds

        def why_not(row: Row) -> str | None:
            """Why ``row`` may not replace the original; None when it may."""
            if row.confidence < CONFIDENT:
                return f"at {row.confidence:.0%}"
            if row.speedup - 1 <= gap:
                return f"inside the {gap:.1%} two sessions of the original differ by"
            if row.rounds < need:
                return f"over only {row.rounds} paired rounds: a win needs {need}, as a bootstrap over 5 calls any " \
                       "5-for-5 result certain"
            return None

        base = [r for r in pick if r.candidate == self.baseline]
        if win.candidate != self.baseline and base and why_not(win) is not None:
            # never trade the original for a guess: the fastest that clears the bar, else the original
            bar = next(r for r in pick if r.candidate == self.baseline or why_not(r) is None)
            self.findings.append(f"{win.candidate.label()} measured {win.speedup:.3f}x, {why_not(win)}: not "
                                 + (f"taken; the fastest that clears the bar is {bar.candidate.label()}"
                                    if bar is not base[0] else "confidently faster than the original; keeping it"))
            win, pick = bar, [bar] + [r for r in pick if r is not bar]
        if win.candidate != self.baseline:
            win, pick = self._against_plain(win, pick)
        if win.candidate != self.baseline and not self.confirmed(win):
            if not base:
                return self._original()
            win, pick = base[0], [base[0]] + [r for r in pick if r is not base[0]]
        if self.max_alive:
            self.findings.append(f"at most {self.max_alive} onnxruntime sessions were open at once (candidates "
                                 "raced; the clearly slower were dropped and their sessions closed)")
        runner_conf = self._pair_confidence(pick) if len(pick) > 1 else None
        self._avoided(win.candidate)
        if win.candidate.ort.disabled:
            self.findings.append("onnxruntime fusions disabled in the winner: " + ", ".join(win.candidate.ort.disabled))
        done = self.confirmation
        speedup, conf = (done.ratio, done.confidence) if done is not None and done.kept else (win.speedup, win.confidence)
        return TuneResult(win.candidate, self.baseline, speedup, conf, runner_conf, self.rows, self.kernels,
                          self.findings, self.skipped, self.failed, self.clock() - self.start, done)

    def _prefer_defaults(self, win: Row, pick: list[Row], gap: float) -> tuple[Row, list[Row]]:
        """The plainer candidate when the winner beats it by no more than two sessions of one
        configuration differ: first the same rewrite set at onnxruntime's defaults (level all,
        nothing disabled), then the rewrite set's level as it is (no family off, no variant) at
        those defaults. A choice people do not make by default must earn its place (6-layer Llama,
        huge pages, sessions 0-2 % apart: "level 2 | ORT extended" and "level 2, GELU off | ORT
        extended" each won a race by noise and ran 0.1-1.5 % behind level 2 at ORT all)."""
        plain_ort = OrtSettings("all", (), win.candidate.ort.threads)
        if win.candidate == self.baseline:
            return win, pick
        bar = 1 + max(gap, SPREAD_FLOOR)

        def plainer(row: Row) -> bool:
            r, w = row.candidate.rewrite, win.candidate.rewrite
            if row.candidate.ort != plain_ort or row is win:
                return False
            return r == w or (r.level == w.level and r.plain and not w.plain)

        for row in sorted((r for r in pick if plainer(r)), key=lambda r: bool(r.candidate.rewrite != win.candidate.rewrite)):
            if win.speedup <= row.speedup * bar:
                self.findings.append(f"{win.candidate.label()} measured {win.speedup / row.speedup:.3f}x of "
                                     f"{row.candidate.label()}, inside the {bar - 1:.1%} two sessions of one "
                                     "configuration differ by: the plainer choice kept")
                return row, [row] + [r for r in pick if r is not row]
        return win, pick

    def _against_plain(self, win: Row, pick: list[Row]) -> tuple[Row, list[Row]]:
        """A winner with a family switched off, another fusion form or non-default ORT settings must
        also beat its level as it is at ORT's defaults in fresh sessions (``confirm``, that level as
        the baseline); else the plain level goes on to the confirmation against the original. The
        race gives each candidate one session, and one session's offset can exceed the A/A pair's
        (6-layer Qwen3 under huge pages: "level 2, GELU off | ORT all -QuickGeluFusion" won its race
        by 3.3 % at an A/A gap of 1.0 % and ran 0.6-3.1 % behind plain level 2 in bench/decoder_latency.py,
        its unfused SiLU's Sigmoid and Mul the difference). Checked only where the budget fits this
        and the confirmation against the original after it."""
        rewrite = win.candidate.rewrite
        plain_ort = OrtSettings("all", (), win.candidate.ort.threads)
        if rewrite.level == 0 or (rewrite.plain and win.candidate.ort == plain_ort):
            return win, pick
        plains = [r for r in self.rows if r.status == "measured" and r.candidate.replica == 0
                  and r.candidate.rewrite.level == rewrite.level and r.candidate.rewrite.plain
                  and r.candidate != win.candidate]
        # at ORT's defaults where it was measured so (else as the rewrite sets were ranked)
        plain = next((r for r in reversed(plains) if r.candidate.ort == plain_ort), plains[-1] if plains else None)
        end = self.start + self.budget
        need = 2 * confirmation_seconds(self.limits.confirm_rounds, self.run_cost)
        if plain is None or end - self.clock() < need:
            return win, pick
        if plain.candidate.rewrite not in self.verified:
            self.progress(f"verifying {plain.candidate.rewrite.name}")
            why = self.verifier(plain.candidate.rewrite)
            if why is not None:
                self.failed[plain.candidate.rewrite.name] = why
                return win, pick
            self.verified.add(plain.candidate.rewrite)
        capacity = min(MAX_SESSIONS, self.timer.capacity())
        self.progress(f"confirmation: {win.candidate.label()} against {plain.candidate.label()} in fresh sessions")
        got = confirm(self.timer, win.candidate, plain.candidate, capacity, self.limits, lambda: end - self.clock(),
                      self.run_cost, max(self.aa_gap.values(), default=0.0), win.speedup / plain.speedup, SPREAD_FLOOR)
        if got is None:
            return win, pick
        found, _samples = got
        if found.kept:
            self.findings.append(f"{win.candidate.label()} beat {plain.candidate.label()} in fresh sessions too "
                                 f"({found.ratio:.3f}x)")
            return win, pick
        self.findings.append(f"{win.candidate.label()} won its race but measured {found.ratio:.3f}x of "
                             f"{plain.candidate.label()} in fresh sessions ({found.note}): the plain level goes on")
        return plain, [plain] + [r for r in pick if r is not plain]

    def _original(self) -> TuneResult:
        """The original kept without a race row of its own to report (speed-up 1, confidence 0.5)."""
        return TuneResult(self.baseline, self.baseline, 1.0, 0.5, None, self.rows, self.kernels, self.findings,
                          self.skipped, self.failed, self.clock() - self.start, self.confirmation)

    def confirmed(self, win: Row) -> bool:
        """Race ``win`` against the original in fresh sessions (stage 4, graphtool.tune.race.confirm);
        whether it may replace the original. Its figures and the reason go to the findings and
        ``self.confirmation``, its sessions to the rows."""
        label, need = win.candidate.label(), self.limits.confirm_rounds
        aa = max(self.aa_gap.values(), default=0.0)
        capacity = min(MAX_SESSIONS, self.timer.capacity())
        end = self.start + self.budget
        self.progress("confirmation: the winner and the original in fresh sessions")
        got = confirm(self.timer, win.candidate, self.baseline, capacity, self.limits, lambda: end - self.clock(),
                      self.run_cost, aa, win.speedup, SPREAD_FLOOR)
        if got is None:
            note = (f"the {max(0.0, end - self.clock()):.0f} s left of the budget cannot fit the confirmation against "
                    f"fresh sessions of the original (~{confirmation_seconds(need, self.run_cost):.0f} s for "
                    f"{need} rounds of 4 sessions)")
            self.confirmation = Confirmation(win.candidate, win.speedup, aa_gap=aa, note=note, stopped="budget")
            self.findings.append(f"{label} measured {win.speedup:.3f}x in the race, but {note}; keeping the original "
                                 "(a larger --budget fits it)")
            return False
        found, samples = got
        self.confirmation = found
        self.max_alive = max(self.max_alive, 4 if capacity >= 4 else 2)
        originals = [c for c in samples if c.rewrite == self.baseline.rewrite and c.ort == self.baseline.ort]
        pooled = round_means(samples, originals)
        for cand, got_ in samples.items():
            mine, theirs = paired(got_, pooled)
            self.rows.append(Row(cand, "confirmation", statistics.median(mine), statistics.fmean(found.original_ms),
                                 spread(mine), len(mine), confidence(mine, theirs),
                                 steps=step_medians(mine)))
        count = {2: "two", 4: "four", 6: "six"}.get(found.sessions, str(found.sessions))
        self.findings.append(
            f"{label} measured {win.speedup:.3f}x in the race and {found.ratio:.3f}x against {count} fresh sessions of "
            f"the original and {count} of its own ({found.rounds} rounds each, {found.confidence:.0%} confident over "
            f"the rounds; sessions of one configuration up to {found.spread:.1%} apart: the winner's "
            f"{session_gap(found.winner_ms):.1%}, the original's {session_gap(found.original_ms):.1%}, the races' A/A "
            f"gap {aa:.1%}); " + (found.note if found.kept else f"{found.note}: keeping the original"))
        return found.kept

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
        return confidence(*paired(samples[pick[0].candidate], samples[pick[1].candidate]))


def tune(timer: Timer, verifier: Verifier, clock: Callable[[], float], budget: float = 300.0,
         threads: int | None = None, cores: int = 1, progress: Callable[[str], None] = lambda _s: None,
         min_rounds: int = 5, max_rounds: int = 60, replace_rounds: int = 10) -> TuneResult:
    """Run the staged search; ``threads`` pins onnxruntime's intra-op threads (no thread stage)."""
    limits = Limits(min_rounds, max_rounds, replace_rounds, min(30, max_rounds))
    search = _Search(timer, verifier, clock, budget, threads, cores, progress, limits)
    slower, faster_families = search.kernel_stage()
    kept = search.rewrite_stage(slower, faster_families)
    if kept:
        search.ort_stage(kept, slower)
    search.thread_stage()
    return search.result()
