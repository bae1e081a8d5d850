"""What verification's input search costs, model by model: attempts until the original ran, input
sets run, seconds for ``verify(model, model)`` (search + every set on both sides).

Run it with two checkouts' interpreters in the same session and compare (issue 32, must show 4:
models that verified before need no more attempts; median and worst extra seconds):

    /work/main/.venv/bin/python bench/verify_cost.py --json > before.jsonl
    .venv/bin/python bench/verify_cost.py --json > after.jsonl
    python bench/verify_cost.py --compare before.jsonl after.jsonl

Models: fixtures/ (top level, verify/, hf/, torch/) and the onnx wheel's light/, pytorch-converted/,
pytorch-operator/ and simple/ models (nothing downloaded).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def models() -> list[str]:
    import onnx

    fixtures = os.path.join(ROOT, "fixtures")
    paths = sorted(glob.glob(os.path.join(fixtures, "*.onnx")))
    for sub in ("verify", "hf", "torch"):
        paths += sorted(glob.glob(os.path.join(fixtures, sub, "*.onnx")))
    data = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")
    paths += sorted(glob.glob(os.path.join(data, "light", "*.onnx")))
    for kind in ("pytorch-converted", "pytorch-operator", "simple"):
        paths += sorted(glob.glob(os.path.join(data, kind, "*", "model.onnx")))
    return paths


def measure(path: str) -> dict:
    from graphtool import io
    from graphtool.verify import verify

    name = os.path.relpath(path, ROOT) if path.startswith(ROOT) else "/".join(path.split(os.sep)[-3:])
    try:
        model = io.load(path)
    except Exception as err:  # noqa: BLE001 - a model graphtool does not load is not part of this measure
        return {"model": name, "status": "load", "error": str(err)[:100]}
    start = time.perf_counter()
    try:
        result = verify(model, model, original_path=path)
    except Exception as err:  # noqa: BLE001 - recorded: the model did not run on anything tried
        return {"model": name, "status": "refused", "seconds": time.perf_counter() - start,
                "error": str(err)[:160]}
    found = result.discovery
    return {"model": name, "status": "ok" if result.ok else "mismatch", "seconds": time.perf_counter() - start,
            "attempts": found.attempts if found else 0, "sets": len(result.sets),
            "search_seconds": found.extra_seconds if found else 0.0}


def compare(before_path: str, after_path: str) -> None:
    def read(p: str) -> dict[str, dict]:
        return {r["model"]: r for r in map(json.loads, open(p)) if r.get("status") != "load"}

    before, after = read(before_path), read(after_path)
    common = [m for m in before if m in after]
    verified_before = [m for m in common if before[m]["status"] == "ok"]
    more = [m for m in verified_before if after[m].get("attempts", 99) > before[m]["attempts"]]
    lost = [m for m in verified_before if after[m]["status"] != "ok"]
    gained = [m for m in common if before[m]["status"] != "ok" and after[m]["status"] == "ok"]
    extra = [after[m]["seconds"] - before[m]["seconds"] for m in verified_before if after[m]["status"] == "ok"]
    print(f"models: {len(common)}; verified before {len(verified_before)}, after "
          f"{sum(after[m]['status'] == 'ok' for m in common)}; verified before and not after: {len(lost)} {lost[:5]}")
    print(f"verified now and not before: {len(gained)} {gained[:8]}")
    print(f"models that verified before and need more attempts now: {len(more)} {more[:5]}")
    if extra:
        worst = max(range(len(extra)), key=lambda i: extra[i])
        print(f"extra seconds per model (verify(model, model), after - before): median {statistics.median(extra):+.3f}, "
              f"worst {extra[worst]:+.3f} ({[m for m in verified_before if after[m]['status'] == 'ok'][worst]})")
        print(f"sets per model: before median {statistics.median(before[m]['sets'] for m in verified_before):.0f}, "
              f"after median {statistics.median(after[m]['sets'] for m in verified_before if after[m]['status'] == 'ok'):.0f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"))
    ap.add_argument("--only", help="substring of model paths")
    args = ap.parse_args()
    if args.compare:
        compare(*args.compare)
        return
    for path in models():
        if args.only and args.only not in path:
            continue
        row = measure(path)
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    sys.exit(main())
