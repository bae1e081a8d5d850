"""Export the decoders bench/decoder_latency.py times: Llama, Qwen2, Qwen3 and Mistral with grouped
KV heads, random weights, sized so a decode step takes 5 ms or more at one thread.

today_corpus.py's tiny decoders (hidden 64, 2 layers) run a decode step in ~0.2 ms: at that size
session overhead, not kernels, decides any ranking. These are the same wrappers and exporters
(``today_corpus.DecoderWithPast``: ids, a mask over past+new, positions, flat past K/V in,
logits and presents out; optimum's names) at hidden 512, 6 layers, 8 query heads over 2 KV heads
(Qwen3: head_dim 64 and its q/k RMSNorm), vocab 2048. Every export is checked against torch
(``today_corpus.check_against_torch``) and written to ``manifest.json`` with its recipe, as the
today corpus is. Models live under /work/cache (never committed); nothing is downloaded.

    /work/cache/torchvenv/bin/python bench/decoder_latency_models.py [--out /work/cache/decoder_latency]
        [--only llama,qwen3] [--exporters torchscript,dynamo]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import today_corpus as tc

SIZE = {"vocab_size": 2048, "hidden_size": 512, "intermediate_size": 1536, "num_hidden_layers": 6,
        "max_position_embeddings": 512, "num_attention_heads": 8, "num_key_value_heads": 2}
FAMILIES = {
    "llama": tc._causal("Llama", **SIZE),
    "qwen2": tc._causal("Qwen2", **SIZE),
    "qwen3": tc._causal("Qwen3", head_dim=64, **SIZE),
    "mistral": tc._causal("Mistral", sliding_window=None, **SIZE),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="/work/cache/decoder_latency")
    ap.add_argument("--only", default=",".join(FAMILIES))
    ap.add_argument("--exporters", default="torchscript,dynamo")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tc.VOCAB = SIZE["vocab_size"]
    tc.DECODERS.update(FAMILIES)
    manifest_path = out / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    manifest.setdefault("meta", {}).update(torch=tc.torch.__version__, transformers=tc.transformers.__version__,
                                          size=SIZE)
    models = manifest.setdefault("models", {})
    for family in args.only.split(","):
        for exporter in args.exporters.split(","):
            name = f"{family}_{exporter}"
            path = out / f"{name}.onnx"
            entry = {"file": path.name, "family": family, "exporter": exporter, "dtype": "float32", "kv_cache": True}
            start = time.perf_counter()
            try:
                wrapper, names, outputs, sample, axes, recipe = tc.spec_for(family)
                tc.export(wrapper, names, outputs, sample, axes, path, exporter)
                entry["recipe"] = recipe
                entry["export_check"] = tc.check_against_torch(family, path, names, recipe)
                entry["ok"] = entry["export_check"].startswith("ok")
            except Exception as exc:  # noqa: BLE001 -- recorded in the manifest, never hidden
                entry["ok"] = False
                entry["failure"] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300]}"
            entry["export_seconds"] = round(time.perf_counter() - start, 1)
            models[name] = entry
            manifest_path.write_text(json.dumps(manifest, indent=1))
            print(f"{name:20s} {'ok' if entry['ok'] else 'FAILED'} {entry.get('export_check') or entry.get('failure')}"
                  f" ({entry['export_seconds']} s)", flush=True)


if __name__ == "__main__":
    main()
