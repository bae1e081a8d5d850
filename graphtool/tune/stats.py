"""The statistics ``tune`` decides with: a paired bootstrap confidence over rounds, a noise
spread, and a t-test over sessions.

Whole-model rounds are interleaved, so sample i of two candidates ran back to back: pairing them
cancels the load that hit both. Rounds cannot show what differs between two sessions of one model
and settings (each keeps an offset of its own for its life); the confirmation's verdict is a test
over session medians instead (``session_test``). How many rounds or sessions a verdict needs is
the search's business (graphtool.tune.search, graphtool.tune.race); these functions only summarize samples.
"""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import dataclass
from typing import Sequence


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


def session_gap(medians: Sequence[float]) -> float:
    """max / min - 1 of one configuration's session medians (0 for fewer than two)."""
    return max(medians) / min(medians) - 1 if len(medians) > 1 and min(medians) > 0 else 0.0


def t_quantile(p: float, df: int) -> float:
    """Student's t quantile for ``p`` in (0.5, 1) and an integer ``df`` (no scipy in the runtime).

    Bisection on the exact finite-series CDF for integer degrees of freedom (Abramowitz & Stegun
    26.7.3-4): the confirmation asks for at most a few dozen values, each in microseconds."""
    df = max(1, int(df))
    lo, hi = 0.0, 1e3
    for _ in range(100):
        mid = (lo + hi) / 2
        if (1 + _t_within(mid, df)) / 2 < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def _t_within(t: float, df: int) -> float:
    """P(|T| < t) for Student's t with ``df`` degrees of freedom."""
    theta = math.atan(abs(t) / math.sqrt(df))
    s, c = math.sin(theta), math.cos(theta)
    term = total = 1.0
    if df % 2:
        if df == 1:
            return 2 * theta / math.pi
        for k in range(1, (df - 3) // 2 + 1):
            term *= 2 * k / (2 * k + 1) * c * c
            total += term
        return 2 / math.pi * (theta + s * c * total)
    for k in range(1, (df - 2) // 2 + 1):
        term *= (2 * k - 1) / (2 * k) * c * c
        total += term
    return s * total


@dataclass(frozen=True)
class SessionTest:
    """A one-sided two-sample t-test on per-session medians: is the winner faster than the original
    by more than sessions of one configuration differ?

    Works on the log of each session's median, so ``gain`` is the log of the ratio of geometric
    means and the session SD is a fraction. Sessions are compared within their step (the sessions
    opened and run together): a load change between steps moves both sides of a step alike, so it
    is taken out of the SD instead of inflating it. The measured SD is floored (``floor``): a few
    sessions that happen to agree are no evidence that sessions of one configuration always do."""

    gain: float  # mean log(original median) - mean log(winner median)
    sd: float  # the pooled within-step SD of one session's log median, as measured
    floor: float  # the least SD believed
    df: int  # its degrees of freedom
    sessions: int  # per configuration
    level: float  # one-sided confidence the test asks for

    @property
    def sd_used(self) -> float:
        return max(self.sd, self.floor)

    @property
    def ratio(self) -> float:
        """The winner's speed-up: original / winner, geometric means of the session medians."""
        return math.exp(self.gain)

    @property
    def t_needed(self) -> float:
        return t_quantile(self.level, self.df)

    @property
    def t(self) -> float:
        se = self.se(self.sessions)
        return self.gain / se if se > 0 else math.copysign(math.inf, self.gain) if self.gain else 0.0

    def se(self, sessions: int) -> float:
        """The standard error of ``gain`` with ``sessions`` sessions a side at this SD."""
        return self.sd_used * math.sqrt(2 / sessions) if sessions else math.inf

    def bar_at(self, sessions: int, df: int) -> float:
        """What ``ratio - 1`` must exceed with ``sessions`` a side and ``df`` degrees of freedom, at this SD."""
        return math.expm1(t_quantile(self.level, df) * self.se(sessions))

    @property
    def bar(self) -> float:
        return self.bar_at(self.sessions, self.df)

    @property
    def passed(self) -> bool:
        return self.t > self.t_needed


def session_test(winner: Sequence[Sequence[float]], original: Sequence[Sequence[float]], aa_gap: float | None,
                 floor: float, level: float) -> SessionTest:
    """The test on ``winner[k]`` and ``original[k]``, the session medians of step ``k``.

    ``aa_gap`` (|one session / another - 1| of two sessions of the original that the races ran side
    by side) counts as one more pair of the original: one more degree of freedom for the SD."""
    logs_w = [[math.log(x) for x in step] for step in winner]
    logs_o = [[math.log(x) for x in step] for step in original]
    flat_w = [x for step in logs_w for x in step]
    flat_o = [x for step in logs_o for x in step]
    ss, df = 0.0, 0
    for group in logs_w + logs_o:
        if len(group) > 1:
            mean = statistics.fmean(group)
            ss += sum((x - mean) ** 2 for x in group)
            df += len(group) - 1
    if aa_gap is not None:
        ss += math.log1p(aa_gap) ** 2 / 2
        df += 1
    gain = statistics.fmean(flat_o) - statistics.fmean(flat_w) if flat_w and flat_o else 0.0
    return SessionTest(gain, math.sqrt(ss / df) if df else 0.0, floor, max(1, df), min(len(flat_w), len(flat_o)), level)
