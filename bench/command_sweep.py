"""Every command on every real-corpus model: exit codes, and no "internal error" anywhere.

"internal error" is reserved for graphtool's own bugs; a model's failure (even one onnxruntime
cannot run) must be the one-line message, and onnxruntime's own logger never writes to the
terminal. This runs inspect, check, optimize (level 1, and level 2 --target ort), diff, viz,
convert, compare (levels 1,2) and tune on each model, each in its own process, and counts
"internal error" and onnxruntime logger lines in every stderr.

    python bench/command_sweep.py [--only a,b]                  # the real corpus (bench/corpus.py)
    python bench/command_sweep.py --manifest /work/cache/today/manifest.json   # today's models
    python bench/command_sweep.py --bad-inputs                  # tests/bad_inputs' corpus
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
import corpus  # noqa: E402

GRAPHTOOL = os.path.join(os.path.dirname(sys.executable), "graphtool")
ORT_LOGGER = re.compile(r"\[[EWIVF]:onnxruntime:|\x1b\[")


def commands(path: str, tmp: str, opset: int | None) -> list[tuple[str, list[str]]]:
    l1 = os.path.join(tmp, "l1.onnx")
    return [
        ("inspect", ["inspect", path]),
        ("check", ["check", path]),
        ("optimize", ["optimize", path, "-o", l1]),
        ("optimize-l2", ["optimize", path, "-o", os.path.join(tmp, "l2.onnx"), "--level", "2", "--target", "ort"]),
        ("diff", ["diff", path, l1 if os.path.exists(l1) else path]),
        ("viz", ["viz", path, "-o", os.path.join(tmp, "v.html")]),
        ("convert", ["convert", path, "--opset", str(max(opset or 17, 17)), "-o", os.path.join(tmp, "c.onnx")]),
        ("compare", ["compare", path, "--levels", "1,2"]),
        ("tune", ["tune", path, "-o", os.path.join(tmp, "t.onnx"), "--budget", "5"]),
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
                rows.append({"model": name, "command": cmd, "rc": rc, "internal": err.count("internal error"),
                             "ort_logger": len(ORT_LOGGER.findall(err)), "traceback": "Traceback" in err,
                             "line": last[:200]})
                print(f"{name:<22} {cmd:<9} rc={rc} {last[:150]}", flush=True)
    return rows


def _bad_inputs(root: str) -> list[tuple[str, str, int | None]]:
    """tests/bad_inputs' corpus built into ``root`` (the fast cases; their model files)."""
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from pathlib import Path

    from tests.bad_inputs.make_bad_inputs import CASES, build

    out = []
    for case in CASES:
        if case.slow:
            continue
        out.append((case.name, str(build(case, Path(root))), None))  # a missing or odd file is a case too
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only")
    ap.add_argument("--manifest", help="a corpus manifest ({'models': {name: {'file': ...}}}) instead of bench/corpus.py's")
    ap.add_argument("--bad-inputs", action="store_true")
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args()
    only = args.only.split(",") if args.only else None
    with tempfile.TemporaryDirectory() as bad_root:
        if args.bad_inputs:
            paths = [p for p in _bad_inputs(bad_root) if not only or p[0] in only]
        elif args.manifest:
            doc = json.load(open(args.manifest))
            folder = os.path.dirname(os.path.abspath(args.manifest))
            paths = [(name, os.path.join(folder, m["file"]), None) for name, m in doc["models"].items()
                     if m.get("ok", True) and (not only or name in only)]
        else:
            models = corpus.models(only)
            paths = [(m["name"], m["path"], m["opset"]) for m in models]
        rows = sweep(paths)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    codes = collections.Counter((r["command"], r["rc"]) for r in rows)
    print(f"\n{len(rows)} runs on {len(paths)} models; internal errors: {sum(r['internal'] for r in rows)}; "
          f"onnxruntime logger lines: {sum(r['ort_logger'] for r in rows)}; tracebacks: {sum(r['traceback'] for r in rows)}")
    for (cmd, rc), n in sorted(codes.items(), key=str):
        print(f"  {cmd:<11} exit {rc}: {n}")


if __name__ == "__main__":
    main()
