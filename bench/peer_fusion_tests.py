"""The peers' own fusion-test models: what each peer's test expects, and who reaches it.

    python bench/peer_fusion_tests.py [--ort-repo PATH] [--only NAME,...] [--out FILE.md] [--json FILE]

Two sources, both written by the peers for their own fusion tests and built here at bench time
into /work/cache/peer_fusions (never committed):

* onnxscript's wheel: ``onnxscript/rewriter/models/`` (SmolLM 1 and 2, Phi-2, Phi-4, a Whisper
  encoder and decoder, a BART encoder, the rotary-embedding cases), with the fused ops its
  ``rewriter/ort_fusions/*_test.py`` assert (noted per case below: file and test);
* onnxscript's ``rewriter/ort_fusions/*_test.py`` unit tests (``--onnxscript-repo``: a fetched
  repository's git dir; the test files are extracted with ``git show`` into the cache, each named
  test is run with ``_test_utils.ort_run`` wrapped, and the first model it runs in onnxruntime —
  the original, before the peer's fusion — is kept with its inputs);
* onnxruntime's ``onnxruntime/test/python/transformers/`` generators, imported from ``--ort-repo``
  (a checkout, or the files copied from one: the generator modules are imported by name from
  ``<ort-repo>/onnxruntime/test/python/transformers``), with the counts its tests assert.
  A generator file that is not there is listed as "not built", never silently dropped.

For each model it prints the expected fused ops, the ops graphtool ``optimize --level 2 --target
ort`` reaches, onnxscript's ``optimize_for_ort``, onnxruntime's transformers ``optimize_model``,
and whether each result's outputs equal the original's in onnxruntime (the same random feeds,
rtol=atol=1e-3 in float32; a result that does not load or run is "error"). A model that does not
run in onnxruntime as shipped is named and left out of the totals.

"Reached" means every expected op type is present at least the expected number of times (exactly,
where the peer's test says so; "Add": 0 where it asserts none is left) *and* the result's outputs
equal the original's: a fusion that breaks the outputs reaches nothing ("fused, outputs DIFFER"). A
SkipSimplifiedLayerNormalization is an RMS norm too, so it counts towards an expected
SimplifiedLayerNormalization (the qwen3 test expects 4 RMS norms, one of which a peer may fuse
with its residual Add); likewise SkipLayerNormalization for LayerNormalization. Nothing else is
merged: an expected MultiHeadAttention is not reached by an Attention.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import logging
import os
import sys
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import onnx

CACHE = Path(os.environ.get("GRAPHTOOL_PEER_CACHE", "/work/cache/peer_fusions"))
ALIASES = {"SimplifiedLayerNormalization": ("SimplifiedLayerNormalization", "SkipSimplifiedLayerNormalization"),
           "LayerNormalization": ("LayerNormalization", "SkipLayerNormalization")}


@dataclass
class Case:
    name: str
    source: str  # where the model and its expectation come from
    build: Callable[[], tuple[onnx.ModelProto, dict[str, np.ndarray] | None]]
    expect: dict[str, int]  # op type -> at least this many
    ort_type: str = "gpt2"  # model_type for onnxruntime's transformers optimizer
    ort_args: dict[str, Any] = field(default_factory=dict)
    # a peer's test asserting an exact count: op type -> exactly this many
    exact: dict[str, int] = field(default_factory=dict)
    # False for a stand-in (a shipped model that does not run, rebuilt with other arguments): shown
    # in the table, kept out of the totals
    counted: bool = True


# ---------------------------------------------------------------------- onnxscript's shipped models


def _onnxscript(module: str, factory: str) -> Callable[[], tuple[onnx.ModelProto, dict | None]]:
    def build() -> tuple[onnx.ModelProto, dict | None]:
        import onnx_ir as ir

        test = getattr(importlib.import_module(f"onnxscript.rewriter.models.{module}"), factory)()
        model = test.get_onnx_model()
        feeds = test.get_ort_inputs() if hasattr(test, "get_ort_inputs") else None
        return ir.serde.serialize_model(model), feeds

    return build


OS = "onnxscript rewriter/models"
ONNXSCRIPT_CASES = [
    # fuse_xformers_test.test_fuse_xformers: rms 3 (2 of them into skip), rotary 2, mha 1;
    # rms_normalization_test / skip_normalization_test / rotary_embedding_test on the same model
    Case("smollm_1", f"{OS}/_smollm_1.py; ort_fusions/fuse_xformers_test.py",
         _onnxscript("_smollm_1", "smollm_test_1"),
         {"SimplifiedLayerNormalization": 3, "SkipSimplifiedLayerNormalization": 2, "RotaryEmbedding": 2,
          "MultiHeadAttention": 1}),
    # mha_test.test_smollm: sdpa > 0 and mha > 0 (after rms / skip-rms / rotary / cos-sin-cache)
    Case("smollm_2", f"{OS}/_smollm_2.py; ort_fusions/mha_test.py::test_smollm",
         _onnxscript("_smollm_2", "smollm_test_2"), {"MultiHeadAttention": 1}),
    # mha_test.test_phi2lm: exactly one MultiHeadAttention with past key/value inputs
    Case("phi2lm", f"{OS}/_phi2lm.py; ort_fusions/mha_test.py::test_phi2lm",
         _onnxscript("_phi2lm", "phi2lm_test"), {"MultiHeadAttention": 1}, ort_type="phi"),
    # attention_test / mha_test test_whisper_encoder: MultiHeadAttention; skip_normalization_test: SkipLayerNormalization
    Case("whisper_encoder", f"{OS}/_whisper_encoder.py; ort_fusions/mha_test.py, skip_normalization_test.py",
         _onnxscript("_whisper_encoder", "whisper_encoder_test"),
         {"MultiHeadAttention": 1, "SkipLayerNormalization": 1}, ort_type="bart"),
    Case("whisper_decoder", f"{OS}/_whisper_decoder.py; ort_fusions/mha_test.py, skip_normalization_test.py",
         _onnxscript("_whisper_decoder", "whisper_decoder_test"),
         {"MultiHeadAttention": 1, "SkipLayerNormalization": 1}, ort_type="bart"),
    # skip_normalization_test.test_bart_encoder: exactly 5 SkipLayerNormalization
    Case("bart_encoder", f"{OS}/_bart_encoder.py; ort_fusions/skip_normalization_test.py::test_bart_encoder",
         _onnxscript("_bart_encoder", "bart_encoder_test"), {"SkipLayerNormalization": 5}, ort_type="bart",
         exact={"SkipLayerNormalization": 5}),
    # rotary_embedding_test (test_case_1), cos_sin_cache_test (test_case_1, test_case_2, partial_rotary)
    Case("rotary_case_1", f"{OS}/_rotary_embedding_models.py; ort_fusions/rotary_embedding_test.py",
         _onnxscript("_rotary_embedding_models", "test_case_1"), {"RotaryEmbedding": 1}),
    Case("rotary_case_2", f"{OS}/_rotary_embedding_models.py; ort_fusions/cos_sin_cache_test.py",
         _onnxscript("_rotary_embedding_models", "test_case_2"), {"RotaryEmbedding": 1}),
    Case("partial_rotary", f"{OS}/_rotary_embedding_models.py; ort_fusions/cos_sin_cache_test.py",
         _onnxscript("_rotary_embedding_models", "partial_rotary_test_case"), {"RotaryEmbedding": 1}),
]

# ---------------------------------------------------------------------- onnxruntime's generators

ORT = "onnxruntime test/python/transformers"


def _ort(module: str, fn: str, **kwargs: Any) -> Callable[[], tuple[onnx.ModelProto, None]]:
    def build() -> tuple[onnx.ModelProto, None]:
        return getattr(importlib.import_module(module), fn)(**kwargs), None

    build.module = module  # type: ignore[attr-defined]
    return build


_QWEN = dict(hidden_size=64, num_heads=8, num_kv_heads=2)
ORT_CASES = [
    # test_optimizer.py::test_qwen3_normalization_fusion: 4 SimplifiedLayerNormalization
    Case("qwen3_layer", f"{ORT}/qwen3_model_generator.py; test_optimizer.py::test_qwen3_normalization_fusion",
         _ort("qwen3_model_generator", "create_qwen3_decoder_layer", **_QWEN),
         {"SimplifiedLayerNormalization": 4}, ort_type="qwen3", ort_args={"num_heads": 8, "hidden_size": 64}),
    # ::test_qwen3_rotary_embedding_fusion: 2 RotaryEmbedding, 4 SimplifiedLayerNormalization
    Case("qwen3_layer_rope", f"{ORT}/qwen3_model_generator.py; test_optimizer.py::test_qwen3_rotary_embedding_fusion",
         _ort("qwen3_model_generator", "create_qwen3_decoder_layer", include_rope=True, **_QWEN),
         {"RotaryEmbedding": 2, "SimplifiedLayerNormalization": 4}, ort_type="qwen3",
         ort_args={"num_heads": 8, "hidden_size": 64}),
    # ::test_qwen3_rotary_embedding_fusion_with_expand: 2 RotaryEmbedding
    Case("qwen3_layer_rope_expand",
         f"{ORT}/qwen3_model_generator.py; test_optimizer.py::test_qwen3_rotary_embedding_fusion_with_expand",
         _ort("qwen3_model_generator", "create_qwen3_decoder_layer", include_rope=True,
              include_expand_in_inv_freq=True, **_QWEN),
         {"RotaryEmbedding": 2}, ort_type="qwen3", ort_args={"num_heads": 8, "hidden_size": 64}),
]

# The shipped qwen3 layer feeds 8 query heads and 2 KV heads to one MatMul without repeat_kv, so it
# does not run (left out below, by measure()); the same generator with num_kv_heads=num_heads does:
# the RMS norm and rotary fusions are measured on that, labelled as such.
_QWEN_MHA = dict(hidden_size=64, num_heads=8, num_kv_heads=8)
ORT_CASES += [
    Case("qwen3_layer_kv8", f"{ORT}/qwen3_model_generator.py (num_kv_heads=8); as test_qwen3_normalization_fusion",
         _ort("qwen3_model_generator", "create_qwen3_decoder_layer", **_QWEN_MHA),
         {"SimplifiedLayerNormalization": 4}, ort_type="qwen3", ort_args={"num_heads": 8, "hidden_size": 64},
         counted=False),
    Case("qwen3_layer_rope_kv8",
         f"{ORT}/qwen3_model_generator.py (num_kv_heads=8); as test_qwen3_rotary_embedding_fusion",
         _ort("qwen3_model_generator", "create_qwen3_decoder_layer", include_rope=True, **_QWEN_MHA),
         {"RotaryEmbedding": 2, "SimplifiedLayerNormalization": 4}, ort_type="qwen3",
         ort_args={"num_heads": 8, "hidden_size": 64}, counted=False),
    Case("qwen3_layer_rope_expand_kv8",
         f"{ORT}/qwen3_model_generator.py (num_kv_heads=8); as test_qwen3_rotary_embedding_fusion_with_expand",
         _ort("qwen3_model_generator", "create_qwen3_decoder_layer", include_rope=True,
              include_expand_in_inv_freq=True, **_QWEN_MHA),
         {"RotaryEmbedding": 2}, ort_type="qwen3", ort_args={"num_heads": 8, "hidden_size": 64}, counted=False),
]

# test_attention_fusion.py (stored id 51937772988) / test_embedlayer_fusion.py: the generators'
# models; each test compares with an expected graph in test_data/models whose fused op is named here.
_TA = "test_attention_fusion.py"
ORT_CASES += [
    # ::test_attention_fusion (attention_opt.onnx) and ::test_multi_head_attention_fusion (same model)
    Case("bert_attention", f"{ORT}/bert_model_generator.py; {_TA}::test_attention_fusion",
         _ort("bert_model_generator", "create_bert_attention"), {"Attention": 1}, ort_type="bert",
         ort_args={"num_heads": 2, "hidden_size": 16}),
    Case("bert_attention_pruned", f"{ORT}/bert_model_generator.py; {_TA}::test_attention_fusion_pruned_model",
         _ort("bert_model_generator", "create_bert_attention", input_hidden_size=16, num_heads=2,
              pruned_qk_hidden_size=8, pruned_v_hidden_size=8), {"Attention": 1}, ort_type="bert",
         ort_args={"num_heads": 2, "hidden_size": 16}),
    Case("bert_attention_reverse_add", f"{ORT}/bert_model_generator.py; {_TA}::test_attention_fusion_reverse_add_order",
         _ort("bert_model_generator", "create_bert_attention", input_hidden_size=16, num_heads=2,
              pruned_qk_hidden_size=8, pruned_v_hidden_size=8, switch_add_inputs=True), {"Attention": 1},
         ort_type="bert", ort_args={"num_heads": 2, "hidden_size": 16}),
    Case("bert_attention_varied_qkv",
         f"{ORT}/bert_model_generator.py; {_TA}::test_attention_fusion_for_varied_qkv_dimensions",
         _ort("bert_model_generator", "create_bert_attention", input_hidden_size=16, num_heads=2,
              pruned_qk_hidden_size=24, pruned_v_hidden_size=16), {"Attention": 1}, ort_type="bert",
         ort_args={"num_heads": 2, "hidden_size": 16}),
    Case("tf2onnx_attention_3d", f"{ORT}/bert_model_generator.py; {_TA}::test_3d_attention_fusion_tf2onnx_model",
         _ort("bert_model_generator", "create_tf2onnx_attention_3d"), {"Attention": 1}, ort_type="bert_tf",
         ort_args={"num_heads": 4, "hidden_size": 16}),
    # ::test_gpt2_attention_fusion (gpt2_attention_opt_*.onnx): Attention with past
    Case("gpt2_attention_past", f"{ORT}/gpt2_model_generator.py; {_TA}::test_gpt2_attention_fusion",
         _ort("gpt2_model_generator", "create_gpt2_attention", hidden_size=64, num_heads=4), {"Attention": 1},
         ort_type="gpt2", ort_args={"num_heads": 4, "hidden_size": 64}),
    Case("gpt2_attention_past_add_order", f"{ORT}/gpt2_model_generator.py; {_TA}::test_gpt2_attention_fusion",
         _ort("gpt2_model_generator", "create_gpt2_attention", hidden_size=64, num_heads=4, switch_add_inputs=True),
         {"Attention": 1}, ort_type="gpt2", ort_args={"num_heads": 4, "hidden_size": 64}),
    # ::test_bart_attention_sdpa_fusion: exactly one Attention (unidirectional with the mask)
    Case("bart_sdpa_mask", f"{ORT}/bart_model_generator.py; {_TA}::test_bart_attention_sdpa_fusion",
         _ort("bart_model_generator", "create_bart_attention_sdpa", hidden_size=16, num_heads=4, with_mask=True),
         {"Attention": 1}, ort_type="bart", ort_args={"num_heads": 4, "hidden_size": 16}, exact={"Attention": 1}),
    Case("bart_sdpa_no_mask", f"{ORT}/bart_model_generator.py; {_TA}::test_bart_attention_sdpa_fusion",
         _ort("bart_model_generator", "create_bart_attention_sdpa", hidden_size=16, num_heads=4, with_mask=False),
         {"Attention": 1}, ort_type="bart", ort_args={"num_heads": 4, "hidden_size": 16}, exact={"Attention": 1}),
]
_TE = "test_embedlayer_fusion.py"
ORT_CASES += [
    # gpt2_embedlayer*_exp.onnx: one EmbedLayerNormalization (position ids = the ids input)
    Case("gpt2_embedlayer", f"{ORT}/gpt2_model_generator.py; {_TE}::test_embedlayer_fusion",
         _ort("gpt2_model_generator", "create_gpt2_embedlayer", one_attention_node=False),
         {"EmbedLayerNormalization": 1}),
    Case("gpt2_embedlayer_one_attn", f"{ORT}/gpt2_model_generator.py; {_TE}::test_embedlayer_fusion_one_attn_node",
         _ort("gpt2_model_generator", "create_gpt2_embedlayer", one_attention_node=True),
         {"EmbedLayerNormalization": 1}),
    Case("gpt2_embedlayer_sum_output",
         f"{ORT}/gpt2_model_generator.py; {_TE}::test_embedlayer_fusion_with_embedding_sum_output",
         _ort("gpt2_model_generator", "create_gpt2_embedlayer", one_attention_node=True, output_embedding_sum=True),
         {"EmbedLayerNormalization": 1}),
    Case("gpt2_embedlayer_sum_output_no_sln",
         f"{ORT}/gpt2_model_generator.py; {_TE}::test_embedlayer_fusion_with_embedding_sum_output_no_sln",
         _ort("gpt2_model_generator", "create_gpt2_embedlayer", one_attention_node=True, has_skip_layer_norm=False,
              output_embedding_sum=True), {"EmbedLayerNormalization": 1}),
]

# ---------------------------------------------------------------------- onnxscript's unit-test models

# Its rewriter/ort_fusions/*_test.py build small models inside the test methods and run the original in
# onnxruntime through _test_utils.ort_run("Original", model, inputs) before fusing. The bench extracts
# those test files from a fetched onnxscript repository (--onnxscript-repo: its git dir; `git show`
# into the cache), runs each named test with ort_run wrapped, and keeps the first model (and the
# inputs) it was called with: the peer's own test model and feeds, before the peer's fusion.
OST_FILES = ("_test_utils", "gelu_test", "erfgelu_test", "bias_gelu_test", "skip_normalization_unit_test",
             "rms_normalization_unit_test", "mha_bias_test", "mha_scale_test")
OST_DIR = CACHE.parent / "onnxscript-tests"


def extract_onnxscript_tests(git_dir: str) -> Path:
    import subprocess

    out = OST_DIR / "ort_fusions"
    out.mkdir(parents=True, exist_ok=True)
    for name in OST_FILES:
        text = subprocess.run(["git", "--git-dir", git_dir, "show", f"HEAD:onnxscript/rewriter/ort_fusions/{name}.py"],
                              check=True, capture_output=True).stdout
        (out / f"{name}.py").write_bytes(text)
    commit = subprocess.run(["git", "--git-dir", git_dir, "rev-parse", "HEAD"], check=True, capture_output=True,
                            text=True).stdout
    (OST_DIR / "COMMIT").write_text(commit)
    return out


def _harvest(module: str, test: str) -> Callable[[], tuple[onnx.ModelProto, dict | None]]:
    """Run onnxscript's test ``module.Class.test`` and keep the first model it runs in onnxruntime."""

    def build() -> tuple[onnx.ModelProto, dict | None]:
        import unittest

        import onnx_ir as ir
        from onnxscript.rewriter.ort_fusions import _test_utils

        folder = OST_DIR / "ort_fusions"
        if not (folder / f"{module}.py").exists():
            raise ImportError(f"{module}.py not extracted (no --onnxscript-repo)")
        if str(folder) not in sys.path:
            sys.path.insert(0, str(folder))
        mod = importlib.import_module(module)
        captured: list = []
        real = _test_utils.ort_run

        def record(name, model, inputs, *args, **kwargs):
            if not captured:
                captured.append((ir.serde.serialize_model(model), {k: np.array(v) for k, v in inputs.items()}))
            return real(name, model, inputs, *args, **kwargs)

        cls_name, method = test.split(".")
        saved = getattr(mod, "ort_run", None)
        _test_utils.ort_run = record
        if saved is not None:
            mod.ort_run = record
        try:
            result = unittest.TestResult()
            unittest.defaultTestLoader.loadTestsFromName(f"{cls_name}.{method}", mod).run(result)
        finally:
            _test_utils.ort_run = real
            if saved is not None:
                mod.ort_run = saved
        if not captured:
            problems = [str(t) for _, t in result.errors + result.failures]
            raise RuntimeError(f"{test} ran no model in onnxruntime {problems[:1]}")
        return captured[0]

    return build


OST = "onnxscript ort_fusions"
_G, _E, _BG, _SK, _RMS = ("GeluFusionTest", "ErfGeluFusionTest", "BiasGeluFusionTest", "SkipNormalizationTest",
                          "RmsNormFusionTest")
ONNXSCRIPT_TEST_CASES = [
    Case("os_gelu_tanh", f"{OST}/gelu_test.py::test_gelu_fusion", _harvest("gelu_test", f"{_G}.test_gelu_fusion"),
         {"FastGelu": 1}),
    Case("os_gelu_erf", f"{OST}/gelu_test.py::test_gelu_erf_fusion",
         _harvest("gelu_test", f"{_G}.test_gelu_erf_fusion"), {"Gelu": 1}),
    *[Case(f"os_erfgelu_{k}", f"{OST}/erfgelu_test.py::{t}", _harvest("erfgelu_test", f"{_E}.{t}"), {"Gelu": 1})
      for k, t in (("p1", "test_pattern1_half_times_x_times_erf_plus_one"),
                   ("p2", "test_pattern2_x_times_half_times_erf_plus_one"),
                   ("nd", "test_multidimensional_input"))],
    *[Case(f"os_bias_gelu_{k}", f"{OST}/bias_gelu_test.py::test_bias_gelu_fusion_{i}_{k}",
           _harvest("bias_gelu_test", f"{_BG}.test_bias_gelu_fusion_{i}_{k}"), {"BiasGelu": 1})
      for i, k in enumerate(("with_onnx_op_default", "with_onnx_op_none", "with_contrib_op", "reversed_order"))],
    *[Case(f"os_skip_rms_{k}", f"{OST}/skip_normalization_unit_test.py::{t}",
           _harvest("skip_normalization_unit_test", f"{_SK}.{t}"), {"SkipSimplifiedLayerNormalization": 1})
      for k, t in (("input_plus_skip", "test_skip_rms_no_bias_0_input_plus_skip"),
                   ("skip_plus_input", "test_skip_rms_no_bias_1_skip_plus_input"),
                   ("post_bias", "test_skip_rms_post_bias"), ("pre_bias", "test_skip_rms_pre_bias"))],
    *[Case(f"os_skip_ln_{k}", f"{OST}/skip_normalization_unit_test.py::{t}",
           _harvest("skip_normalization_unit_test", f"{_SK}.{t}"), {"SkipLayerNormalization": 1})
      for k, t in (("no_bias", "test_skip_ln_no_bias"), ("post_bias", "test_skip_ln_post_bias"))],
    *[Case(f"os_rms_{k}", f"{OST}/rms_normalization_unit_test.py::{t}",
           _harvest("rms_normalization_unit_test", f"{_RMS}.{t}"), {"SimplifiedLayerNormalization": 1})
      for k, t in (("scale_first", "test_mul_order_variants_0_scale_times_normalized"),
                   ("norm_first", "test_mul_order_variants_1_normalized_times_scale"),
                   ("fp16_cast", "test_cast_input_mixed_precision"))],
    # mha_bias_test: the q/k/v bias Adds before a MultiHeadAttention go into its bias input (no Add left)
    *[Case(f"os_mha_bias_{k}", f"{OST}/mha_bias_test.py::{t}", _harvest("mha_bias_test", f"FuseBiasMHATest.{t}"),
           {"MultiHeadAttention": 1, "Add": 0}, exact={"Add": 0})
      for k, t in (("qkv", "test_all_three_biases_fused"), ("q", "test_only_q_bias"), ("k", "test_only_k_bias"),
                   ("v", "test_only_v_bias"), ("qk", "test_q_and_k_bias_only"))],
    # mha_scale_test: a constant Mul on the query goes into MultiHeadAttention's scale (no Mul left)
    *[Case(f"os_mha_scale_{k}", f"{OST}/mha_scale_test.py::{t}", _harvest("mha_scale_test", f"FuseMHAScaleTest.{t}"),
           {"MultiHeadAttention": 1, "Mul": 0}, exact={"Mul": 0})
      for k, t in (("scalar", "test_scalar_scale_fused"), ("int", "test_integer_scale_fused"),
                   ("with_attr", "test_scale_combined_with_existing_scale_attr"))],
]

# Peer test models named and left out, with the reason (not counted in the totals).
LEFT_OUT = {
    "onnxscript _phi4lm.py (gqa_test.py::test_phi4lm, expects 2 GroupQueryAttention)":
        "make_model_with_random_weights() draws ~7.5 GB of float32 weights (two 100352x5120 embeddings, two "
        "5120-wide layers): past protobuf's 2 GB and this 24 GB machine shared by eight; onnxscript's own test "
        "is skipped upstream ('Needs too much memory')",
    "ort test_attention_fusion.py::test_attention_fusion_pre_ln* (3) and ::test_gpt2_attention_no_past_fusion (4)":
        "the test file (stored id 51937772988) is newer than every stored bert/gpt2_model_generator version: "
        "create_bert_attention_pre_ln and create_gpt2_attention_no_past are in none of them, so the models "
        "cannot be built from the copies",
    ("ort test_attention_fusion.py::test_megatron_gpt2_attention_fusion, test_optimizer.py (gpt2_past, "
     "TF/HF models)"): "binary test_data/*.onnx files (read_file stores text only) or HuggingFace downloads",
    "ort test_conformer.py (1)": "imports ct_model_generator, which was not copied in this stop",
    ("onnxscript gqa_test.py, sdpa_test.py, mha_unit_test.py, rotary_embedding_unit_test.py, "
     "cos_sin_cache_*_test.py, attention_test.py"):
        "gqa_test imports torch (this venv has none); sdpa_test expects onnxscript's internal SDPA op, not an "
        "onnxruntime one; the unit tests start from onnxscript's intermediate ai.onnxruntime._fusion ops, which "
        "onnxruntime cannot run; cos_sin_cache/attention tests use the shipped models above",
    "ort test_rotary_embedding_fusion.py (6 models: no_past/past/merged x redundant Squeezes or not)":
        "its create_initializers() writes the Slice/Unsqueeze/Gather indices ('zero', 'one', 'two', 'three', "
        "'int_max', 'pos_ids_new_shape') as FLOAT tensors, which no ONNX Slice/Unsqueeze/Reshape accepts: "
        "the test compares graph strings and never runs them (index copy at 07bfbbb)",
}

# ---------------------------------------------------------------------- feeds, runs, counts


def _dim(d: onnx.TensorShapeProto.Dimension, sizes: dict[str, int]) -> int:
    """A size for one dim: fixed dims as declared; one size per symbolic name (the same name is the
    same size in every input), distinct names distinct sizes; a past is neither empty nor the new length."""
    if d.HasField("dim_value") and d.dim_value > 0:
        return d.dim_value
    return _named(d.dim_param.lower().replace(" ", ""), sizes)


def _named(name: str, sizes: dict[str, int]) -> int:
    if "+" in name:  # "s16 + s62", "past_sequence_length + sequence_length": the sum of its parts
        return sum(_named(part, sizes) for part in name.split("+"))
    if name not in sizes:
        if "past" in name:
            sizes[name] = 5
        elif "batch" in name:
            sizes[name] = 2
        elif name in ("sequence_length", "seq_len", "sequence", "s"):
            sizes[name] = 3
        else:
            taken = set(sizes.values())
            sizes[name] = next(n for n in range(4, 64) if n not in taken)
    return sizes[name]


def random_feeds(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    inits = {i.name for i in model.graph.initializer}
    feeds = {}
    sizes: dict[str, int] = {}
    for vi in (i for i in model.graph.input if i.name not in inits):
        t = vi.type.tensor_type
        shape = [_dim(d, sizes) for d in t.shape.dim]
        dtype = onnx.helper.tensor_dtype_to_np_dtype(t.elem_type)
        name = vi.name.lower()
        if np.issubdtype(dtype, np.integer):
            if "position" in name:
                feeds[vi.name] = np.broadcast_to(np.arange(shape[-1] if shape else 1), shape).astype(dtype).copy()
            elif "mask" in name:
                feeds[vi.name] = np.ones(shape, dtype)
            else:
                feeds[vi.name] = rng.integers(0, 8, shape).astype(dtype)
        elif dtype == np.bool_:
            feeds[vi.name] = np.ones(shape, bool)
        else:
            feeds[vi.name] = (rng.standard_normal(shape) if "mask" not in name else np.ones(shape)).astype(dtype)
    return feeds


def run(model: onnx.ModelProto | str, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    so.intra_op_num_threads = 1
    payload = model if isinstance(model, str) else model.SerializeToString()
    sess = ort.InferenceSession(payload, so, providers=["CPUExecutionProvider"])
    names = {i.name for i in sess.get_inputs()}
    return sess.run(None, {k: v for k, v in feeds.items() if k in names})


def same(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x.shape != y.shape:
            return False
        if np.issubdtype(x.dtype, np.floating):
            if not np.allclose(x.astype(np.float64), y.astype(np.float64), rtol=1e-3, atol=1e-3, equal_nan=True):
                return False
        elif not np.array_equal(x, y):
            return False
    return True


def op_counts(model: onnx.ModelProto) -> Counter:
    counts: Counter = Counter()

    def walk(graph: onnx.GraphProto) -> None:
        for n in graph.node:
            counts[n.op_type] += 1
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    walk(a.g)
                for g in a.graphs:
                    walk(g)

    walk(model.graph)
    return counts


def reached(case: Case, counts: Counter) -> bool:
    for op_type, n in case.expect.items():
        have = sum(counts.get(t, 0) for t in ALIASES.get(op_type, (op_type,)))
        if have < n:
            return False
        if op_type in case.exact and have != case.exact[op_type]:
            return False
    return True


def shown(case: Case, counts: Counter | None) -> str:
    if counts is None:
        return "-"
    return " ".join(f"{t}={sum(counts.get(a, 0) for a in ALIASES.get(t, (t,)))}" for t in case.expect)


# ---------------------------------------------------------------------- the three optimizers


def graphtool_l2(path: Path, out: Path) -> onnx.ModelProto:
    import graphtool as gt

    model, _ = gt.optimize(gt.load(path), level=2, target="ort")
    gt.save(model, out)
    return onnx.load(out)


def onnxscript_ort(path: Path, out: Path) -> onnx.ModelProto:
    import onnx_ir as ir
    import onnxscript.optimizer
    from onnxscript.rewriter.ort_fusions import optimize_for_ort

    model = ir.load(path)
    onnxscript.optimizer.optimize(model)  # what its tests do first
    model, _ = optimize_for_ort(model)
    ir.save(model, out)
    return onnx.load(out)


def ort_transformers(path: Path, out: Path, case: Case) -> onnx.ModelProto:
    from onnxruntime.transformers.optimizer import optimize_model

    import onnxruntime as ort
    from onnxruntime.transformers.optimizer import MODEL_TYPES

    logging.getLogger("onnxruntime.transformers").setLevel(logging.ERROR)
    args = {"num_heads": 0, "hidden_size": 0, **case.ort_args}
    source = str(path)
    if MODEL_TYPES[case.ort_type][2] == 1:
        # the model type's default opt_level is 1: run ORT's basic level first, as optimize_model does
        # (its own call imports torch, which this venv does not have), then the fusions (opt_level=0)
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        so.optimized_model_filepath = source = str(out.with_suffix(".basic.onnx"))
        ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"], disabled_optimizers=["ConstantSharing"])
    optimized = optimize_model(source, model_type=case.ort_type, opt_level=0, **args)
    optimized.save_model_to_file(str(out))
    return onnx.load(out)


PEERS = {"graphtool": lambda p, o, c: graphtool_l2(p, o),
         "onnxscript": lambda p, o, c: onnxscript_ort(p, o),
         "ort": ort_transformers}


def measure(case: Case) -> dict[str, Any]:
    row: dict[str, Any] = {"name": case.name, "source": case.source, "expect": case.expect}
    try:
        proto, feeds = case.build()
    except ImportError as e:
        row["status"] = f"not built: {e}"
        return row
    folder = CACHE / case.name
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "model.onnx"
    onnx.save(proto, path)
    row["size_mb"] = round(path.stat().st_size / 1e6, 1)
    feeds = dict(feeds) if feeds else random_feeds(proto)
    feeds = {k: np.asarray(v) for k, v in feeds.items()}
    try:
        reference = run(str(path), feeds)
    except Exception as e:  # noqa: BLE001 - the peer's model itself does not run
        row["status"] = f"does not run as shipped: {str(e).splitlines()[0][:160]}"
        return row
    row["status"] = "ok"
    row["nodes"] = len(proto.graph.node)
    for peer, fn in PEERS.items():
        out = folder / f"{peer}.onnx"
        start = time.perf_counter()
        entry: dict[str, Any] = {}
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                result = fn(path, out, case)
            counts = op_counts(result)
            entry.update(counts=dict(counts), reached=reached(case, counts), nodes=len(result.graph.node),
                         size_mb=round(sum(f.stat().st_size for f in folder.glob(f"{peer}.onnx*")) / 1e6, 1))
            try:
                entry["outputs"] = "equal" if same(reference, run(str(out), feeds)) else "DIFFER"
            except Exception as e:  # noqa: BLE001
                entry["outputs"] = f"error: {str(e).splitlines()[0][:120]}"
            # a result that does not run, or whose outputs differ, reaches nothing
            entry["fused"] = entry["reached"]
            entry["reached"] = entry["reached"] and entry["outputs"] == "equal"
        except Exception as e:  # noqa: BLE001
            entry.update(error=f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}",
                         reached=False, outputs="-")
            entry["trace"] = traceback.format_exc(limit=3)[-400:]
        entry["seconds"] = round(time.perf_counter() - start, 2)
        row[peer] = entry
    return row


def table(rows: list[dict[str, Any]], cases: dict[str, Case]) -> str:
    lines = ["| model | expected (peer's test) | graphtool L2 ort | onnxscript optimize_for_ort | ORT transformers "
             "| outputs g/o/t | MB in → g/o/t |", "|---|---|---|---|---|---|---|"]
    totals = Counter()
    counted = 0
    stand_ins = []
    for row in rows:
        case = cases[row["name"]]
        if row.get("status") != "ok":
            continue
        counted += case.counted
        cells = []
        for peer in PEERS:
            e = row[peer]
            if "error" in e:
                cells.append(f"error ({e['error'][:60]})")
                continue
            mark = "**yes**" if e["reached"] else ("fused, outputs " + e["outputs"][:6] if e.get("fused") else "no")
            totals[peer] += bool(e["reached"]) and case.counted
            cells.append(f"{mark}: {shown(case, Counter(e['counts']))}")
        outs = "/".join(row[p].get("outputs", "-")[:6] for p in PEERS)
        expect = ", ".join(f"{t}{'=' if t in case.exact else '>='}{n}" for t, n in case.expect.items())
        sizes = "/".join(str(row[p].get("size_mb", "-")) for p in PEERS)
        line = f"| {row['name']} | {expect} | " + " | ".join(cells) + f" | {outs} | {row.get('size_mb')} → {sizes} |"
        (lines if case.counted else stand_ins).append(line)
    lines.append(f"| **total reached** (of {counted}) | | **{totals['graphtool']}** | **{totals['onnxscript']}** | "
                 f"**{totals['ort']}** | | |")
    if stand_ins:
        lines += ["", "Stand-ins (a shipped model that does not run, rebuilt so it does; not in the totals):", "",
                  lines[0], lines[1], *stand_ins]
    left = [f"- {r['name']}: {r['status']}" for r in rows if r.get("status") != "ok"]
    left += [f"- {k}: {v}" for k, v in LEFT_OUT.items()]
    if left:
        lines += ["", "Left out (named, not counted):", *left]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ort-repo", help="onnxruntime checkout (or copy of onnxruntime/test/python/transformers)")
    ap.add_argument("--onnxscript-repo", help="git dir of a fetched onnxscript repository (its ort_fusions unit tests)")
    ap.add_argument("--only", help="comma-separated case names")
    ap.add_argument("--out", help="write the markdown table here")
    ap.add_argument("--json", help="write the rows as JSON here")
    ap.add_argument("--from-json", help="comma-separated JSON files of earlier runs: print their rows as one table")
    args = ap.parse_args(argv)
    if args.from_json:  # runs split for memory (a 1 GB model alone) rendered as one table
        if args.ort_repo:
            sys.path.insert(0, str(Path(args.ort_repo) / "onnxruntime" / "test" / "python" / "transformers"))
        every = {c.name: c for c in ONNXSCRIPT_CASES + ORT_CASES + ONNXSCRIPT_TEST_CASES}
        rows = [r for f in args.from_json.split(",") for r in json.loads(Path(f).read_text())]
        order = list(every)
        rows.sort(key=lambda r: order.index(r["name"]))
        text = table(rows, every)
        print(text)
        if args.out:
            Path(args.out).write_text(text + "\n")
        return 0
    cases = list(ONNXSCRIPT_CASES)
    if args.ort_repo:
        sys.path.insert(0, str(Path(args.ort_repo) / "onnxruntime" / "test" / "python" / "transformers"))
        cases += ORT_CASES
    else:
        print("no --ort-repo: onnxruntime's generator models are not built", file=sys.stderr)
    if args.onnxscript_repo:
        extract_onnxscript_tests(args.onnxscript_repo)
        cases += ONNXSCRIPT_TEST_CASES
    else:
        print("no --onnxscript-repo: onnxscript's unit-test models are not built", file=sys.stderr)
    if args.only:
        wanted = set(args.only.split(","))
        cases = [c for c in cases if c.name in wanted]
    rows = []
    for case in cases:
        print(f"[{case.name}] ...", file=sys.stderr, flush=True)
        row = measure(case)
        rows.append(row)
        print(f"[{case.name}] {row.get('status')} " + " ".join(
            f"{p}={'yes' if row[p].get('reached') else 'no'}/{row[p].get('outputs')}" for p in PEERS if p in row),
            file=sys.stderr, flush=True)
    text = table(rows, {c.name: c for c in cases})
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
