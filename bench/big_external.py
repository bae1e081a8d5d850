"""Multi-GB external-data models: inspect, round-trip and optimize in bounded memory.

Generates (once, under /tmp) transformer-like models whose weights live in one external-data file
(bench/gen_models.py ``external_transformer``: largest tensor 256 MB), then measures each step in
its own subprocess, reading that child's peak RSS from ``os.wait4`` (per process, not the max over
all children):

1. ``graphtool inspect MODEL`` — must stay < 400 MB RSS and < 2 s.
2. ``io.save(io.load(p), out)`` — every weight's sha256 compared between source and output,
   hashed by an independent reader (onnx protos + plain file reads, in 16 MB chunks).
3. ``optimize(model, level=2)`` + ``io.save`` on the > 4 GB model — RSS < 1.5 GB; weights present in
   both models must be byte-identical; bytes each pass materialized (``Tensor.numpy``) and the RSS
   high-water mark after each pass are recorded, so a pass that reads too much is named.
4. The same architecture at a small width is optimized and verified through onnxruntime
   (``graphtool.verify.verification``): the numeric check of step 3 on a slice that fits a test run.

    python bench/big_external.py                 # 2.3 GB and 4.6 GB models
    python bench/big_external.py --layers 3      # only the 2.3 GB one
    python bench/big_external.py --clean         # delete the generated models afterwards
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

BIN = os.path.dirname(sys.executable)
INSPECT_RSS_MB, INSPECT_SECONDS, OPTIMIZE_RSS_MB = 400, 2.0, 1536
CACHE = os.environ.get("GRAPHTOOL_BIG_DIR", os.path.join(tempfile.gettempdir(), "graphtool-big"))


# ----------------------------------------------------------------------------- measuring children


def measure(cmd: list[str]) -> dict:
    """Run ``cmd``; its wall seconds, peak RSS (MB, that process alone), exit code and output."""
    # Children compile their modules once and reuse the bytecode (as an installed graphtool
    # does), even where the environment sets PYTHONDONTWRITEBYTECODE; the cache goes to /tmp.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = os.path.join(CACHE, "pycache")
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    streams: dict[str, str] = {}
    readers = [threading.Thread(target=lambda k=k, s=s: streams.__setitem__(k, s.read()))
               for k, s in (("stdout", proc.stdout), ("stderr", proc.stderr))]
    for t in readers:
        t.start()
    _, status, usage = os.wait4(proc.pid, 0)  # this child's own rusage, not RUSAGE_CHILDREN's max
    for t in readers:
        t.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    return {"seconds": time.perf_counter() - start, "rss_mb": usage.ru_maxrss / 1024,
            "cpu": usage.ru_utime + usage.ru_stime,
            "code": proc.returncode, **streams}


def py(code: str, *args: str) -> list[str]:
    return [sys.executable, "-c", code, *args]


ROUND_TRIP = """
import sys, time
from graphtool import io
t = time.perf_counter(); m = io.load(sys.argv[1]); io.save(m, sys.argv[2])
print(time.perf_counter() - t)
"""

OPTIMIZE = """
import json, sys, time, resource
from graphtool import io
from graphtool.ir import tensor as T
import graphtool.pass_manager as pm
from graphtool.optimize import optimize

current = ["load"]
read = {}
numpy = T.Tensor.numpy
def counting_numpy(self):
    if self._array is None and self.external is not None:
        read[current[0]] = read.get(current[0], 0) + self.nbytes
    return numpy(self)
T.Tensor.numpy = counting_numpy

def hwm_mb():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM"):
            return int(line.split()[1]) / 1024
    return 0.0

peaks = {}
run_once = pm.PassManager.run_once
def traced(p, model, ctx, record=None):
    current[0] = p.name
    try:
        return run_once(p, model, ctx, record)
    finally:
        peaks[p.name] = max(peaks.get(p.name, 0), hwm_mb())
        current[0] = "other"
pm.PassManager.run_once = staticmethod(traced)

t0 = time.perf_counter()
model = io.load(sys.argv[1])
after_load = hwm_mb()
t1 = time.perf_counter()
out, report, ctx = optimize(model, level=2)
t2 = time.perf_counter()
current[0] = "save"
io.save(out, sys.argv[2])
t3 = time.perf_counter()
print(json.dumps({"load": t1 - t0, "optimize": t2 - t1, "save": t3 - t2, "hwm_after_load": after_load,
                  "hwm_after_pass": peaks, "materialized": read,
                  "nodes": [report.nodes_before, report.nodes_after],
                  "passes": {r.name: r.stats for r in report.passes.values() if r.changed_runs}}))
"""


# ----------------------------------------------------------------------------- independent hashing


def weight_hashes(path: str) -> dict[str, tuple[str, tuple[int, ...], int, int]]:
    """name -> (sha256 of the little-endian bytes, dims, dtype, nbytes), streamed from disk
    without graphtool: onnx protos for metadata, plain reads for external bytes."""
    import onnx
    from onnx import numpy_helper

    proto = onnx.load(path, load_external_data=False)
    folder = os.path.dirname(os.path.abspath(path))
    out = {}
    for t in proto.graph.initializer:
        h = hashlib.sha256()
        if t.data_location == onnx.TensorProto.EXTERNAL:
            info = {e.key: e.value for e in t.external_data}
            offset, length = int(info.get("offset", 0)), int(info["length"])
            with open(os.path.join(folder, info["location"]), "rb") as f:
                f.seek(offset)
                left = length
                while left:
                    chunk = f.read(min(left, 16 << 20))
                    if not chunk:
                        raise ValueError(f"{path}: {t.name} is truncated")
                    h.update(chunk)
                    left -= len(chunk)
            size = length
        else:
            data = t.raw_data if t.HasField("raw_data") else numpy_helper.to_array(t).tobytes()
            h.update(data)
            size = len(data)
        out[t.name] = (h.hexdigest(), tuple(t.dims), t.data_type, size)
    return out


def compare(src: dict, dst: dict) -> dict:
    both = src.keys() & dst.keys()
    same = [k for k in both if src[k] == dst[k]]
    return {
        "tensors": len(src),
        "identical": len(same),
        "identical_bytes": sum(src[k][3] for k in same),
        "changed": sorted(k for k in both if src[k] != dst[k]),
        "removed": sorted(src.keys() - dst.keys()),
        "added": sorted(dst.keys() - src.keys()),
    }


# ----------------------------------------------------------------------------- the steps


def model_dir(layers: int, d_model: int, d_ff: int) -> str:
    return os.path.join(CACHE, f"transformer_{layers}l_{d_model}x{d_ff}")


def generate(layers: int, d_model: int, d_ff: int) -> str:
    from gen_models import external_transformer

    path = os.path.join(model_dir(layers, d_model, d_ff), "model.onnx")
    if not (os.path.exists(path) and os.path.exists(path + ".data")):
        t = time.perf_counter()
        external_transformer(path, layers=layers, d_model=d_model, d_ff=d_ff)
        print(f"generated {path} in {time.perf_counter() - t:.0f} s", file=sys.stderr, flush=True)
    return path


def gb(n: float) -> str:
    return f"{n / 1e9:.2f} GB"


def bench_model(path: str, optimize: bool, keep: bool, verify_full: bool = False) -> dict:
    data_bytes = os.path.getsize(path + ".data")
    res: dict = {"path": path, "data_bytes": data_bytes}
    runs = [measure([os.path.join(BIN, "graphtool"), "inspect", path]) for _ in range(3)]  # 1st warms caches
    bad = [r for r in runs if r["code"]]
    if bad:
        raise SystemExit(f"inspect failed: {bad[0]['stderr']}")
    res["inspect"] = min(runs, key=lambda r: r["seconds"])

    src = weight_hashes(path)
    out_dir = tempfile.mkdtemp(prefix="rt-", dir=os.path.dirname(path))
    try:
        out = os.path.join(out_dir, "roundtrip.onnx")
        rt = measure(py(ROUND_TRIP, path, out))
        if rt["code"]:
            raise SystemExit(f"round trip failed: {rt['stderr'][-2000:]}")
        res["roundtrip"] = rt
        res["roundtrip_cmp"] = compare(src, weight_hashes(out))
        os.unlink(out + ".data")
        if optimize:
            out = os.path.join(out_dir, "optimized.onnx")
            opt = measure(py(OPTIMIZE, path, out))
            if opt["code"]:
                raise SystemExit(f"optimize failed: {opt['stderr'][-3000:]}")
            res["optimize"] = opt
            res["optimize_info"] = json.loads(opt["stdout"].strip().splitlines()[-1])
            res["optimize_cmp"] = compare(src, weight_hashes(out))
            if verify_full:
                res["full_check"] = full_check(path, out)
    finally:
        if not keep:
            shutil.rmtree(out_dir, ignore_errors=True)
    return res


FULL_RUN = """
import sys, numpy as np, onnxruntime as ort
so = ort.SessionOptions()
so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
sess = ort.InferenceSession(sys.argv[1], so, providers=["CPUExecutionProvider"])
x = np.random.default_rng(0).standard_normal((1, 8, 4096)).astype(np.float32)
np.save(sys.argv[2], sess.run(None, {"x": x})[0])
"""


def full_check(src: str, optimized: str) -> dict:
    """Both full-size models through onnxruntime, one process each (each holds its weights)."""
    folder = os.path.dirname(optimized)
    runs = {}
    for tag, path in (("source", src), ("optimized", optimized)):
        r = measure(py(FULL_RUN, path, os.path.join(folder, f"{tag}.npy")))
        if r["code"]:
            raise SystemExit(f"onnxruntime on the {tag} model failed: {r['stderr'][-2000:]}")
        runs[tag] = r
    import numpy as np

    a, b = (np.load(os.path.join(folder, f"{t}.npy")) for t in ("source", "optimized"))
    return {"max_abs": float(np.max(np.abs(a - b))), "ok": bool(np.allclose(a, b, rtol=1e-3, atol=1e-4)),
            "rss_mb": {k: v["rss_mb"] for k, v in runs.items()}}


def slice_check() -> dict:
    """The same architecture, 256 wide: optimize level 2 and compare outputs in onnxruntime."""
    from gen_models import external_transformer

    from graphtool import io
    from graphtool.optimize import optimize
    from graphtool.verify import verify

    folder = tempfile.mkdtemp(prefix="gt-slice-")
    try:
        path = external_transformer(os.path.join(folder, "slice.onnx"), layers=2, d_model=256, d_ff=1024)
        model = io.load(path)
        optimized, report, _ = optimize(model, level=2)
        out = os.path.join(folder, "slice_opt.onnx")
        io.save(optimized, out)
        v = verify(model, io.load(out))
        src, dst = weight_hashes(path), weight_hashes(out)
        return {"ok": v.ok, "max_abs": v.max_abs, "nodes": (report.nodes_before, report.nodes_after),
                "cmp": compare(src, dst)}
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def verdict(ok: bool) -> str:
    return "ok" if ok else "**FAIL**"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", default="3,6", help="models to build (3 layers = 2.3 GB, 6 = 4.6 GB)")
    ap.add_argument("--d-model", type=int, default=4096)
    ap.add_argument("--d-ff", type=int, default=16384)
    ap.add_argument("--no-optimize", action="store_true")
    ap.add_argument("--optimize-all", action="store_true", help="optimize every model, not only > 4 GB ones")
    ap.add_argument("--keep", action="store_true", help="keep the outputs beside the models")
    ap.add_argument("--verify-full", action="store_true",
                    help="also run the full-size source and optimized models in onnxruntime (~size of the model in RAM each)")
    ap.add_argument("--clean", action="store_true", help="delete the generated models at the end")
    args = ap.parse_args(argv)
    layer_counts = [int(x) for x in args.layers.split(",")]
    results = []
    for layers in layer_counts:
        path = generate(layers, args.d_model, args.d_ff)
        big = os.path.getsize(path + ".data") > 4 * 2**30 or args.optimize_all
        results.append(bench_model(path, optimize=big and not args.no_optimize, keep=args.keep,
                                   verify_full=args.verify_full))
        print(f"[{layers} layers done]", file=sys.stderr, flush=True)
    sliced = None if args.no_optimize else slice_check()

    failed = 0
    print("### Multi-GB external data\n")
    print("| model | external data | step | wall s | CPU s | peak RSS MB | limit | verdict |")
    print("|---|---:|---|---:|---:|---:|---|---|")
    for r in results:
        name = os.path.basename(os.path.dirname(r["path"])).replace("transformer_", "")
        i = r["inspect"]
        ok = i["rss_mb"] < INSPECT_RSS_MB and i["seconds"] < INSPECT_SECONDS
        failed += not ok
        print(f"| {name} | {gb(r['data_bytes'])} | `graphtool inspect` | {i['seconds']:.2f} | {i['cpu']:.2f} | {i['rss_mb']:.0f} "
              f"| < {INSPECT_RSS_MB} MB, < {INSPECT_SECONDS:g} s | {verdict(ok)} |")
        rt, c = r["roundtrip"], r["roundtrip_cmp"]
        ok = c["identical"] == c["tensors"] and not (c["changed"] or c["removed"] or c["added"])
        ok_rss = rt["rss_mb"] < r["data_bytes"] / 2**20 / 4
        failed += not (ok and ok_rss)
        print(f"| {name} | {gb(r['data_bytes'])} | round trip `io.save(io.load(p))` | {rt['seconds']:.1f} "
              f"| {rt['cpu']:.1f} | {rt['rss_mb']:.0f} | every sha256 equal; RSS < model/4 | {verdict(ok and ok_rss)} "
              f"({c['identical']}/{c['tensors']} tensors, {gb(c['identical_bytes'])} identical) |")
        if "optimize" in r:
            o, c, info = r["optimize"], r["optimize_cmp"], r["optimize_info"]
            ok = o["rss_mb"] < OPTIMIZE_RSS_MB and not c["changed"]
            failed += not ok
            print(f"| {name} | {gb(r['data_bytes'])} | `optimize(level=2)` + save | {o['seconds']:.1f} "
                  f"| {o['cpu']:.1f} | {o['rss_mb']:.0f} | < {OPTIMIZE_RSS_MB} MB; kept weights identical | {verdict(ok)} "
                  f"({c['identical']} kept tensors = {gb(c['identical_bytes'])} byte-identical, "
                  f"{len(c['changed'])} changed, {len(c['removed'])} removed, {len(c['added'])} new) |")
    for r in results:
        if "optimize_info" not in r:
            continue
        info = r["optimize_info"]
        print(f"\n`optimize(level=2)` on {gb(r['data_bytes'])}: nodes {info['nodes'][0]} -> {info['nodes'][1]}; "
              f"load {info['load']:.1f} s, passes {info['optimize']:.1f} s, save {info['save']:.1f} s; "
              f"RSS high-water after load {info['hwm_after_load']:.0f} MB.\n")
        print("| pass | changed (stats) | external MB materialized | RSS high-water after it MB |")
        print("|---|---|---:|---:|")
        for name, hwm in info["hwm_after_pass"].items():
            stats = info["passes"].get(name)
            stat_text = ", ".join(f"{k}={v}" for k, v in stats.items() if v) if stats else "–"
            print(f"| {name} | {stat_text} | {info['materialized'].get(name, 0) / 2**20:.1f} | {hwm:.0f} |")
        for other in ("load", "other", "save"):
            if info["materialized"].get(other):
                print(f"| ({other}) | | {info['materialized'][other] / 2**20:.1f} | |")
        if "full_check" in r:
            f = r["full_check"]
            failed += not f["ok"]
            print(f"\nFull-size check in onnxruntime (ORT optimizations off, seeded input [1, 8, 4096]): outputs "
                  f"{'match' if f['ok'] else 'DIFFER'}, max abs {f['max_abs']:.2e}; onnxruntime RSS "
                  f"{f['rss_mb']['source']:.0f} MB (source) / {f['rss_mb']['optimized']:.0f} MB (optimized). "
                  f"{verdict(f['ok'])}")
        removed = r["optimize_cmp"]["removed"]
        if removed:
            print(f"\nweights no longer in the optimized model ({len(removed)}): {', '.join(removed[:12])}"
                  + (" …" if len(removed) > 12 else ""))
    if sliced is not None:
        c = sliced["cmp"]
        ok = sliced["ok"] and not c["changed"]
        failed += not ok
        print(f"\nSlice check (same architecture, d_model 256, 2 layers, external data): optimize level 2 "
              f"{sliced['nodes'][0]} -> {sliced['nodes'][1]} nodes; onnxruntime outputs "
              f"{'match' if sliced['ok'] else 'DIFFER'} (max abs {sliced['max_abs']:.2e}); "
              f"{c['identical']}/{c['tensors']} source tensors byte-identical, {len(c['changed'])} changed, "
              f"{len(c['removed'])} removed, {len(c['added'])} new. {verdict(ok)}")
    if args.clean:
        for layers in layer_counts:
            shutil.rmtree(model_dir(layers, args.d_model, args.d_ff), ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
