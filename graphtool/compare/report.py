"""One compare report: ORT's graph and graphtool's at each level, side by side (fusions each
applied, op histograms, outputs), as a JSON-ready dict."""

from __future__ import annotations

from collections import Counter

from typing import Any, Callable, Iterable

import numpy as np

from graphtool.compare.run import layout_notes, measure_latency, ort_job, ort_optimized_session, output_diffs
from graphtool.compare.schema import ORT_LEVELS, SCHEMA
from graphtool.fusion_trace import Fusion, Trace, index_original, trace_fusions
from graphtool.fusion_trace import group_fusions as _group
from graphtool.inspect import op_histogram
from graphtool.ir.model import Model
from graphtool.runtime import sandbox


def compare_fusions(ort: Trace, ours: Trace) -> dict[str, list[dict[str, Any]]]:
    """Rewrites (fusions, replacements, expansions) found in one graph and not the other,
    grouped by pattern.

    An ORT rewrite counts as done by graphtool when one graphtool node stands for the same
    original ops or a superset of them; when graphtool fused only some of them, the entry says
    what graphtool did instead (``graphtool_did``).
    """
    def rewrites(trace: Trace) -> list[Fusion]:
        return [f for f in trace.fusions if f.kind in ("fused", "replaced", "expanded")]

    ort_f, our_f = rewrites(ort), rewrites(ours)

    def owner_map(fusions: list[Fusion]) -> dict[int, Fusion]:
        table: dict[int, Fusion] = {}
        for f in fusions:
            for i in f.absorbed:
                table.setdefault(i, f)
        return table

    our_owner, ort_owner = owner_map(our_f), owner_map(ort_f)

    def missing(fusions: list[Fusion], other: dict[int, Fusion]) -> tuple[list[Fusion], dict[int, list[str]]]:
        left: list[Fusion] = []
        instead: dict[int, list[str]] = {}
        for f in fusions:
            owners = {id(other[i]): other[i] for i in f.absorbed if i in other}
            if len(owners) == 1 and all(i in other for i in f.absorbed):
                continue  # the other side fused the same ops (or more) into one node
            left.append(f)
            instead[id(f)] = sorted({o.pattern for o in owners.values()})
        return left, instead

    ort_only, ort_instead = missing(ort_f, our_owner)
    our_only, our_instead = missing(our_f, ort_owner)

    def ort_side(f: Fusion) -> dict[str, Any]:
        extra: dict[str, Any] = {"graphtool_did": "; ".join(ort_instead[id(f)])}
        why = why_not_ours(f)
        if why:
            extra["why"] = why
        return extra

    return {
        "ort": _group(ort_f),
        "graphtool": _group(our_f),
        "ort_only": _group(ort_only, ort_side),
        "graphtool_only": _group(our_only, lambda f: {"ort_did": "; ".join(our_instead[id(f)])}),
    }


def why_not_ours(fusion: Fusion) -> str | None:
    """Why graphtool does not make an ORT-only rewrite, for the ones it leaves on purpose."""
    added = Counter(op for _, op in fusion.new_ops)
    added.subtract(Counter(fusion.absorbed_ops))
    if fusion.kind == "expanded" and {op for op, n in added.items() if n > 0} == {"DequantizeLinear"}:
        return ("onnxruntime copies a DequantizeLinear that several QDQ node units read (EnsureUniqueDQForNodeUnit) "
                "so that each unit fuses on its own; graphtool's QDQ fusions read the shared one, no copy needed")
    return None


def _flat(hist: dict[str, dict[str, int]]) -> dict[tuple[str, str], int]:
    return {(d, op): n for d, ops in hist.items() for op, n in ops.items()}


def histogram_diff(ort_hist: dict[str, dict[str, int]], our_hist: dict[str, dict[str, int]]) -> list[dict[str, Any]]:
    """Every (domain, op) whose count differs; ``only`` names the side that alone has it."""
    a, b = _flat(ort_hist), _flat(our_hist)
    rows = []
    for key in sorted(set(a) | set(b)):
        if a.get(key, 0) != b.get(key, 0):
            only = "ort" if key not in b else "graphtool" if key not in a else None
            rows.append({"domain": key[0], "op_type": key[1], "ort": a.get(key, 0), "graphtool": b.get(key, 0),
                         "only": only})
    return rows


# --------------------------------------------------------------------------- one level


def _side(model: Model, trace: Trace | None = None) -> dict[str, Any]:
    side: dict[str, Any] = {"nodes": model.node_count(), "op_histogram": op_histogram(model)}
    if trace is not None:
        side["removed"] = dict(trace.removed.most_common())
        side["untraced"] = [{"domain": d or "ai.onnx", "op_type": o, "name": n} for d, o, n in trace.inserted]
    return side


def compare_level(original_model: Model, optimized_model: Model, level: int, target: str = "onnx",
                  ort_model: Model | None = None, seed: int = 0,
                  feeds: dict[str, np.ndarray] | None = None,
                  original_outputs: dict[str, Any] | None = None, ort_session: Any = None,
                  index: Any = None, ours: "OurSide | None" = None, reference: Any = None) -> dict[str, Any]:
    """ORT's graph at ``level`` beside graphtool's ``optimized_model`` (optimized at that level).

    This is what ``graphtool optimize --compare-ort`` prints (through ``format_compare``) and
    what ``graphtool compare`` builds once per level. ``ort_model`` can be passed when the caller
    already has ORT's graph (and ``ort_session``, the session that made it, which then gives its
    outputs); otherwise ORT optimizes ``original_model`` here. ``index``: the original's
    ``fusion_trace.index_original``, when the caller traces it more than once; ``ours``:
    graphtool's side already traced (``OurSide``), when several levels share it. ``reference``:
    a ``verify.ReferenceJob`` whose first input set and outputs stand for ``feeds`` and
    ``original_outputs``, waited for beside ORT's trace (on a big model it finishes last).
    """
    if ort_model is None:
        ort_model, ort_session = ort_optimized_session(original_model, level)
    index = index if index is not None else index_original(original_model)  # read by both traces
    ours = ours if ours is not None else OurSide(optimized_model)
    our_trace = ours.traced(original_model, index)
    # the outputs: sessions in the sandbox child, while ORT's graph is traced here
    sessions = {"ort": ort_session} if ort_session is not None else {}

    def outputs_job() -> dict[str, Any]:
        given, known = feeds, original_outputs
        if reference is not None:
            side = reference.result()
            given, known = side.input_sets[0].feeds, side.expected[0]
        return output_diffs({"original": original_model, "ort": ort_model, "graphtool": optimized_model}, seed=seed,
                            feeds=given, known={"original": known} if known is not None else None,
                            sessions={**sessions, **ours.sessions()})

    outputs = sandbox.Background(outputs_job)
    ort_trace = trace_fusions(original_model, ort_model, index=index)
    ort_side, our_side = _side(ort_model, ort_trace), _side(optimized_model, our_trace)
    return {
        "level": level,
        "ort_level": ORT_LEVELS[level],
        "graphtool_level": level,
        "target": target,
        "original_nodes": original_model.node_count(),
        "ort": ort_side,
        "graphtool": our_side,
        "op_diff": histogram_diff(ort_side["op_histogram"], our_side["op_histogram"]),
        "fusions": compare_fusions(ort_trace, our_trace),
        "outputs": outputs.result(),
        "notes": layout_notes(ort_model),
    }


class OurSide:
    """graphtool's optimized model, its session opening in the sandbox child from the moment it
    exists (on a 200k-node compare that session was the last thing waited for: started after
    the original's index, it ended 1.5 s after everything else), and its trace against the
    original. Levels that share graphtool's model (L2 and L3) share both. Unsandboxed,
    ``output_diffs`` opens the session later: in this process it would only compete with the
    trace for the same interpreter."""

    def __init__(self, optimized: Model) -> None:
        from graphtool.runtime import make_session, source_of

        self.optimized = optimized
        self._opening = None
        if sandbox.sessions_enabled():
            # The session's source (bytes and cuts) is made here, before the original is indexed:
            # in the job's thread it shared the interpreter with the index and ORT's graph being
            # read, and the child started ORT 1.8 s later instead of 0.65 s.
            source = source_of(optimized)
            self._opening = sandbox.Background(lambda: make_session(source))
        self._session: Any = None
        self._trace: Trace | None = None

    def traced(self, original: Model, index: Any) -> Trace:
        """The optimized model traced back to ``original`` (whose ``index_original`` is ``index``)."""
        if self._trace is None:
            self._trace = trace_fusions(original, self.optimized, index=index)
        return self._trace

    def sessions(self) -> dict[str, Any]:
        """{"graphtool": its open session} for ``output_diffs``, every level that asks (a
        Background hands its value over once)."""
        if self._opening is not None:
            self._session, self._opening = self._opening.result(), None
        return {"graphtool": self._session} if self._session is not None else {}


# --------------------------------------------------------------------------- whole report


def graphtool_level_for(level: int, target: str) -> int:
    """graphtool's level that matches ORT's: 3 only once graphtool has level-3 passes."""
    from graphtool.pass_manager import load_builtin_and_plugins

    top = max((cls.level for cls in load_builtin_and_plugins().values()
               if cls.target in ("onnx", target) and not cls.analysis), default=1)
    return min(level, max(2, min(top, 3)))


def compare(model: Model, levels: Iterable[int] = (1, 2, 3), target: str = "onnx", latency: bool = False,
            runs: int = 20, warmup: int = 3, seed: int = 0, path: str | None = None,
            feeds: dict[str, np.ndarray] | None = None,
            on_step: Callable[[str], None] | None = None,
            models: dict[int, tuple[Model, Model]] | None = None,
            original_outputs: dict[str, Any] | None = None, reference: Any = None,
            started: "sandbox.Background | None" = None) -> dict[str, Any]:
    """The ``graphtool compare`` report (schema ``graphtool.compare/1``, see ``JSON_SCHEMA``).

    ``models``, when given, receives {level: (ORT's graph, graphtool's graph)} for callers that
    render the graphs themselves (``--html``). ``original_outputs``: the original's outputs on
    ``feeds`` when the caller has them (input discovery ran it): its session is not built again.
    ``reference``: a ``verify.ReferenceJob`` started for ``model`` (input discovery and the
    original's outputs, in the sandbox child while graphtool and ORT optimize); its first input
    set and outputs stand for ``feeds`` and ``original_outputs``. ``started``: ORT's job for the
    first level, already running (``run.ort_job_from_file_bytes``).
    """
    from graphtool.optimize import optimize

    levels = sorted(set(levels))
    ours: dict[int, Model] = {}
    our_notes: dict[int, list[str]] = {}  # what graphtool's passes refused and why (the layout pass's reason)
    report: dict[str, Any] = {
        "schema": SCHEMA,
        "model": path,
        "target": target,
        "original": _side(model),
        "levels": [],
        "latency": None,
    }
    index = None
    traced: OurSide | None = None  # graphtool's side, one level at a time (its session open meanwhile)
    # ORT optimizes while graphtool does: the next level builds in the other ORT child while this
    # one's outputs run, and the level after next starts in this level's child once it is done
    pending: dict[int, sandbox.Background] = {}
    if levels:
        pending[levels[0]] = started if started is not None else ort_job(model, levels[0])
    for i, level in enumerate(levels):
        our_level = graphtool_level_for(level, target)
        if our_level not in ours:
            if on_step:
                on_step(f"graphtool optimize level {our_level}")
            ours[our_level], _, ctx = optimize(model, level=our_level, target=target)
            our_notes[our_level] = [f"graphtool: {n}" for n in getattr(ctx, "notes", [])]
            traced = OurSide(ours[our_level])  # its session opens while the original is indexed
            index = index if index is not None else index_original(model)
            traced.traced(model, index)
        if on_step:
            on_step(f"onnxruntime level {level} ({ORT_LEVELS[level]})")
        ort_model, ort_session = pending.pop(level).result()
        if i + 1 < len(levels) and levels[i + 1] not in pending:
            pending[levels[i + 1]] = ort_job(model, levels[i + 1], turn=i + 1)
        entry = compare_level(model, ours[our_level], level, target, ort_model=ort_model, seed=seed, feeds=feeds,
                              original_outputs=original_outputs, ort_session=ort_session, index=index,
                              ours=traced, reference=reference)
        if reference is not None:  # the first level waited for it: later ones reuse what it found
            side = reference.result()
            feeds, original_outputs, reference = side.input_sets[0].feeds, side.expected[0], None
        del ort_session  # its child-side session closes before the next level's opens
        if i + 2 < len(levels):
            pending[levels[i + 2]] = ort_job(model, levels[i + 2], turn=i + 2)
        if models is not None:
            models[level] = (ort_model, ours[our_level])
        entry["graphtool_level"] = our_level  # L3 compares against graphtool's L2 until it has L3 passes
        entry["notes"] += our_notes.get(our_level, [])
        report["levels"].append(entry)
    if latency:
        if on_step:
            on_step("latency")
        variants = [("original", model)] + [(f"graphtool L{lv}", m) for lv, m in sorted(ours.items())]
        ort_levels = ["off"] + [ORT_LEVELS[lv] for lv in levels]
        report["latency"] = measure_latency(variants, ort_levels, runs=runs, warmup=warmup, feeds=feeds, seed=seed)
    return report
