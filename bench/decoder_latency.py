"""Decoder latency: graphtool tune's result against the original at every onnxruntime level and
the peers' outputs, on a prefill and a decode step (issue 33, must-show 3).

    python bench/decoder_latency.py [--folder /work/cache/decoder_latency] [--models llama_torchscript,...]
        [--budget 240] [--rounds 40] [--json OUT]

Models: bench/decoder_latency_models.py's Llama, Qwen2, Qwen3 and Mistral with grouped KV heads
(random weights, hidden 512, 6 layers; both torch exporters), under /work/cache, never committed.
Inputs: graphtool.verify.find_step_inputs, the builder ``tune`` times on — a prefill of 64 tokens
over an empty cache and a decode step of one token over 64 cached ones, batch 1.

Candidates, each in its own session at one intra-op thread:

* the original at ORT basic, extended and all;
* onnxruntime's transformers optimizer output (``optimize_model`` after ORT basic, as
  bench/peers.py runs it) with model_type gpt2 — it has no llama/mistral/qwen2 type — and qwen3
  for Qwen3, at ORT all;
* onnxscript's ``optimize_for_ort`` output at ORT all;
* graphtool ``--level 2 --target ort`` at ORT all;
* ``graphtool tune --threads 1 --prefill 64 --past 64`` (ranked by the decode step): its model
  with the settings it wrote to OUT.session.json; where tune recommends a process environment
  (``environment`` in session.json: huge pages for malloc), that is tune's result, timed in a
  child process started with it (``ChildSession``, CPU time measured there), and the model alone
  in this process is shown beside it.

Every candidate's outputs are checked against the original's on both steps before timing (a
candidate that differs is shown and never counted as the fastest other). Then ONE interleaved run:
each round runs every candidate (order rotated round by round) on the prefill and then the decode
step, each ``session.run`` timed in CPU time (``time.process_time``: one thread, so other
processes' load stays out). Each candidate runs in ``--sessions`` sessions (default 2), pooled: a
session keeps an offset of its own for its life that rounds cannot average out. A row is one model and one step: medians, each candidate's ratio to
the fastest other candidate, and the paired-bootstrap confidence (graphtool.tune.confidence over
the rounds) that tune's result is faster than it. Where tune's result is slower than the fastest
other, both are profiled (``SessionOptions.enable_profiling``) on that step and the row names the
op types whose kernels account for the gap, with their measured milliseconds per run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict

import numpy as np
import onnxruntime as ort

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peers import measure  # noqa: E402

from graphtool import io  # noqa: E402
from graphtool.tune import as_shell, confidence  # noqa: E402
from graphtool.verify import find_step_inputs  # noqa: E402

LEVELS = {"basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
          "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
          "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL}
TUNED = "graphtool tune"
TOLERANCE = 1e-3


def session(path: str, level: str, disabled: list[str] | None = None, profile: str | None = None) -> ort.InferenceSession:
    opts = ort.SessionOptions()
    opts.graph_optimization_level = LEVELS[level]
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    if profile:
        opts.enable_profiling = True
        opts.profile_file_prefix = profile
    kwargs = {"disabled_optimizers": disabled} if disabled else {}
    return ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"], **kwargs)


class ChildSession:
    """A candidate timed in a process of its own started with ``env`` (tune's recommended
    environment acts only when a process starts): each ``time(step)`` runs that step there and
    returns the CPU seconds measured there, around ``session.run`` as for every other candidate."""

    def __init__(self, path: str, level: str, disabled: list[str] | None, feeds: dict[str, dict[str, np.ndarray]],
                 env: dict[str, str], work: str) -> None:
        self.feeds_path = os.path.join(work, f"child_feeds_{os.getpid()}.npz")
        np.savez(self.feeds_path, **{f"{k}/{n}": v for k, f in feeds.items() for n, v in f.items()})
        cmd = [sys.executable, os.path.abspath(__file__), "--child", path, level, ",".join(disabled or []),
               self.feeds_path]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     env={**os.environ, **env})
        assert self.proc.stdout.readline().strip() == "ready"

    def time(self, step: str) -> float:
        self.proc.stdin.write(step + "\n")
        self.proc.stdin.flush()
        return float(self.proc.stdout.readline())

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def child_main(path: str, level: str, disabled: str, feeds_path: str) -> None:
    """The ChildSession's process: open the session, warm every step, then time the steps asked for."""
    data = np.load(feeds_path)
    steps: dict[str, dict[str, np.ndarray]] = defaultdict(dict)
    for key in data.files:
        step, name = key.split("/", 1)
        steps[step][name] = data[key]
    sess = session(path, level, [d for d in disabled.split(",") if d] or None)
    names = {i.name for i in sess.get_inputs()}
    steps = {k: {n: v for n, v in f.items() if n in names} for k, f in steps.items()}
    for _ in range(2):
        for f in steps.values():
            sess.run(None, f)
    print("ready", flush=True)
    for line in sys.stdin:
        f = steps[line.strip()]
        start = time.process_time()
        sess.run(None, f)
        print(time.process_time() - start, flush=True)


def run(sess: ort.InferenceSession, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    names = {i.name for i in sess.get_inputs()}
    return sess.run(None, {k: v for k, v in feeds.items() if k in names})


def diff(want: list[np.ndarray], got: list[np.ndarray]) -> float:
    return max(float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)))) / max(1.0, float(np.max(np.abs(a))))
               if np.size(a) else 0.0 for a, b in zip(want, got))


def tune(path: str, out: str, budget: float, prefill: int, past: int) -> dict:
    """``graphtool tune`` as a user runs it (a process of its own), one thread; its --json report."""
    cmd = [sys.executable, "-m", "graphtool", "tune", path, "-o", out, "--threads", "1", "--budget", str(budget),
           "--prefill", str(prefill), "--past", str(past), "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"tune failed: {proc.stderr.strip()[-300:]}")
    return json.loads(proc.stdout)


def build(name: str, path: str, family: str, work: str, budget: float, prefill: int, past: int,
          reuse: bool = False) -> tuple[list, dict]:
    """(candidates as (label, path, level, disabled), notes) for one model; ``reuse``: the files an
    earlier run left in ``work`` (the peers' outputs, tune's model, settings and report) are taken."""
    cands = [(f"original ORT {lvl}", path, lvl, None) for lvl in ("basic", "extended", "all")]
    notes: dict = {}
    peers = [("ort-transformers:gpt2", "ORT transformers (gpt2)")]
    if family == "qwen3":
        peers.append(("ort-transformers:qwen3", "ORT transformers (qwen3)"))
    peers += [("onnxscript-ort", "onnxscript optimize_for_ort"), ("graphtool", "graphtool L2 ort")]
    for tool, label in peers:
        out = os.path.join(work, f"{name}.{tool.replace(':', '_')}.onnx")
        if reuse and os.path.exists(out):
            import onnx
            got = {"nodes": len(onnx.load(out, load_external_data=False).graph.node), "seconds": float("nan")}
        else:
            got = measure(tool, path, out, level=2, target="ort", timeout=1800)
        if "error" in got:
            notes[label] = f"error: {got['error']}"
            continue
        notes[label] = f"{got['nodes']} nodes, {got['seconds']:.1f} s"
        cands.append((label + " @ ORT all", out, "all", None))
    out = os.path.join(work, f"{name}.tuned.onnx")
    start = time.perf_counter()
    if reuse and os.path.exists(out + ".tune.json"):
        report = json.load(open(out + ".tune.json"))
        start -= report["seconds"]
    else:
        report = tune(path, out, budget, prefill, past)
        with open(out + ".tune.json", "w") as handle:  # tune's whole report, for the reader of the table
            json.dump(report, handle, indent=1)
    settings = json.load(open(out + ".session.json"))
    notes[TUNED] = {"winner": report["winner"]["label"], "seconds": round(time.perf_counter() - start, 1),
                    "verification": report["verification"], "decoder": report["decoder"],
                    "findings": report["findings"][:4]}
    cands.append((f"{TUNED} ({report['winner']['label']})", out, settings["graph_optimization_level"],
                  settings.get("disabled_optimizers") or None))
    if settings.get("environment"):  # what tune hands the user includes the process environment it measured
        env = as_shell(settings["environment"])
        notes[TUNED]["environment"] = settings["environment"]
        cands.append((f"{TUNED} + {env}", out, settings["graph_optimization_level"],
                      settings.get("disabled_optimizers") or None))
    return cands, notes


def _kernel_ms(trace_path: str) -> dict[str, float]:
    """Op type → kernel milliseconds per run, from an onnxruntime profile: each node's median over
    the runs (the profiler's durations are wall time: a kernel the scheduler preempted once would
    otherwise carry the other process's time), summed by op type."""
    per_node: dict[tuple[str, str], list[float]] = defaultdict(list)
    for ev in json.load(open(trace_path)):
        if ev.get("cat") == "Node" and ev.get("name", "").endswith("_kernel_time"):
            per_node[(ev["args"].get("op_name", "?"), ev["name"])].append(ev["dur"] / 1000)
    by_op: dict[str, float] = defaultdict(float)
    for (op, _name), durs in per_node.items():
        by_op[op] += statistics.median(durs)
    return dict(by_op)


def blame(tuned: tuple, other: tuple, feeds: dict, work: str, runs: int = 20) -> str:
    """The op types whose kernel time makes ``tuned`` slower than ``other`` on ``feeds``, measured by
    onnxruntime's profiler in two sessions run alternately (its durations are wall time: the
    machine's load falls on both alike)."""
    a = session(tuned[1], tuned[2], tuned[3], profile=os.path.join(work, "profile_tuned"))
    b = session(other[1], other[2], other[3], profile=os.path.join(work, "profile_other"))
    for _ in range(runs):
        run(a, feeds)
        run(b, feeds)
    mine, theirs = _kernel_ms(a.end_profiling()), _kernel_ms(b.end_profiling())
    gaps = sorted(((mine.get(op, 0.0) - theirs.get(op, 0.0), op) for op in set(mine) | set(theirs)), reverse=True)
    worse = [f"{op} {mine.get(op, 0):.2f} vs {theirs.get(op, 0):.2f} ms" for gap, op in gaps[:3] if gap > 0.005]
    total = sum(mine.values()) - sum(theirs.values())
    return (f"profiled kernels (per-node medians) {sum(mine.values()):.2f} vs {sum(theirs.values()):.2f} ms/run "
            f"({total:+.2f}); slower: " + ("; ".join(worse) if worse else "no op type"))


def bench_model(name: str, entry: dict, folder: str, args: argparse.Namespace, work: str) -> dict:
    path = os.path.join(folder, entry["file"])
    steps = find_step_inputs(io.load(path), path, args.prefill, args.past)
    assert steps is not None, f"{name}: no KV cache found"
    feeds = {k: s.feeds for k, s in steps.steps.items()}
    cands, notes = build(name, path, entry["family"], work, args.budget, args.prefill, args.past, args.reuse)
    print(f"{name}: built {len(cands)} candidates; tune chose {notes[TUNED]['winner']}", file=sys.stderr, flush=True)
    sessions, checks = [], {}
    ref = session(path, "basic")
    want = {k: run(ref, f) for k, f in feeds.items()}
    del ref
    # each copy opens the candidates in the other order (forward, reversed, ...): a session opened
    # early measured slower than one opened late on this machine, so every candidate gets both ends
    for copy in range(args.sessions):
        for cand in (cands if copy % 2 == 0 else cands[::-1]):
            if cand[0].startswith(TUNED + " + "):  # in the environment tune recommends: a child process
                sess = ChildSession(cand[1], cand[2], cand[3], feeds, notes[TUNED]["environment"], work)
                checks[cand[0]] = checks.get(next(c[0] for c in cands if c[0].startswith(TUNED + " (")), "ok")
                sessions.append((cand, sess, copy))
                continue
            sess = session(cand[1], cand[2], cand[3])
            if copy == 0:
                worst = max(diff(want[k], run(sess, f)) for k, f in feeds.items())
                checks[cand[0]] = "ok" if worst <= TOLERANCE else f"DIFFERS {worst:.1e}"
            for _ in range(2):
                for f in feeds.values():
                    run(sess, f)
            sessions.append((cand, sess, copy))
    times: dict[str, dict[str, list[float]]] = {c[0]: {k: [] for k in feeds} for c in cands}
    per_session: dict[tuple[str, int], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in range(args.rounds):
        order = sessions[r % len(sessions):] + sessions[:r % len(sessions)]
        for cand, sess, copy in order:
            for step, f in feeds.items():
                if isinstance(sess, ChildSession):
                    took = sess.time(step)
                else:
                    names = {i.name for i in sess.get_inputs()}
                    one = {k: v for k, v in f.items() if k in names}
                    start = time.process_time()
                    sess.run(None, one)
                    took = time.process_time() - start
                times[cand[0]][step].append(took)
                per_session[(cand[0], copy)][step].append(took)
    for _, sess, _ in sessions:
        if isinstance(sess, ChildSession):
            sess.close()
    del sessions
    rows = []
    # tune's result: with the environment it recommends where it recommends one (its model alone is shown too)
    tuned = next((c for c in cands if c[0].startswith(TUNED + " + ")), None) or \
        next(c for c in cands if c[0].startswith(TUNED))
    for step in feeds:
        med = {c[0]: statistics.median(times[c[0]][step]) for c in cands}
        # a candidate that is tune's result itself (the same graph at the same settings: tune chose
        # graphtool's level 2 at ORT all) is not an "other": comparing the two times one thing twice
        same = [c for c in cands if c is not tuned and (c[0].startswith(TUNED) or _same_candidate(c, tuned))]
        others = [c for c in cands if c is not tuned and c not in same and checks[c[0]] == "ok"]
        best = min(others, key=lambda c: med[c[0]])
        ratio = med[tuned[0]] / med[best[0]]
        conf = confidence(times[tuned[0]][step], times[best[0]][step])
        # max / min - 1 of one candidate's session medians: how far sessions of one file and settings sit apart
        gaps = {c[0]: (lambda ms: max(ms) / min(ms) - 1)([statistics.median(per_session[(c[0], i)][step])
                                                          for i in range(args.sessions)]) for c in cands}
        row = {"model": name, "step": step, "shapes": steps.steps[step].shapes, "ms": {k: v * 1000 for k, v in med.items()},
               "session_gap": gaps,
               "fastest_other": best[0], "tuned": tuned[0], "ratio": ratio, "confidence_tuned_faster": conf,
               "holds": ratio <= 1.0, "same_as_tuned": [c[0] for c in same]}
        if ratio > 1.0:
            row["kernel"] = blame(tuned, best, feeds[step], work, runs=args.profile_runs)
        rows.append(row)
    return {"model": name, "candidates": [c[0] for c in cands], "checks": checks, "notes": notes, "rows": rows,
            "files": {c[0]: list(c[1:]) for c in cands}}


def _same_candidate(a: tuple, b: tuple) -> bool:
    """Two candidates are one: the same nodes (ops, wiring, attributes) at the same onnxruntime
    level with the same optimizers disabled."""
    import onnx

    if (a[2], a[3] or None) != (b[2], b[3] or None):
        return False
    graphs = [onnx.load(path, load_external_data=False).graph for path in (a[1], b[1])]
    return [n.SerializeToString() for n in graphs[0].node] == [n.SerializeToString() for n in graphs[1].node]


def reblame(results: list[dict], args: argparse.Namespace, work: str) -> None:
    """Profile again the rows where tune's result lost (``--reblame``: a finished --json run)."""
    manifest = json.load(open(os.path.join(args.folder, "manifest.json")))["models"]
    for res in results:
        path = os.path.join(args.folder, manifest[res["model"]]["file"])
        steps = find_step_inputs(io.load(path), path, args.prefill, args.past)
        files = res["files"]
        for row in res["rows"]:
            if not row["holds"]:
                tuned = (row["tuned"], *files[row["tuned"]])
                best = (row["fastest_other"], *files[row["fastest_other"]])
                row["kernel"] = blame(tuned, best, steps.steps[row["step"]].feeds, work, runs=args.profile_runs)


def short(label: str) -> str:
    return label.replace(" @ ORT all", "").replace("onnxscript optimize_for_ort", "onnxscript ort")


def table(results: list[dict]) -> str:
    lines = []
    for res in results:
        cands = res["candidates"]
        lines.append(f"### {res['model']}")
        lines.append("")
        lines.append("| step | " + " | ".join(short(c) for c in cands) + " | fastest other | tuned / fastest other | conf. tuned faster | holds |")
        lines.append("|" + "---|" * (len(cands) + 5))
        for row in res["rows"]:
            best = row["ms"][row["fastest_other"]]
            cells = [f"{row['ms'][c]:.2f} ({row['ms'][c] / best:.2f}x)" + ("" if res["checks"][c] == "ok" else " ✗")
                     for c in cands]
            verdict = "yes" if row["holds"] else f"no: {row.get('kernel', '')}"
            if row.get("same_as_tuned"):
                verdict += " (not counted as others: " + ", ".join(short(c) for c in row["same_as_tuned"]) + \
                    ", tune's own model or the same graph and settings)"
            lines.append(f"| {row['step']} | " + " | ".join(cells) + f" | {short(row['fastest_other'])} | "
                         f"{row['ratio']:.3f} | {row['confidence_tuned_faster']:.0%} | {verdict} |")
            if "session_gap" in row:
                lines.append(f"| {row['step']}: sessions apart | " + " | ".join(
                    f"{row['session_gap'][c]:.0%}" for c in cands) + " | | | | |")
        lines.append("")
        lines.append("outputs: " + ", ".join(f"{short(k)} {v}" for k, v in res["checks"].items()))
        lines.append(f"tune: {res['notes'][TUNED]['winner']} in {res['notes'][TUNED]['seconds']} s; "
                     f"verification: {res['notes'][TUNED]['verification']}")
        lines.append("")
    rows = [r for res in results for r in res["rows"]]
    lines.append(f"tuned ≤ the fastest other: {sum(r['holds'] for r in rows)}/{len(rows)} rows "
                 "(ms: CPU-time median per session.run at 1 thread, over every session of the candidate; (x): ratio to "
                 "the fastest other candidate; conf. tuned faster: paired bootstrap over the rounds, blind to session "
                 "offsets; sessions apart: max / min - 1 of the candidate's session medians)")
    return "\n".join(lines)


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        child_main(*sys.argv[2:6])
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--folder", default="/work/cache/decoder_latency")
    ap.add_argument("--models", default="llama_torchscript,qwen3_torchscript,mistral_torchscript")
    ap.add_argument("--budget", type=float, default=600.0)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--sessions", type=int, default=2, help="sessions per candidate, pooled: a session keeps "
                    "an offset of its own for its life (graphtool.tune.race.confirm), rounds cannot average it out")
    ap.add_argument("--prefill", type=int, default=64)
    ap.add_argument("--past", type=int, default=64)
    ap.add_argument("--json")
    ap.add_argument("--reblame", action="store_true", help="profile again the lost rows of the --json run")
    ap.add_argument("--profile-runs", type=int, default=30)
    ap.add_argument("--work", help="keep the candidates' files here (default: a temporary folder)")
    ap.add_argument("--reuse", action="store_true", help="take the peers' outputs and tune's result an earlier "
                    "run left in --work (time again without building again)")
    args = ap.parse_args()
    if args.reblame:
        results = json.load(open(args.json))
        reblame(results, args, args.work or tempfile.mkdtemp(prefix="decoder-latency-"))
        json.dump(results, open(args.json, "w"), indent=1)
        print(table(results))
        return
    manifest = json.load(open(os.path.join(args.folder, "manifest.json")))["models"]
    results = []
    with tempfile.TemporaryDirectory(prefix="decoder-latency-") as tmp:
        work = args.work or tmp
        os.makedirs(work, exist_ok=True)
        for name in args.models.split(","):
            entry = manifest.get(name)
            if not entry or not entry.get("ok"):
                print(f"{name}: not in the manifest or its export failed", file=sys.stderr)
                continue
            results.append(bench_model(name, entry, args.folder, args, work))
            if args.json:
                with open(args.json, "w") as handle:
                    json.dump(results, handle, indent=1)
            print(table(results[-1:]), flush=True)
    print(table(results))


if __name__ == "__main__":
    main()
