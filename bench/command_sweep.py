"""Every command on every real-corpus model: exit codes, and no "internal error" anywhere.

"internal error" is reserved for graphtool's own bugs; a model's failure (even one onnxruntime
cannot run) must be the one-line message. This runs inspect, check, optimize, diff, viz, convert
and compare (levels 1,2) on each corpus model, each in its own process, and counts.

    python bench/command_sweep.py [--only a,b] [--bad-inputs]   # --bad-inputs: also tests/bad_inputs' corpus
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
import corpus  # noqa: E402

GRAPHTOOL = os.path.join(os.path.dirname(sys.executable), "graphtool")


def commands(path: str, tmp: str, opset: int | None) -> list[tuple[str, list[str]]]:
    l1 = os.path.join(tmp, "l1.onnx")
    return [
        ("inspect", ["inspect", path]),
        ("check", ["check", path]),
        ("optimize", ["optimize", path, "-o", l1]),
        ("diff", ["diff", path, l1 if os.path.exists(l1) else path]),
        ("viz", ["viz", path, "-o", os.path.join(tmp, "v.html")]),
        ("convert", ["convert", path, "--opset", str(max(opset or 17, 17)), "-o", os.path.join(tmp, "c.onnx")]),
        ("compare", ["compare", path, "--levels", "1,2"]),
    ]


def sweep(paths: list[tuple[str, str, int | None]]) -> list[dict]:
    rows = []
    for name, path, opset in paths:
        with tempfile.TemporaryDirectory() as tmp:
            for cmd, _ in commands(path, tmp, opset):
                args = dict(commands(path, tmp, opset))[cmd]  # rebuilt: diff needs optimize's output
                try:
                    proc = subprocess.run([GRAPHTOOL, *args], capture_output=True, text=True, timeout=600)
                    rc, err = proc.returncode, proc.stderr
                except subprocess.TimeoutExpired:
                    rc, err = "timeout", ""
                last = err.strip().splitlines()[-1] if err.strip() else ""
                rows.append({"model": name, "command": cmd, "rc": rc, "internal": "internal error" in err,
                             "traceback": "Traceback" in err, "line": last[:200]})
                print(f"{name:<22} {cmd:<9} rc={rc} {last[:150]}", flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only")
    args = ap.parse_args()
    models = corpus.models(args.only.split(",") if args.only else None)
    rows = sweep([(m["name"], m["path"], m["opset"]) for m in models])
    codes = collections.Counter((r["command"], r["rc"]) for r in rows)
    print(f"\n{len(rows)} runs on {len(models)} models; internal errors: {sum(r['internal'] for r in rows)}; "
          f"tracebacks: {sum(r['traceback'] for r in rows)}")
    for (cmd, rc), n in sorted(codes.items(), key=str):
        print(f"  {cmd:<9} exit {rc}: {n}")


if __name__ == "__main__":
    main()
