"""What ``tune`` searches over and reports, as data: fusion families, rewrite sets, onnxruntime
settings, candidates, the rows and kernels measured, the result; and the ``Timer`` protocol every
measurement comes through.

Kept apart from the search (graphtool.tune.search) so that the onnxruntime timer (graphtool.tune.ort),
the command and the benchmark read these types without importing the search's decisions.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, Sequence

from graphtool.tune.stats import SessionTest, session_gap

# Fusion families of graphtool's rewrite set (pass names); "level 2 with the family off" skips them.
FAMILIES: dict[str, tuple[str, ...]] = {
    "attention": ("fuse-attention-ort", "fuse-attention"),
    "skip/layer norm": ("ort-skip-layer-norm", "ort-embed-layer-norm", "fuse-layer-norm", "fuse-rms-norm",
                        "ort-rms-norm"),
    "GELU": ("fuse-gelu", "ort-gelu", "ort-bias-gelu", "ort-quick-gelu"),
    "conv/gemm activation": ("ort-fused-conv", "ort-fused-gemm"),
    "MatMul scale": ("ort-fused-matmul",),
}
# Another form of a family's fusion, made by opt-in passes no level runs: "level 2, <name>" skips the
# family's usual passes and adds these (BERT-base dynamo, batch 2, one thread: MultiHeadAttention on
# the three unpacked projections measured 2% faster than the original, packed Attention slower).
# The last field is the fused op the variant re-forms: a level-2 model without it (a decoder, whose
# cached attention is MultiHeadAttention either way) has nothing to re-form, and the set would only
# race level 2 again under another name.
VARIANTS: dict[str, tuple[str, tuple[str, ...], tuple[str, ...], str]] = {
    "attention as MultiHeadAttention": ("attention", ("fuse-attention-ort",), ("fuse-attention-mha",), "Attention"),
}
# A fused op → (its family, the passes that make it, onnxruntime's fusion that makes it too).
FUSED_OPS: dict[str, tuple[str, tuple[str, ...], str | None]] = {
    "Attention": ("attention", ("fuse-attention-ort", "fuse-attention"), "AttentionFusion"),
    "MultiHeadAttention": ("attention", ("fuse-attention-ort", "fuse-attention-mha"), "AttentionFusion"),
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


@dataclass(frozen=True)
class RewriteSet:
    """A graphtool rewrite of the model: ``level`` 0 is the original, ``skip`` the passes left out,
    ``extra`` opt-in passes run besides the level's (``VARIANTS``)."""

    name: str
    level: int = 0
    skip: tuple[str, ...] = ()
    extra: tuple[str, ...] = ()

    @property
    def plain(self) -> bool:
        """A level as it is: no family switched off, no other form of a fusion (tune's ties go to it)."""
        return not self.skip and not self.extra

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "level": self.level, "skip": list(self.skip), "extra": list(self.extra)}


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
    # which session of this model and settings: 0 the search's, 1 the A/A control (a 2nd session),
    # 2 and up the fresh sessions of the confirmation, opened two at a time (graphtool.tune.race.confirm)
    replica: int = 0

    def label(self) -> str:
        suffix = "" if not self.replica else " (A/A control: a 2nd session)" if self.replica == 1 else \
            f" (fresh session {self.replica - 1} of the confirmation)"
        return f"{self.rewrite.name} | {self.ort.label()}" + suffix


class Timer(Protocol):
    """Where measurements come from (graphtool.tune.ort.OrtTimer, or a fake in tests)."""

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

    def same_graph(self, a: Candidate, b: Candidate) -> bool:
        """Whether onnxruntime runs the same nodes for ``a`` and ``b`` (same op types, same counts):
        two settings that run one graph differ only by session noise, never worth a race."""
        ...

    def capacity(self) -> int:
        """How many sessions of this model memory holds at once (the search opens no more)."""
        ...

    def release(self, candidates: Sequence[Candidate]) -> None:
        """Close the sessions of ``candidates`` (they left the race): their memory goes back now."""
        ...


class Sample(float):
    """One timed run of a model with generation steps (a KV-cache decoder: a prefill, then a decode
    step): the seconds of the step the search ranks by, as a float every statistic reads, and
    ``steps``, every step's seconds in that run, so each row can report them all."""

    __slots__ = ("steps",)

    def __new__(cls, value: float, steps: dict[str, float]) -> Sample:
        sample = super().__new__(cls, value)
        sample.steps = steps
        return sample

    def __reduce__(self) -> tuple[type, tuple[float, dict[str, float]]]:  # tune's search may run in a child
        return (Sample, (float(self), self.steps))


def step_medians(samples: Sequence[float]) -> dict[str, float]:
    """Step name → median seconds over ``samples`` ({} unless every sample is a ``Sample``)."""
    parts = [getattr(x, "steps", None) for x in samples]
    if not parts or any(p is None for p in parts):
        return {}
    return {name: statistics.median(p[name] for p in parts) for name in parts[0]}


Verifier = Callable[[RewriteSet], "str | None"]  # None when the rewrite set's model is verified, else why not


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
    left: str = ""  # why it left its race before the end (dropped as slower, or retired to make room)
    steps: dict[str, float] = field(default_factory=dict)  # a decoder's step → median seconds, same rounds

    @property
    def speedup(self) -> float:
        return self.baseline / self.median if self.median > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"rewrite": self.candidate.rewrite.as_dict(), "ort": self.candidate.ort.as_dict(),
                "label": self.candidate.label(), "stage": self.stage, "median_ms": round(self.median * 1000, 4),
                "baseline_ms": round(self.baseline * 1000, 4), "speedup": round(self.speedup, 4),
                "spread": round(self.spread, 4), "rounds": self.rounds,
                "confidence_faster_than_baseline": round(self.confidence, 3), "status": self.status,
                "left_race": self.left, **({"steps_ms": {k: round(v * 1000, 4) for k, v in self.steps.items()}}
                                           if self.steps else {})}


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
class Confirmation:
    """The race's winner against the original under onnxruntime's defaults, each in fresh sessions
    raced together (graphtool.tune.race.confirm), and whether the winner was kept.

    Sessions of one model and settings keep a per-session offset (memory and thread placement)
    that rounds inside one session never show, and the race's winner is the candidate whose session
    drew the luckiest offset too. So the verdict is a t-test over session medians (``test``): two
    sessions a side first, two more a side while the result is inside the bar but not clearly
    inside noise, up to graphtool.tune.race.CONFIRM_MAX_SESSIONS. ``spread`` (the larger gap
    between sessions of one configuration, and the search's A/A gaps) is reported, not decided on."""

    winner: Candidate
    race_speedup: float  # what the race measured (the winner's own session against the baseline's)
    rounds: int = 0  # paired rounds each fresh session ran (the fewest, over all of them)
    winner_ms: list[float] = field(default_factory=list)  # each fresh session's median, in the order opened
    original_ms: list[float] = field(default_factory=list)
    aa_gap: float = 0.0  # the largest A/A gap of the search's races
    ratio: float = 0.0  # original / winner: geometric means of the session medians
    confidence: float = 0.5  # that the winner is faster, paired bootstrap over the pooled rounds
    kept: bool = False
    note: str = ""  # why the winner was kept or not, or why no confirmation ran
    test: SessionTest | None = None  # the t-test over the session medians, at the last step
    stopped: str = ""  # why no more sessions: "decided", "inside noise", "most sessions", "budget"

    @property
    def spread(self) -> float:
        return max(session_gap(self.winner_ms), session_gap(self.original_ms), self.aa_gap)

    @property
    def sessions(self) -> int:
        """Fresh sessions per configuration."""
        return min(len(self.winner_ms), len(self.original_ms))

    def as_dict(self) -> dict[str, Any]:
        test = self.test
        return {"winner": self.winner.label(), "race_speedup": round(self.race_speedup, 4), "rounds": self.rounds,
                "winner_session_ms": [round(x * 1000, 4) for x in self.winner_ms],
                "original_session_ms": [round(x * 1000, 4) for x in self.original_ms],
                "winner_gap": round(session_gap(self.winner_ms), 4),
                "original_gap": round(session_gap(self.original_ms), 4),
                "aa_gap": round(self.aa_gap, 4), "session_spread": round(self.spread, 4), "ratio": round(self.ratio, 4),
                "confidence": round(self.confidence, 3), "kept": self.kept, "note": self.note,
                "sessions_per_side": self.sessions, "stopped": self.stopped,
                "bar": None if test is None else round(test.bar, 4),
                "session_sd": None if test is None else round(test.sd, 4),
                "session_sd_floor": None if test is None else round(test.floor, 4),
                "t": None if test is None or not math.isfinite(test.t) else round(test.t, 3),
                "t_needed": None if test is None else round(test.t_needed, 3),
                "df": None if test is None else test.df, "level": None if test is None else test.level}


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
    confirmation: Confirmation | None = None  # the fresh-session check of a winner other than the original

    def as_dict(self) -> dict[str, Any]:
        return {"winner": {"rewrite": self.winner.rewrite.as_dict(), "ort": self.winner.ort.as_dict(),
                           "label": self.winner.label()},
                "baseline": self.baseline.label(), "speedup": round(self.speedup, 4),
                "confidence": round(self.confidence, 3),
                "runner_up_confidence": None if self.runner_up_confidence is None else round(self.runner_up_confidence, 3),
                "tried": [r.as_dict() for r in self.rows], "kernels": [k.as_dict() for k in self.kernels],
                "findings": self.findings, "skipped": self.skipped, "verification_failed": self.failed,
                "seconds": round(self.seconds, 2),
                "confirmation": None if self.confirmation is None else self.confirmation.as_dict()}

