"""Export today's generative models (tiny, random weights) with a KV cache, for issues 32 and 33.

Why
---
graphtool's verification and fusions have to be measured on the graphs people optimize now:
decoders with a KV cache (Llama, Qwen2, Qwen3, Phi-3, Mistral with grouped KV heads, GPT-2) and
the decoders of encoder-decoders with cross-attention (BART, T5, Whisper), as both torch
exporters emit them, plus fp16 and quantized variants. None of these may live in the repository
(issue 32: "never committed"), and nothing may be downloaded: every model is built from a tiny
seeded config (hidden 64, 2 layers, vocab 512), so this script only needs the torch venv.

This script only *builds* the corpus; ``bench/today_verify.py`` (project venv) measures graphtool
on it. What the two share is ``manifest.json``: per model its file, family, exporter, dtype and the
recipe for hand-built inputs (which inputs are past K/V with their head count and head dim, which
is the mask and how long it must be, positions, encoder states). A failed export is written into
the manifest with its reason, never skipped silently.

Inputs and outputs are named as HF/optimum name them: ``input_ids``, ``attention_mask``,
``position_ids``, ``past_key_values.{i}.key/.value`` (encoder-decoders:
``past_key_values.{i}.decoder.key/.value`` and, for Whisper, the cross-attention cache
``past_key_values.{i}.encoder.key/.value``), ``encoder_hidden_states``, ``encoder_attention_mask``;
outputs ``logits`` and ``present.{i}.key/.value`` (``present.{i}.decoder.key/.value``).
A third exporter, transformers' own ``transformers.exporters.OnnxExporter`` (experimental in 5.x,
dynamo underneath), exports Llama and Qwen3 from the model and a ``DynamicCache`` directly; it names
the cache ``input.cache.layers.{i}.keys/.values`` / ``output.cache.layers.{i}.keys/.values``, and
that spelling is kept: recognizing a KV cache must not depend on one naming convention.

Every export is checked here against torch on the recipe's inputs (past 8 / new 4), so a recipe
that does not match the model is caught at build time (``export_check`` in the manifest).

    /work/cache/torchvenv/bin/python bench/today_corpus.py --out /work/cache/today [--only llama,gpt2]
        [--exporters torchscript,dynamo,transformers]
    /work/cache/torchvenv/bin/python bench/today_corpus.py --set unseen --exporters torchscript,dynamo
        (families not developed on, UNSEEN below, into /work/cache/unseen with its own manifest.json)
    /work/cache/torchvenv/bin/python bench/today_corpus.py --set unseen2 --exporters torchscript,dynamo
        (a second unseen batch, UNSEEN2/UNSEEN2_ENC_DECS below: RoPE scaling as released checkpoints
        configure it, GPT-J, GPT-BigCode, OPT, BLOOM, CodeGen, Cohere, Starcoder2, mBART, Marian,
        Pegasus, mT5; into /work/cache/unseen2)
"""

from __future__ import annotations

import argparse
import inspect
import json
import re
import time
import traceback
import warnings
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import torch
import transformers
from today_inputs import (  # numpy/onnx only, shared with today_verify.py
    VOCAB,
    hand_inputs,
)
from torch import nn
from transformers.cache_utils import DynamicCache, EncoderDecoderCache

SEED = 0
# Sizes used to trace the export: every dim distinct and >= 2 so no exporter specializes them.
TRACE = {"batch": 2, "past": 3, "seq": 2, "enc": 6}


# --- the families -------------------------------------------------------------------------------

def _causal(cls_name: str, config_name: str | None = None, **cfg):
    def build():
        config = getattr(transformers, config_name or cls_name + "Config")(**cfg)
        return getattr(transformers, cls_name + "ForCausalLM")(config).eval(), config
    return build


COMMON = {"vocab_size": VOCAB, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
          "max_position_embeddings": 256}
DECODERS = {  # all take position_ids; all but Phi-3 have grouped KV heads, as the released models do
    "llama": _causal("Llama", num_attention_heads=4, num_key_value_heads=2, **COMMON),
    "qwen2": _causal("Qwen2", num_attention_heads=4, num_key_value_heads=2, **COMMON),
    "qwen3": _causal("Qwen3", num_attention_heads=4, num_key_value_heads=2, head_dim=16, **COMMON),
    "phi3": _causal("Phi3", num_attention_heads=4, num_key_value_heads=4, pad_token_id=0, **COMMON),
    "mistral": _causal("Mistral", num_attention_heads=8, num_key_value_heads=2, sliding_window=None, **COMMON),
}


def _gpt2():
    config = transformers.GPT2Config(vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=4, n_positions=256,
                                     bos_token_id=1, eos_token_id=2)
    return transformers.GPT2LMHeadModel(config).eval(), config


DECODERS["gpt2"] = _gpt2

# --set unseen: decoder families graphtool was not developed on (issue 33's re-measurement), each in the
# form its released checkpoints have, shrunk: the layer quirks are kept (Gemma's (1+w) RMSNorm,
# GELU-tanh MLP, q/k norms and a sliding-window layer; Gemma 2's logit soft-capping; SmolLM3's NoPE
# layer; Granite's multipliers; OLMo 2's norms after attention/MLP and over the whole q/k projection;
# Phi-4-mini's partial rotary with grouped KV; StableLM/GPT-NeoX's partial rotary and LayerNorm;
# Falcon's new decoder architecture; MoE MLPs). The sliding window (5) is shorter than the hand-built
# past 8 / new 4 so the window is exercised, not only present in the graph.
_TOKENS = {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}
_GQA = {"num_attention_heads": 4, "num_key_value_heads": 2}
def _jittered(build):
    """The model with every norm's weight and bias drawn at random (seeded): freshly initialized norms
    are all ones/zeros, so two norms of a layer are one value to an exporter's or graphtool's CSE
    (GPT-NeoX's parallel norms merged) and a rule that swaps gammas would still give equal outputs.
    Released checkpoints have distinct norms; so do these."""
    def jittered():
        model, config = build()
        gen = torch.Generator().manual_seed(SEED + 1)
        with torch.no_grad():
            for module in model.modules():
                if "Norm" in type(module).__name__:
                    for param in module.parameters(recurse=False):
                        param.add_(torch.randn(param.shape, generator=gen) * 0.1)
        return model, config
    return jittered


def expected_layers(model, config) -> dict[str, int]:
    """What a full fusion reaches, counted on the torch model: its RMSNorm modules (class name ends
    in RMSNorm, or T5's RMS "LayerNorm": the q/k norms too), LayerNorms (nn.LayerNorm and Cohere's
    bias-free one), attention layers, and rotations (q and k of every layer that applies rotary, in
    a model that has a rotary module: SmolLM3's NoPE layers do not; OPT, BLOOM, BigCode have none).
    An encoder-decoder counts its decoder only (the export is the decoder)."""
    root = model.get_decoder() if config.is_encoder_decoder else model
    modules = list(root.modules())
    classes = [type(m).__name__ for m in modules]
    layers = kv_geometry(config)[0]
    rope_layers = sum(getattr(config, "no_rope_layers", None) or [1] * layers)
    rotary = any("Rotary" in c for c in classes)
    return {"attention": layers * (2 if config.is_encoder_decoder else 1), "rotary": 2 * rope_layers if rotary else 0,
            "rmsnorm": sum(c.endswith("RMSNorm") or c in ("T5LayerNorm", "MT5LayerNorm") for c in classes),
            "layernorm": sum(isinstance(m, nn.LayerNorm) or type(m).__name__ == "CohereLayerNorm" for m in modules)}


UNSEEN = {
    "gemma3": _causal("Gemma3", "Gemma3TextConfig", head_dim=16, sliding_window=5,
                      layer_types=["sliding_attention", "full_attention"], **_GQA, **_TOKENS, **COMMON),
    "gemma2": _causal("Gemma2", head_dim=16, sliding_window=5, **_GQA, **_TOKENS, **COMMON),
    "smollm3": _causal("SmolLM3", no_rope_layer_interval=2, **_GQA, **_TOKENS, **COMMON),
    "granite": _causal("Granite", embedding_multiplier=12.0, residual_multiplier=0.22,
                       attention_multiplier=0.0078125, logits_scaling=8.0, **_GQA, **_TOKENS, **COMMON),
    "olmo2": _causal("Olmo2", **_GQA, **_TOKENS, **COMMON),
    "phi4mini": _causal("Phi3", partial_rotary_factor=0.75, tie_word_embeddings=True, **_GQA, **_TOKENS, **COMMON),
    "stablelm": _causal("StableLm", partial_rotary_factor=0.25, use_qkv_bias=True, **_GQA, **_TOKENS, **COMMON),
    "gptneox": _causal("GPTNeoX", num_attention_heads=4, rotary_pct=0.25, **_TOKENS, **COMMON),
    "falcon": _causal("Falcon", vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                      new_decoder_architecture=True, num_kv_heads=2, **_TOKENS),
    # MoE: transformers 5's default experts code (grouped_mm) counts tokens with aten::histc, which no
    # exporter translates; "batched_mm" gathers each token's experts' weights (dense, traceable)
    "qwen2moe": _causal("Qwen2Moe", moe_intermediate_size=32, shared_expert_intermediate_size=64, num_experts=4,
                        num_experts_per_tok=2, experts_implementation="batched_mm", **_GQA, **_TOKENS, **COMMON),
    "mixtral": _causal("Mixtral", num_local_experts=4, num_experts_per_tok=2, experts_implementation="batched_mm",
                       **_GQA, **_TOKENS, **COMMON),
}
UNSEEN = {name: _jittered(build) for name, build in UNSEEN.items()}

# --set unseen2: a second batch nobody here developed on. RoPE scaling as released checkpoints configure
# it (``rope_parameters``, transformers 5's name for ``rope_scaling``), shrunk so the scaling matters at
# the hand-built sizes: Llama 3.x "llama3" (original 64 positions with head dim 16 puts the 8 frequencies
# in all three bands: kept, smoothed, divided by 8); Phi-3.5 / Phi-4-mini "longrope" with short and long
# factors and original 8 positions, so prefill (positions 0..6) takes the short and past 8 / new 4 the long
# factors (transformers picks them with torch.where on max(position_ids)+1, traceable: the graph holds
# both and the switch); Qwen2.5 "yarn" (its attention factor scales cos/sin); "dynamic" NTK (a Python
# branch on the sequence length: the exporters freeze the branch the trace took, within max positions
# that is plain RoPE). Then families with their own attention: GPT-J and CodeGen (interleaved partial
# rotary, CodeGen's fused qkv split in 4), GPT-BigCode (multi-query: one K/V head), OPT (learned positions
# from the mask's cumsum), BLOOM (ALiBi, no position input), Cohere (bias-free LayerNorm with the mean,
# parallel attention+MLP, interleaved rotary, logit scale), Starcoder2 (LayerNorm with bias, GQA,
# sliding window 5).
_ORIG = {"original_max_position_embeddings": 8}
UNSEEN2 = {
    "llama3": _causal("Llama", rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                                "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                "original_max_position_embeddings": 64}, **_GQA, **_TOKENS, **COMMON),
    "phi35": _causal("Phi3", rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0, **_ORIG,
                                              "short_factor": [1.0, 1.02, 1.05, 1.1, 1.2, 1.5, 2.0, 3.0],
                                              "long_factor": [1.0, 1.3, 2.0, 3.5, 6.0, 10.0, 16.0, 24.0]},
                     num_attention_heads=4, num_key_value_heads=4, **_ORIG, **_TOKENS, **COMMON),
    "phi4mini_longrope": _causal("Phi3", partial_rotary_factor=0.75, tie_word_embeddings=True,
                                 rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0, **_ORIG,
                                                  "partial_rotary_factor": 0.75,
                                                  "short_factor": [1.0, 1.05, 1.1, 1.3, 1.6, 2.0],
                                                  "long_factor": [1.0, 1.5, 3.0, 6.0, 12.0, 20.0]},
                                 **_ORIG, **_GQA, **_TOKENS, **COMMON),
    "qwen25_yarn": _causal("Qwen2", rope_parameters={"rope_type": "yarn", "rope_theta": 1000000.0, "factor": 4.0,
                                                     "original_max_position_embeddings": 64}, **_GQA, **_TOKENS, **COMMON),
    "llama_dynamic": _causal("Llama", rope_parameters={"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0},
                             **_GQA, **_TOKENS, **COMMON),
    "gptj": _causal("GPTJ", vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=4, rotary_dim=8, n_positions=256,
                    n_inner=128, **_TOKENS),
    "gpt_bigcode": _causal("GPTBigCode", vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=4, n_positions=256,
                           n_inner=128, multi_query=True, **_TOKENS),
    "opt": _causal("OPT", vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, ffn_dim=128, num_attention_heads=4,
                   max_position_embeddings=256, word_embed_proj_dim=64, **_TOKENS),
    "bloom": _causal("Bloom", vocab_size=VOCAB, hidden_size=64, n_layer=2, n_head=4, **_TOKENS),
    "codegen": _causal("CodeGen", vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=4, rotary_dim=8, n_positions=256,
                       n_ctx=256, n_inner=128, **_TOKENS),
    "cohere": _causal("Cohere", logit_scale=0.0625, **_GQA, **_TOKENS, **COMMON),
    "starcoder2": _causal("Starcoder2", sliding_window=5, use_bias=True, **_GQA, **_TOKENS, **COMMON),
}
UNSEEN2 = {name: _jittered(build) for name, build in UNSEEN2.items()}


def _bart():
    config = transformers.BartConfig(vocab_size=VOCAB, d_model=64, encoder_layers=2, decoder_layers=2,
                                     encoder_attention_heads=4, decoder_attention_heads=4,
                                     encoder_ffn_dim=128, decoder_ffn_dim=128, max_position_embeddings=256)
    return transformers.BartForConditionalGeneration(config).eval(), config


def _t5():
    config = transformers.T5Config(vocab_size=VOCAB, d_model=64, d_kv=16, d_ff=128, num_layers=2,
                                   num_decoder_layers=2, num_heads=4, decoder_start_token_id=0)
    return transformers.T5ForConditionalGeneration(config).eval(), config


def _whisper():
    config = transformers.WhisperConfig(vocab_size=VOCAB, d_model=64, encoder_layers=2, decoder_layers=2,
                                        encoder_attention_heads=4, decoder_attention_heads=4,
                                        encoder_ffn_dim=128, decoder_ffn_dim=128, num_mel_bins=16,
                                        max_source_positions=64, max_target_positions=64,
                                        pad_token_id=0, bos_token_id=1, eos_token_id=2,
                                        decoder_start_token_id=1)
    return transformers.WhisperForConditionalGeneration(config).eval(), config


# name: (builder, cross-attention K/V cached as inputs?)
ENC_DECS = {"bart": (_bart, False), "t5": (_t5, False), "whisper": (_whisper, True)}


def _seq2seq(cls_name: str, model_cls: str, **cfg):
    def build():
        config = getattr(transformers, cls_name + "Config")(**cfg)
        return getattr(transformers, model_cls)(config).eval(), config
    return build


_SEQ2SEQ = {"vocab_size": VOCAB, "d_model": 64, "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 4,
            "decoder_attention_heads": 4, "encoder_ffn_dim": 128, "decoder_ffn_dim": 128, "max_position_embeddings": 256,
            "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2, "decoder_start_token_id": 0}
# --set unseen2's encoder-decoders (decoder with cross-attention and a self-attention cache): mBART (pre-norm,
# embedding LayerNorm, scaled embeddings) and Pegasus (pre-norm, sinusoidal positions) with the cross K/V
# cached as inputs (Whisper's form); Marian (post-norm, sinusoidal) and mT5 (RMS norms, gated GELU,
# relative bias, unscaled scores) computing cross K/V from encoder states every step (BART/T5's form).
UNSEEN2_ENC_DECS = {
    "mbart": (_jittered(_seq2seq("MBart", "MBartForConditionalGeneration", scale_embedding=True, **_SEQ2SEQ)), True),
    "marian": (_jittered(_seq2seq("Marian", "MarianMTModel", decoder_vocab_size=VOCAB, **_SEQ2SEQ)), False),
    "pegasus": (_jittered(_seq2seq("Pegasus", "PegasusForConditionalGeneration", **_SEQ2SEQ)), True),
    "mt5": (_jittered(_seq2seq("MT5", "MT5ForConditionalGeneration", vocab_size=VOCAB, d_model=64, d_kv=16, d_ff=128,
                               num_layers=2, num_decoder_layers=2, num_heads=4, pad_token_id=0, eos_token_id=1,
                               decoder_start_token_id=0)), False),
}


def kv_geometry(config) -> tuple[int, int, int, int]:
    """(layers, kv heads, head dim, hidden) of the decoder's self-attention cache."""
    c = config
    if isinstance(c, transformers.GPT2Config):
        return c.n_layer, c.n_head, c.n_embd // c.n_head, c.n_embd
    if isinstance(c, (transformers.T5Config, transformers.MT5Config)):
        return c.num_decoder_layers, c.num_heads, c.d_kv, c.d_model
    if isinstance(c, (transformers.BartConfig, transformers.WhisperConfig, transformers.MBartConfig,
                      transformers.MarianConfig, transformers.PegasusConfig)):
        return c.decoder_layers, c.decoder_attention_heads, c.d_model // c.decoder_attention_heads, c.d_model
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    if isinstance(c, transformers.FalconConfig):  # the new architecture caches K/V repeated to every head
        kv_heads = c.num_attention_heads if c.new_decoder_architecture else 1 if c.multi_query else c.num_attention_heads
        return c.num_hidden_layers, kv_heads, head_dim, c.hidden_size
    kv_heads = getattr(c, "num_key_value_heads", None) or getattr(c, "num_kv_heads", None) or c.num_attention_heads
    return c.num_hidden_layers, kv_heads, head_dim, c.hidden_size


# --- wrappers: flat past tensors in, flat present tensors out ------------------------------------

def _cache_of(out):
    """The cache a forward returned (``cache`` since transformers 5.x, ``past_key_values`` before)."""
    cache = getattr(out, "cache", None)
    return cache if cache is not None else out.past_key_values


def _flat_presents(cache) -> list[torch.Tensor]:
    out = []
    for layer in cache.layers:
        out += [layer.keys, layer.values]
    return out


class DecoderWithPast(nn.Module):
    """A decoder-only LM as optimum exports it: ids, mask over past+new, positions, past K/V."""

    fixed_inputs = 3

    def __init__(self, model, layers: int):
        super().__init__()
        self.model, self.layers = model, layers

    def forward(self, input_ids, attention_mask, position_ids, *past):
        cache = DynamicCache([(past[2 * i], past[2 * i + 1]) for i in range(self.layers)])
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                         cache=cache, use_cache=True)
        return (out.logits, *_flat_presents(_cache_of(out)))


class DecoderWithPastNoPositions(DecoderWithPast):
    """A decoder whose forward takes no position ids (BLOOM: ALiBi from the mask): ids, mask, past K/V."""

    fixed_inputs = 2

    def forward(self, input_ids, attention_mask, *past):
        cache = DynamicCache([(past[2 * i], past[2 * i + 1]) for i in range(self.layers)])
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, cache=cache, use_cache=True)
        return (out.logits, *_flat_presents(_cache_of(out)))


class Seq2SeqDecoderWithPast(nn.Module):
    """The decoder of an encoder-decoder: encoder states + mask in, self-attention cache in and out.

    Cross-attention K/V are computed from ``encoder_hidden_states`` at every step (BART, T5), so a
    decoder length different from the encoder length is exercised on every call."""

    fixed_inputs = 3

    def __init__(self, model, layers: int):
        super().__init__()
        self.model, self.layers = model, layers

    def forward(self, input_ids, encoder_hidden_states, encoder_attention_mask, *past):
        cache = EncoderDecoderCache(DynamicCache([(past[2 * i], past[2 * i + 1]) for i in range(self.layers)]),
                                    DynamicCache())
        out = self.model(decoder_input_ids=input_ids, encoder_outputs=(encoder_hidden_states,),
                         attention_mask=encoder_attention_mask, cache=cache, use_cache=True)
        return (out.logits, *_flat_presents(_cache_of(out).self_attention_cache))


class CrossCachedDecoderWithPast(nn.Module):
    """Whisper's decode-step decoder (and mBART's, Pegasus' in --set unseen2): self-attention cache and
    the cross-attention cache (K/V of the encoder, computed once at prefill) are both inputs; there is
    no encoder_hidden_states input."""

    fixed_inputs = 1

    def __init__(self, model, layers: int, hidden: int):
        super().__init__()
        self.model, self.layers, self.hidden = model, layers, hidden

    def forward(self, input_ids, *past):
        selfs = [(past[4 * i], past[4 * i + 1]) for i in range(self.layers)]
        cross = [(past[4 * i + 2], past[4 * i + 3]) for i in range(self.layers)]
        cache = EncoderDecoderCache(DynamicCache(selfs), DynamicCache(cross))
        # Only its presence matters (the cross K/V come from the cache); its shape follows the cache.
        k = past[2]
        enc = k.new_zeros(k.shape[0], k.shape[2], self.hidden)
        out = self.model(decoder_input_ids=input_ids, encoder_outputs=(enc,), cache=cache, use_cache=True)
        return (out.logits, *_flat_presents(_cache_of(out).self_attention_cache))


# --- one model: wrapper, names, sample inputs, recipe ---------------------------------------------

def spec_for(family: str):
    """(wrapper, input names, output names, sample inputs, dynamic axes, recipe) for one family."""
    torch.manual_seed(SEED)
    b, p, s, e = TRACE["batch"], TRACE["past"], TRACE["seq"], TRACE["enc"]
    gen = torch.Generator().manual_seed(SEED)
    decoders, enc_decs = {**DECODERS, **UNSEEN, **UNSEEN2}, {**ENC_DECS, **UNSEEN2_ENC_DECS}
    if family in decoders:
        model, config = decoders[family]()
        layers, heads, head_dim, hidden = kv_geometry(config)
        positions = "position_ids" in inspect.signature(model.forward).parameters
        wrapper = (DecoderWithPast if positions else DecoderWithPastNoPositions)(model, layers)
        names = ["input_ids", "attention_mask", "position_ids"][:wrapper.fixed_inputs]
        sample = [torch.randint(0, VOCAB, (b, s), generator=gen), torch.ones(b, p + s, dtype=torch.int64),
                  torch.arange(p, p + s).expand(b, s).clone()][:wrapper.fixed_inputs]
        axes = {"input_ids": {0: "batch", 1: "sequence_length"},
                "attention_mask": {0: "batch", 1: "total_sequence_length"},
                "position_ids": {0: "batch", 1: "sequence_length"}}
        past_names = [f"past_key_values.{i}.{kv}" for i in range(layers) for kv in ("key", "value")]
        present_names = [f"present.{i}.{kv}" for i in range(layers) for kv in ("key", "value")]
        recipe = {"kind": "decoder", "input_ids": "input_ids", "attention_mask": "attention_mask",
                  "mask_length": "past+new", "position_ids": "position_ids", "positions": "past..past+new-1",
                  "past": {n: {"heads": heads, "head_dim": head_dim, "length": "past"} for n in past_names}}
        if not positions:
            del axes["position_ids"], recipe["position_ids"]
            recipe["positions"] = "none (ALiBi from the mask)"
        if family in UNSEEN or family in UNSEEN2:
            recipe["expect"] = expected_layers(model, config)
    else:
        build, cross_cached = enc_decs[family]
        model, config = build()
        layers, heads, head_dim, hidden = kv_geometry(config)
        names = ["input_ids"]
        sample = [torch.randint(0, VOCAB, (b, s), generator=gen)]
        axes = {"input_ids": {0: "batch", 1: "sequence_length"}}
        recipe = {"kind": "seq2seq_decoder", "input_ids": "input_ids", "past": {}}
        if cross_cached:
            wrapper = CrossCachedDecoderWithPast(model, layers, hidden)
            kinds = ("decoder.key", "decoder.value", "encoder.key", "encoder.value")
        else:
            wrapper = Seq2SeqDecoderWithPast(model, layers)
            kinds = ("decoder.key", "decoder.value")
            names += ["encoder_hidden_states", "encoder_attention_mask"]
            sample += [torch.randn(b, e, hidden, generator=gen), torch.ones(b, e, dtype=torch.int64)]
            axes["encoder_hidden_states"] = {0: "batch", 1: "encoder_sequence_length"}
            axes["encoder_attention_mask"] = {0: "batch", 1: "encoder_sequence_length"}
            recipe.update(encoder_hidden_states="encoder_hidden_states", encoder_hidden=hidden,
                          encoder_attention_mask="encoder_attention_mask")
        past_names = [f"past_key_values.{i}.{k}" for i in range(layers) for k in kinds]
        present_names = [f"present.{i}.{k}" for i in range(layers) for k in kinds[:2]]
        for n in past_names:
            recipe["past"][n] = {"heads": heads, "head_dim": head_dim,
                                 "length": "encoder" if ".encoder." in n else "past"}
        recipe["positions"] = "none (from the past length)"
        if family in UNSEEN2_ENC_DECS:
            recipe["expect"] = expected_layers(model, config)
    for n in past_names:
        length = e if recipe["past"][n]["length"] == "encoder" else p
        sample.append(torch.randn(b, heads, length, head_dim, generator=gen))
        axes[n] = {0: "batch", 2: "encoder_sequence_length" if length == e else "past_sequence_length"}
    names += past_names
    outputs = ["logits", *present_names]
    axes["logits"] = {0: "batch", 1: "sequence_length"}
    for n in present_names:
        axes[n] = {0: "batch", 2: "total_sequence_length"}
    recipe["batch"] = "any"
    return wrapper, names, outputs, sample, axes, recipe


def dynamic_shapes_for(names, axes, fixed: int):
    """torch.export dims named as the TorchScript axes are; the mask's past+new length is AUTO, so
    the exporter finds how it relates to past and new itself (a named Dim for it is refused, since
    the graph ties it to ``past + new``). The wrapper's ``*past`` is one tuple, as torch.export
    matches it."""
    named: dict[str, object] = {}

    def dim(label: str):
        if label == "total_sequence_length":
            return torch.export.Dim.AUTO
        return named.setdefault(label, torch.export.Dim(label))

    dims = [{d: dim(label) for d, label in axes[n].items()} for n in names]
    return (*dims[:fixed], tuple(dims[fixed:]))


def export(wrapper, names, outputs, sample, axes, path: Path, exporter: str) -> None:
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if exporter == "torchscript":
            torch.onnx.export(wrapper, tuple(sample), str(path), dynamo=False, opset_version=17,
                              input_names=names, output_names=outputs, dynamic_axes=axes)
        else:
            prog = torch.onnx.export(wrapper, tuple(sample), dynamo=True, input_names=names,
                                     output_names=outputs, dynamic_shapes=dynamic_shapes_for(names, axes, wrapper.fixed_inputs))
            prog.save(str(path))


# transformers' own exporter (transformers.exporters.OnnxExporter, experimental in 5.x) names the
# cache its own way: input.cache.layers.{i}.keys/.values in, output.cache.layers.{i}.keys/.values out.
TRANSFORMERS_EXPORTER = ("llama", "qwen3", "gemma3", "smollm3", "phi4mini", "granite", "olmo2", "llama3", "phi35",
                         "qwen25_yarn")


def transformers_names(names: list[str]) -> list[str]:
    """Our input names as transformers' OnnxExporter spells them."""
    return [re.sub(r"^past_key_values\.(\d+)\.(key|value)$", lambda m: f"input.cache.layers.{m[1]}.{m[2]}s", n)
            for n in names]


def export_transformers(wrapper, names, sample, path: Path) -> None:
    """``OnnxExporter().export(model, kwargs, OnnxConfig(dynamic=True))`` as its docstring shows, then
    saved as one file (it writes external data; the models are small)."""
    import tempfile

    from transformers.exporters import OnnxConfig, OnnxExporter
    args = dict(zip(names, sample))
    past = [args[n] for n in names if n.startswith("past_key_values.")]
    kwargs = {n: args[n] for n in ("input_ids", "attention_mask", "position_ids")}
    kwargs["cache"] = DynamicCache([(past[2 * i], past[2 * i + 1]) for i in range(len(past) // 2)])
    with torch.no_grad(), warnings.catch_warnings(), tempfile.TemporaryDirectory() as tmp:
        warnings.simplefilter("ignore")
        OnnxExporter().export(wrapper.model, kwargs, OnnxConfig(dynamic=True)).save_pretrained(tmp)
        onnx.save(onnx.load(str(Path(tmp) / "model.onnx")), str(path))


# --- hand-built inputs: bench/today_inputs.py (today_verify.py reads the same recipe) -----------------

def check_against_torch(family: str, path: Path, names: list[str], recipe: dict) -> str:
    """Run the export in onnxruntime and a fresh copy of the wrapper (same seed, same weights) in
    torch on past 8 / new 4 / encoder 12. Fresh: after a TorchScript export the traced module itself
    gave different logits for GPT-2, BART and T5 (up to 2.6 abs), while a new copy agrees with the
    ONNX file to 1e-7."""
    wrapper = spec_for(family)[0]
    feeds = hand_inputs(path, recipe, past=8, new=4, keep_all=True)
    args = [torch.from_numpy(feeds[n]) for n in names]
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = sess.run(None, {k: v for k, v in feeds.items() if k in {i.name for i in sess.get_inputs()}})
    with torch.no_grad():
        want = [t.float().numpy() for t in wrapper(*args)]
    worst = max(float(np.max(np.abs(g.astype(np.float32) - w))) for g, w in zip(got, want))
    return f"ok (max abs {worst:.2e} vs torch)" if worst < 1e-3 else f"MISMATCH max abs {worst:.2e} vs torch"


# --- variants: fp16 and quantized ---------------------------------------------------------------

def fp16_variant(src: Path, dst: Path, keep_io_types: bool) -> None:
    """fp16 as people convert an fp32 export today: onnxruntime.transformers' float16 converter.
    ``keep_io_types=False``: past K/V, encoder states, logits and presents are fp16 too (optimum's
    fp16 layout); ``True``: fp32 at the boundary, Casts inside."""
    from onnxruntime.transformers.float16 import convert_float_to_float16
    model = onnx.load(str(src))
    onnx.save(convert_float_to_float16(model, keep_io_types=keep_io_types), str(dst))


def dynamic_quant_variant(src: Path, dst: Path) -> None:
    """Dynamic int8 quantization of the MatMul weights (MatMulInteger / DynamicQuantizeLinear)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic
    quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8)


def qdq_variant(src: Path, dst: Path, recipe: dict) -> None:
    """Static QDQ quantization (QuantizeLinear/DequantizeLinear pairs), calibrated on recipe inputs."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.items = iter([hand_inputs(src, recipe, past=p, new=n) for p, n in ((3, 2), (8, 4), (5, 1))])

        def get_next(self):
            return next(self.items, None)

    quantize_static(str(src), str(dst), Reader(), quant_format=QuantFormat.QDQ,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, op_types_to_quantize=["MatMul"])


UNSEEN2_VARIANTS = {"llama3_fp16": ("llama3_torchscript", "fp16"), "gptj_dynq": ("gptj_torchscript", "dynamic_int8"),
                    "mbart_fp16": ("mbart_dynamo", "fp16_io32")}
UNSEEN_VARIANTS = {"gemma3_fp16": ("gemma3_torchscript", "fp16"), "smollm3_fp16": ("smollm3_dynamo", "fp16_io32"),
                   "phi4mini_dynq": ("phi4mini_torchscript", "dynamic_int8"), "olmo2_qdq": ("olmo2_torchscript", "qdq_int8")}
VARIANTS = {
    # name: (source export, kind)
    "llama_fp16": ("llama_torchscript", "fp16"),  # fp16 inputs/outputs
    "qwen2_fp16": ("qwen2_dynamo", "fp16_io32"),  # fp32 inputs/outputs, fp16 inside
    "llama_dynq": ("llama_torchscript", "dynamic_int8"),
    "phi3_qdq": ("phi3_torchscript", "qdq_int8"),
}


# --- main -------------------------------------------------------------------------------------

def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--set", choices=("today", "unseen", "unseen2"), default="today",
                    help="today: the families graphtool was developed on; unseen: UNSEEN (default --out /work/cache/unseen);"
                         " unseen2: UNSEEN2 and UNSEEN2_ENC_DECS (default --out /work/cache/unseen2)")
    ap.add_argument("--out")
    ap.add_argument("--only", help="comma-separated families (llama, ..., whisper)")
    ap.add_argument("--exporters", default="torchscript,dynamo,transformers",
                    help=f"which exporters to run (transformers: only for {', '.join(TRANSFORMERS_EXPORTER)})")
    args = ap.parse_args()
    out = Path(args.out or f"/work/cache/{args.set}")
    out.mkdir(parents=True, exist_ok=True)
    families = {"today": [*DECODERS, *ENC_DECS], "unseen": [*UNSEEN],
                "unseen2": [*UNSEEN2, *UNSEEN2_ENC_DECS]}[args.set]
    variants = {"today": VARIANTS, "unseen": UNSEEN_VARIANTS, "unseen2": UNSEEN2_VARIANTS}[args.set]
    if args.only:
        families = [f for f in families if f in args.only.split(",")]
    manifest_path = out / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    manifest.setdefault("meta", {}).update(torch=torch.__version__, transformers=transformers.__version__,
                                          onnx=onnx.__version__, onnxruntime=ort.__version__)
    models = manifest.setdefault("models", {})
    for family in families:
        for exporter in args.exporters.split(","):
            if exporter == "transformers" and family not in TRANSFORMERS_EXPORTER:
                continue
            name = f"{family}_{exporter}"
            path = out / f"{name}.onnx"
            entry = {"file": path.name, "family": family, "exporter": exporter, "dtype": "float32",
                     "kv_cache": True}
            start = time.perf_counter()
            try:
                wrapper, names, outputs, sample, axes, recipe = spec_for(family)
                if exporter == "transformers":
                    export_transformers(wrapper, names, sample, path)
                    names = transformers_names(names)
                    recipe["past"] = dict(zip(transformers_names(list(recipe["past"])), recipe["past"].values()))
                else:
                    export(wrapper, names, outputs, sample, axes, path, exporter)
                entry["recipe"] = recipe
                entry["export_check"] = check_against_torch(family, path, names, recipe)
                entry["ok"] = True
            except Exception as exc:  # noqa: BLE001 -- recorded in the manifest, never hidden
                entry["ok"] = False
                entry["failure"] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300]}"
                (out / f"{name}.export_error.txt").write_text(traceback.format_exc())
            entry["export_seconds"] = round(time.perf_counter() - start, 1)
            models[name] = entry
            manifest_path.write_text(json.dumps(manifest, indent=1))  # progress survives a crash
            print(f"{name:24s} {'ok' if entry['ok'] else 'FAILED'} {entry.get('export_check') or entry.get('failure')}",
                  flush=True)
    for name, (source, kind) in variants.items():
        src = models.get(source)
        if src is None or src["family"] not in families or src["exporter"] not in args.exporters.split(","):
            continue
        path = out / f"{name}.onnx"
        entry = {"file": path.name, "family": src["family"], "exporter": src["exporter"], "source": source,
                 "dtype": "float16" if kind.startswith("fp16") else kind, "variant": kind, "kv_cache": True,
                 "recipe": src.get("recipe")}
        try:
            if not src["ok"]:
                raise RuntimeError(f"source export {source} failed")
            if kind.startswith("fp16"):
                fp16_variant(out / src["file"], path, keep_io_types=kind == "fp16_io32")
            elif kind == "dynamic_int8":
                dynamic_quant_variant(out / src["file"], path)
            else:
                qdq_variant(out / src["file"], path, src["recipe"])
            ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
                None, hand_inputs(path, src["recipe"], past=8, new=4))
            entry["ok"] = True
        except Exception as exc:  # noqa: BLE001 -- recorded in the manifest
            entry["ok"] = False
            entry["failure"] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300]}"
        models[name] = entry
        print(f"{name:24s} {'ok' if entry['ok'] else 'FAILED'} {entry.get('failure', '')}", flush=True)
    manifest_path.write_text(json.dumps(manifest, indent=1))
    print(f"{sum(m['ok'] for m in models.values())}/{len(models)} models in {manifest_path}")


if __name__ == "__main__":
    main()
