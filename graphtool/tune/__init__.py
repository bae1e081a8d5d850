"""``graphtool tune``: the fastest verified (rewrite set, onnxruntime settings) pair on this machine.
``space`` is the vocabulary, ``search`` the decisions, ``race`` and ``stats`` the measurements'
bookkeeping, ``ort`` the onnxruntime timer that makes them."""

from __future__ import annotations

from graphtool.tune.ort import (
           PAST_TOKENS,
           PREFILL_TOKENS,
           clock_for,
           rewrite_passes,
           tune_file,
)
from graphtool.tune.environment import as_shell
from graphtool.tune.outcome import PICKS, step_latencies
from graphtool.tune.race import round_means
from graphtool.tune.search import (
           Candidate,
           OrtSettings,
           RewriteSet,
           TuneResult,
           confidence,
           tune,
)
from graphtool.tune.space import Sample, step_medians
from graphtool.tune.stats import session_gap, session_test, t_quantile

__all__ = [
           "as_shell",
           "PAST_TOKENS",
           "PICKS",
           "PREFILL_TOKENS",
           "Candidate",
           "OrtSettings",
           "RewriteSet",
           "Sample",
           "TuneResult",
           "clock_for",
           "confidence",
           "rewrite_passes",
           "round_means",
           "session_gap",
           "session_test",
           "step_latencies",
           "step_medians",
           "t_quantile",
           "tune",
           "tune_file",
]
