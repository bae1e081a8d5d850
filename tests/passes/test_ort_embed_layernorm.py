"""BERT/GPT-2 embedding lookups + LayerNormalization → com.microsoft EmbedLayerNormalization."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.passes.ort_helpers import assert_same_outputs, ops, run

V, P, H = 30, 16, 8


def embedding_model(positions="slice", token_types="zeros", arange=True, sum_used=False):
    """HF BERT's embeddings as the TorchScript exporter writes them (after shape folding)."""
    rng = np.random.default_rng(0)
    pos_buffer = np.arange(P, dtype=np.int64) if arange else np.arange(P, dtype=np.int64)[::-1].copy()
    inits = [
        numpy_helper.from_array(rng.standard_normal((V, H)).astype(np.float32), "word"),
        numpy_helper.from_array(rng.standard_normal((P, H)).astype(np.float32), "pos"),
        numpy_helper.from_array(rng.standard_normal((2, H)).astype(np.float32), "type"),
        numpy_helper.from_array(pos_buffer.reshape(1, P), "position_ids"),
        numpy_helper.from_array(np.zeros((1, P), np.int64), "token_type_ids"),
        numpy_helper.from_array((1 + 0.1 * rng.standard_normal(H)).astype(np.float32), "gamma"),
        numpy_helper.from_array(rng.standard_normal(H).astype(np.float32), "beta"),
        numpy_helper.from_array(np.array([0], np.int64), "zero"),
        numpy_helper.from_array(np.array([1], np.int64), "one"),
    ]
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])]
    nodes = [helper.make_node("Shape", ["input_ids"], ["ids_shape"]),
             helper.make_node("Shape", ["input_ids"], ["seq_len"], start=1, end=2)]
    if positions == "slice":
        nodes.append(helper.make_node("Slice", ["position_ids", "zero", "seq_len", "one"], ["pids"]))
    else:  # GPT-2: arange(seq).unsqueeze(0)
        nodes += [helper.make_node("Squeeze", ["seq_len"], ["s"]),
                  helper.make_node("Constant", [], ["r0"], value=numpy_helper.from_array(np.array(0, np.int64))),
                  helper.make_node("Constant", [], ["r1"], value=numpy_helper.from_array(np.array(1, np.int64))),
                  helper.make_node("Range", ["r0", "s", "r1"], ["ar"]),
                  helper.make_node("Unsqueeze", ["ar", "zero"], ["pids"])]
    nodes += [helper.make_node("Gather", ["word", "input_ids"], ["w"]),
              helper.make_node("Gather", ["pos", "pids"], ["p"]),
              helper.make_node("Add", ["w", "p"], ["wp"])]
    last = "wp"
    if token_types == "zeros":
        nodes += [helper.make_node("Slice", ["token_type_ids", "zero", "seq_len", "one"], ["tt0"]),
                  helper.make_node("Expand", ["tt0", "ids_shape"], ["tt"])]
    elif token_types == "input":
        inputs.append(helper.make_tensor_value_info("tt", TensorProto.INT64, ["batch", "seq"]))
    if token_types:
        nodes += [helper.make_node("Gather", ["type", "tt"], ["t"]), helper.make_node("Add", [last, "t"], ["sum"])]
        last = "sum"
    nodes.append(helper.make_node("LayerNormalization", [last, "gamma", "beta"], ["y"], epsilon=1e-12))
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    if sum_used:
        nodes.append(helper.make_node("Relu", [last], ["r"]))
        outputs.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def feeds(proto, seq=7):
    rng = np.random.default_rng(2)
    out = {"input_ids": rng.integers(0, V, (2, seq)).astype(np.int64)}
    if any(i.name == "tt" for i in proto.graph.input):
        out["tt"] = rng.integers(0, 2, (2, seq)).astype(np.int64)
    return out


@pytest.mark.parametrize("positions,token_types", [("slice", "zeros"), ("range", None), ("slice", "input")])
def test_embeddings_become_one_op(positions, token_types):
    proto = embedding_model(positions, token_types)
    original, fused, _ = run(proto, ["ort-embed-layer-norm", "dead-code-elimination"])
    counts = ops(fused)
    assert counts["com.microsoft:EmbedLayerNormalization"] == 1
    assert not {"Gather", "LayerNormalization", "Add"} & set(counts)
    for seq in (7, 16):
        assert_same_outputs(original, fused, feeds(proto, seq))


def test_sum_read_elsewhere_is_output_2():
    proto = embedding_model(sum_used=True)
    original, fused, _ = run(proto, ["ort-embed-layer-norm"])
    node = fused.graph.nodes("EmbedLayerNormalization")[0]
    assert node.outputs[2] == "sum"
    assert_same_outputs(original, fused, feeds(proto))


def test_position_ids_not_arange_are_refused():
    """A reversed position buffer is not the 0..S-1 the op builds in, and its sliced shape is not
    proven [1, S] for the kernel's position_ids input either."""
    original, result, _ = run(embedding_model(arange=False), ["ort-embed-layer-norm"])
    assert "com.microsoft:EmbedLayerNormalization" not in ops(result)


def gpt2_embeddings(position_shape=("batch", "seq")):
    """GPT-2: wte[input_ids] + wpe[position_ids] (positions start after the cache), the sum also
    feeding the first residual Add."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((V, H)).astype(np.float32), "wte"),
             numpy_helper.from_array(rng.standard_normal((40, H)).astype(np.float32), "wpe"),
             numpy_helper.from_array(np.ones(H, np.float32), "g"), numpy_helper.from_array(np.zeros(H, np.float32), "b")]
    nodes = [helper.make_node("Gather", ["wte", "input_ids"], ["we"]),
             helper.make_node("Gather", ["wpe", "position_ids"], ["pe"]),
             helper.make_node("Add", ["we", "pe"], ["h"]),
             helper.make_node("LayerNormalization", ["h", "g", "b"], ["ln"], epsilon=1e-5),
             helper.make_node("Add", ["h", "ln"], ["y"])]
    graph = helper.make_graph(
        nodes, "gpt2_embeddings",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
         helper.make_tensor_value_info("position_ids", TensorProto.INT64, list(position_shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", H])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("position_shape", [("batch", "seq"), (1, "seq")])
def test_gpt2_embeddings_with_position_ids_after_a_cache(position_shape):
    proto = gpt2_embeddings(position_shape)
    original, fused, _ = run(proto, ["ort-embed-layer-norm"])
    assert ops(fused)["com.microsoft:EmbedLayerNormalization"] == 1
    rng = np.random.default_rng(3)
    for past, seq in ((0, 5), (9, 1), (20, 7)):
        pos = np.arange(past, past + seq, dtype=np.int64)[None].repeat(2 if position_shape[0] != 1 else 1, 0)
        assert_same_outputs(original, fused, {"input_ids": rng.integers(0, V, (2, seq)), "position_ids": pos})


def test_gpt2_positions_of_another_length_are_refused():
    proto = gpt2_embeddings(("batch", "other"))
    original, result, _ = run(proto, ["ort-embed-layer-norm"])
    assert "com.microsoft:EmbedLayerNormalization" not in ops(result)


def skip_embeddings(sum_output=False, bias=False):
    """The three lookups summed by an already-fused com.microsoft SkipLayerNormalization, as in
    onnxruntime's test_embedlayer_fusion.py models (gpt2_model_generator.create_gpt2_embedlayer: every
    lookup reads the same int32 ids; the sum may be the Skip's output 3)."""
    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)
             for name, shape in (("word", (V, H)), ("pos", (P, H)), ("tok", (10, H)), ("gamma", (H,)), ("beta", (H,)),
                                 ("bias", (H,)))]
    nodes = [helper.make_node("Gather", ["word", "ids"], ["w"]), helper.make_node("Gather", ["pos", "ids"], ["p"]),
             helper.make_node("Add", ["w", "p"], ["wp"]), helper.make_node("Gather", ["tok", "ids"], ["t"]),
             helper.make_node("SkipLayerNormalization", ["wp", "t", "gamma", "beta"] + (["bias"] if bias else []),
                              ["y", "", "", "s"] if sum_output else ["y"], domain="com.microsoft", epsilon=0.1)]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    if sum_output:
        outputs.append(helper.make_tensor_value_info("s", TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("ids", TensorProto.INT32, ["batch", "seq"])],
                              outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16), helper.make_opsetid("com.microsoft", 1)])


@pytest.mark.parametrize("sum_output", [False, True])
def test_lookups_summed_by_a_skip_layer_norm(sum_output):
    proto = skip_embeddings(sum_output)
    original, fused, _ = run(proto, ["ort-embed-layer-norm", "dead-code-elimination"])
    counts = ops(fused)
    assert counts["com.microsoft:EmbedLayerNormalization"] == 1
    assert not {"Gather", "Add", "com.microsoft:SkipLayerNormalization"} & set(counts)
    node = next(n for n in fused.graph.nodes() if n.op_type == "EmbedLayerNormalization")
    assert list(node.inputs) == ["ids", "ids", "word", "pos", "tok", "gamma", "beta", "", "ids"]
    assert (len(node.outputs) == 3 and node.outputs[2] == "s") if sum_output else len(node.outputs) == 2
    rng = np.random.default_rng(4)
    for seq in (5, 9):
        assert_same_outputs(original, fused, {"ids": rng.integers(0, 10, (2, seq)).astype(np.int32)})


def test_skip_layer_norm_with_a_bias_is_left_alone():
    _, fused, _ = run(skip_embeddings(bias=True), ["ort-embed-layer-norm"])
    assert "com.microsoft:EmbedLayerNormalization" not in ops(fused)
