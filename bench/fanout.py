"""Fan-out scale: one value read by N nodes (``tests/bad_inputs/make_bad_inputs.fanout_model_bytes``:
x read by N identical Relus, summed by a chain of N Adds, so CSE merges N nodes into one reader of
x). ``optimize`` and ``compare --levels 1`` as a user runs them (fresh process), at several N, so
the growth says whether the cost is linear in fan-out (x2 nodes -> x2 seconds) or not.

    .venv/bin/python bench/fanout.py [--sizes 25000,50000,100000] [--commands optimize,compare]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.bad_inputs.make_bad_inputs import fanout_model_bytes  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="25000,50000,100000")
    ap.add_argument("--commands", default="optimize,compare")
    args = ap.parse_args()
    print("| readers of x | nodes | command | seconds | exit | s per 1k readers |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for n in map(int, args.sizes.split(",")):
            model = Path(tmp) / f"fanout{n}.onnx"
            model.write_bytes(fanout_model_bytes(n))
            for command in args.commands.split(","):
                argv = ["optimize", str(model), "-o", str(Path(tmp) / "out.onnx")] if command == "optimize" \
                    else ["compare", str(model), "--levels", "1"]
                start = time.perf_counter()
                proc = subprocess.run([sys.executable, "-m", "graphtool", *argv], capture_output=True, cwd=ROOT,
                                      env=os.environ.copy(), timeout=1800)
                seconds = time.perf_counter() - start
                print(f"| {n:,} | {2 * n:,} | {command} | {seconds:.1f} | {proc.returncode} | "
                      f"{seconds / n * 1000:.3f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
