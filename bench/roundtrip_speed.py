"""Round-trip speed: graphtool ``io.load`` + ``io.save`` against onnx_ir and plain onnx.

On the torch fixtures and on generated 20k/100k-node graphs, each tool loads the file and writes
it back in a fresh process; the best CPU time (load + save) of ``--repeat`` runs is kept (a shared
machine disturbs CPU time far less than wall time). A fresh process per run matters: the cyclic
garbage collector's first scan of a just-loaded model lands in whatever step comes next. The last column checks graphtool's promise that an untouched model comes
back byte-identical to ``onnx.load(p).SerializeToString()``.

    python bench/roundtrip_speed.py
    python bench/roundtrip_speed.py --sizes 20000 --repeat 5
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)


WORKER = """
import json, sys, time
path, out, tool = sys.argv[1:4]
if tool == "graphtool":
    from graphtool import io as lib
    load, save = lib.load, lib.save
elif tool == "onnx_ir":
    import onnx_ir as lib
    load, save = lib.load, lib.save
else:
    import onnx as lib
    load, save = lib.load, lib.save
t = time.process_time(); model = load(path); t1 = time.process_time(); save(model, out); t2 = time.process_time()
print(json.dumps({"load": t1 - t, "save": t2 - t1}))
"""


def measure(path: str, out_dir: str, repeat: int) -> dict:
    """Each tool in fresh processes (no tool pays for another's garbage); best CPU of ``repeat``."""
    import onnx

    out = os.path.join(out_dir, "out.onnx")
    r: dict = {}
    for tool in ("graphtool", "onnx_ir", "onnx"):
        runs = []
        for _ in range(repeat):
            proc = subprocess.run([sys.executable, "-c", WORKER, path, out, tool], capture_output=True, text=True)
            if proc.returncode:
                raise SystemExit(f"{tool} failed on {path}: {proc.stderr[-2000:]}")
            runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        r[tool] = min(runs, key=lambda x: x["load"] + x["save"])
        if tool == "graphtool":
            r["identical"] = open(out, "rb").read() == onnx.load(path).SerializeToString()
    return r


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="20000,100000", help="generated graph sizes (nodes)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    from gen_models import write_big_graph
    from scale import CACHE

    import onnx

    models = sorted(glob.glob(os.path.join(ROOT, "fixtures", "torch", "*.onnx")))
    models += [write_big_graph(int(n), os.path.join(CACHE, f"graph_v1_{n}.onnx")) for n in args.sizes.split(",") if n]
    print("### Round trip, CPU seconds (best of %d)\n" % args.repeat)
    print("| model | nodes | graphtool load | graphtool save | onnx_ir load | onnx_ir save | onnx load | onnx save "
          "| graphtool / onnx_ir | byte-identical |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    with tempfile.TemporaryDirectory() as out_dir:
        for path in models:
            nodes = len(onnx.load(path, load_external_data=False).graph.node)
            r = measure(path, out_dir, args.repeat)
            g, i, o = r["graphtool"], r["onnx_ir"], r["onnx"]
            ratio = (g["load"] + g["save"]) / (i["load"] + i["save"])
            print(f"| {os.path.basename(path)} | {nodes:,} | {g['load']:.3f} | {g['save']:.3f} | {i['load']:.3f} "
                  f"| {i['save']:.3f} | {o['load']:.3f} | {o['save']:.3f} | {ratio:.2f}x "
                  f"| {'yes' if r['identical'] else '**no**'} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
