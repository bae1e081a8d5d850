"""An LLM-size decoder for the viewer bench (issue 36, must-show 1): a real ``torch.onnx.export``
(dynamo) of a transformers decoder with a KV cache, 32 layers, a small hidden size and random
weights, so ``bench/viewer_scale.py`` measures the page on what the exporter really writes (its
op names, ``pkg.torch.onnx.name_scopes`` metadata, shape arithmetic), not on a hand-built graph.

Runs in the torch venv (the project itself never needs torch); the model goes under /work/cache,
never into the repository. The wrapper, names and dynamic axes are ``today_corpus``'s (the decoder
as optimum names it: ``input_ids``, ``attention_mask``, ``position_ids``, ``past_key_values.N.key``
in; ``logits``, ``present.N.key`` out); only the depth differs. The export is checked against torch
through onnxruntime on one input set (past 8, new 4).

    /work/cache/torchvenv/bin/python bench/viewer_decoder.py [--family llama] [--layers 32] \
        [--out /work/cache/viewer]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import today_corpus as tc  # the torch venv


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", default="llama", choices=["llama", "qwen3"])
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--out", default="/work/cache/viewer")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    name = f"{args.family}{args.layers}_dynamo"
    cfg = dict(tc.COMMON, num_hidden_layers=args.layers)
    extra = {"head_dim": 16} if args.family == "qwen3" else {}
    tc.DECODERS[name] = tc._causal("Llama" if args.family == "llama" else "Qwen3", num_attention_heads=4,
                                   num_key_value_heads=2, **extra, **cfg)
    wrapper, names, outputs, sample, axes, recipe = tc.spec_for(name)
    path = out / f"{name}.onnx"
    start = time.perf_counter()
    tc.export(wrapper, names, outputs, sample, axes, path, "dynamo")
    seconds = time.perf_counter() - start
    check = tc.check_against_torch(name, path, names, recipe)
    import onnx

    proto = onnx.load(str(path), load_external_data=False)
    info = {"file": path.name, "family": args.family, "layers": args.layers, "exporter": "torch.onnx.export(dynamo=True)",
            "torch": tc.torch.__version__, "transformers": tc.transformers.__version__, "export_seconds": round(seconds, 1),
            "nodes": len(proto.graph.node), "check": check, "bytes": os.path.getsize(path)}
    (out / f"{name}.json").write_text(json.dumps(info, indent=1))
    print(json.dumps(info))


if __name__ == "__main__":
    main()
