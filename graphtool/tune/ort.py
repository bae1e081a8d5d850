"""The onnxruntime side of ``tune``: build each rewrite set, time sessions, micro-benchmark kernels.

graphtool.tune.search decides; this module measures. ``OrtTimer`` implements tune's ``Timer`` protocol
with real sessions in this process (never the sandbox child: a pipe round trip would be timed
too), wall-clock ``perf_counter`` around ``session.run`` on the model's real inputs, candidates
interleaved round by round so load from other processes falls on all of them alike.

A model with a KV cache is timed on two steps of a generation in every run: a prefill of
``--prefill`` tokens over an empty cache, then a decode step of one token over ``--past`` cached
ones (graphtool.verify.find_step_inputs builds both, as verification builds its KV-cache sets).
Each run's sample is a ``Sample``: the seconds of the step the search ranks by (``pick``: the
decode step unless told otherwise, since a generation runs one prefill and then a decode step
per new token) carrying both steps' seconds, so every row reports both latencies.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import onnx
from onnx import helper

from graphtool import io
from graphtool.ir.model import Model
from graphtool.optimize import optimize
from graphtool.pass_manager import load_builtin_and_plugins, select_passes
from graphtool.runtime import tuned_session
from graphtool.tune.environment import FIRST_PROBE_RUNS, recommend
from graphtool.tune.outcome import (
    PICKS,
    TuneRun,
    decoder_report,
    session_settings,
    write_settings,
)
from graphtool.tune.search import TuneResult, tune
from graphtool.tune.space import (
    FUSED_OPS,
    ORT_FUSIONS,
    Candidate,
    OrtSettings,
    RewriteSet,
    Sample,
)
from graphtool.verify import ATOL, RTOL, find_inputs, find_step_inputs, verify

WARMUP = 2
# onnxruntime's intra-op threads spin after a run; interleaved, they steal the next session's CPU
# (BERT-base, 2 cores: a 1-thread session measured 643 ms after a 2-thread one, 584 ms alone, 573
# ms with this pause between runs), so multi-threaded pools get a pause to park their threads.
SPIN_PAUSE = 0.005
KERNEL_MIN_ROUNDS, KERNEL_MAX_ROUNDS = 10, 300
# The share of the machine's memory tune's sessions may hold together.
MEMORY_SHARE = 0.25
# A decoder's generation steps: a prefill of this many tokens over an empty cache, a decode step
# of one token over this many cached ones (--prefill, --past), ranked by the decode step (--pick).
PREFILL_TOKENS, PAST_TOKENS = 64, 64
# The share of --budget the environment probe may take before the search (six processes of the
# original: ~12 s on a 6-layer decoder, ~35 s on BERT-base; the default 300 s budget fits both).
PROBE_SHARE = 0.15


def rewrite_passes(rewrite: RewriteSet, target: str) -> list[str] | None:
    """The passes a rewrite set runs: its level's less ``skip``, plus its opt-in ``extra`` passes
    (None: just the level's, which ``optimize`` selects itself)."""
    if not rewrite.extra:
        return None
    known = load_builtin_and_plugins()
    skip = [p for p in rewrite.skip if p in known]
    chosen = [c.name for c in select_passes(rewrite.level, target, skip=skip)]
    return chosen + [p for p in rewrite.extra if p in known and p not in chosen]


def _rss() -> int:
    """This process's resident memory in bytes (0 where /proc is absent)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _machine_memory() -> int:
    """The machine's physical memory in bytes (sysconf: no file to open); 8 GB where it cannot say."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 8 << 30


def _model_bytes(path: str) -> int:
    """The model file and its external data beside it: what one session's weights take, at least."""
    folder = os.path.dirname(os.path.abspath(path))
    total = os.path.getsize(path)
    try:
        proto = onnx.load(path, load_external_data=False)
    except Exception:  # noqa: BLE001 - an unreadable file: its own size is the estimate
        return total
    locations = {e.value for t in proto.graph.initializer for e in t.external_data if e.key == "location"}
    return total + sum(os.path.getsize(os.path.join(folder, loc)) for loc in locations
                       if os.path.exists(os.path.join(folder, loc)))


def clock_for(threads: Sequence[int]) -> tuple[str, Callable[[], float]]:
    """The clock for a batch whose candidates run on ``threads`` intra-op threads (0: one per core)."""
    return ("CPU time", time.process_time) if threads and all(t == 1 for t in threads) else \
        ("wall time", time.perf_counter)


def _op_counts(proto: onnx.ModelProto) -> Counter:
    return Counter(n.op_type for n in proto.graph.node)


class OrtTimer:
    """Rewrite-set models on disk under ``workdir``, sessions kept while their candidates are timed."""

    def __init__(self, original: Model, original_path: str, feeds: dict[str, np.ndarray], target: str,
                 workdir: str, input_shapes: dict[str, list[int]] | None = None,
                 steps: dict[str, dict[str, np.ndarray]] | None = None, pick: str = "decode") -> None:
        # steps: a decoder's generation steps (name → feeds), run in this order in every timed run;
        # ``feeds`` is then the picked step's (what the kernel micro-benchmarks see)
        self.steps, self.pick = dict(steps or {}), pick
        if self.steps:
            feeds = self.steps[pick]
        self.original, self.original_path, self.feeds = original, original_path, feeds
        self.target, self.workdir, self.input_shapes = target, workdir, input_shapes or {}
        self.paths: dict[RewriteSet, str] = {}
        self.provenance: dict[RewriteSet, dict[str, list[str]]] = {}
        self.sessions: dict[Candidate, Any] = {}
        self.notes: list[str] = []
        self.clocks: set[str] = set()  # the clocks the batches were timed with
        self.wall_per_run = 0.0
        self.known_passes = set(load_builtin_and_plugins())
        self.memory = _machine_memory()
        self.session_bytes = _model_bytes(original_path)  # raised to what opening a session was seen to take

    # ------------------------------------------------------------------------------ rewrite sets

    def path(self, rewrite: RewriteSet) -> str:
        """The rewrite set's model file (made on first use)."""
        if rewrite.level == 0:
            return self.original_path
        if rewrite not in self.paths:
            skip = [p for p in rewrite.skip if p in self.known_passes]
            only = rewrite_passes(rewrite, self.target)
            model, _report, ctx = optimize(self.original, level=rewrite.level, target=self.target, skip=() if only else skip,
                                           passes=only, input_shapes=self.input_shapes)
            path = os.path.join(self.workdir, f"rewrite{len(self.paths)}.onnx")
            io.save(model, path)
            self.paths[rewrite] = path
            self.provenance[rewrite] = {k: list(v) for k, v in ctx.provenance.items()}
        return self.paths[rewrite]

    def model(self, rewrite: RewriteSet) -> Model:
        return self.original if rewrite.level == 0 else io.load(self.path(rewrite))

    # ---------------------------------------------------------------------------- whole models

    def capacity(self) -> int:
        """Sessions that fit in ``MEMORY_SHARE`` of the machine's memory."""
        return max(1, int(self.memory * MEMORY_SHARE / max(1, self.session_bytes)))

    def release(self, candidates: Sequence[Candidate]) -> None:
        for cand in candidates:
            self.sessions.pop(cand, None)

    def _session(self, cand: Candidate) -> Any:
        if cand not in self.sessions:
            path = self.path(cand.rewrite)
            before = _rss()
            sess = tuned_session(path, cand.ort.level, tuple(cand.ort.optimizer_names()), cand.ort.threads)
            self.session_bytes = max(self.session_bytes, _rss() - before)
            names = {i.name for i in sess.get_inputs()}
            steps = self.steps or {"": self.feeds}
            feeds = {step: {k: v for k, v in got.items() if k in names} for step, got in steps.items()}
            for _ in range(WARMUP):
                for one in feeds.values():
                    sess.run(None, one)
            self.sessions[cand] = (sess, feeds)
        return self.sessions[cand]

    def time(self, candidates: Sequence[Candidate], rounds: int) -> dict[Candidate, list[float]]:
        for stale in [c for c in self.sessions if c not in candidates]:  # only the race's field stays open
            del self.sessions[stale]
        runs = [(c, *self._session(c)) for c in candidates]
        samples: dict[Candidate, list[float]] = {c: [] for c in candidates}
        pause = SPIN_PAUSE if any(c.ort.threads != 1 for c in candidates) else 0.0
        name, clock = clock_for([c.ort.threads for c in candidates])
        self.clocks.add(name)
        started = time.perf_counter()
        for r in range(rounds):
            order = runs[r % len(runs):] + runs[:r % len(runs)]  # rotate: no candidate always runs first
            for cand, sess, feeds in order:
                took = {}
                for step, one in feeds.items():  # a decoder: the prefill, then the decode step
                    if pause:
                        time.sleep(pause)
                    start = clock()
                    sess.run(None, one)
                    took[step] = clock() - start
                samples[cand].append(Sample(took[self.pick], took) if self.steps else took[""])
        self.wall_per_run = (time.perf_counter() - started) / max(1, rounds * len(runs))
        return samples

    def close(self) -> None:
        self.sessions.clear()

    # ------------------------------------------------------------------------- ORT's fusions

    def ort_fusions(self, rewrite: RewriteSet) -> list[str]:
        """onnxruntime fusions that make ops at the extended level on this model, checked to be names
        ``disabled_optimizers`` accepts: with all of them disabled, none of their ops may appear."""
        path = self.path(rewrite)
        before = _op_counts(onnx.load(path, load_external_data=False))

        def fused(disabled: list[str]) -> Counter:
            out = os.path.join(self.workdir, "ort_extended.onnx")
            tuned_session(path, "extended", tuple(OrtSettings(disabled=tuple(disabled)).optimizer_names()), 1,
                          optimized_path=out)
            after = _op_counts(onnx.load(out, load_external_data=False))
            return Counter({op: after[op] - before.get(op, 0) for op in after if after[op] > before.get(op, 0)})

        try:
            made = fused([])
            firing = [name for name, op in ORT_FUSIONS.items() if made.get(op)]
            if firing:
                still = fused(firing)
                refused = [name for name in firing if still.get(ORT_FUSIONS[name])]
                for name in refused:
                    self.notes.append(f"{rewrite.name}: onnxruntime still makes {ORT_FUSIONS[name]} with {name} "
                                      "disabled (not a name it accepts, or another fusion makes it): not tuned")
                firing = [n for n in firing if n not in refused]
        except Exception as err:  # noqa: BLE001 - a model ORT cannot save optimized: no fusion to tune
            self.notes.append(f"{rewrite.name}: could not inspect onnxruntime's fusions ({type(err).__name__})")
            return []
        return firing

    def ops(self, candidate: Candidate) -> set[str]:
        """The op types onnxruntime runs for ``candidate``: its model as ORT optimized it at the
        candidate's level with its disabled fusions (ORT saves the optimized graph)."""
        return {op for op, _domain in self._ran(candidate)}

    def same_rewrite(self, a: RewriteSet, b: RewriteSet) -> bool:
        """Whether two rewrite sets wrote graphs of the same ops (level 3 is level 2 where no layout
        changes; with --target onnx it runs level 2's passes and is not built at all)."""
        def passes(rewrite: RewriteSet) -> list[str]:
            skip = [p for p in rewrite.skip if p in self.known_passes]
            return [c.name for c in select_passes(rewrite.level, self.target, skip=skip)] + list(rewrite.extra)

        if passes(a) == passes(b):
            return True

        def ops(rewrite: RewriteSet) -> Counter:
            graph = onnx.load(self.path(rewrite), load_external_data=False).graph
            return Counter((n.op_type, n.domain) for n in graph.node)
        return ops(a) == ops(b)

    def same_graph(self, a: Candidate, b: Candidate) -> bool:
        return self._ran(a) == self._ran(b)

    def _ran(self, candidate: Candidate) -> Counter:
        """(op type, domain) → count in the graph onnxruntime runs for ``candidate``."""
        out = os.path.join(self.workdir, "ort_ran.onnx")
        tuned_session(self.path(candidate.rewrite), candidate.ort.level, tuple(candidate.ort.optimizer_names()), 1,
                      optimized_path=out)
        return Counter((n.op_type, n.domain) for n in onnx.load(out, load_external_data=False).graph.node)

    # ------------------------------------------------------------------------------- kernels

    def kernels(self, threads: int, seconds: float) -> dict[str, tuple[str, list[float], list[float]]]:
        """Each fused op of the level-2 rewrite, one instance, against the original subgraph it
        absorbed, both with the inputs that reach them on the model's real inputs and both at
        onnxruntime's default level with ORT's own fusion for that op disabled (so the unfused side
        is what the model would run if neither graphtool nor onnxruntime fused it)."""
        level2 = RewriteSet("level 2", 2)
        fused_proto = onnx.load_from_string(io.to_bytes(self.model(level2)))
        original_proto = onnx.load_from_string(io.to_bytes(self.original))
        provenance = self.provenance.get(level2, {})
        by_name = {n.name: n for n in original_proto.graph.node if n.name}
        picks: dict[str, tuple[onnx.NodeProto, list[onnx.NodeProto]]] = {}
        for node in fused_proto.graph.node:
            olds = _originals(node.name, provenance, set(by_name)) if node.name in provenance else []
            if node.op_type in FUSED_OPS and node.op_type not in picks and len(olds) >= 2 \
                    and all(o in by_name for o in olds):
                picks[node.op_type] = (node, [by_name[o] for o in olds])
        if not picks:
            return {}
        pairs = {op: (_subgraph(fused_proto, [node]), _subgraph(original_proto, olds))
                 for op, (node, olds) in picks.items()}
        fused_values = _values(fused_proto, {v for sub, _ in pairs.values() for v in sub["feeds"]}, self.feeds)
        original_values = _values(original_proto, {v for _, sub in pairs.values() for v in sub["feeds"]}, self.feeds)
        results: dict[str, tuple[str, list[float], list[float]]] = {}
        share = seconds / len(pairs)
        for op, (fused_sub, unfused_sub) in pairs.items():
            disabled = tuple(OrtSettings(disabled=(FUSED_OPS[op][2],)).optimizer_names()) if FUSED_OPS[op][2] else ()
            try:
                a = _micro_session(fused_proto, fused_sub, fused_values, disabled, threads)
                b = _micro_session(original_proto, unfused_sub, original_values, disabled, threads)
            except Exception as err:  # noqa: BLE001 - a subgraph that does not stand alone: no verdict
                self.notes.append(f"kernel {op}: not measured ({type(err).__name__})")
                continue
            shapes = " ".join("x".join(map(str, v.shape)) for v in a[1].values() if v.ndim)
            results[op] = (f"[{shapes}]", *_interleave(a, b, share, clock_for([threads])[1]))
        return results


def _originals(name: str, provenance: dict[str, list[str]], original: set[str]) -> list[str]:
    """The original nodes a fused node absorbed, through the fused nodes it absorbed in turn
    (SkipLayerNormalization absorbs the LayerNormalization level 1 made from the decomposed ops)."""
    found: list[str] = []
    stack, seen = [name], {name}
    while stack:
        for old in provenance.get(stack.pop(), []):
            if old in original:
                found.append(old)
            elif old not in seen:
                seen.add(old)
                stack.append(old)
    return list(dict.fromkeys(found))


def _subgraph(proto: onnx.ModelProto, nodes: list[onnx.NodeProto]) -> dict[str, Any]:
    """Nodes (with the Constant nodes feeding them), the initializers they read, the values to
    feed (runtime values entering them), and their outputs (values leaving them)."""
    graph = proto.graph
    producer = {o: n for n in graph.node for o in n.output if o}
    inits = {t.name for t in graph.initializer}
    chosen = list(nodes)
    for node in nodes:
        for name in node.input:
            src = producer.get(name)
            if src is not None and src.op_type == "Constant" and src not in chosen:
                chosen.insert(0, src)
    produced = {o for n in chosen for o in n.output if o}
    consumed = [i for n in chosen for i in n.input if i]
    ids = {id(n) for n in chosen}
    used_outside = {i for n in graph.node if id(n) not in ids for i in n.input} | {o.name for o in graph.output}
    outputs = [o for n in chosen for o in n.output if o and o in used_outside] or \
              [o for o in produced if o not in consumed]
    feeds = [v for v in dict.fromkeys(consumed) if v not in produced and v not in inits]
    return {"nodes": chosen, "inits": [v for v in dict.fromkeys(consumed) if v in inits and v not in produced],
            "feeds": feeds, "outputs": outputs}


def _values(proto: onnx.ModelProto, names: set[str], feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The runtime values ``names`` take when the model runs on ``feeds`` (exposed as extra outputs)."""
    graph_inputs = {i.name for i in proto.graph.input}
    values = {n: feeds[n] for n in names if n in graph_inputs and n in feeds}
    wanted = [n for n in names if n not in values]
    if not wanted:
        return values
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    existing = {o.name for o in copy.graph.output}
    copy.graph.output.extend(onnx.ValueInfoProto(name=n) for n in wanted if n not in existing)
    sess = tuned_session(copy.SerializeToString(), "off", (), 1)
    accepted = {i.name for i in sess.get_inputs()}
    names_out = [o.name for o in sess.get_outputs()]
    out = dict(zip(names_out, sess.run(None, {k: v for k, v in feeds.items() if k in accepted})))
    values.update({n: np.asarray(out[n]) for n in wanted if n in out})
    return values


def _micro_session(proto: onnx.ModelProto, sub: dict[str, Any], values: dict[str, np.ndarray],
                   disabled: tuple[str, ...], threads: int) -> tuple[Any, dict[str, np.ndarray]]:
    inits = {t.name: t for t in proto.graph.initializer}
    feeds = {n: values[n] for n in sub["feeds"]}
    inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
              for n, v in feeds.items()]
    graph = helper.make_graph(sub["nodes"], "kernel", inputs, [onnx.ValueInfoProto(name=o) for o in sub["outputs"]],
                              [inits[n] for n in sub["inits"]])
    model = helper.make_model(graph, opset_imports=list(proto.opset_import), ir_version=proto.ir_version)
    sess = tuned_session(model.SerializeToString(), "all", disabled, threads)
    for _ in range(WARMUP):
        sess.run(None, feeds)
    return sess, feeds


def _interleave(a: tuple[Any, dict], b: tuple[Any, dict], seconds: float,
                clock: Callable[[], float] = time.perf_counter) -> tuple[list[float], list[float]]:
    """Alternate runs of the two sessions until ``seconds`` of wall time (at least KERNEL_MIN_ROUNDS
    rounds), each run timed with ``clock``."""
    times: tuple[list[float], list[float]] = ([], [])
    end = time.perf_counter() + seconds
    for r in range(KERNEL_MAX_ROUNDS):
        if r >= KERNEL_MIN_ROUNDS and time.perf_counter() > end:
            break
        for index in ((0, 1) if r % 2 == 0 else (1, 0)):
            sess, feeds = (a, b)[index]
            start = clock()
            sess.run(None, feeds)
            times[index].append(clock() - start)
    return times


class Verifier:
    """tune's verifier: graphtool.verify.verification against the original, input sets found once and reused."""

    def __init__(self, timer: OrtTimer, feeds: dict[str, np.ndarray] | None, input_shapes: dict[str, list[int]],
                 input_values: dict[str, list[Any]], rtol: float, atol: float) -> None:
        self.timer, self.feeds, self.shapes, self.values = timer, feeds, input_shapes, input_values
        self.rtol, self.atol = rtol, atol
        self.input_sets: Any = None
        self.summaries: dict[RewriteSet, str] = {}

    def __call__(self, rewrite: RewriteSet) -> str | None:
        result = verify(self.timer.original, self.timer.model(rewrite), input_shapes=self.shapes, feeds=self.feeds,
                        input_values=self.values, rtol=self.rtol, atol=self.atol,
                        original_path=self.timer.original_path, input_sets=self.input_sets)
        self.input_sets = result.input_sets
        self.summaries[rewrite] = result.summary()
        return None if result.ok else result.summary()


def tune_file(model_path: str, output: str, original: Model | None = None, target: str = "ort",
              threads: int | None = None, budget: float = 300.0, feeds: dict[str, np.ndarray] | None = None,
              input_shapes: dict[str, list[int]] | None = None, input_values: dict[str, list[Any]] | None = None,
              rtol: float = RTOL, atol: float = ATOL, progress: Callable[[str], None] = lambda _s: None,
              prefill: int = PREFILL_TOKENS, past: int = PAST_TOKENS, pick: str = "decode",
              environment: bool = True) -> TuneRun:
    """Tune ``model_path`` on this machine; write the winner to ``output`` and its onnxruntime
    settings to ``output.session.json``. Times on ``feeds`` if given; else a model with a KV cache on
    a prefill of ``prefill`` tokens and a decode step over ``past`` cached ones (ranked by ``pick``),
    any other on the largest input set verification finds (which may be smaller than what the user
    runs: the report says so).

    With ``environment``, the process environment is decided first, on the original
    (graphtool.tune.environment): where huge pages for malloc are clearly faster, the search runs
    in a child process started with them (graphtool.tune.child), so the model is chosen where it
    will run. Decided after the search instead, the races ran in an environment whose sessions of
    one file sat 15-60 % apart and could not separate the candidates (bench/decoder_latency.py)."""
    from graphtool.optimize import require_schema_valid

    if pick not in PICKS:
        raise ValueError(f"pick must be one of {sorted(PICKS)}")
    started = time.perf_counter()
    original = original if original is not None else io.load(model_path)
    require_schema_valid(original)  # a broken op is named as such, before onnxruntime's load error
    shapes, values = dict(input_shapes or {}), dict(input_values or {})
    plan = plan_timing(original, model_path, feeds, shapes, values, prefill, past, pick)
    env: dict[str, str] = {}
    env_finding = None
    if environment:
        progress("trying huge pages for malloc on the original")
        env, env_finding = recommend(model_path, plan.steps or {"run": plan.timing},
                                     pick if plan.steps is not None else "run", budget * PROBE_SHARE,
                                     runs=FIRST_PROBE_RUNS,
                                     threads=threads if threads is not None else 0)
    request = SearchRequest(model_path, output, target, threads, budget - (time.perf_counter() - started), plan,
                            feeds, shapes, values, rtol, atol)
    if env:
        from graphtool.tune.child import search_in

        result, verification = search_in(env, search_and_write, request, progress)
    else:
        result, verification = search_and_write(request, progress, original)
    if env_finding:
        result.findings.append(env_finding + (" (the search ran in it)" if env else ""))
    steps = plan.steps
    decoder = None if steps is None else decoder_report(
        result, plan.prefill, plan.past, pick, {k: {n: list(v.shape) for n, v in f.items()} for k, f in steps.items()})
    settings = session_settings(result, output)
    if env:
        settings["environment"] = env
    write_settings(output, settings)
    return TuneRun(model_path, output, target, budget, result, {k: list(v.shape) for k, v in plan.timing.items()},
                   plan.how, verification, settings, decoder)


@dataclass
class TimingPlan:
    """What the search times on: ``timing`` (the ranked step's feeds) and, for a KV-cache model,
    every step's feeds, how they were found and what was halved."""

    timing: dict[str, np.ndarray]
    how: str
    steps: dict[str, dict[str, np.ndarray]] | None = None
    pick: str = "decode"
    prefill: int = PREFILL_TOKENS
    past: int = PAST_TOKENS
    smaller: list[str] = field(default_factory=list)


def plan_timing(original: Model, model_path: str, feeds: dict[str, np.ndarray] | None, shapes: dict[str, list[int]],
                values: dict[str, list[Any]], prefill: int, past: int, pick: str) -> TimingPlan:
    if feeds is not None:
        return TimingPlan(feeds, "given", pick=pick, prefill=prefill, past=past)
    found_steps = find_step_inputs(original, model_path, prefill, past, shapes, values)
    if found_steps is not None:
        steps = {name: s.feeds for name, s in found_steps.steps.items()}
        how = (f"{found_steps.how}: " + "; ".join(s.label.split(", ", 1)[1] for s in found_steps.steps.values())
               + "; --prefill/--past set the step sizes")
        return TimingPlan(steps[pick], how, steps, pick, found_steps.sizes.get("prefill", (prefill, 0))[0],
                          found_steps.sizes.get("decode", (1, past))[1], list(found_steps.smaller))
    found = find_inputs(original, model_path, shapes, values)
    # timed at a size people run where the model accepted one (else the last set found)
    timing = next((s.feeds for s in found.sets if "realistic size" in s.label), found.sets[-1].feeds)
    return TimingPlan(timing, f"{found.how}; give --inputs or --input-shape for the shapes you run",
                      pick=pick, prefill=prefill, past=past)


@dataclass
class SearchRequest:
    """Everything the search needs, picklable: it may run in a child process (graphtool.tune.child)."""

    model_path: str
    output: str
    target: str
    threads: int | None
    budget: float
    plan: TimingPlan
    feeds: dict[str, np.ndarray] | None
    shapes: dict[str, list[int]]
    values: dict[str, list[Any]]
    rtol: float
    atol: float


def search_and_write(request: SearchRequest, progress: Callable[[str], None],
                     original: Model | None = None) -> tuple[TuneResult, str]:
    """Run the search in this process and write the winner to ``request.output``; (result, its verification)."""
    r, plan = request, request.plan
    original = original if original is not None else io.load(r.model_path)
    with tempfile.TemporaryDirectory(prefix="graphtool-tune-") as workdir:
        timer = OrtTimer(original, r.model_path, plan.timing, r.target, workdir, r.shapes, plan.steps, plan.pick)
        verifier = Verifier(timer, r.feeds, r.shapes, r.values, r.rtol, r.atol)
        result = tune(timer, verifier, time.perf_counter, budget=r.budget, threads=r.threads,
                      cores=os.cpu_count() or 1, progress=progress)
        timer.close()
        result.findings += timer.notes
        result.findings += plan.smaller
        if timer.clocks:
            result.findings.append("timed with " + " and ".join(sorted(timer.clocks)) + " around session.run"
                                   + (" (CPU time where every candidate of a batch runs on one thread: other "
                                      "processes' load stays out of it)" if "CPU time" in timer.clocks else ""))
        if result.winner.rewrite.level == 0:
            verification = "the original (no rewrite)"
        else:
            verification = verifier.summaries.get(result.winner.rewrite, "verified")
        io.save(timer.model(result.winner.rewrite), r.output)
    return result, verification
