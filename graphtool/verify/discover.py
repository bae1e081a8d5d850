"""Find inputs on which the *original* model runs, so verification works on models people have.

Random inputs with every free dim = 2 and integers in [0, 4) run most models, but not a VAD
whose STFT pads 64 samples (a sequence of 2 is too short), a detector whose feature maps must
halve five times, or a model whose int64 ``sr`` input must equal 16000. Before calling a model
unrunnable, this module searches, cheapest evidence first:

1. user-given shapes and values (``--input-shape``, ``--input-value``) are never changed;
2. integer and bool inputs compared with constants (Equal/Less/Greater/Where/If conditions that
   read the input directly or through Cast/Squeeze/Unsqueeze/Reshape/Identity) take those
   constants as values; every distinct constant becomes its own input set, so both branches of
   an ``sr == 16000`` If are exercised;
3. id-like inputs (indices of a Gather on a constant table) stay below the table's row count;
4. free dims: the defaults first (so a model that ran before costs nothing more), then sizes the
   model names itself (``imgsz`` metadata), then a ladder of sizes, smallest first, with
   batch-like dims held at 1 and a cap on elements so no attempt allocates more than it should.

The first set of shapes on which the original runs is used; a second set (another seed, and
another size from the ladder where the model accepts one) catches rewrites that specialised on
one shape. The report says how the inputs were found.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass, field
from typing import Any, Iterable

import numpy as np
import onnx

from graphtool.errors import ModelDoesNotRun
from graphtool.verify.dims import DimModel, InputSpec, analyse
from graphtool.verify.evidence import compared_values, id_bounds, metadata_sizes

LADDER = (1, 4, 8, 16, 32, 64, 128, 224, 256, 320, 512, 640, 1024)
MAX_ELEMENTS = 1 << 24  # per input, for a discovery attempt (64 MB of float32)
BUDGET_SECONDS = 120.0
_BATCH_NAMES = {"n", "b", "bs", "batch", "batch_size", "batchsize", "batch_dim", "dynamicdimension.0",
                "p2o.dynamicdimension.0", "unk__0"}


@dataclass
class InputSet:
    feeds: dict[str, np.ndarray]
    label: str  # e.g. "seed 0, sequence=128, sr=16000"
    outputs: dict[str, Any] | None = None  # the original's outputs on these feeds, once run

    @property
    def shapes(self) -> dict[str, list[int]]:
        return {k: list(np.shape(v)) for k, v in self.feeds.items()}


@dataclass
class Discovery:
    """What verification runs on, and how it was found (for the report)."""

    sets: list[InputSet]
    how: str
    attempts: int = 1
    seconds: float = 0.0  # the whole search, including the successful reference run
    extra_seconds: float = 0.0  # spent on attempts that failed: what discovery cost beyond one run
    failures: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"how": self.how, "attempts": self.attempts, "seconds": round(self.seconds, 3),
                "extra_seconds": round(self.extra_seconds, 3),
                "sets": [s.label for s in self.sets],
                "shapes": self.sets[0].shapes if self.sets else {},
                "set_shapes": [s.shapes for s in self.sets]}


# --------------------------------------------------------------------------- shapes and feeds


def _batch_like(spec: InputSpec, index: int) -> bool:
    dim = spec.dims[index]
    if isinstance(dim, str) and dim.lower() in _BATCH_NAMES:
        return True
    return index == 0 and len(spec.dims) >= 3 and not isinstance(dim, int)


def shape_plan(inputs: list[InputSpec], size: int, batch: int, fixed: dict[str, list[int]]) -> dict[str, list[int]]:
    """Concrete shapes: free dims = ``size``, batch-like dims = ``batch``; a named symbol gets one
    value everywhere it appears (batch wins, since a symbol batch-like in one input is in all)."""
    symbols: dict[str, int] = {}
    for spec in inputs:
        for i, dim in enumerate(spec.dims):
            if isinstance(dim, str) and dim and _batch_like(spec, i):
                symbols[dim] = batch
    shapes: dict[str, list[int]] = {}
    for spec in inputs:
        if spec.name in fixed:
            shapes[spec.name] = list(fixed[spec.name])
            continue
        shape = []
        for i, dim in enumerate(spec.dims):
            if isinstance(dim, int) and dim >= 0:
                shape.append(dim)
            elif isinstance(dim, str) and dim:
                shape.append(symbols.setdefault(dim, batch if _batch_like(spec, i) else size))
            else:
                shape.append(batch if _batch_like(spec, i) else size)
        shapes[spec.name] = shape
    return shapes


def make_feeds(inputs: list[InputSpec], shapes: dict[str, list[int]], seed: int,
               values: dict[str, Any], bounds: dict[str, int],
               arrays: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Seeded random arrays of the declared dtypes; ``values`` fill whole inputs with one value,
    ``arrays`` give whole inputs (a KV cache's mask and positions)."""
    from graphtool.runtime import ORT_TYPES

    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    for spec in inputs:
        dtype = ORT_TYPES[spec.ort_type]
        shape = shapes[spec.name]
        if arrays and spec.name in arrays:
            feeds[spec.name] = arrays[spec.name]
        elif spec.name in values:
            feeds[spec.name] = np.full(shape, values[spec.name], dtype=dtype if dtype is not np.str_ else object)
        elif dtype is np.str_:
            feeds[spec.name] = rng.integers(0, 4, size=shape).astype(str).astype(object)
        elif dtype is np.bool_:
            feeds[spec.name] = rng.integers(0, 2, size=shape).astype(np.bool_)
        elif np.issubdtype(dtype, np.integer):
            feeds[spec.name] = rng.integers(0, max(1, min(4, bounds.get(spec.name, 4))), size=shape).astype(dtype)
        else:
            feeds[spec.name] = rng.standard_normal(shape).astype(dtype)
    return feeds


def _elements(shapes: dict[str, list[int]]) -> int:
    """The largest input's element count (Python ints: 2^62 x 2^62 does not wrap to 0)."""
    return max((math.prod(int(d) for d in s) for s in shapes.values()), default=0)


def _too_big(inputs: list[InputSpec], shapes: dict[str, list[int]]) -> str:
    """The one line for an input whose declared (or given) shape is past what discovery builds."""
    name, shape = max(shapes.items(), key=lambda kv: math.prod(int(d) for d in kv[1]))
    return (f"input '{name}' has shape {'x'.join(map(str, shape))} ({math.prod(int(d) for d in shape):.3g} elements), "
            f"too big for random inputs (limit {MAX_ELEMENTS:.3g} per input); give real inputs with --inputs FILE "
            "or smaller ones with --input-shape NAME=DxD, or skip the check with --no-verify")


def _free_dims(inputs: list[InputSpec], fixed: dict[str, list[int]]) -> bool:
    return any(not (isinstance(d, int) and d >= 0) for s in inputs if s.name not in fixed for d in s.dims)


# --------------------------------------------------------------------------- the search


REALISTIC_SECONDS = 20.0  # an input set at a size people run is skipped when it would take longer


def role_arrays(dm: DimModel, inputs: list[InputSpec], shapes: dict[str, list[int]], sizes: dict[str, int],
                fixed: dict[str, list[int]]) -> dict[str, np.ndarray]:
    """Whole inputs a generative model's interface fixes: masks of ones, positions P .. P+S-1."""
    from graphtool.runtime import ORT_TYPES

    past, new = dm.values(sizes)
    arrays: dict[str, np.ndarray] = {}
    for spec in inputs:
        if spec.name in fixed or spec.ort_type not in ORT_TYPES or ORT_TYPES[spec.ort_type] is np.str_:
            continue
        dtype, shape = ORT_TYPES[spec.ort_type], shapes[spec.name]
        if spec.name in dm.masks:
            arrays[spec.name] = np.ones(shape, dtype=dtype)
        elif spec.name in dm.positions and shape and np.issubdtype(dtype, np.integer):
            count = shape[-1]
            start = past if count == new else max(0, count - new)  # positions of the new tokens
            arrays[spec.name] = np.broadcast_to(np.arange(start, start + count, dtype=dtype), shape).copy()
    return arrays


@dataclass
class _Plan:
    """One input set's shapes before its random values are drawn."""

    how: str
    shapes: dict[str, list[int]]
    arrays: dict[str, np.ndarray]
    rung: int


def _plan(dm: DimModel, inputs: list[InputSpec], fixed: dict[str, list[int]], mode: str, rung: int, how: str) -> _Plan:
    sizes = dm.sizes(mode, rung)
    shapes = {s.name: list(fixed[s.name]) if s.name in fixed else dm.shape(s, sizes) for s in inputs}
    return _Plan(how, shapes, role_arrays(dm, inputs, shapes, sizes, fixed), rung)


def _candidates(inputs: list[InputSpec], model: onnx.ModelProto, fixed: dict[str, list[int]],
                dim_default: int, dm: DimModel) -> Iterable[_Plan]:
    """Where the search tries the model, in order: defaults, metadata, then the ladder."""
    yield _plan(dm, inputs, fixed, "defaults", dim_default, "defaults")
    if not _free_dims(inputs, fixed):
        return
    tried = {dim_default}
    for size in metadata_sizes(model):
        if size not in tried:
            tried.add(size)
            yield _plan(dm, inputs, fixed, "defaults", size, "model metadata (imgsz)")
    for size in LADDER:
        if size not in tried:
            tried.add(size)
            yield _plan(dm, inputs, fixed, "defaults", size, "size ladder")


def describe(shapes: dict[str, list[int]], inputs: list[InputSpec], values: dict[str, Any]) -> str:
    """The shapes of an input set's inputs with free dims (of all inputs when none has one)."""
    free = [f"{s.name}={'x'.join(map(str, shapes[s.name]))}" for s in inputs
            if any(not (isinstance(d, int) and d >= 0) for d in s.dims)]
    if not free:
        free = [f"{s.name}={'x'.join(map(str, shapes[s.name])) or 'scalar'}" for s in inputs[:8]]
        free += [f"+{len(inputs) - 8} more"] if len(inputs) > 8 else []
    vals = [f"{k}={v}" for k, v in values.items()]
    return ", ".join(free + vals)


class _Search:
    """The state one discovery shares between its attempts and its extra sets."""

    def __init__(self, inputs: list[InputSpec], run: Any, seed: int, bounds: dict[str, int],
                 clock: Any) -> None:
        self.inputs, self.run, self.seed, self.bounds, self.clock = inputs, run, seed, bounds, clock
        self.failed_seconds = 0.0
        self.notes: list[str] = []

    def attempt(self, plan: _Plan, values: dict[str, Any], seed: int, label: str) -> tuple[InputSet | None, str]:
        feeds = make_feeds(self.inputs, plan.shapes, seed, values, self.bounds, plan.arrays)
        before = self.clock()
        try:
            outputs = self.run(feeds)
        except Exception as err:  # noqa: BLE001 - the model's own failure, kept for the report
            self.failed_seconds += self.clock() - before
            return None, ort_reason(err)
        text = describe(plan.shapes, self.inputs, values)
        return InputSet(feeds, f"seed {seed}, {label}{': ' + text if text else ''}".rstrip(", :"), outputs), ""


def discover(model: onnx.ModelProto, run: Any, inputs: list[InputSpec], seed: int = 0,
             fixed_shapes: dict[str, list[int]] | None = None, fixed_values: dict[str, list[Any]] | None = None,
             dim_default: int = 2, budget: float = BUDGET_SECONDS, clock: Any = time.perf_counter) -> Discovery:
    """Search for input sets on which ``run(feeds)`` (the original model) succeeds.

    ``run`` raises on failure (any exception: ORT's message is kept for the final report).
    Raises ModelDoesNotRun when nothing ran.
    """
    start = clock()
    fixed = dict(fixed_shapes or {})
    user_values = {k: list(v) for k, v in (fixed_values or {}).items()}
    found_values = {k: v for k, v in compared_values(model, inputs).items() if k not in user_values}
    bounds = id_bounds(model, inputs)
    value_sets = _value_sets(user_values, found_values)
    dm = analyse(model if model.graph.node else None, inputs, fixed)
    search = _Search(inputs, run, seed, bounds, clock)
    failures: list[str] = []
    attempts = 0
    too_big = ""
    for plan in _candidates(inputs, model, fixed, dim_default, dm):
        if _elements(plan.shapes) > MAX_ELEMENTS:
            too_big = too_big or _too_big(inputs, plan.shapes)
            continue
        attempts += 1
        before = clock()
        first, reason = search.attempt(plan, value_sets[0], seed, "first set found")
        if first is None:
            failures.append(f"{describe(plan.shapes, inputs, value_sets[0])}: {reason}")
            if clock() - start > budget:
                break
            continue
        first_seconds = clock() - before
        first.label = first.label.replace("first set found", "defaults" if plan.how == "defaults" else plan.how)
        sets = [first] + _more_sets(search, dm, plan, fixed, value_sets, first_seconds)
        evidence = plan.how if plan.how != "defaults" else "declared shapes, free dims = 2"
        roles = dm.describe()
        if roles:
            evidence += f"; {roles}"
        if found_values:
            evidence += "; values compared in the graph: " + ", ".join(
                f"{k} ∈ {{{', '.join(map(str, v))}}}" for k, v in found_values.items())
        if user_values:
            evidence += "; values given: " + ", ".join(f"{k}={v}" for k, v in user_values.items())
        evidence += "".join(f"; {n}" for n in search.notes)
        return Discovery(sets, evidence, attempts, clock() - start, before - start, failures)
    if not attempts and too_big:
        raise ModelDoesNotRun(too_big)
    raise ModelDoesNotRun(
        "the original model fails in onnxruntime on every input set tried "
        f"({attempts} attempt{'s' if attempts != 1 else ''}; first: {failures[0] if failures else 'none fit'}); "
        "give real inputs with --inputs FILE, --input-value NAME=V or --input-shape NAME=DxD, "
        "or skip the check with --no-verify")


def _value_sets(user: dict[str, list[Any]], found: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """One dict of whole-input values per set: user lists and discovered constants, zipped so
    each value appears in some set (at most 4 sets)."""
    merged = {**found, **user}
    if not merged:
        return [{}]
    count = min(4, max(len(v) for v in merged.values()))
    return [{k: v[i % len(v)] for k, v in merged.items()} for i in range(count)]


def _tie_from_error(dm: DimModel, sizes: dict[str, int], reason: str) -> bool:
    """A refusal that names two of the distinct sizes ("3 by 5") shows a tie the graph analysis
    missed: put those classes together. True when something was tied."""
    numbers = {int(n) for n in re.findall(r"(?<![\w.])(\d+)(?![\w.])", reason)}
    named = [c for c, v in sizes.items() if v in numbers and v > 1 and c not in dm.pinned]
    by_size: dict[int, list[str]] = {}
    for c in named:
        by_size.setdefault(sizes[c], []).append(c)
    if len(by_size) != 2:  # three sizes in one message (a reshape's shapes) do not say which two are one
        return False
    keep, *rest = sorted(by_size, key=lambda v: (dm.order.index(by_size[v][0])))
    target = by_size[keep][0]
    for v in rest:
        for c in by_size[v]:
            for k, cc in list(dm.cls.items()):
                if cc == c:
                    dm.cls[k] = target
            dm.order.remove(c)
    return True


def _more_sets(search: _Search, dm: DimModel, found: _Plan, fixed: dict[str, list[int]],
               value_sets: list[dict[str, Any]], first_seconds: float) -> list[InputSet]:
    """The sets verification runs beside the first: every free dim its own size (distinct), a size
    people run (realistic), a KV cache's prefill (P = 0) and decode step (S = 1), each further
    branch value, and a second seed where nothing else adds a set."""
    inputs, seed = search.inputs, search.seed
    extra: list[InputSet] = []
    free = _free_dims(inputs, fixed)
    base = found
    if free:
        plan = _plan(dm, inputs, fixed, "distinct", found.rung, "distinct dims")
        for _ in range(2):
            if plan.shapes == found.shapes or _elements(plan.shapes) > MAX_ELEMENTS:
                break
            got, reason = search.attempt(plan, value_sets[0], seed + 1, "distinct dims")
            if got is not None:
                extra.append(got)
                base = plan
                break
            sizes = dm.sizes("distinct", found.rung)
            if not _tie_from_error(dm, sizes, reason):
                search.notes.append(f"distinct dims refused by the model ({reason[:120]})")
                break
            plan = _plan(dm, inputs, fixed, "distinct", found.rung, "distinct dims")
        real = _plan(dm, inputs, fixed, "realistic", max(found.rung, 1), "realistic size")
        grow = _elements(real.shapes) / max(_elements(found.shapes), 1)
        if real.shapes not in (found.shapes, base.shapes) and _elements(real.shapes) <= MAX_ELEMENTS and \
                first_seconds * grow <= REALISTIC_SECONDS:
            got, reason = search.attempt(real, value_sets[0], seed + 2, "realistic size")
            if got is not None:
                extra.append(got)
            else:
                search.notes.append(f"realistic size refused ({reason[:120]})")
        if dm.kv_cache:
            mode_base = "distinct" if base is not found else "defaults"
            for mode, label in (("prefill", "prefill, past length 0"), ("decode", "decode step, 1 new token")):
                sizes = dm.sizes(mode if mode_base == "distinct" else "defaults", found.rung)
                if mode_base == "defaults":
                    sizes.update({c: v for c, v in dm.sizes(mode, found.rung).items()
                                  if dm.kinds.get(c) in (("past",) if mode == "prefill" else ("sequence",))})
                shapes = {s.name: list(fixed[s.name]) if s.name in fixed else dm.shape(s, sizes) for s in inputs}
                plan = _Plan(label, shapes, role_arrays(dm, inputs, shapes, sizes, fixed), found.rung)
                got, reason = search.attempt(plan, value_sets[0], seed + 3, label)
                if got is not None:
                    extra.append(got)
                elif mode == "decode":
                    search.notes.append(f"{label} refused ({reason[:120]})")
    for values in value_sets[1:]:
        got, _ = search.attempt(found, values, seed, "branch value")
        if got is not None:
            extra.append(got)
    if not extra:
        if free:  # the model accepts only some sizes: a larger rung, as the ladder would try it
            for other in [s for s in LADDER if s > found.rung][:2]:
                plan = _plan(dm, inputs, fixed, "defaults", other, "larger size")
                if _elements(plan.shapes) > MAX_ELEMENTS:
                    break
                got, _ = search.attempt(plan, value_sets[0], seed + 1, "larger size")
                if got is not None:
                    return [got]
        got, _ = search.attempt(found, value_sets[0], seed + 1, "same shapes")
        if got is not None:
            extra.append(got)
    return extra


def ort_reason(err: Exception) -> str:
    """onnxruntime's message without its source location and C++ signature: the part a user reads."""
    text = str(err).strip().replace("\n", " ")
    marker = "Status Message: "
    if marker in text:
        text = text.rsplit(marker, 1)[1]
    text = re.sub(r"^/\S+:\d+ \S+?\(.*?\)\s*", "", text)
    return text[:240] or type(err).__name__


# --------------------------------------------------------------------------- generation steps

STEP_HALVINGS = 6  # a refused step is tried at half its tokens up to this many times (64 -> 1)


@dataclass
class StepSets:
    """A KV-cache model's generation steps, as ``tune`` times them: step name → its input set
    (the original's outputs on it included), in the order a generation runs them."""

    steps: dict[str, InputSet]
    how: str  # the dims' roles, for the report
    sizes: dict[str, tuple[int, int]] = field(default_factory=dict)  # step -> (new tokens, past tokens) run
    smaller: list[str] = field(default_factory=list)  # the steps the original refused at the asked size

    @property
    def shapes(self) -> dict[str, dict[str, list[int]]]:
        return {name: s.shapes for name, s in self.steps.items()}


def step_sets(model: onnx.ModelProto, run: Any, inputs: list[InputSpec], prefill: int, past: int, seed: int = 0,
              fixed_shapes: dict[str, list[int]] | None = None,
              fixed_values: dict[str, list[Any]] | None = None) -> StepSets | None:
    """A prefill of ``prefill`` tokens over an empty cache and a decode step of one token over
    ``past`` cached ones, at batch 1, built as verification builds its KV-cache sets (``dims``: the
    mask spans past + new, positions count past .. past+new-1, ids stay inside the embedding
    table); None when the model has no KV-cache inputs. Each set is run on the original
    (``run``): a step it refuses raises ModelDoesNotRun naming the step and the flags that help."""
    fixed = dict(fixed_shapes or {})
    dm = analyse(model if model.graph.node else None, inputs, fixed)
    if not dm.kv_cache:
        return None
    user_values = {k: list(v) for k, v in (fixed_values or {}).items()}
    found_values = {k: v for k, v in compared_values(model, inputs).items() if k not in user_values}
    values = _value_sets(user_values, found_values)[0]
    search = _Search(inputs, run, seed, id_bounds(model, inputs), time.perf_counter)
    result = StepSets({}, dm.describe())
    for name, new, cached in (("prefill", prefill, 0), ("decode", 1, past)):
        first = None
        # a model whose position table is shorter than the asked step (Whisper's 448 target positions,
        # a tiny test model's 64) refuses it: the step is timed at the largest half that runs, and said
        for tries in range(STEP_HALVINGS + 1):
            sizes = dm.step_sizes(new, cached)
            shapes = {s.name: list(fixed[s.name]) if s.name in fixed else dm.shape(s, sizes) for s in inputs}
            label = f"{name}: {new} new token{'s' if new != 1 else ''}, past {cached}"
            got, reason = search.attempt(_Plan(label, shapes, role_arrays(dm, inputs, shapes, sizes, fixed), 1),
                                         values, seed, label)
            first = first or (label, shapes, reason)
            if got is not None or (new if name == "prefill" else cached) <= 1:
                break
            new, cached = (max(1, new // 2), cached) if name == "prefill" else (new, max(1, cached // 2))
        if got is None:
            label, shapes, reason = first
            flag = "--prefill" if name == "prefill" else "--past"
            raise ModelDoesNotRun(f"the original model fails in onnxruntime on its {label} "
                                  f"({describe(shapes, inputs, values)}): {reason}; change {flag}, or give the "
                                  "inputs you run with --inputs FILE")
        if tries:
            result.smaller.append(f"the original refused its {first[0]} ({first[2]}): timed at "
                                  f"{new if name == 'prefill' else cached} {'new' if name == 'prefill' else 'past'} "
                                  "tokens, the largest half that runs")
        result.steps[name] = got
        result.sizes[name] = (new, cached)
    return result
