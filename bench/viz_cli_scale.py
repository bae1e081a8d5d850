"""``graphtool viz MODEL -o page.html`` on big chains, as a user runs it (a fresh process), for
two checkouts of graphtool side by side in the same run: wall time, CPU time and peak memory of
the whole command (load, shapes, layers, the page), and the page's size.

The baseline is another checkout's source tree (``git archive <commit> graphtool | tar -x -C DIR``)
put first on PYTHONPATH under this interpreter, so both run with the same packages.

    python bench/viz_cli_scale.py --baseline /tmp/base --models /work/cache/viewer/chain_100000.onnx,...
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def run(source: str, model: str, out: str) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=source)
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "graphtool", "viz", model, "-o", out], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tempfile.gettempdir())
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    err = proc.stderr.read().decode() if proc.stderr else ""
    if status != 0:
        raise SystemExit(f"{source}: viz {model} failed: {err.strip()[-400:]}")
    return {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "rss": usage.ru_maxrss / 1024,
            "size": os.path.getsize(out) / 1e6}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", required=True, help="a checkout's source folder (holding graphtool/)")
    ap.add_argument("--models", required=True, help="comma-separated .onnx files")
    ap.add_argument("--out", default="/work/cache/viewer")
    args = ap.parse_args()
    rows = []
    for model in args.models.split(","):
        name = os.path.basename(model)[:-5]
        for label, source in (("before", args.baseline), ("after", ROOT)):
            r = run(source, model, os.path.join(args.out, f"{name}_{label}.html"))
            rows.append((name, label, r))
            print(name, label, {k: round(v, 1) for k, v in r.items()}, flush=True)
    print(f"\nload average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores\n")
    print("| model | checkout | wall s | CPU s | peak RSS MB | page MB |")
    print("|---|---|---:|---:|---:|---:|")
    for name, label, r in rows:
        print(f"| {name} | {label} | {r['wall']:.1f} | {r['cpu']:.1f} | {r['rss']:.0f} | {r['size']:.1f} |")


if __name__ == "__main__":
    main()
