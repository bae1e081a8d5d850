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

import ast
import re
import time
from dataclasses import dataclass, field
from typing import Any, Iterable

import numpy as np
import onnx
from onnx import numpy_helper

from graphtool.errors import ModelDoesNotRun

LADDER = (1, 4, 8, 16, 32, 64, 128, 224, 256, 320, 512, 640, 1024)
MAX_ELEMENTS = 1 << 24  # per input, for a discovery attempt (64 MB of float32)
BUDGET_SECONDS = 120.0
_PASS_THROUGH = {"Cast", "Squeeze", "Unsqueeze", "Reshape", "Identity", "Flatten", "CastLike"}
_COMPARISONS = {"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"}
_BATCH_NAMES = {"n", "b", "bs", "batch", "batch_size", "batchsize", "batch_dim", "dynamicdimension.0",
                "p2o.dynamicdimension.0", "unk__0"}


@dataclass
class InputSpec:
    """One graph input as onnxruntime declares it: dims are ints or symbol names (None = unnamed)."""

    name: str
    ort_type: str
    dims: list[int | str | None]


@dataclass
class InputSet:
    feeds: dict[str, np.ndarray]
    label: str  # e.g. "seed 0, sequence=128, sr=16000"
    outputs: dict[str, Any] | None = None  # the original's outputs on these feeds, once run


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
                "shapes": {k: list(v.shape) for k, v in (self.sets[0].feeds.items() if self.sets else [])}}


# --------------------------------------------------------------------------- evidence in the graph


def _graphs(graph: onnx.GraphProto) -> Iterable[onnx.GraphProto]:
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _graphs(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for g in attr.graphs:
                    yield from _graphs(g)


def _constants(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """Small constants by value name (initializers and Constant nodes, in every scope)."""
    consts: dict[str, np.ndarray] = {}
    for g in _graphs(model.graph):
        for init in g.initializer:
            if np.prod(init.dims, dtype=np.int64) <= 16 and not init.data_location:
                consts[init.name] = numpy_helper.to_array(init)
        for node in g.node:
            if node.op_type == "Constant" and node.output:
                for attr in node.attribute:
                    if attr.name == "value" and attr.type == onnx.AttributeProto.TENSOR and \
                            np.prod(attr.t.dims, dtype=np.int64) <= 16 and not attr.t.data_location:
                        consts[node.output[0]] = numpy_helper.to_array(attr.t)
                    elif attr.name in ("value_int", "value_ints"):
                        consts[node.output[0]] = np.array(onnx.helper.get_attribute_value(attr))
    return consts


def _sources(model: onnx.ModelProto, names: set[str]) -> dict[str, str]:
    """value name → the graph input it is (a pass-through chain of) , for values reached from inputs."""
    origin = {n: n for n in names}
    for g in _graphs(model.graph):
        for node in g.node:  # nodes are topologically ordered within a graph
            if node.op_type in _PASS_THROUGH and node.input and node.input[0] in origin:
                for out in node.output[:1]:
                    origin[out] = origin[node.input[0]]
    return origin


def compared_values(model: onnx.ModelProto, inputs: list[InputSpec]) -> dict[str, list[Any]]:
    """Integer/bool inputs → the constants the graph compares them with (the branch values)."""
    wanted = {s.name for s in inputs if _is_int(s.ort_type) or s.ort_type == "tensor(bool)"}
    if not wanted:
        return {}
    origin, consts = _sources(model, wanted), _constants(model)
    found: dict[str, list[Any]] = {}
    unequal: dict[str, list[Any]] = {}
    for g in _graphs(model.graph):
        for node in g.node:
            if node.op_type in _COMPARISONS and len(node.input) == 2:
                for mine, other in ((0, 1), (1, 0)):
                    src = origin.get(node.input[mine])
                    if src and node.input[other] in consts:
                        for v in np.unique(consts[node.input[other]]).tolist()[:4]:
                            if v not in found.setdefault(src, []):
                                found[src].append(v)
                            if node.op_type == "Equal":
                                unequal.setdefault(src, []).append(v)
            elif node.op_type in ("If", "Where") and node.input and origin.get(node.input[0]):
                src = origin[node.input[0]]
                if _bool(inputs, src):
                    found[src] = [True, False]
    for src, equals in unequal.items():  # the "not equal" side of `x == c` needs a value too
        if len(found[src]) == 1 and isinstance(equals[0], (int, float)) and not isinstance(equals[0], bool):
            c = equals[0]
            found[src].append(c // 2 if isinstance(c, int) and c > 1 else c + 1)  # 16000 -> 8000
    return found


def id_bounds(model: onnx.ModelProto, inputs: list[InputSpec]) -> dict[str, int]:
    """Integer inputs used as Gather indices into a constant table → the table's row count."""
    wanted = {s.name for s in inputs if _is_int(s.ort_type)}
    if not wanted:
        return {}
    origin = _sources(model, wanted)
    rows: dict[str, int] = {}
    init_dims = {t.name: list(t.dims) for g in _graphs(model.graph) for t in g.initializer}
    for g in _graphs(model.graph):
        for node in g.node:
            if node.op_type == "Gather" and len(node.input) == 2 and origin.get(node.input[1]):
                dims = init_dims.get(node.input[0])
                axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
                if dims and -len(dims) <= axis < len(dims):
                    src = origin[node.input[1]]
                    rows[src] = min(rows.get(src, dims[axis]), dims[axis])
    return rows


def metadata_sizes(model: onnx.ModelProto) -> list[int]:
    """Image sizes the exporter wrote down (ultralytics: ``imgsz`` = "[320, 320]")."""
    for prop in model.metadata_props:
        if prop.key.lower() in ("imgsz", "image_size", "img_size", "input_size"):
            try:
                value = ast.literal_eval(prop.value)
            except (ValueError, SyntaxError):
                continue
            values = value if isinstance(value, (list, tuple)) else [value]
            sizes = [int(v) for v in values if isinstance(v, (int, float)) and 0 < v <= 8192]
            if sizes:
                return sorted(set(sizes))
    return []


def _is_int(ort_type: str) -> bool:
    return ort_type.startswith("tensor(int") or ort_type.startswith("tensor(uint")


def _bool(inputs: list[InputSpec], name: str) -> bool:
    return any(s.name == name and s.ort_type == "tensor(bool)" for s in inputs)


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
               values: dict[str, Any], bounds: dict[str, int]) -> dict[str, np.ndarray]:
    """Seeded random arrays of the declared dtypes; ``values`` fill whole inputs with one value."""
    from graphtool.runtime import ORT_TYPES

    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    for spec in inputs:
        dtype = ORT_TYPES[spec.ort_type]
        shape = shapes[spec.name]
        if spec.name in values:
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
    return max((int(np.prod(s, dtype=np.int64)) for s in shapes.values()), default=0)


def _free_dims(inputs: list[InputSpec], fixed: dict[str, list[int]]) -> bool:
    return any(not (isinstance(d, int) and d >= 0) for s in inputs if s.name not in fixed for d in s.dims)


# --------------------------------------------------------------------------- the search


def _candidates(inputs: list[InputSpec], model: onnx.ModelProto, fixed: dict[str, list[int]],
                dim_default: int) -> Iterable[tuple[str, int, int]]:
    """(how, size, batch) in the order they are tried: defaults, metadata, then the ladder."""
    yield "defaults", dim_default, dim_default
    if not _free_dims(inputs, fixed):
        return
    tried = {(dim_default, dim_default)}
    for size in metadata_sizes(model):
        if (size, 1) not in tried:
            tried.add((size, 1))
            yield "model metadata (imgsz)", size, 1
    for size in LADDER:
        if (size, 1) not in tried:
            tried.add((size, 1))
            yield "size ladder", size, 1


def describe(shapes: dict[str, list[int]], inputs: list[InputSpec], values: dict[str, Any]) -> str:
    free = [f"{s.name}={'x'.join(map(str, shapes[s.name]))}" for s in inputs
            if any(not (isinstance(d, int) and d >= 0) for d in s.dims)]
    vals = [f"{k}={v}" for k, v in values.items()]
    return ", ".join(free + vals)


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
    failures: list[str] = []
    attempts = 0
    for how, size, batch in _candidates(inputs, model, fixed, dim_default):
        shapes = shape_plan(inputs, size, batch, fixed)
        if _elements(shapes) > MAX_ELEMENTS:
            continue
        attempts += 1
        feeds = make_feeds(inputs, shapes, seed, value_sets[0], bounds)
        before = clock()
        try:
            outputs = run(feeds)
        except Exception as err:  # noqa: BLE001 - the model's own failure, kept for the report
            failures.append(f"{describe(shapes, inputs, value_sets[0])}: {ort_reason(err)}")
            if clock() - start > budget:
                break
            continue
        sets = [InputSet(feeds, f"seed {seed}, {describe(shapes, inputs, value_sets[0])}".rstrip(", "), outputs)]
        sets += _more_sets(inputs, shapes, seed, value_sets, bounds, run, fixed, size, batch, how)
        evidence = how if how != "defaults" else "declared shapes, free dims = 2"
        if found_values:
            evidence += "; values compared in the graph: " + ", ".join(
                f"{k} ∈ {{{', '.join(map(str, v))}}}" for k, v in found_values.items())
        if user_values:
            evidence += "; values given: " + ", ".join(f"{k}={v}" for k, v in user_values.items())
        return Discovery(sets, evidence, attempts, clock() - start, before - start, failures)
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


def _more_sets(inputs: list[InputSpec], shapes: dict[str, list[int]], seed: int, value_sets: list[dict[str, Any]],
               bounds: dict[str, int], run: Any, fixed: dict[str, list[int]], size: int, batch: int,
               how: str) -> list[InputSet]:
    """The extra sets verification also runs: each further branch value, and a second seed at
    another size where the model accepts one (else at the same size)."""
    extra: list[InputSet] = []
    for values in value_sets[1:]:
        feeds = make_feeds(inputs, shapes, seed, values, bounds)
        try:
            outputs = run(feeds)
        except Exception:  # noqa: BLE001 - this branch value does not run: keep the others
            continue
        extra.append(InputSet(feeds, f"seed {seed}, {describe(shapes, inputs, values)}".rstrip(", "), outputs))
    if _free_dims(inputs, fixed):
        larger = [s for s in LADDER if s > size][:2]
        for other in larger:
            other_shapes = shape_plan(inputs, other, batch, fixed)
            if _elements(other_shapes) > MAX_ELEMENTS:
                break
            feeds = make_feeds(inputs, other_shapes, seed + 1, value_sets[0], bounds)
            try:
                outputs = run(feeds)
            except Exception:  # noqa: BLE001 - the model accepts only some sizes
                continue
            extra.append(InputSet(feeds, f"seed {seed + 1}, {describe(other_shapes, inputs, value_sets[0])}", outputs))
            return extra
    feeds = make_feeds(inputs, shapes, seed + 1, value_sets[0], bounds)
    try:
        extra.append(InputSet(feeds, f"seed {seed + 1}, same shapes", run(feeds)))
    except Exception:  # noqa: BLE001 - random values this seed drew are not valid for the model
        pass
    return extra


def ort_reason(err: Exception) -> str:
    """onnxruntime's message without its source location and C++ signature: the part a user reads."""
    text = str(err).strip().replace("\n", " ")
    marker = "Status Message: "
    if marker in text:
        text = text.rsplit(marker, 1)[1]
    text = re.sub(r"^/\S+:\d+ \S+?\(.*?\)\s*", "", text)
    return text[:240] or type(err).__name__
