"""The two statistics ``tune`` decides with: a paired bootstrap confidence and a noise spread.

Whole-model rounds are interleaved, so sample i of two candidates ran back to back: pairing them
cancels the load that hit both. How many pairs a verdict needs is the search's business
(graphtool.tune); these functions only summarize samples.
"""

from __future__ import annotations

import random
import statistics
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

