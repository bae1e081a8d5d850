"""Proof that a rewrite kept the model's outputs: run both in onnxruntime and compare.

Both models run with ORT's own optimizations off, on the same input sets (found by
graphtool.verify.discover, or given by the user), so a difference can only come from the rewrite. The
report says how the inputs were found, how many sets ran, which If branches they reached, and
which rewritten branches no input reached (unverified).
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

from graphtool import io
from graphtool.errors import BadModel, ModelDoesNotRun
from graphtool.ir.model import Model
from graphtool.ir.to_onnx import to_onnx
from graphtool.runtime import ORT_TYPES, Source, make_session, source_of
from graphtool.verify import tolerance
from graphtool.verify.coverage import (
    Coverage,
    Site,
    instrument,
    record,
    strip_markers,
    unverified_rewrites,
)
from graphtool.verify.discover import (
    Discovery,
    InputSet,
    InputSpec,
    StepSets,
    discover,
    make_feeds,
    ort_reason,
    shape_plan,
    step_sets,
)

RTOL = 1e-3
ATOL = 1e-4


@dataclass
class OutputDiff:
    name: str
    max_abs: float
    max_rel: float
    ok: bool
    reason: str = ""
    rtol: float | None = None  # set when this output's dtype chose its tolerance
    atol: float | None = None
    dtype: str | None = None  # the dtype that set them (float16, bfloat16)
    noise: float | None = None  # the original's own max abs difference between ORT levels, when measured
    quantized: str | None = None  # the quantization grid that set atol ("quantized output: 2 steps of scale ...")

    def as_dict(self) -> dict[str, Any]:
        """One output's difference as JSON."""
        return {"name": self.name, "max_abs": self.max_abs, "max_rel": self.max_rel, "ok": self.ok, "reason": self.reason,
                "rtol": self.rtol, "atol": self.atol, "tolerance_from": self.dtype, "original_noise": self.noise,
                "quantized": self.quantized}


@dataclass
class Verification:
    """Both models run in onnxruntime on the same input sets: ``ok`` when every output agrees
    within ``rtol``/``atol``; per-output differences, the input sets (and how they were found),
    and which If branches they reached (``unverified``: rewrites in branches none reached)."""

    ok: bool
    rtol: float
    atol: float
    outputs: list[OutputDiff] = field(default_factory=list)
    sets: list[str] = field(default_factory=list)  # one label per input set the models ran on
    discovery: Discovery | None = None
    coverage: Coverage | None = None
    input_sets: list[InputSet] = field(default_factory=list, repr=False)  # reused by bisection

    @property
    def max_abs(self) -> float:
        """The largest absolute difference over all outputs."""
        return max((o.max_abs for o in self.outputs), default=0.0)

    @property
    def unverified(self) -> list[str]:
        """Rewrites inside If branches no input set reached."""
        return self.coverage.unverified if self.coverage else []

    def as_dict(self) -> dict[str, Any]:
        """The JSON form (``optimize --json``'s ``verification``)."""
        return {"ok": self.ok, "rtol": self.rtol, "atol": self.atol, "max_abs": self.max_abs,
                "outputs": [o.as_dict() for o in self.outputs], "input_sets": self.sets,
                "inputs_found": self.discovery.as_dict() if self.discovery else None,
                "coverage": self.coverage.as_dict() if self.coverage else None,
                "unverified": self.unverified}

    def _tolerances(self, outputs: list[OutputDiff]) -> str:
        """``rtol=.., atol=..`` and, for outputs whose dtype set theirs, which dtype and what."""
        text = f"rtol={self.rtol:g}, atol={self.atol:g}"
        by_dtype = {o.dtype: o for o in outputs if o.dtype}
        for dtype, o in by_dtype.items():
            text += f"; {dtype} outputs: rtol={o.rtol:.2g}, atol={o.atol:.2g} from the dtype"
        grids = {o.quantized: o.name for o in outputs if o.quantized}
        for grid, name in list(grids.items())[:3]:
            text += f"; '{name}' {grid}"
        if len(grids) > 3:
            text += f"; {len(grids) - 3} more quantized outputs"
        noisy = [o for o in outputs if o.noise]
        if noisy:
            worst = max(noisy, key=lambda o: o.noise or 0.0)
            text += (f"; within {tolerance.NOISE_FACTOR:g}x the original's own difference between ORT levels off and "
                     f"all on {len(noisy)} output{'s' if len(noisy) != 1 else ''} (up to {worst.noise:.3g})")
        return text

    def summary(self) -> str:
        """One line: equal on N input sets (max abs diff), or the first output that differs and how."""
        sets = f" on {len(self.sets)} input set{'s' if len(self.sets) != 1 else ''}" if self.sets else ""
        bad = [o for o in self.outputs if not o.ok]
        if not bad:
            text = f"outputs equal{sets} (max abs diff {self.max_abs:.3g}; {self._tolerances(self.outputs)})"
            covered = self.coverage.summary() if self.coverage else ""
            return text + (f"; {covered}" if covered else "")
        o = bad[0]
        return (f"output '{o.name}' differs{sets}: {o.reason or f'max abs {o.max_abs:.3g}, max rel {o.max_rel:.3g}'} "
                f"({self._tolerances([o])})")


def compare_arrays(name: str, ref: Any, got: Any, rtol: float = RTOL, atol: float | np.ndarray = ATOL,
                   int_atol: float = 0.0) -> OutputDiff:
    """Max abs/rel difference; NaN must match NaN and inf must match inf exactly. Integers must be
    equal unless ``int_atol`` allows units of difference (a quantized output's grid step);
    ``atol`` may be an array that broadcasts to the output (a per-channel quantization step)."""
    if isinstance(ref, list) or isinstance(got, list):
        if not isinstance(ref, list) or not isinstance(got, list) or len(ref) != len(got):
            return OutputDiff(name, float("inf"), float("inf"), False, "sequence lengths differ")
        parts = [compare_arrays(name, a, b, rtol, atol, int_atol) for a, b in zip(ref, got)]
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
            equal = equal or diff <= int_atol
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
    bound = np.broadcast_to(atol, a.shape)[finite] if np.ndim(atol) else atol
    ok = same_special and bool(np.all(delta <= bound + rtol * np.abs(a64[finite])))
    return OutputDiff(name, max_abs, max_rel, ok, "" if same_special else "NaN/inf positions differ")


def judge_output(name: str, ref: Any, got: Any, rtol: float, atol: float, inside: str | None,
                 grid: tolerance.QuantStep | None) -> OutputDiff:
    """One output compared with the tolerance its model gives it: the quantization grid's steps
    when a DequantizeLinear or quantized op made it (``tolerance.quantized_outputs``), else the
    dtype's (fp16/bf16) or the user's."""
    if grid is not None and not isinstance(ref, list):
        shape = tuple(np.shape(ref))
        if grid.integer:
            diff = compare_arrays(name, ref, got, rtol, atol, int_atol=grid.atol(shape))
        else:
            g_atol = grid.atol(shape)
            diff = compare_arrays(name, ref, got, rtol, np.maximum(g_atol, atol) if np.ndim(g_atol) else max(g_atol, atol))
        diff.quantized = grid.describe()
        return diff
    o_rtol, o_atol, dtype = tolerance.for_output(ref, rtol, atol, inside)
    diff = compare_arrays(name, ref, got, o_rtol, o_atol)
    if dtype:
        diff.rtol, diff.atol, diff.dtype = o_rtol, o_atol, dtype
    return diff


def _dim(d: Any) -> int | str | None:
    """A declared dim: an int, a symbol, or None; a symbol that is a number (``"16"``, as some
    exporters write a static size) is that number."""
    if isinstance(d, int):
        return d
    if isinstance(d, str) and d.isdigit():
        return int(d)
    return d or None


def input_specs(sess: Any) -> list[InputSpec]:
    """The session's inputs; a type random inputs cannot make (sequence, map) stops here with
    the one line that names the flags which can supply it."""
    specs = []
    for arg in sess.get_inputs():
        if arg.type not in ORT_TYPES:
            raise ModelDoesNotRun(f"input '{arg.name}' has type {arg.type}, which graphtool cannot synthesize; "
                                  "give it with --inputs FILE, or skip the check with --no-verify")
        specs.append(InputSpec(arg.name, arg.type, [_dim(d) for d in arg.shape]))
    return specs


@dataclass
class Snapshot:
    """What the reference needs of the original, taken at once: after it, the original may be
    optimized in place while the reference's session builds (``ReferenceJob``)."""

    proto: Any  # the original as a ModelProto (None for external-data models: the session reads the path)
    source: Source | Model  # what the session opens: the file (a Source), or the Model, read in the thread
    branchy: bool  # If/Loop/Scan: instrument for coverage

    @staticmethod
    def of(original: Model, original_path: str | None = None) -> Snapshot:
        proto = None if io.wants_external(original) else to_onnx(original)
        # only If/Loop/Scan make coverage sites: without them the whole-model copy is skipped
        branchy = any(original.graph.has_op(op) for op in ("If", "Loop", "Scan"))
        return Snapshot(proto, source_of(original, original_path) if original_path else original, branchy)

    @property
    def detached(self) -> bool:
        """True when nothing later reads the original Model (the session opens the file)."""
        return isinstance(self.source, Source)


class Reference:
    """The original model in onnxruntime, instrumented for branch coverage when it has Ifs."""

    def __init__(self, snapshot: Snapshot, stop: threading.Event | None = None) -> None:
        self.stop = stop
        self.sites: list[Site] = []
        self.proto = snapshot.proto
        instrumented = instrument(self.proto) if self.proto is not None and snapshot.branchy else None
        self._check()
        if instrumented is not None:
            copy, self.sites = instrumented
            self.session = make_session(copy)
        else:
            self.session = make_session(snapshot.source)
        self.names = [o.name for o in self.session.get_outputs()]

    def _check(self) -> None:
        if self.stop is not None and self.stop.is_set():
            raise _Abandoned()

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, Any]:
        self._check()
        return dict(zip(self.names, self.session.run(None, feeds)))


def _user_sets(ref: Reference, specs: list[InputSpec], feeds: dict[str, np.ndarray] | list[dict[str, np.ndarray]],
               seed: int) -> list[InputSet]:
    """Sets from the user's arrays; inputs they leave out are filled as random inputs would be."""
    sets = []
    for i, given in enumerate(feeds if isinstance(feeds, list) else [feeds]):
        shapes = shape_plan(specs, 2, 2, {k: list(np.shape(v)) for k, v in given.items()})
        full = {**make_feeds(specs, shapes, seed + i, {}, {}), **given}
        full = {s.name: full[s.name] for s in specs}
        try:
            outputs = ref.run(full)
        except Exception as err:  # noqa: BLE001 - onnxruntime's own message is what the user needs
            raise ModelDoesNotRun(f"the original model fails in onnxruntime on the inputs given: {ort_reason(err)}") from None
        sets.append(InputSet(full, f"given set {i + 1}", outputs))
    return sets


@dataclass
class _ReferenceSide:
    """What verification needs of the original model: its outputs on the input sets."""

    proto: Any  # the original as a ModelProto (None for external-data models), for coverage
    discovery: Discovery | None
    coverage: Coverage | None
    input_sets: list[InputSet]
    expected: list[dict[str, Any]]


class _Abandoned(Exception):
    """A ReferenceJob whose verification will not happen stops at its next onnxruntime call."""


def _reference_side(snapshot: Snapshot, seed: int, input_shapes: dict[str, list[int]] | None,
                    feeds: dict[str, np.ndarray] | list[dict[str, np.ndarray]] | None,
                    input_values: dict[str, list[Any]] | None, input_sets: list[InputSet] | None,
                    stop: threading.Event | None = None) -> _ReferenceSide:
    ref = Reference(snapshot, stop)
    discovery = None
    if input_sets is None:
        specs = input_specs(ref.session)
        if feeds is not None:
            input_sets = _user_sets(ref, specs, feeds, seed)
        else:
            discovery = discover(ref.proto if ref.proto is not None else onnx.ModelProto(), ref.run, specs, seed,
                                 input_shapes, input_values)
            input_sets = discovery.sets
    coverage = None
    if ref.sites:
        for s in input_sets:
            if s.outputs is None:
                s.outputs = ref.run(s.feeds)
            record(ref.sites, s.outputs)
        coverage = Coverage(ref.sites)
    expected = []
    for s in input_sets:
        expected.append(strip_markers(s.outputs if s.outputs is not None else ref.run(s.feeds)))
    # the session ends here; the proto is kept only for coverage (a million-node parse is ~350 MB)
    return _ReferenceSide(ref.proto if coverage is not None else None, discovery, coverage, input_sets, expected)


class ReferenceJob:
    """The original's side of a verification, started before the optimization it will check.

    Its onnxruntime session and input discovery then run in a sandbox child of their own while
    the passes run here (on 200k nodes the session alone costs onnxruntime seconds: the passes'
    time is hidden behind it); errors surface from ``result()``, where ``verify`` would have
    raised them. Without the sandbox (``GRAPHTOOL_SANDBOX=0``) nothing starts early: onnxruntime
    would hold this process's CPU, and ``result()`` does the work then (``sandbox.Background``).
    """

    def __init__(self, original: Model, original_path: str | None = None, seed: int = 0,
                 input_shapes: dict[str, list[int]] | None = None,
                 feeds: dict[str, np.ndarray] | list[dict[str, np.ndarray]] | None = None,
                 input_values: dict[str, list[Any]] | None = None) -> None:
        from graphtool.runtime import sandbox

        self.original = original
        self._stop = threading.Event()
        self.snapshot = Snapshot.of(original, original_path)  # here: the thread never reads the Model
        args = (self.snapshot, seed, input_shapes, feeds, input_values, None, self._stop)
        self._side: _ReferenceSide | None = None
        # a big model's in its own child: the passes' folds in the main one never wait behind its session build
        self._job = sandbox.Background(lambda: _reference_side(*args),
                                       child=sandbox.child_for("reference", original.node_count()))
        _STARTED.add(self)

    def abandon(self) -> None:
        """The verification will not happen (the optimization failed): stop at the next call."""
        self._stop.set()

    def result(self) -> _ReferenceSide:
        if self._side is None:
            self._side = self._job.result()
        return self._side


_STARTED: weakref.WeakSet[ReferenceJob] = weakref.WeakSet()


def abandon_references() -> None:
    """Stop every ReferenceJob still running (the CLI calls this when a command ends, so a job
    whose optimization failed does not go on after it; one already used is finished)."""
    for job in list(_STARTED):
        job.abandon()


def verify(original: Model, rewritten: Model, seed: int = 0, input_shapes: dict[str, list[int]] | None = None,
           feeds: dict[str, np.ndarray] | list[dict[str, np.ndarray]] | None = None, rtol: float = RTOL,
           atol: float = ATOL, original_path: str | None = None, input_values: dict[str, list[Any]] | None = None,
           input_sets: list[InputSet] | None = None, reference: ReferenceJob | None = None) -> Verification:
    """Run both models on the same input sets and compare every output.

    Input sets come from ``input_sets`` (a previous verification's, as bisection replays), the
    user's ``feeds``, or discovery (graphtool.verify.discover), which keeps the original's outputs from
    its successful runs, so the original runs once per set. The original is instrumented for
    branch coverage; the sessions exist one at a time, so peak memory is one model's.
    ``reference`` is that side of the work already started (``ReferenceJob``, made with the same
    original and options).
    """
    if reference is not None:
        if reference.original is not original:
            raise ValueError("verify: the reference job was started for another model")
        side = reference.result()
    else:
        side = _reference_side(Snapshot.of(original, original_path), seed, input_shapes, feeds, input_values, input_sets)
    input_sets, coverage, expected, ref_proto = side.input_sets, side.coverage, side.expected, side.proto
    result = Verification(True, rtol, atol, sets=[s.label for s in input_sets], discovery=side.discovery,
                          coverage=coverage, input_sets=input_sets)
    try:
        new_sess = make_session(rewritten)
    except BadModel as err:  # a model graphtool wrote that onnxruntime refuses is a failed rewrite, not bad input
        result.ok = False
        result.outputs = [OutputDiff("(load)", float("inf"), float("inf"), False,
                                     f"the rewritten model does not load in onnxruntime: {err}")]
        return result
    new_names = [o.name for o in new_sess.get_outputs()]
    accepted = {i.name for i in new_sess.get_inputs()} | {i.name for i in new_sess.get_overridable_initializers()}
    worst: dict[str, OutputDiff] = {}
    inside = tolerance.low_precision_inside(original)
    grids = tolerance.quantized_outputs(original)
    noisy = _NoiseFloor(original, original_path)
    for s, ref_out in zip(input_sets, expected):
        try:
            new_out = dict(zip(new_names, new_sess.run(None, {k: v for k, v in s.feeds.items() if k in accepted})))
        except Exception as err:  # noqa: BLE001 - a rewrite that breaks the model is a mismatch, not a crash
            if "(run)" not in worst:  # the first set that fails names it (the smallest, the one to debug)
                worst["(run)"] = OutputDiff("(run)", float("inf"), float("inf"), False,
                                            f"the rewritten model fails in onnxruntime on {s.label}: {ort_reason(err)}")
            continue
        for name, ref_value in ref_out.items():
            if name not in new_out:
                diff = OutputDiff(name, float("inf"), float("inf"), False, "output missing from the rewritten model")
            else:
                diff = judge_output(name, ref_value, new_out[name], rtol, atol, inside, grids.get(name))
                if not diff.ok and not diff.reason and np.isfinite(diff.max_abs):
                    floor = noisy.of(s, name, ref_value)
                    if floor and diff.max_abs <= tolerance.NOISE_FACTOR * floor:
                        diff.ok, diff.noise = True, floor
            prev = worst.get(name)
            if prev is None or (prev.ok and not diff.ok) or (prev.ok == diff.ok and diff.max_abs > prev.max_abs):
                worst[name] = diff
    del new_sess
    result.outputs = list(worst.values())
    result.ok = all(o.ok for o in result.outputs)
    if coverage is not None and ref_proto is not None:
        coverage.unverified = unverified_rewrites(ref_proto, to_onnx(rewritten), coverage.sites)
    return result


class _NoiseFloor:
    """The original run with every ORT optimization on, opened only when a comparison failed: how
    far the original moves itself between levels (graphtool.verify.tolerance)."""

    def __init__(self, original: Model, original_path: str | None) -> None:
        self.source: Model | str = original_path or original
        self.session: Any = None
        self.outputs: dict[int, dict[str, Any]] = {}

    def of(self, s: InputSet, name: str, ref_value: Any) -> float:
        if id(s) not in self.outputs:
            try:
                if self.session is None:
                    self.session = make_session(self.source, level="all")
                names = [o.name for o in self.session.get_outputs()]
                self.outputs[id(s)] = dict(zip(names, self.session.run(None, s.feeds)))
            except Exception:  # noqa: BLE001 - the original at level all fails: no floor, the check stands
                self.outputs[id(s)] = {}
        other = self.outputs[id(s)].get(name)
        return tolerance.noise(ref_value, other) if other is not None else 0.0


def find_step_inputs(model: Model, path: str | None, prefill: int, past: int,
                     input_shapes: dict[str, list[int]] | None = None,
                     input_values: dict[str, list[Any]] | None = None, seed: int = 0) -> StepSets | None:
    """A KV-cache model's prefill and decode-step input sets, checked on the original
    (graphtool.verify.discover.step_sets); None when the model has no KV cache."""
    ref = Reference(Snapshot.of(model, path))
    return step_sets(ref.proto if ref.proto is not None else onnx.ModelProto(), ref.run, input_specs(ref.session),
                     prefill, past, seed, input_shapes, input_values)


def find_inputs(model: Model, path: str | None = None, input_shapes: dict[str, list[int]] | None = None,
                input_values: dict[str, list[Any]] | None = None, seed: int = 0) -> Discovery:
    """Input sets the original runs on, found as verify finds them (for compare and benchmarks)."""
    ref = Reference(Snapshot.of(model, path))
    return discover(ref.proto if ref.proto is not None else onnx.ModelProto(), ref.run, input_specs(ref.session),
                    seed, input_shapes, input_values)
