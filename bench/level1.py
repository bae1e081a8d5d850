"""Level 1 side by side: graphtool vs ORT basic, onnxsim and onnxslim — nodes and seconds.

    python bench/level1.py [--models light_resnet50,bert_ts] [--out bench/out]
    python bench/level1.py --corpus --out /tmp/corpus   # the wheel's other 140 models

The bar (issue: pass framework, level 1): graphtool's node count ≤ the best peer's and its wall
time ≤ onnxslim's on every model. Rows that miss the bar are marked.
"""

from __future__ import annotations

import argparse
import glob
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

from peers import measure, outputs_equal  # noqa: E402

PEERS = ("ort-basic", "onnxsim", "onnxslim")


def _wheel_data(*parts: str) -> str:
    """A folder of the onnx wheel's backend test data."""
    import onnx

    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", *parts)


def bench_models() -> dict[str, tuple[str, str | None]]:
    """name → (path, inputs.npz or None): the light/ models and the torch exports."""
    light = _wheel_data("light")
    models: dict[str, tuple[str, str | None]] = {}
    for path in sorted(glob.glob(os.path.join(light, "*.onnx"))):
        models[os.path.basename(path)[:-5]] = (path, None)
    torch_dir = os.path.join(os.path.dirname(HERE), "fixtures", "torch")
    for path in sorted(glob.glob(os.path.join(torch_dir, "*.onnx"))):
        name = os.path.basename(path)[:-5]
        inputs = os.path.join(torch_dir, f"{name}.inputs.npz")
        models[name] = (path, inputs if os.path.exists(inputs) else None)
    return models


def corpus_models() -> dict[str, tuple[str, str | None]]:
    """The onnx wheel's other on-disk models (pytorch-converted, pytorch-operator, simple): a
    check on graphs the passes were not tuned on."""
    models: dict[str, tuple[str, str | None]] = {}
    for family in ("pytorch-converted", "pytorch-operator", "simple"):
        for path in sorted(glob.glob(os.path.join(_wheel_data(family), "*", "model.onnx"))):
            models[f"{family}/{os.path.basename(os.path.dirname(path))}"] = (path, None)
    return models


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help="comma-separated subset")
    parser.add_argument("--out", default=os.path.join(HERE, "out"))
    parser.add_argument("--corpus", action="store_true", help="the wheel's pytorch-converted/-operator and simple models instead")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    models = corpus_models() if args.corpus else bench_models()
    if args.models:
        models = {k: v for k, v in models.items() if k in args.models.split(",")}
    header = ["model", "graphtool", *PEERS, "best peer", "gt s", *(f"{p} s" for p in PEERS), "gt/slim time", "max |diff|", "bar"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    misses = 0
    for name, (path, inputs) in models.items():
        row = {}
        for tool in ("graphtool", *PEERS):
            out = os.path.join(args.out, f"{name.replace('/', '_')}.{tool}.onnx")
            row[tool] = measure(tool, path, out)
            row[tool]["out"] = out
        gt = row["graphtool"]
        peer_nodes = [row[p]["nodes"] for p in PEERS if "nodes" in row[p]]
        best = min(peer_nodes) if peer_nodes else None
        diff = outputs_equal(path, gt["out"], inputs) if "nodes" in gt else None
        slim_s = row["onnxslim"].get("seconds")
        ratio = gt["seconds"] / slim_s if slim_s and "seconds" in gt else None
        ok = ("nodes" in gt and best is not None and gt["nodes"] <= best and ratio is not None and ratio <= 1.0
              and diff is not None and diff < 1e-3)
        misses += not ok
        cells = [name, gt.get("nodes", gt.get("error")), *(row[p].get("nodes", "err") for p in PEERS), best,
                 f"{gt.get('seconds', float('nan')):.2f}", *(f"{row[p].get('seconds', float('nan')):.2f}" for p in PEERS),
                 f"{ratio:.2f}" if ratio else "-", f"{diff:.1e}" if diff is not None else "FAIL", "ok" if ok else "MISS"]
        print("| " + " | ".join(str(c) for c in cells) + " |", flush=True)
    print(f"\n{len(models) - misses}/{len(models)} models meet the bar")


if __name__ == "__main__":
    main()
