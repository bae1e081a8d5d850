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

``confirm`` is the last race: the winner against the original, each in fresh sessions (see there).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field, replace
from typing import Callable

from graphtool.tune_space import Candidate, Confirmation, Timer
from graphtool.tune_stats import confidence

CONFIDENT = 0.95  # a difference counts when the bootstrap puts it on one side this often
MARGIN = 0.03  # and when it is this large: 1% at 95% confidence after 5 rounds decides nothing
SETUP_RUNS = 3  # what opening a session and its warm-up runs cost, in runs
CONFIRM_SESSIONS = 2  # fresh sessions of each configuration in the confirmation


@dataclass
class Limits:
    """Round counts: each newcomer's first batch, the most any candidate runs, what a winner
    needs against the original, and what cheap runs get before a gap is believed."""

    min_rounds: int = 5
    max_rounds: int = 60
    replace_rounds: int = 10
    cheap_rounds: int = 30


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


def confirmation_seconds(rounds: int, cost: RunCost) -> float:
    """What ``confirm`` costs the budget: four fresh sessions opened, warmed up and run ``rounds`` times."""
    return 2 * CONFIRM_SESSIONS * (rounds + SETUP_RUNS) * (cost.value or 0.0)


def confirm(timer: Timer, winner: Candidate, baseline: Candidate, capacity: int, limits: Limits,
            time_left: Callable[[], float], cost: RunCost, aa_gap: float,
            race_speedup: float) -> tuple[Confirmation, dict[Candidate, dict[int, float]]] | None:
    """The winner and the original (``baseline``), each in two sessions none of the races opened,
    interleaved round by round; None when the time left cannot fit ``replace_rounds`` rounds.

    Why fresh sessions, and two of each: a session of a given model and settings keeps an offset
    of its own for its whole life (where its weights and arenas landed in memory, which core its
    threads favour): 0.2–1.8% at one thread on BERT-base, more at two. Rounds inside one session
    cannot see it, and the race's winner is, among many candidates, the one whose session also drew
    a lucky offset (the winner's curse). Fresh sessions of the winner remove that selection; two of
    each configuration measure the offset's size on both sides in the same rounds. The decision
    (graphtool.tune) compares the pooled means against that spread. Sessions are opened
    alternately (original, winner, original, winner) so neither side always gets the memory opened
    first. When memory holds fewer than four sessions, the two (original, winner) pairs run one
    after the other, each pair interleaved."""
    need = max(limits.replace_rounds, limits.min_rounds)
    if not cost.value or time_left() < confirmation_seconds(need, cost):
        return None
    twins = [replace(winner, replica=2 + i) for i in range(CONFIRM_SESSIONS)]
    fresh = [replace(baseline, replica=2 + i) for i in range(CONFIRM_SESSIONS)]
    order = [c for pair in zip(fresh, twins) for c in pair]
    together = capacity >= len(order)
    groups = [order] if together else [list(pair) for pair in zip(fresh, twins)]
    samples: dict[Candidate, dict[int, float]] = {c: {} for c in order}
    done = 0
    while True:
        for group in groups:
            batch = timer.time(group, need)
            for cand, got in batch.items():
                samples[cand].update((done + i, x) for i, x in enumerate(got))
        done += need
        undecided = 1 - CONFIDENT < confidence(*_pooled(samples, twins, fresh)) < CONFIDENT
        # at most one more batch, only for the bootstrap: rounds shrink the noise inside a session,
        # not the spread between sessions; separate pairs would open new sessions, not extend these
        if not (together and undecided and done + need <= min(limits.max_rounds, 2 * need)
                and time_left() >= len(order) * need * cost.value):
            break
    timer.release(order)
    winner_ms = [median(samples[c]) for c in twins]
    original_ms = [median(samples[c]) for c in fresh]
    found = Confirmation(winner, race_speedup, min(len(s) for s in samples.values()), winner_ms, original_ms, aa_gap,
                         statistics.fmean(original_ms) / statistics.fmean(winner_ms),
                         confidence(*_pooled(samples, twins, fresh)))
    return found, samples


def _pooled(samples: dict[Candidate, dict[int, float]], twins: list[Candidate],
            fresh: list[Candidate]) -> tuple[list[float], list[float]]:
    """Per round, the mean over the winner's sessions and over the original's (rounds all four ran)."""
    common = sorted(set.intersection(*(set(samples[c]) for c in twins + fresh)))
    return ([statistics.fmean(samples[c][i] for c in twins) for i in common],
            [statistics.fmean(samples[c][i] for c in fresh) for i in common])
