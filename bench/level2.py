"""Level 2 side by side: graphtool's fusions vs ORT extended, ORT's transformer optimizer, onnxscript.

    python bench/level2.py [--only light|torch] [--no-torchenv]

Three tables (markdown):

1. light/ CNNs — ``optimize(level=2, target="ort")`` node count beside ORT extended's (the
   optimized file ORT writes), and max |diff| of the outputs on seeded random inputs.
2. torch exports, ``--target onnx`` — how many LayerNorm / GELU subgraphs the original has, how
   many LayerNormalization / Gelu ops come out (Gelu needs opset 20: the TorchScript exports are at
   17), what is left of the decomposed forms, and max |diff| on the fixture's own inputs.
3. torch exports, ``--target ort`` — node count beside ORT extended, the best of
   ``onnxruntime.transformers.optimizer.optimize_model`` at opt_level 0/1/2 (levels 1 and 2 import
   torch, so they run in /work/torchenv), and onnxscript's ``ort_fusions.optimize_for_ort``; then
   graphtool's max |diff| against the original and against the torch outputs.
"""

from __future__ import annotations

import argparse
import collections
import logging
import os
import subprocess
import sys
import tempfile
import warnings

import numpy as np
import onnx

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

from graphtool import io  # noqa: E402
from graphtool.optimize import optimize  # noqa: E402
from graphtool.runtime import make_session, random_inputs  # noqa: E402

LIGHT = ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet", "squeezenet",
         "vgg19", "zfnet512"]
ORT_EXTENDED_BAR = {"bvlc_alexnet": 15, "densenet121": 432, "inception_v1": 83, "inception_v2": 110, "resnet50": 90,
                    "shufflenet": 137, "squeezenet": 39, "vgg19": 26, "zfnet512": 15}
TORCH = [f"{m}_{e}" for m in ("bert", "gpt2", "vit") for e in ("ts", "dynamo")]
TORCHENV = "/work/torchenv/bin/python"

ORT_T_SCRIPT = r"""
import sys, json, warnings, logging
warnings.filterwarnings("ignore"); logging.disable(logging.WARNING)
from onnxruntime.transformers.optimizer import optimize_model
path, kind, level = sys.argv[1], sys.argv[2], int(sys.argv[3])
m = optimize_model(path, model_type=kind, num_heads=4, hidden_size=64, opt_level=level, use_gpu=False)
print(json.dumps(len(m.model.graph.node)))
"""


def onnx_count(path: str) -> int:
    return len(onnx.load(path, load_external_data=False).graph.node)


def ort_extended(path: str) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "ext.onnx")
        make_session(path, "extended", optimized_path=out)
        return onnx_count(out)


def max_diff(original, rewritten, feeds) -> float:
    a = make_session(original).run(None, feeds)
    sess = make_session(rewritten)
    names = {i.name for i in sess.get_inputs()}
    b = sess.run(None, {k: v for k, v in feeds.items() if k in names})
    return max(float(np.max(np.abs(x.astype(np.float64) - y.astype(np.float64)))) for x, y in zip(a, b))


def ort_transformers(path: str, kind: str, level: int, torchenv: bool) -> int | None:
    """Node count of onnxruntime.transformers.optimize_model; levels >= 1 import torch."""
    if level == 0:
        from onnxruntime.transformers.optimizer import optimize_model

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            logging.disable(logging.WARNING)
            try:
                return len(optimize_model(path, model_type=kind, num_heads=4, hidden_size=64, opt_level=0).model.graph.node)
            finally:
                logging.disable(logging.NOTSET)
    if not torchenv or not os.path.exists(TORCHENV):
        return None
    proc = subprocess.run([TORCHENV, "-c", ORT_T_SCRIPT, path, kind, str(level)], capture_output=True, text=True, timeout=600)
    lines = [line for line in proc.stdout.splitlines() if line.strip().isdigit()]
    return int(lines[-1]) if lines else None


def onnxscript_count(path: str) -> int | None:
    try:
        import onnx_ir as ir
        from onnxscript.rewriter.ort_fusions import optimize_for_ort
    except ImportError:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        logging.disable(logging.WARNING)
        try:
            model = ir.load(path)
            optimize_for_ort(model)
            return len(model.graph)
        except Exception:  # noqa: BLE001 - a peer failing is a table cell, not a crash
            return None
        finally:
            logging.disable(logging.NOTSET)


def light_table() -> None:
    data = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
    print("## light/ models: optimize(level=2, target='ort') vs ORT extended\n")
    print("| model | original | ORT extended | graphtool L2 ort | bar (≤ ORT ext) | max abs diff |")
    print("|---|---|---|---|---|---|")
    for name in LIGHT:
        path = os.path.join(data, f"light_{name}.onnx")
        model = io.load(path)
        fused, report, _ = optimize(model, level=2, target="ort")
        feeds = random_inputs(make_session(model), 0)
        diff = max_diff(model, fused, feeds)
        ext = ort_extended(path)
        ok = "ok" if report.nodes_after <= ext else "MISS"
        print(f"| {name} | {report.nodes_before} | {ext} | {report.nodes_after} | {ok} | {diff:.1e} |", flush=True)


def _histogram(model) -> collections.Counter:
    return collections.Counter(n.op_type for n in model.graph.nodes())


def torch_tables(torchenv: bool) -> None:
    fixtures = os.path.join(ROOT, "fixtures", "torch")
    print("\n## torch exports, --target onnx (level 2): LayerNorm / GELU subgraphs → one op each\n")
    print("| model | opset | LN subgraphs (orig) | LayerNormalization out | GELU subgraphs (orig) | Gelu out | "
          "decomposed left (ReduceMean/Erf/Tanh) | nodes | max abs diff |")
    print("|---|---|---|---|---|---|---|---|---|")
    rows = []
    for name in TORCH:
        path = os.path.join(fixtures, f"{name}.onnx")
        model = io.load(path)
        feeds = dict(np.load(os.path.join(fixtures, f"{name}.inputs.npz")))
        orig = _histogram(model)
        ln_sub = orig["ReduceMean"] // 2 + orig["LayerNormalization"]
        gelu_sub = orig["Erf"] + orig["Tanh"] + orig["Gelu"]
        fused, report, _ = optimize(model, level=2, target="onnx")
        h = _histogram(fused)
        left = h["ReduceMean"] + h["Erf"] + h["Tanh"]
        diff = max_diff(model, fused, feeds)
        print(f"| {name} | {model.opset('')} | {ln_sub} | {h['LayerNormalization']} | {gelu_sub} | {h['Gelu']} | {left} | "
              f"{report.nodes_before} → {report.nodes_after} | {diff:.1e} |", flush=True)
        rows.append((name, path, model, feeds))

    print("\n## torch exports, --target ort (level 2) vs peers (node counts)\n")
    print("| model | original | ORT extended | ORT transformers opt 0 / 1 / 2 | onnxscript optimize_for_ort | best peer | "
          "graphtool L2 ort | bar | max abs diff vs original | vs torch |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, path, model, feeds in rows:
        kind = "gpt2" if name.startswith("gpt2") else "bert"
        ext = ort_extended(path)
        ortt = [ort_transformers(path, kind, level, torchenv) for level in (0, 1, 2)]
        osc = onnxscript_count(path)
        peers = [c for c in (ext, *ortt, osc) if c is not None]
        best = min(peers)
        fused, report, _ = optimize(model, level=2, target="ort")
        diff = max_diff(model, fused, feeds)
        expected = dict(np.load(os.path.join(os.path.dirname(path), f"{name}.expected.npz")))
        sess = make_session(fused)
        got = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
        vs_torch = max(float(np.max(np.abs(got[k] - v))) for k, v in expected.items())
        ortt_cell = " / ".join("-" if c is None else str(c) for c in ortt)
        ok = "ok" if report.nodes_after <= best else "MISS"
        print(f"| {name} | {report.nodes_before} | {ext} | {ortt_cell} | {osc if osc is not None else '-'} | {best} | "
              f"{report.nodes_after} | {ok} | {diff:.1e} | {vs_torch:.1e} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=("light", "torch"))
    parser.add_argument("--no-torchenv", action="store_true", help="skip ORT transformers opt_level 1/2 (needs torch)")
    args = parser.parse_args()
    if args.only in (None, "light"):
        light_table()
    if args.only in (None, "torch"):
        torch_tables(not args.no_torchenv)


if __name__ == "__main__":
    main()
