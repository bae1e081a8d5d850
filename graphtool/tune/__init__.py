"""``graphtool tune``: the fastest verified (rewrite set, onnxruntime settings) pair on this machine.
``space`` is the vocabulary, ``search`` the decisions, ``race`` and ``stats`` the measurements'
bookkeeping, ``ort`` the onnxruntime timer that makes them."""

from __future__ import annotations

from graphtool.tune.ort import clock_for, rewrite_passes, tune_file
from graphtool.tune.race import round_means
from graphtool.tune.search import Candidate, OrtSettings, RewriteSet, TuneResult, confidence, tune
from graphtool.tune.stats import session_gap, session_test, t_quantile

__all__ = ["Candidate", "OrtSettings", "RewriteSet", "TuneResult", "clock_for", "confidence", "rewrite_passes",
           "round_means", "session_gap", "session_test", "t_quantile", "tune", "tune_file"]
