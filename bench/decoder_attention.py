"""Attention fusion on today's decoder exports: counts vs layers, outputs at sizes built by hand.

    python bench/decoder_attention.py [/work/cache/today] [--target onnx --opset 23] [model ...]

Reads the corpus helper's manifest.json (tiny random-weight Llama/Qwen/Phi-3/Mistral/GPT-2
decoders with KV caches, BART/T5/Whisper decoders with cross-attention; both torch exporters,
fp16 and quantized variants), runs ``optimize(level=2, target="ort")``, and prints per model:
the attention ops reached against the layer count (and, where the recipe says what the torch
model has — ``--set unseen`` — rotary, RMS norm and LayerNorm ops reached against it), and the
largest difference from the original
on inputs built from the export's recipe — prefill (past 0), past 8 / new 4, a decode step
(past 9 / new 1); encoder-decoders with decoder 5 / encoder 12. A set the original itself
cannot run is named and skipped. Nothing is downloaded; models come from the corpus folder.

``--target onnx --opset 23``: each export is first converted to opset 23 (``graphtool.convert``,
onnx's version converter, verified), then ``optimize(level=2, target="onnx")``; the rows count
ONNX Attention, RotaryEmbedding and RMSNormalization, outputs compared with the converted export.
"""

from __future__ import annotations

import collections
import json
import os
import re
import sys
import time

import numpy as np
import onnx

from graphtool import io
from graphtool.convert import convert
from graphtool.ir.to_onnx import to_onnx
from graphtool.optimize import optimize
from graphtool.runtime import make_session

SETS = [("prefill", dict(past=0, new=7, enc=12, batch=2)), ("past8/new4", dict(past=8, new=4, enc=12, batch=2)),
        ("decode", dict(past=9, new=1, enc=12, batch=3)), ("dec5/enc12", dict(past=3, new=5, enc=12, batch=2))]
ATTENTION = {"com.microsoft:MultiHeadAttention": "MHA", "com.microsoft:Attention": "Att",
             "com.microsoft:GroupQueryAttention": "GQA", "Attention": "onnx-Att"}
STANDARD = {"RotaryEmbedding": "rot", "RMSNormalization": "rms"}


def _dtype(model: onnx.ModelProto, name: str) -> np.dtype:
    for i in model.graph.input:
        if i.name == name:
            return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type))
    raise KeyError(name)


def build_inputs(model: onnx.ModelProto, recipe: dict, past: int, new: int, enc: int, batch: int,
                 seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    names = {i.name for i in model.graph.input}
    feeds: dict[str, np.ndarray] = {}
    total = past + new
    feeds[recipe["input_ids"]] = rng.integers(3, 90, (batch, new)).astype(_dtype(model, recipe["input_ids"]))
    if recipe.get("attention_mask") in names:
        mask = np.ones((batch, total), np.int64)
        mask[1:, : min(2, total - 1)] = 0  # left padding on the second sequence
        feeds[recipe["attention_mask"]] = mask.astype(_dtype(model, recipe["attention_mask"]))
    if recipe.get("position_ids") in names:
        positions = np.broadcast_to(np.arange(past, total), (batch, new))
        feeds[recipe["position_ids"]] = positions.astype(_dtype(model, recipe["position_ids"]))
    if recipe.get("encoder_hidden_states") in names:
        name = recipe["encoder_hidden_states"]
        feeds[name] = rng.standard_normal((batch, enc, recipe["encoder_hidden"])).astype(_dtype(model, name))
    if recipe.get("encoder_attention_mask") in names:
        mask = np.ones((batch, enc), np.int64)
        mask[1:, enc - 3:] = 0
        feeds[recipe["encoder_attention_mask"]] = mask.astype(_dtype(model, recipe["encoder_attention_mask"]))
    for name, spec in recipe.get("past", {}).items():
        length = enc if ".encoder." in name else past
        feeds[name] = rng.standard_normal((batch, spec["heads"], length, spec["head_dim"])).astype(_dtype(model, name))
    for i in model.graph.input:
        if i.name not in feeds:
            raise ValueError(f"no recipe for input {i.name}")
    return feeds


def expected_attention(recipe: dict) -> int:
    # the layer is the first number in a cache input's name: past_key_values.3.key, input.cache.layers.3.keys
    layers = len({re.search(r"\d+", k).group() for k in recipe.get("past", {})})
    return layers * (2 if recipe["kind"] == "seq2seq_decoder" else 1)


ROTARY = ("com.microsoft:RotaryEmbedding", "RotaryEmbedding")
RMS = ("SimplifiedLayerNormalization", "com.microsoft:SkipSimplifiedLayerNormalization", "RMSNormalization")
LAYER_NORM = ("LayerNormalization", "com.microsoft:SkipLayerNormalization", "com.microsoft:EmbedLayerNormalization")


def fused_vs_expected(counts: collections.Counter, recipe: dict) -> str:
    """rotary, RMS norm and LayerNorm ops written against what the torch model has (the recipe's
    ``expect``, counted on the torch modules by today_corpus.py --set unseen); '-' without it."""
    expect = recipe.get("expect")
    if not expect:
        return f"{'-':>7} {'-':>7} {'-':>7}"
    cells = [f"{sum(counts[o] for o in ops)}/{expect[key]}"
             for ops, key in ((ROTARY, "rotary"), (RMS, "rmsnorm"), (LAYER_NORM, "layernorm"))]
    return " ".join(f"{c:>7}" for c in cells)


def op_counts(model) -> collections.Counter:
    return collections.Counter(f"{n.domain}:{n.op_type}" if n.domain not in ("", "ai.onnx") else n.op_type
                               for n in model.graph.nodes())


def _option(argv: list[str], flag: str, default: str | None) -> str | None:
    if flag in argv:
        i = argv.index(flag)
        value = argv[i + 1]
        del argv[i:i + 2]
        return value
    return default


def main(argv: list[str]) -> None:
    argv = list(argv)
    target = _option(argv, "--target", "ort")
    opset = _option(argv, "--opset", None)
    folder = argv[0] if argv and os.path.isdir(argv[0]) else "/work/cache/today"
    wanted = [a for a in argv if not os.path.isdir(a)]
    manifest = json.load(open(os.path.join(folder, "manifest.json")))["models"]
    print(f"{'model':22} {'attention':>10} {'layers':>6} {'rotary':>7} {'rms':>7} {'ln':>7}  {'nodes':>11}"
          "  outputs (max abs diff per input set)")
    for name, entry in manifest.items():
        if wanted and name not in wanted or not entry.get("ok"):
            continue
        path = os.path.join(folder, entry["file"])
        proto = onnx.load(path)
        recipe = entry["recipe"]
        model = io.load(path)
        if opset is not None:
            try:
                model = convert(model, int(opset)).model
            except Exception as e:
                print(f"{name:22} conversion to opset {opset} refused: {str(e).splitlines()[0][:100]}", flush=True)
                continue
            proto = to_onnx(model)
        start = time.time()
        fused, _, _ = optimize(model, level=2, target=target)
        seconds = time.time() - start
        counts = op_counts(fused)
        kinds = "+".join(f"{counts[a]} {short}" for a, short in ATTENTION.items() if counts[a])
        extra = " ".join(f"{counts[a]} {short}" for a, short in STANDARD.items() if counts[a])
        if extra:
            seconds_note = f"{extra}, "
        else:
            seconds_note = ""
        original, ours = make_session(model if opset is not None else path), make_session(fused)
        results = []
        for label, sizes in SETS:
            if label == "dec5/enc12" and recipe["kind"] != "seq2seq_decoder":
                continue
            feeds = build_inputs(proto, recipe, **sizes)
            try:
                want = original.run(None, feeds)
            except Exception as e:  # the export itself cannot run this set
                results.append(f"{label}: original fails ({str(e).splitlines()[0][:60]})")
                continue
            try:
                got = ours.run(None, feeds)
                diff = max(float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)))) for a, b in zip(want, got))
                results.append(f"{label}: {diff:.1e}")
            except Exception as e:
                results.append(f"{label}: OURS FAILS {str(e).splitlines()[0][:80]}")
        print(f"{name:22} {kinds or '0':>10} {expected_attention(recipe):>6} {fused_vs_expected(counts, recipe)}"
              f"  {len(proto.graph.node):>4} -> {fused.node_count():<4}"
              f"  {'; '.join(results)}  ({seconds_note}{seconds:.1f} s)", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
