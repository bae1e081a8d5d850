"""`make bench`: graphtool against onnxsim, onnxslim, onnxoptimizer and ORT on generated models.

    python bench/run_all.py                    # everything (generates missing models first)
    python bench/run_all.py --quick            # light/ models + the tiny torch fixtures, no generation
    python bench/run_all.py --only torch,g100k --tools graphtool-l1,onnxslim
    python bench/run_all.py --write            # also (re)write the "## Peers (make bench)" section
                                                 of bench/results.md (a full run always does)

Model groups (``--only`` takes group names, model names or fnmatch patterns):

* ``light``  -- the onnx wheel's ``backend/test/data/light`` models (seeded random inputs);
* ``torch``  -- ResNet-18, MobileNetV2, a UNet, BERT (4 layers), GPT-2 (4 and 12 layers), each
  exported by TorchScript (``_ts``, no constant folding) and dynamo (``_dynamo``) with
  ``bench/torch_models.py`` in the torch venv (``$TORCH_PYTHON`` or /work/torchenv/bin/python;
  without one the group is skipped with a message) -- fed the export's own sample inputs;
* ``scale``  -- 100k- and 200k-node graphs from ``bench/gen_models.py`` (``big_graph``);
* ``big``    -- a > 4 GB external-data transformer from ``bench/gen_models.py``
  (``external_transformer``, 6 layers, largest tensor 256 MB);
* ``tiny``   -- the committed ``fixtures/torch`` exports (only with ``--quick`` or ``--only``).

Every (model, tool) pair runs in its own process through ``bench/peers.measure`` (nodes after,
seconds for load -> optimize -> save, CPU seconds, peak RSS of that process), with a per-model
timeout and an address-space cap of 12 GB so no peer can take the machine down; a run under 2 s is
repeated (``--repeat``, default 3) and the fastest kept, since short runs are noise-dominated on a
shared machine. graphtool runs twice: level 1
(compared with ORT basic, onnxsim, onnxslim, onnxoptimizer) and level 2 ``--target ort``
(compared with ORT extended). "max |diff|" runs the original and each result in onnxruntime with
optimizations off on the same inputs, in a separate process per model. Times are also given as
a ratio to the fastest peer on the same model in the same run, because the machine is shared
and absolute seconds drift between runs.

The bar: graphtool's node count <= the best peer's, and graphtool's wall time <= onnxslim's.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import fnmatch
import glob
import json
import os
import platform
import subprocess
import sys
import time
from importlib import metadata

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, REPO)

from peers import measure  # noqa: E402

MODELS_DIR = os.path.join(HERE, "out", "models")
RUNS_DIR = os.path.join(HERE, "out", "runs")
RESULTS = os.path.join(HERE, "results.md")
SECTION = "## Peers (make bench)"
MEM_LIMIT_MB = 12 * 1024
TORCH_MODELS = ("resnet18", "mobilenetv2", "unet", "bert4", "gpt2_4", "gpt2_12")
SCALE_NODES = {"g100k": 100_000, "g200k": 200_000}
REPEAT_BELOW_S = 2.0
BIG_LAYERS = 6  # 6 x 768 MB of float32 weights = 4.8 GB external data


@dataclasses.dataclass(frozen=True)
class Tool:
    slug: str  # column / file name
    peer: str  # bench/peers.py tool name
    level: int = 1
    target: str = "onnx"

    @property
    def is_graphtool(self) -> bool:
        return self.peer == "graphtool"


TOOLS = (
    Tool("graphtool-l1", "graphtool", 1),
    Tool("graphtool-l2", "graphtool", 2, "ort"),
    Tool("ort-basic", "ort-basic"),
    Tool("ort-extended", "ort-extended"),
    Tool("onnxsim", "onnxsim"),
    Tool("onnxslim", "onnxslim"),
    Tool("onnxoptimizer", "onnxoptimizer"),
)
L1_PEERS = ("ort-basic", "onnxsim", "onnxslim", "onnxoptimizer")
ALL_PEERS = ("ort-basic", "ort-extended", "onnxsim", "onnxslim", "onnxoptimizer")


@dataclasses.dataclass
class Bench:
    name: str
    group: str
    path: str
    inputs: str | None  # sample inputs .npz; None: seeded random inputs
    timeout: float  # seconds per tool
    verify_timeout: float = 300
    cleanup: bool = False  # delete the tools' outputs after verification (multi-GB results)
    skip_after_timeout: str | None = None  # a smaller model of the same family: a tool that timed out there is not run


# --------------------------------------------------------------------------- model sets


def light_models() -> list[Bench]:
    import onnx

    light = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
    return [Bench(os.path.basename(p)[:-5], "light", p, None, timeout=300)
            for p in sorted(glob.glob(os.path.join(light, "*.onnx")))]


def _with_inputs(path: str, group: str, timeout: float = 300) -> Bench:
    npz = path[:-5] + ".inputs.npz"
    return Bench(os.path.basename(path)[:-5], group, path, npz if os.path.exists(npz) else None, timeout)


def tiny_models() -> list[Bench]:
    return [_with_inputs(p, "tiny") for p in sorted(glob.glob(os.path.join(REPO, "fixtures", "torch", "*.onnx")))]


def torch_python() -> str | None:
    candidate = os.environ.get("TORCH_PYTHON") or "/work/torchenv/bin/python"
    return candidate if os.path.exists(candidate) else None


def torch_models(generate: bool) -> list[Bench]:
    """The torch set; missing exports are made by bench/torch_models.py in the torch venv."""
    stems = [f"{m}_{e}" for m in TORCH_MODELS for e in ("ts", "dynamo")]
    missing = sorted({s.rsplit("_", 1)[0] for s in stems if not os.path.exists(os.path.join(MODELS_DIR, s + ".onnx"))})
    if missing and generate:
        python = torch_python()
        if python is None:
            print("torch set skipped: no torch venv (set TORCH_PYTHON or create /work/torchenv with torch, "
                  "onnx, onnxscript, onnxruntime); graphtool itself never needs torch", file=sys.stderr)
            return []
        print(f"exporting torch models {','.join(missing)} with {python} ...", file=sys.stderr, flush=True)
        proc = subprocess.run([python, os.path.join(HERE, "torch_models.py"), "--out", MODELS_DIR,
                               "--only", ",".join(missing)], capture_output=True, text=True, timeout=1800)
        for line in proc.stdout.splitlines():
            if "exported in" in line:
                print("  " + line, file=sys.stderr)
        if proc.returncode != 0:
            print(f"torch export failed: {(proc.stderr.strip().splitlines() or ['?'])[-1]}", file=sys.stderr)
    return [_with_inputs(os.path.join(MODELS_DIR, s + ".onnx"), "torch")
            for s in stems if os.path.exists(os.path.join(MODELS_DIR, s + ".onnx"))]


def _gen(args: list[str]) -> None:
    subprocess.run([sys.executable, os.path.join(HERE, "gen_models.py"), *args], check=True)


def scale_models(generate: bool) -> list[Bench]:
    """bench/gen_models.py's big_graph at 100k and 200k nodes. Peers that time out at 100k are not
    run at 200k (they would only burn the timeout again)."""
    benches = []
    for name, nodes in SCALE_NODES.items():
        path = os.path.join(MODELS_DIR, f"{name}.onnx")
        if not os.path.exists(path) and generate:
            print(f"generating {name} ({nodes} nodes) ...", file=sys.stderr, flush=True)
            _gen(["graph", str(nodes), path])
        if os.path.exists(path):
            benches.append(Bench(name, "scale", path, None, timeout=150 if nodes <= 100_000 else 300,
                                 verify_timeout=600, skip_after_timeout="g100k" if name != "g100k" else None))
    return benches


def big_models(generate: bool) -> list[Bench]:
    path = os.path.join(MODELS_DIR, "ext5g", "model.onnx")
    if not (os.path.exists(path) and os.path.exists(path + ".data")) and generate:
        print(f"generating the {BIG_LAYERS}-layer external-data transformer (~4.8 GB) ...", file=sys.stderr, flush=True)
        _gen(["external", path, "--layers", str(BIG_LAYERS)])
    if not os.path.exists(path):
        return []
    return [Bench("ext5g", "big", path, None, timeout=420, verify_timeout=900, cleanup=True)]


def select(args: argparse.Namespace) -> list[Bench]:
    patterns = args.only.split(",") if args.only else None
    groups = ["light", "tiny"] if args.quick else ["light", "torch", "scale", "big"]
    if patterns:  # an explicit --only may name any group, including tiny
        groups = ["light", "tiny", "torch", "scale", "big"]

    def wanted_group(group: str, names: list[str]) -> bool:
        return patterns is None or group in patterns or any(fnmatch.fnmatch(n, p) or n == p for n in names for p in patterns)

    makers = {"light": lambda g: light_models(), "tiny": lambda g: tiny_models(), "torch": torch_models,
              "scale": scale_models, "big": big_models}
    candidate_names = {"light": None, "tiny": None, "torch": [f"{m}_{e}" for m in TORCH_MODELS for e in ("ts", "dynamo")],
                       "scale": list(SCALE_NODES), "big": ["ext5g"]}
    benches: list[Bench] = []
    for group in groups:
        names = candidate_names[group]
        if names is not None and not wanted_group(group, names):
            continue  # do not generate what was not asked for
        for bench in makers[group](not args.no_generate):
            if patterns is None or group in patterns or any(fnmatch.fnmatch(bench.name, p) for p in patterns):
                benches.append(bench)
    return benches


# --------------------------------------------------------------------------- measuring


def _op_histogram(path: str) -> collections.Counter:
    import onnx

    hist: collections.Counter = collections.Counter()

    def walk(graph) -> None:
        for node in graph.node:
            hist[node.op_type] += 1
            for attr in node.attribute:
                for sub in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)):
                    walk(sub)

    walk(onnx.load(path, load_external_data=False).graph)
    return hist


def _warm(path: str) -> None:
    """Read the model (and its external data) once so every tool starts from the same page cache:
    otherwise the first tool on a multi-GB model pays the disk read for everyone after it."""
    for p in (path, *glob.glob(os.path.join(os.path.dirname(path), "*.data"))):
        with open(p, "rb") as handle:
            while handle.read(16 << 20):
                pass


def _remove(path: str) -> None:
    for p in (path, path + ".data"):
        if os.path.exists(p):
            os.remove(p)


def _reference(src: str, inputs: str | None, ref_path: str) -> tuple[dict, dict]:
    """(feeds, outputs by name) of ``src`` under ORT with optimizations off, cached in ``ref_path``
    so a multi-GB original runs once even when its results are checked one at a time."""
    import gc
    import pickle

    import numpy as np

    from graphtool.runtime import make_session, random_inputs

    if os.path.exists(ref_path):
        with open(ref_path, "rb") as handle:
            return pickle.load(handle)
    sess = make_session(src)
    feeds = dict(np.load(inputs)) if inputs else random_inputs(sess, 0)
    names = [o.name for o in sess.get_outputs()]
    ref = dict(zip(names, sess.run(None, {i.name: feeds[i.name] for i in sess.get_inputs()})))
    del sess
    gc.collect()
    with open(ref_path, "wb") as handle:
        pickle.dump((feeds, ref), handle)
    return feeds, ref


def verify_child(src: str, inputs: str | None, ref_path: str, outs: dict[str, str]) -> dict[str, dict]:
    """Run in a child: each result's outputs against the reference (ORT, optimizations off)."""
    import gc

    from graphtool.runtime import make_session
    from graphtool.verify import compare_arrays

    feeds, ref = _reference(src, inputs, ref_path)
    result: dict[str, dict] = {}
    for slug, out in outs.items():
        try:
            sess = make_session(out)
            got_names = [o.name for o in sess.get_outputs()]
            extra = [i.name for i in sess.get_inputs() if i.name not in feeds]
            if extra:
                result[slug] = {"error": f"✗ result needs new input(s) {', '.join(extra[:2])}"}
                continue
            got = sess.run(None, {i.name: feeds[i.name] for i in sess.get_inputs()})
            del sess
            pairs = ([(ref[n], g) for n, g in zip(got_names, got)] if set(got_names) == set(ref)
                     else list(zip(ref.values(), got)))
            diffs = [compare_arrays("o", a, b) for a, b in pairs]
            result[slug] = {"max_abs": max(d.max_abs for d in diffs),
                            "ok": all(d.ok for d in diffs) and len(got) == len(ref)}
        except Exception as err:  # a result ORT cannot load or run is a finding, not a crash
            result[slug] = {"error": f"{type(err).__name__}: {str(err).splitlines()[0][:100] if str(err) else ''}"}
        gc.collect()
    return result


def _reference_path(bench: Bench) -> str:
    return os.path.join(RUNS_DIR, f"{bench.name}.reference.pkl")


def verify(bench: Bench, outs: dict[str, str]) -> dict[str, dict]:
    if not outs:
        return {}
    spec = json.dumps({"src": bench.path, "inputs": bench.inputs, "ref": _reference_path(bench), "outs": outs})

    def cap() -> None:
        import resource

        limit = MEM_LIMIT_MB << 20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    try:
        proc = subprocess.run([sys.executable, __file__, "--verify-child", spec], capture_output=True, text=True,
                              timeout=bench.verify_timeout, preexec_fn=cap, env={**os.environ, "OMP_NUM_THREADS": "1"})
    except subprocess.TimeoutExpired:
        return {slug: {"error": f"n/a (verification > {bench.verify_timeout:.0f}s)"} for slug in outs}
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["failed"])[-1][:100]
        return {slug: {"error": f"n/a (verification failed: {tail})"} for slug in outs}
    return json.loads(lines[-1])


def run_bench(bench: Bench, tools: tuple[Tool, ...], timed_out: dict[str, set[str]], repeat: int = 1) -> dict:
    """Measure every tool on one model, then check the results' outputs. A ``cleanup`` model's
    results are checked and deleted one by one, so at most one multi-GB result is on disk."""
    os.makedirs(RUNS_DIR, exist_ok=True)
    row: dict = {"bench": bench, "results": {}, "nodes_in": sum(_op_histogram(bench.path).values())}
    _remove(_reference_path(bench))
    outs: dict[str, str] = {}
    for tool in tools:
        out = os.path.join(RUNS_DIR, f"{bench.name}.{tool.slug}.onnx")
        _remove(out)
        skipped_by = bench.skip_after_timeout
        if skipped_by and tool.slug in timed_out.get(skipped_by, set()):
            res = {"error": f"timeout (not run: timed out on {skipped_by})"}
        else:
            if bench.group == "big":
                _warm(bench.path)
            res = measure(tool.peer, bench.path, out, tool.level, tool.target, timeout=bench.timeout,
                          mem_limit_mb=MEM_LIMIT_MB)
            for _ in range(repeat - 1):  # sub-2-second runs are noise-dominated on a shared machine: keep the best
                if "seconds" not in res or res["seconds"] >= REPEAT_BELOW_S:
                    break
                again = measure(tool.peer, bench.path, out, tool.level, tool.target, timeout=bench.timeout,
                                mem_limit_mb=MEM_LIMIT_MB)
                if again.get("seconds", float("inf")) < res["seconds"]:
                    res = again
        if "error" in res and res["error"].startswith("timeout"):
            timed_out.setdefault(bench.name, set()).add(tool.slug)
        if "nodes" in res:
            res["hist"] = _op_histogram(out)
            outs[tool.slug] = out
        row["results"][tool.slug] = res
        print(f"  {bench.name:<24} {tool.slug:<14} " + (f"{res['nodes']:>7} nodes {res['seconds']:8.2f}s "
              f"{res['rss_mb']:7.0f} MB" if "nodes" in res else res["error"]), file=sys.stderr, flush=True)
        if bench.cleanup and tool.slug in outs:
            res["verify"] = verify(bench, {tool.slug: out})[tool.slug]
            print(f"  {'':<24} {'':<14} max |diff| {_diff_cell(res)}", file=sys.stderr, flush=True)
        if bench.cleanup:
            _remove(out)  # also what a failed tool left behind
    if not bench.cleanup:
        for slug, v in verify(bench, outs).items():
            row["results"][slug]["verify"] = v
    return row


# --------------------------------------------------------------------------- reporting


def _fastest_peer(results: dict, nodes_in: int) -> tuple[str, float] | None:
    """The fastest peer among those that changed the graph (a no-op, like onnxoptimizer on the IR-3
    light/ models, is no reference for speed); among all peers when none changed it."""
    timed = [(results[p]["seconds"], p) for p in ALL_PEERS if p in results and "seconds" in results[p]]
    working = [t for t in timed if results[t[1]]["nodes"] != nodes_in]
    best = min(working or timed, default=None)
    return (best[1], best[0]) if best else None


def _best(results: dict, peers: tuple[str, ...]) -> tuple[str, int] | None:
    counted = [(results[p]["nodes"], p) for p in peers if p in results and "nodes" in results[p]]
    return (min(counted)[1], min(counted)[0]) if counted else None


def _diff_cell(res: dict) -> str:
    v = res.get("verify")
    if v is None:
        return "-"
    if "error" in v:
        return v["error"]
    return f"{v['max_abs']:.1e}" + ("" if v["ok"] else " ✗")


def _rss_cell(res: dict) -> str:
    return f"{res['rss_mb']:.0f}" if "rss_mb" in res else "-"


def _error_cell(res: dict) -> str:
    err = res["error"]
    if err.startswith("timeout"):
        return err.replace(": timed out on", " after a timeout on")
    if err.startswith("OOM"):
        return f"OOM ({MEM_LIMIT_MB // 1024} GB cap)"
    kind, _, message = err.partition(": ")
    if message and " " not in kind:  # "google.protobuf.message.EncodeError: ..." -> "EncodeError: ..."
        err = f"{kind.rsplit('.', 1)[-1]}: {message}"
    return "error: " + err.replace("|", "/")[:80]


def bar(row: dict, slug: str) -> tuple[bool | None, str]:
    """(met?, why not): nodes <= best peer (level 1 peers for L1, every peer for L2), seconds <=
    onnxslim's, outputs equal. None when graphtool itself failed."""
    res = row["results"]
    gt = res.get(slug)
    if gt is None or "nodes" not in gt:
        return None, "graphtool failed"
    best = _best(res, L1_PEERS if slug == "graphtool-l1" else ALL_PEERS)
    why = []
    if best and gt["nodes"] > best[1]:
        why.append(f"nodes {gt['nodes']} > {best[0]} {best[1]}")
    slim = res.get("onnxslim", {})
    if "seconds" in slim and gt["seconds"] > slim["seconds"]:
        cpu = (f" (cpu {gt['cpu_seconds']:.2f}s vs {slim['cpu_seconds']:.2f}s)"
               if "cpu_seconds" in gt and "cpu_seconds" in slim else "")
        why.append(f"time {gt['seconds']:.2f}s > onnxslim {slim['seconds']:.2f}s{cpu}")
    v = gt.get("verify", {})
    if "ok" in v and not v["ok"]:
        why.append(f"outputs differ ({v['max_abs']:.1e})")
    return not why, "; ".join(why)


def summary_table(rows: list[dict], tools: tuple[Tool, ...]) -> list[str]:
    slugs = [t.slug for t in tools]
    header = ["model", "nodes in", *slugs, "best L1 peer", "gt-l1 s", "onnxslim s", "fastest peer",
              "gt-l1 / fastest", "L1 bar", "L2 bar"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        res = row["results"]
        best = _best(res, L1_PEERS)
        fastest = _fastest_peer(res, row["nodes_in"])
        gt = res.get("graphtool-l1", {})
        cells = [row["bench"].name, row["nodes_in"]]
        cells += [res[s]["nodes"] if "nodes" in res.get(s, {}) else (_error_cell(res[s]) if s in res else "-") for s in slugs]
        cells.append(f"{best[1]} ({best[0]})" if best else "-")
        cells.append(f"{gt['seconds']:.2f}" if "seconds" in gt else "-")
        cells.append(f"{res['onnxslim']['seconds']:.2f}" if "seconds" in res.get("onnxslim", {}) else
                     (_error_cell(res["onnxslim"]) if "onnxslim" in res else "-"))
        cells.append(f"{fastest[1]:.2f} ({fastest[0]})" if fastest else "-")
        cells.append(f"{gt['seconds'] / fastest[1]:.2f}×" if fastest and "seconds" in gt else "-")
        for slug in ("graphtool-l1", "graphtool-l2"):
            if slug not in res:
                cells.append("-")
                continue
            ok, why = bar(row, slug)
            cells.append("ok" if ok else ("FAIL" if ok is None else "MISS: " + why))
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return lines


def detail_table(rows: list[dict], tools: tuple[Tool, ...]) -> list[str]:
    header = ["model", "tool", "nodes after", "wall s", "× fastest peer", "cpu s", "peak RSS MB", "max |diff|"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        res = row["results"]
        fastest = _fastest_peer(res, row["nodes_in"])
        for tool in tools:
            r = res.get(tool.slug)
            if r is None:
                continue
            label = f"{tool.slug}" + (f" (L{tool.level}, {tool.target})" if tool.is_graphtool else "")
            if "nodes" in r:
                ratio = f"{r['seconds'] / fastest[1]:.2f}" if fastest and fastest[1] > 0 else "-"
                cpu = f"{r['cpu_seconds']:.2f}" if "cpu_seconds" in r else "-"
                cells = [row["bench"].name, label, r["nodes"], f"{r['seconds']:.2f}", ratio, cpu, _rss_cell(r), _diff_cell(r)]
            else:
                cells = [row["bench"].name, label, _error_cell(r), "-", "-", "-", "-", "-"]
            lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return lines


def _hist_delta(gt: collections.Counter, peer: collections.Counter, top: int = 6) -> str:
    delta = {op: gt.get(op, 0) - peer.get(op, 0) for op in set(gt) | set(peer)}
    items = sorted(((d, op) for op, d in delta.items() if d), key=lambda x: (-abs(x[0]), x[1]))[:top]
    return ", ".join(f"{op} {d:+d}" for d, op in items) or "same op histogram"


def misses(rows: list[dict]) -> list[str]:
    """For each missed bar: which ops graphtool keeps that the best peer removed (+) or vice versa (-)."""
    lines = []
    for row in rows:
        res = row["results"]
        for slug, peers in (("graphtool-l1", L1_PEERS), ("graphtool-l2", ALL_PEERS)):
            ok, why = bar(row, slug) if slug in res else (True, "")
            if ok:
                continue
            text = f"- **{row['bench'].name} {slug}**: {why}"
            best = _best(res, peers)
            if best and "hist" in res[slug] and best[1] < res[slug]["nodes"]:
                text += f". graphtool − {best[0]}: {_hist_delta(res[slug]['hist'], res[best[0]]['hist'])}"
            lines.append(text)
    return lines


def _versions() -> str:
    names = ("onnx", "onnxruntime", "onnxsim", "onnxslim", "onnxoptimizer")
    parts = []
    for name in names:
        try:
            parts.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            parts.append(f"{name} (missing)")
    return ", ".join(parts)


def section(rows: list[dict], tools: tuple[Tool, ...], elapsed: float, generation: float, argv: list[str],
            repeat: int) -> str:
    cmd = "python bench/run_all.py" + ("" if not argv else " " + " ".join(argv))
    out = [SECTION, "",
           f"`make bench` (`{cmd}`), {time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores "
           f"({platform.machine()}, shared with other jobs), {_versions()}. Whole run: {elapsed / 60:.1f} min, of which "
           f"{generation / 60:.1f} min generating missing models (a run from an empty bench/out/models exports and "
           "generates them all: about 5 min more).",
           "Every cell is one fresh process (bench/peers.py): seconds = load → optimize → save, imports excluded "
           f"(best of {repeat} when under {REPEAT_BELOW_S:.0f} s); cpu s = that process's CPU time; peak RSS of that process; 12 GB address-space cap. graphtool-l1 = `optimize(level=1)`, "
           "graphtool-l2 = `optimize(level=2, target=\"ort\")`. max |diff| = original vs result in onnxruntime "
           "(optimizations off), export sample inputs for torch models, seeded random inputs otherwise; ✗ = outside "
           "rtol 1e-3 / atol 1e-4. Bar: graphtool nodes ≤ best peer (L1: ORT basic, onnxsim, onnxslim, onnxoptimizer; "
           "L2: those and ORT extended) and graphtool wall time ≤ onnxslim's. × fastest peer = wall time over the "
           "fastest peer that changed the graph on that model (onnxoptimizer's 0.00 s no-op on the IR-3 light/ models "
           "is no reference). The big model's files are read once before each tool so all start from the same page cache.",
           "",
           "### Summary (nodes after)", "", *summary_table(rows, tools), ""]
    missed = misses(rows)
    if missed:
        out += ["### Rows that miss the bar", "",
                "Op-count difference graphtool − best peer (+: graphtool keeps more of that op).", "", *missed, ""]
    out += ["### Per tool", "", *detail_table(rows, tools), ""]
    return "\n".join(out)


def write_section(text: str) -> None:
    """Replace (or append) our section of bench/results.md, leaving other sections alone."""
    existing = open(RESULTS).read() if os.path.exists(RESULTS) else "# Benchmarks\n"
    lines = existing.splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip() == SECTION), None)
    if start is None:
        new = existing.rstrip("\n") + "\n\n" + text.rstrip("\n") + "\n"
    else:
        end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
        new = "\n".join(lines[:start] + text.rstrip("\n").splitlines() + ([""] + lines[end:] if end < len(lines) else [])) + "\n"
    tmp = RESULTS + ".tmp"
    with open(tmp, "w") as handle:
        handle.write(new)
    os.replace(tmp, RESULTS)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--verify-child"]:
        spec = json.loads(argv[1])
        print(json.dumps(verify_child(spec["src"], spec["inputs"], spec["ref"], spec["outs"])))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="light/ models and the tiny torch fixtures only")
    ap.add_argument("--only", help="comma-separated groups (light, tiny, torch, scale, big), model names or patterns")
    ap.add_argument("--tools", help="comma-separated subset of " + ",".join(t.slug for t in TOOLS))
    ap.add_argument("--repeat", type=int, default=3,
                    help=f"runs per (model, tool) when a run takes < {REPEAT_BELOW_S:.0f}s; the fastest is kept (default 3)")
    ap.add_argument("--no-generate", action="store_true", help="use only models already in bench/out/models")
    ap.add_argument("--write", action="store_true", help="write bench/results.md even for a --quick/--only run")
    args = ap.parse_args(argv)
    tools = TOOLS if not args.tools else tuple(t for t in TOOLS if t.slug in args.tools.split(","))
    start = time.perf_counter()
    os.makedirs(MODELS_DIR, exist_ok=True)
    benches = select(args)
    generation = time.perf_counter() - start  # exporting/generating the models that were missing
    if not benches:
        ap.error("no model matches")
    rows, timed_out = [], {}
    for bench in benches:
        print(f"{bench.group}/{bench.name}", file=sys.stderr, flush=True)
        rows.append(run_bench(bench, tools, timed_out, args.repeat))
    elapsed = time.perf_counter() - start
    text = section(rows, tools, elapsed, generation, argv, args.repeat)
    print(text)
    if args.write or not (args.quick or args.only or args.tools or args.no_generate):
        write_section(text)
        print(f"wrote {os.path.relpath(RESULTS, REPO)} ({SECTION})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
