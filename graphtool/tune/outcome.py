"""What a ``graphtool tune`` run leaves: its report (``TuneRun``, the decoder block with both steps'
latencies) and the winner's ``OUT.session.json`` (the onnxruntime settings ``runtime.session_for``
reads, how they were found, the process environment measured faster). Apart from the timer
(``tune.ort``) so that what is written can be read without what measures it."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from graphtool import io
from graphtool.runtime import SESSION_SUFFIX
from graphtool.tune.search import Candidate, TuneResult

PICKS = {"decode": "the decode step (a generation runs one prefill, then one decode step per new token)",
         "prefill": "the prefill (--pick prefill: the time to the first token)"}


@dataclass
class TuneRun:
    """What ``tune_file`` did: the search's result, the inputs it timed on, the winner's verification."""

    model_path: str
    output: str
    target: str
    budget: float
    result: TuneResult
    timing_shapes: dict[str, list[int]]
    timing_how: str
    verification: str
    settings: dict[str, Any]
    decoder: dict[str, Any] | None = None  # a KV-cache model's steps, the rule that picked, both latencies

    def as_dict(self) -> dict[str, Any]:
        return {"input": self.model_path, "output": self.output, "session": self.output + SESSION_SUFFIX,
                "target": self.target, "budget": self.budget, "timing_inputs": self.timing_shapes,
                "timing_inputs_how": self.timing_how, "verification": self.verification, "settings": self.settings,
                "decoder": self.decoder, **self.result.as_dict()}


def write_settings(output: str, settings: dict[str, Any]) -> None:
    with io.atomic_file(output + SESSION_SUFFIX) as handle:
        handle.write((json.dumps(settings, indent=2) + "\n").encode())


def session_settings(result: TuneResult, output: str) -> dict[str, Any]:
    """What OUT.session.json holds: the onnxruntime settings (what ``runtime.session_for`` reads)
    and how they were found (for the person who wonders why a fusion is off)."""
    import platform

    import onnxruntime as ort

    return {"model": os.path.basename(output), "providers": ["CPUExecutionProvider"], **result.winner.ort.as_dict(),
            "rewrite": result.winner.rewrite.as_dict(), "onnxruntime": ort.__version__,
            "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count()},
            "speedup": round(result.speedup, 4), "confidence": round(result.confidence, 3)}


def step_latencies(result: TuneResult, candidate: Candidate) -> dict[str, float]:
    """A decoder's step → seconds for ``candidate`` from the last row that measured it ({} for other models)."""
    rows = [r for r in result.rows if r.candidate == candidate and r.steps and r.status == "measured"]
    return dict(rows[-1].steps) if rows else {}


def decoder_report(result: TuneResult, prefill: int, past: int, pick: str,
                    shapes: dict[str, dict[str, list[int]]]) -> dict[str, Any]:
    winner, original = step_latencies(result, result.winner), step_latencies(result, result.baseline)
    result.findings.insert(0, f"KV cache: every run timed a prefill of {prefill} tokens (empty past) and then a decode "
                              f"step (1 token over {past} past); candidates ranked by {PICKS[pick]}")
    if winner and original:
        result.findings.insert(1, "the winner: " + ", ".join(
            f"{step} {winner[step] * 1000:.2f} ms ({original[step] / winner[step]:.2f}x the original's "
            f"{original[step] * 1000:.2f} ms)" for step in winner if step in original))
    return {"prefill_tokens": prefill, "past_tokens": past, "pick": pick, "rule": PICKS[pick], "steps": shapes,
            "winner_ms": {k: round(v * 1000, 4) for k, v in winner.items()},
            "original_ms": {k: round(v * 1000, 4) for k, v in original.items()}}
