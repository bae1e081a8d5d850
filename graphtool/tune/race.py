"""One stage of ``tune``'s whole-model measurements, run as a race with a bounded field.

The baseline (the original under onnxruntime's defaults) and its A/A control run in every round;
at most ``capacity`` sessions are alive at once, because each holds its own copy of the weights
(BERT-base: 0.44 GB a session; a field of 23 candidates took tune to 10.7 GB RSS). Candidates
wait for a place; after each batch of interleaved rounds:

* a candidate the leader beats with 95% confidence, by more than ``MARGIN`` and than the A/A gap,
  is dropped and its session closed (``Timer.release``): its rounds so far are its row;
* when candidates wait and no place is free, one that ran ``replace_rounds`` rounds without
  leading retires (within noise of the leader, or it would have been dropped) to make room.

The race ends when nothing waits and the leader is separated from the runner-up with enough
rounds — ``replace_rounds`` paired rounds when the leader is not the baseline, since a bootstrap
over 5 rounds calls any 5-for-5 result certain — or when ``max_rounds`` or the stage's time run
out. Comparisons pair rounds by index: two candidates compare on the rounds both ran.

``confirm`` is the last race: the winner against the original, each in fresh sessions, two a
side and two more while a t-test over the session medians is undecided (see there).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field, replace
from typing import Callable

from graphtool.tune.space import Candidate, Confirmation, Timer
from graphtool.tune.stats import SessionTest, confidence, session_test

CONFIDENT = 0.95  # a difference counts when the bootstrap puts it on one side this often
MARGIN = 0.03  # and when it is this large: 1% at 95% confidence after 5 rounds decides nothing
SETUP_RUNS = 3  # what opening a session and its warm-up runs cost, in runs
CONFIRM_SESSIONS = 2  # fresh sessions of each configuration a confirmation step opens
CONFIRM_MAX_SESSIONS = 6  # of each configuration, after escalating (each BERT-base session: 0.44 GB, ~6 s)
CONFIRM_LEVEL = 0.975  # each step's one-sided t-test: over up to three looks, about 95% in all
FUTILITY = 0.5  # no more sessions when the gain is under this share of the bar the most sessions would set
CONFIRM_RESERVED_STEPS = 2  # confirmation steps the last stage leaves time for (the others: one)


@dataclass
class Limits:
    """Round counts: each newcomer's first batch, the most any candidate runs, what a winner
    needs against the original, and what cheap runs get before a gap is believed."""

    min_rounds: int = 5
    max_rounds: int = 60
    replace_rounds: int = 10
    cheap_rounds: int = 30

    @property
    def confirm_rounds(self) -> int:
        """The rounds each fresh session of a confirmation step runs."""
        return max(self.replace_rounds, self.min_rounds)


@dataclass
class RunCost:
    """Seconds one candidate run costs the budget (shared across the stages' races)."""

    value: float | None = None


@dataclass
class RaceResult:
    samples: dict[Candidate, dict[int, float]]  # candidate → round index → seconds
    left: dict[Candidate, str] = field(default_factory=dict)  # candidate → why it left the race early
    unmeasured: list[Candidate] = field(default_factory=list)  # still waiting when the time ran out
    aa_gap: float = 0.0  # |control / baseline - 1| over the race's rounds
    max_alive: int = 0  # the most sessions one batch had open


def paired(a: dict[int, float], b: dict[int, float]) -> tuple[list[float], list[float]]:
    """The samples of ``a`` and ``b`` from the rounds both ran, in round order."""
    common = sorted(a.keys() & b.keys())
    return [a[i] for i in common], [b[i] for i in common]


def median(samples: dict[int, float]) -> float:
    return statistics.median(samples.values())


def run_race(timer: Timer, pool: list[Candidate], capacity: int, limits: Limits, time_left: Callable[[], float],
             cost: RunCost) -> RaceResult:
    """Race ``pool`` (the baseline, its A/A control, then the candidates in priority order)."""
    baseline, control = pool[0], pool[1]
    capacity = max(3, capacity)
    waiting, active = list(pool[2:]), [baseline, control]
    samples: dict[Candidate, dict[int, float]] = {c: {} for c in pool}
    result = RaceResult(samples)
    done, required, first = 0, limits.min_rounds, True
    while True:
        while waiting and len(active) < capacity:
            active.append(waiting.pop(0))
        rounds = _next_rounds(active, waiting, samples, control, required, limits)
        if rounds <= 0:
            break
        if not first and cost.value:
            fits = int(time_left() / (cost.value * len(active)))
            if fits < rounds and len(active) > 3:  # time is short: the leader goes on alone with the baseline
                leader = min((c for c in active if c != control and samples[c]), key=lambda c: median(samples[c]))
                for cand in [c for c in active[2:] if c != leader]:
                    result.left[cand] = f"retired after {len(samples[cand])} rounds to give the leader the time left"
                    active.remove(cand)
                    timer.release([cand])
                result.unmeasured += waiting
                waiting = []
                rounds = _next_rounds(active, waiting, samples, control, required, limits)
                fits = int(time_left() / (cost.value * len(active)))
            rounds = min(rounds, fits)
            if rounds < 2:
                break
        batch = timer.time(active, rounds)
        result.max_alive = max(result.max_alive, len(active))
        for cand, got in batch.items():
            samples[cand].update((done + i, x) for i, x in enumerate(got))
        done += len(batch.get(baseline, ())) or rounds
        runs = [x for got in batch.values() for x in got]
        # what a run costs the budget: the samples may be CPU time, which leaves out the time other
        # processes held the core, so the timer's elapsed time per timed run bounds it from below
        # (not the batch's: that includes building the rewrite sets and opening their sessions)
        per_run = max(sum(runs) / len(runs), timer.wall_per_run) if runs else 0.0
        cost.value = per_run or cost.value
        if first and per_run > 0 and per_run * len(active) * limits.cheap_rounds < time_left() / 4:
            required = min(limits.cheap_rounds, limits.max_rounds)  # cheap runs: more rounds before believing a gap
        first = False
        result.aa_gap = abs(median(samples[control]) / median(samples[baseline]) - 1)
        for cand in _leaving(active, bool(waiting), samples, baseline, control, result.aa_gap, limits, result.left):
            active.remove(cand)
            timer.release([cand])
    result.unmeasured += waiting
    return result


def _next_rounds(active: list[Candidate], waiting: list[Candidate], samples: dict[Candidate, dict[int, float]],
                 control: Candidate, required: int, limits: Limits) -> int:
    """How many rounds the next batch runs; 0 when the race is decided."""
    fresh = [len(samples[c]) for c in active if len(samples[c]) < limits.min_rounds]
    if fresh:
        return limits.min_rounds - min(fresh)
    if waiting:  # a place frees when someone is dropped or retires (after replace_rounds rounds)
        ran = max(len(samples[c]) for c in active[2:]) if active[2:] else limits.replace_rounds
        return max(2, min(limits.min_rounds, min(limits.replace_rounds, limits.max_rounds) - ran))
    ranked = sorted((c for c in active if c != control), key=lambda c: median(samples[c]))
    leader = ranked[0]
    ran = len(samples[leader])
    separated = len(ranked) < 2 or confidence(*paired(samples[leader], samples[ranked[1]])) >= CONFIDENT
    need = required if leader == active[0] else max(required, limits.replace_rounds)
    if (separated and ran >= need) or ran >= limits.max_rounds:
        return 0
    return min(max(ran, need - ran), limits.max_rounds - ran)


def _leaving(active: list[Candidate], waiting: bool, samples: dict[Candidate, dict[int, float]], baseline: Candidate,
             control: Candidate, gap: float, limits: Limits, left: dict[Candidate, str]) -> list[Candidate]:
    """The candidates that leave after this batch (their reasons go to ``left``)."""
    ranked = sorted((c for c in active if c != control), key=lambda c: median(samples[c]))
    leader, out = ranked[0], []
    for cand in ranked[1:]:
        if cand == baseline or len(samples[cand]) < limits.min_rounds:
            continue
        mine, lead = paired(samples[cand], samples[leader])
        slower = statistics.median(mine) / statistics.median(lead) - 1
        if confidence(lead, mine) >= CONFIDENT and slower > max(MARGIN, gap):
            left[cand] = f"dropped after {len(mine)} rounds: {slower:.1%} slower than the leader"
            out.append(cand)
    for cand in ranked:
        if cand != baseline and cand not in out and len(samples[cand]) >= limits.max_rounds:
            left[cand] = f"ran the most rounds a candidate runs ({limits.max_rounds})"
            out.append(cand)
    if waiting and not out:  # the slowest that ran enough rounds retires (the leader too, when alone)
        enough = min(limits.replace_rounds, limits.max_rounds)
        done = [c for c in reversed(ranked) if c != baseline and len(samples[c]) >= enough]
        if done:
            why = "leading" if done[0] == leader else "within noise of the leader"
            left[done[0]] = f"retired after {len(samples[done[0]])} rounds to make room ({why})"
            out.append(done[0])
    return out


def confirmation_seconds(rounds: int, cost: RunCost, steps: int = 1) -> float:
    """What ``steps`` steps of ``confirm`` cost the budget: four fresh sessions a step, each opened,
    warmed up and run ``rounds`` times."""
    return steps * 2 * CONFIRM_SESSIONS * (rounds + SETUP_RUNS) * (cost.value or 0.0)


def confirm(timer: Timer, winner: Candidate, baseline: Candidate, capacity: int, limits: Limits,
            time_left: Callable[[], float], cost: RunCost, aa_gap: float, race_speedup: float,
            floor: float) -> tuple[Confirmation, dict[Candidate, dict[int, float]]] | None:
    """The winner and the original (``baseline``) in sessions none of the races opened, two of each
    a step, interleaved round by round, until a t-test over the session medians decides; None when
    the time left cannot fit the first step's ``replace_rounds`` rounds. ``floor`` is the least gap
    believed between two sessions of one configuration (graphtool.tune.search.SPREAD_FLOOR).

    Why fresh sessions: a session of a given model and settings keeps an offset of its own for its
    whole life (where its weights and arenas landed in memory, which core its threads favour):
    0.2–1.8% at one thread on BERT-base, more at two. Rounds inside one session cannot see it, and
    the race's winner is, among many candidates, the one whose session also drew a lucky offset (the
    winner's curse). Fresh sessions of the winner remove that selection.

    Why a t-test over sessions, and more sessions when it is undecided: the session, not the round,
    is the unit the offset varies by, so the verdict compares the mean log session median of each
    side against the SD of sessions within one configuration (``session_test``: sessions compared
    within their step, the races' A/A pair as one more pair, the SD floored at ``floor``/√2: the SD
    at which two sessions sit ``floor`` apart, root mean square). The bar the difference must clear,
    t·SD·√(2/n), shrinks with n sessions a side: at an SD of 0.6%, 1.9% at two (t on 3 df), 1.1% at
    four (5 df), 0.8% at six (7 df). A true 1% gain (BERT-base's MultiHeadAttention set) is beyond what
    two sessions a side can confirm, so while the gain is inside the bar but at least ``FUTILITY``
    of the bar ``CONFIRM_MAX_SESSIONS`` would set, and the budget fits it, two more sessions a side
    are opened. Each look tests at ``CONFIRM_LEVEL`` (97.5% one-sided) so that the three looks
    together keep a false win near 5% (simulated: 3–4.5% at session SDs of 0.6–1.2%, against 6–8%
    for the two-session range bar this replaced, which kept a true 1% gain at a 0.6% SD 44% of the
    time; this rule, 65%): a wrong win hands the user a slower model, a wrong "keep" misses a gain,
    so the rule errs toward the original. The pooled rounds' bootstrap must agree too (``CONFIDENT``).
    Sessions are opened alternately (original, winner, original, winner) so neither side always
    gets the memory opened first; a step's sessions are closed before the next step opens its own,
    and when memory holds fewer than four sessions, a step's two (original, winner) pairs run one
    after the other, each pair interleaved."""
    need = limits.confirm_rounds
    if not cost.value or time_left() < confirmation_seconds(need, cost):
        return None
    samples: dict[Candidate, dict[int, float]] = {}
    twins: list[list[Candidate]] = []  # per step, the winner's sessions
    fresh: list[list[Candidate]] = []  # per step, the original's
    done = 0
    while True:
        first = 2 + len(twins) * CONFIRM_SESSIONS  # replicas 0 and 1 are the races' sessions
        twins.append([replace(winner, replica=first + i) for i in range(CONFIRM_SESSIONS)])
        fresh.append([replace(baseline, replica=first + i) for i in range(CONFIRM_SESSIONS)])
        last = len(twins) * CONFIRM_SESSIONS >= CONFIRM_MAX_SESSIONS
        done = _step(timer, twins[-1], fresh[-1], capacity, limits, done, samples, time_left, cost, last)
        test = session_test([[median(samples[c]) for c in step] for step in twins],
                            [[median(samples[c]) for c in step] for step in fresh], aa_gap, floor / math.sqrt(2),
                            CONFIRM_LEVEL)
        all_twins, all_fresh = [c for s in twins for c in s], [c for s in fresh for c in s]
        conf = confidence(*_pooled(samples, all_twins, all_fresh))
        stopped, note = _next_step(test, conf, floor, time_left, confirmation_seconds(need, cost))
        if stopped:
            break
    found = Confirmation(winner, race_speedup, min(len(samples[c]) for c in all_twins + all_fresh),
                         [median(samples[c]) for c in all_twins], [median(samples[c]) for c in all_fresh], aa_gap,
                         test.ratio, conf, stopped == "decided" and test.passed, note, test, stopped)
    return found, samples


def _step(timer: Timer, twins: list[Candidate], fresh: list[Candidate], capacity: int, limits: Limits, done: int,
          samples: dict[Candidate, dict[int, float]], time_left: Callable[[], float], cost: RunCost, last: bool) -> int:
    """One step of ``confirm``: ``twins`` and ``fresh`` opened, run, closed; returns the rounds done so far.
    Only the ``last`` step a confirmation may open runs one more batch when the rounds' bootstrap is
    undecided: before it, the time buys more sessions, which add rounds and narrow the bar too."""
    need = limits.confirm_rounds
    order = [c for pair in zip(fresh, twins) for c in pair]
    together = capacity >= len(order)
    groups = [order] if together else [list(pair) for pair in zip(fresh, twins)]
    samples.update({c: {} for c in order})
    start = done
    while True:
        for group in groups:
            batch = timer.time(group, need)
            for cand, got in batch.items():
                samples[cand].update((done + i, x) for i, x in enumerate(got))
        done += need
        undecided = 1 - CONFIDENT < confidence(*_pooled(samples, twins, fresh)) < CONFIDENT
        # at most one more batch, only for the bootstrap: rounds shrink the noise inside a session,
        # not the spread between sessions; separate pairs would open new sessions, not extend these
        if not (last and together and undecided and done - start + need <= min(limits.max_rounds, 2 * need)
                and time_left() >= len(order) * need * (cost.value or 0.0)):
            break
    timer.release(order)
    runs = [x for c in order for x in samples[c].values()]
    cost.value = max(statistics.fmean(runs), timer.wall_per_run) if runs else cost.value  # what the next step costs
    return done


def _next_step(test: SessionTest, conf: float, floor: float, time_left: Callable[[], float],
               step_seconds: float) -> tuple[str, str]:
    """("", "") when ``confirm`` opens two more sessions a side; else why it stops and the verdict's note."""
    n = test.sessions
    more = max(0, CONFIRM_MAX_SESSIONS - n) // CONFIRM_SESSIONS  # steps the cap still allows
    cap_bar = test.bar_at(n + more * CONFIRM_SESSIONS, test.df + more * 2 * (CONFIRM_SESSIONS - 1))
    sd = f"session SD {test.sd_used:.2%}" + (
        f", floored: sessions of one configuration differ by at least {floor:.1%} on this kind of machine"
        if test.sd < test.floor else "")
    detail = f"t {test.t:.2f}, {test.t_needed:.2f} needed: one-sided {test.level:.1%} on {test.df} df; {sd}"
    figures = f"{test.ratio:.3f}x vs a bar of {test.bar:.1%} ({detail})"
    sides = f"{n} sessions a side"
    if test.passed and conf >= CONFIDENT:
        return "decided", f"confirmed after {sides}: {figures}"
    why = "inside the bar" if not test.passed else f"at {conf:.0%} confidence over the rounds"
    if not more:
        return "most sessions", f"{why} after {sides}, the most the confirmation opens: {figures}"
    if test.ratio - 1 < FUTILITY * cap_bar:
        return "inside noise", (f"inside noise after {sides}: {figures}; under half the {cap_bar:.1%} that "
                                f"{n + more * CONFIRM_SESSIONS} sessions a side would need, so no more sessions")
    left = time_left()
    if left < step_seconds:
        return "budget", (f"{why} after {sides}: {figures}; {2 * CONFIRM_SESSIONS} more fresh sessions "
                          f"(~{step_seconds:.0f} s) do not fit in the {max(0.0, left):.0f} s left of the budget")
    return "", ""


def _pooled(samples: dict[Candidate, dict[int, float]], twins: list[Candidate],
            fresh: list[Candidate]) -> tuple[list[float], list[float]]:
    """Per round both sides ran, the mean over the winner's sessions that ran it and over the original's."""
    return paired(round_means(samples, twins), round_means(samples, fresh))


def round_means(samples: dict[Candidate, dict[int, float]], sessions: list[Candidate]) -> dict[int, float]:
    """Round index → the mean over the ``sessions`` that ran that round."""
    by_round: dict[int, list[float]] = {}
    for cand in sessions:
        for i, x in samples[cand].items():
            by_round.setdefault(i, []).append(x)
    return {i: statistics.fmean(xs) for i, xs in by_round.items()}
