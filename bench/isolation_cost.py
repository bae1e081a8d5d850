"""What running onnxruntime in the sandbox child costs: ``optimize`` and ``compare`` on the
real-model corpus, each run as a user runs it (a fresh ``graphtool`` process), with the sandbox
(default) and without (``GRAPHTOOL_SANDBOX=0``), interleaved A/B then B/A per model so a busy
machine slows both alike.

    .venv/bin/python bench/isolation_cost.py [--reps 2] [--only NAME,...] [--commands optimize,compare]

Prints one row per model and command (median seconds each way, extra seconds, exit codes, which
must match) and the medians over the corpus: the numbers bench/results.md quotes.
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
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = Path.home() / ".cache" / "graphtool" / "corpus" / "manifest.json"
GRAPHTOOL = [sys.executable, "-m", "graphtool"]


def _argv(command: str, model: str, out: Path) -> list[str]:
    if command == "optimize":
        return ["optimize", model, "-o", str(out / "out.onnx")]
    return [command, model]


def _run(command: str, model: str, sandbox: bool, out: Path) -> tuple[float, int]:
    env = {**os.environ, "GRAPHTOOL_SANDBOX": "1" if sandbox else "0"}
    start = time.perf_counter()
    proc = subprocess.run([*GRAPHTOOL, *_argv(command, model, out)], env=env, capture_output=True, cwd=ROOT,
                          timeout=900)
    return time.perf_counter() - start, proc.returncode


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--only")
    ap.add_argument("--commands", default="optimize,compare")
    args = ap.parse_args()
    models = json.loads(MANIFEST.read_text())
    if args.only:
        models = [m for m in models if m["name"] in args.only.split(",")]
    extra: dict[str, list[float]] = {}
    ratio: dict[str, list[float]] = {}
    print("| model | command | in-process s | sandbox s | extra s | exit (in/sandbox) |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        for index, m in enumerate(models):
            for command in args.commands.split(","):
                times = {False: [], True: []}
                codes = {}
                for rep in range(args.reps):
                    for sandbox in ((False, True) if (rep + index) % 2 == 0 else (True, False)):
                        seconds, code = _run(command, m["path"], sandbox, out)
                        times[sandbox].append(seconds)
                        codes[sandbox] = code
                plain, boxed = statistics.median(times[False]), statistics.median(times[True])
                extra.setdefault(command, []).append(boxed - plain)
                ratio.setdefault(command, []).append(boxed / plain)
                flag = "" if codes[False] == codes[True] else " **differ**"
                print(f"| {m['name']} | {command} | {plain:.2f} | {boxed:.2f} | {boxed - plain:+.2f} | "
                      f"{codes[False]}/{codes[True]}{flag} |", flush=True)
    print()
    for command in extra:
        e = extra[command]
        print(f"{command}: median extra {statistics.median(e):+.2f} s (min {min(e):+.2f}, max {max(e):+.2f}), "
              f"median ratio {statistics.median(ratio[command]):.2f}x over {len(e)} models")
    return 0


if __name__ == "__main__":
    sys.exit(main())
