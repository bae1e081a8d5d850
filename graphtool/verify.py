"""Proof that a rewrite kept the model's outputs: run both in onnxruntime and compare.

Both models run with ORT's own optimizations off, on the same seeded random inputs of the
declared dtypes, so a difference can only come from the rewrite.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from graphtool.ir.model import Model
from graphtool.runtime import make_session, random_inputs

RTOL = 1e-3
ATOL = 1e-4


@dataclass
class OutputDiff:
    name: str
    max_abs: float
    max_rel: float
    ok: bool
    reason: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "max_abs": self.max_abs, "max_rel": self.max_rel, "ok": self.ok, "reason": self.reason}


@dataclass
class Verification:
    ok: bool
    rtol: float
    atol: float
    outputs: list[OutputDiff] = field(default_factory=list)

    @property
    def max_abs(self) -> float:
        return max((o.max_abs for o in self.outputs), default=0.0)

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "rtol": self.rtol, "atol": self.atol, "max_abs": self.max_abs,
                "outputs": [o.as_dict() for o in self.outputs]}

    def summary(self) -> str:
        bad = [o for o in self.outputs if not o.ok]
        if not bad:
            return f"outputs equal (max abs diff {self.max_abs:.3g}; rtol={self.rtol:g}, atol={self.atol:g})"
        o = bad[0]
        return f"output '{o.name}' differs: {o.reason or f'max abs {o.max_abs:.3g}, max rel {o.max_rel:.3g}'} (rtol={self.rtol:g}, atol={self.atol:g})"


def compare_arrays(name: str, ref: Any, got: Any, rtol: float = RTOL, atol: float = ATOL) -> OutputDiff:
    """Max abs/rel difference; NaN must match NaN and inf must match inf exactly."""
    if isinstance(ref, list) or isinstance(got, list):
        if not isinstance(ref, list) or not isinstance(got, list) or len(ref) != len(got):
            return OutputDiff(name, float("inf"), float("inf"), False, "sequence lengths differ")
        parts = [compare_arrays(name, a, b, rtol, atol) for a, b in zip(ref, got)]
        worst = max(parts, key=lambda p: p.max_abs, default=OutputDiff(name, 0.0, 0.0, True))
        return OutputDiff(name, worst.max_abs, worst.max_rel, all(p.ok for p in parts), worst.reason)
    a, b = np.asarray(ref), np.asarray(got)
    if a.shape != b.shape:
        return OutputDiff(name, float("inf"), float("inf"), False, f"shape {list(a.shape)} became {list(b.shape)}")
    if a.dtype != b.dtype:
        return OutputDiff(name, float("inf"), float("inf"), False, f"dtype {a.dtype} became {b.dtype}")
    if a.dtype.kind in "OUSb" or a.dtype.kind in "iu":
        equal = bool(np.array_equal(a, b))
        if a.dtype.kind in "iu" and a.size:
            diff = float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))
        else:
            diff = 0.0 if equal else 1.0
        return OutputDiff(name, diff, diff, equal, "" if equal else "values differ")
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    same_special = np.array_equal(np.isnan(a64), np.isnan(b64)) and np.array_equal(
        np.where(np.isinf(a64), np.sign(a64), 0), np.where(np.isinf(b64), np.sign(b64), 0))
    finite = np.isfinite(a64) & np.isfinite(b64)
    if not finite.any():
        return OutputDiff(name, 0.0, 0.0, same_special, "" if same_special else "NaN/inf positions differ")
    delta = np.abs(a64[finite] - b64[finite])
    max_abs = float(delta.max())
    max_rel = float((delta / np.maximum(np.abs(a64[finite]), 1e-12)).max())
    ok = same_special and bool(np.all(delta <= atol + rtol * np.abs(a64[finite])))
    return OutputDiff(name, max_abs, max_rel, ok, "" if same_special else "NaN/inf positions differ")


def verify(original: Model, rewritten: Model, seed: int = 0, input_shapes: dict[str, list[int]] | None = None,
           feeds: dict[str, np.ndarray] | None = None, rtol: float = RTOL, atol: float = ATOL,
           original_path: str | None = None) -> Verification:
    """Run both models on the same inputs and compare every output.

    The sessions run one after the other (the first is dropped before the second is built), so
    peak memory is one model's, not two; ``original_path`` lets the original run from its file
    instead of a re-saved copy when the Model came from disk unchanged.
    """
    ref_sess = make_session(original_path or original)
    if feeds is None:
        feeds = random_inputs(ref_sess, seed, input_shapes)
    names = [o.name for o in ref_sess.get_outputs()]
    ref_out = ref_sess.run(None, feeds)
    del ref_sess
    new_sess = make_session(rewritten)
    new_names = [o.name for o in new_sess.get_outputs()]
    accepted = {i.name for i in new_sess.get_inputs()} | {i.name for i in new_sess.get_overridable_initializers()}
    new_feeds = {k: v for k, v in feeds.items() if k in accepted}
    new_out = dict(zip(new_names, new_sess.run(None, new_feeds)))
    del new_sess
    result = Verification(True, rtol, atol)
    for name, ref in zip(names, ref_out):
        if name not in new_out:
            diff = OutputDiff(name, float("inf"), float("inf"), False, "output missing from the rewritten model")
        else:
            diff = compare_arrays(name, ref, new_out[name], rtol, atol)
        result.outputs.append(diff)
        result.ok &= diff.ok
    return result
