"""Round-trip speed: graphtool ``io.load`` + ``io.save`` against onnx_ir and plain onnx.

On the torch fixtures and on generated 20k/100k-node graphs, each tool loads the file and writes
it back; the best CPU time of ``--repeat`` runs is kept (a shared machine disturbs CPU time far
less than wall time). The last column checks graphtool's promise that an untouched model comes
back byte-identical to ``onnx.load(p).SerializeToString()``.

    python bench/roundtrip_speed.py
    python bench/roundtrip_speed.py --sizes 20000 --repeat 5
"""

from __future__ import annotations

import argparse
import gc
import glob
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)


def cpu(fn) -> float:
    gc.collect()
    t = time.process_time()
    fn()
    return time.process_time() - t


def best(fn, repeat: int) -> float:
    return min(cpu(fn) for _ in range(repeat))


def measure(path: str, out_dir: str, repeat: int) -> dict:
    import onnx
    import onnx_ir as ir

    from graphtool import io

    out = os.path.join(out_dir, "out.onnx")
    r: dict = {}
    holder: dict = {}
    r["gt load"] = best(lambda: holder.__setitem__("gt", io.load(path)), repeat)
    r["gt save"] = best(lambda: io.save(holder["gt"], out), repeat)
    r["identical"] = open(out, "rb").read() == onnx.load(path).SerializeToString()
    holder.clear()
    r["ir load"] = best(lambda: holder.__setitem__("ir", ir.load(path)), repeat)
    r["ir save"] = best(lambda: ir.save(holder["ir"], out), repeat)
    holder.clear()
    r["onnx load"] = best(lambda: holder.__setitem__("onnx", onnx.load(path)), repeat)
    r["onnx save"] = best(lambda: onnx.save(holder["onnx"], out), repeat)
    holder.clear()
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
            repeat = args.repeat if nodes < 50000 else 1
            r = measure(path, out_dir, repeat)
            ratio = (r["gt load"] + r["gt save"]) / (r["ir load"] + r["ir save"])
            print(f"| {os.path.basename(path)} | {nodes:,} | {r['gt load']:.3f} | {r['gt save']:.3f} | {r['ir load']:.3f} "
                  f"| {r['ir save']:.3f} | {r['onnx load']:.3f} | {r['onnx save']:.3f} | {ratio:.2f}x "
                  f"| {'yes' if r['identical'] else '**no**'} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
