"""Small generative-model interfaces built with onnx.helper, the way exporters write them.

- ``kv_decoder``: one attention layer with a KV cache (``past_key_values.0.key/value`` of
  [batch, heads, past, head] in, ``present.*`` out), an attention mask over past + new tokens and
  position ids that continue the past; mask dim named as optimum writes it, as dynamo writes it
  (``s1 + s2``), or not named at all.
- ``cross_decoder``: a decoder step with cross-attention over ``encoder_hidden_states`` and an
  ``encoder_attention_mask``; the mask is expanded with shapes read from the inputs (``Shape``),
  as TorchScript exports do, so a rewrite that reads the wrong input's length only shows when the
  encoder and decoder lengths differ.
"""

from __future__ import annotations

import zlib

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HEADS, HEAD, D, VOCAB = 2, 4, 8, 16


def _w(name: str, *shape: int, seed: int = 0) -> TensorProto:
    rng = np.random.default_rng(zlib.crc32(name.encode()) + seed)
    return numpy_helper.from_array((rng.standard_normal(shape) * 0.5).astype(np.float32), name)


def _i64(name: str, values: list[int]) -> TensorProto:
    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)


def _heads(nodes: list, inits: list, x: str, w: str, out: str) -> None:
    """x [b, s, D] @ W -> [b, HEADS, s, HEAD]"""
    nodes += [helper.make_node("MatMul", [x, w], [out + "_p"]),
              helper.make_node("Reshape", [out + "_p", "heads_shape"], [out + "_r"]),
              helper.make_node("Transpose", [out + "_r"], [out], perm=[0, 2, 1, 3])]


def _merge(nodes: list, x: str, out: str) -> None:
    nodes += [helper.make_node("Transpose", [x], [out + "_t"], perm=[0, 2, 1, 3]),
              helper.make_node("Reshape", [out + "_t", "merge_shape"], [out])]


def kv_decoder(mask_dim: str | None = "past_sequence_length + sequence_length", dynamo: bool = False) -> onnx.ModelProto:
    b, s, p = ("s0", "s1", "s2") if dynamo else ("batch_size", "sequence_length", "past_sequence_length")
    if dynamo and mask_dim == "past_sequence_length + sequence_length":
        mask_dim = "s2 + s1"
    inits = [_w("embed", VOCAB, D), _w("pos_embed", 64, D), _w("wq", D, D), _w("wk", D, D), _w("wv", D, D),
             _w("wo", D, D), _w("lm_head", D, VOCAB), _i64("heads_shape", [0, 0, HEADS, HEAD]),
             _i64("merge_shape", [0, 0, D]), numpy_helper.from_array(np.array(HEAD ** -0.5, np.float32), "scale"),
             numpy_helper.from_array(np.array(-1e4, np.float32), "neg"),
             numpy_helper.from_array(np.array(1.0, np.float32), "one"), _i64("axes12", [1, 2])]
    nodes = [helper.make_node("Gather", ["embed", "input_ids"], ["tok"]),
             helper.make_node("Gather", ["pos_embed", "position_ids"], ["pos"]),
             helper.make_node("Add", ["tok", "pos"], ["h"])]
    _heads(nodes, inits, "h", "wq", "q")
    _heads(nodes, inits, "h", "wk", "k_new")
    _heads(nodes, inits, "h", "wv", "v_new")
    nodes += [helper.make_node("Concat", ["past_key_values.0.key", "k_new"], ["present.0.key"], axis=2),
              helper.make_node("Concat", ["past_key_values.0.value", "v_new"], ["present.0.value"], axis=2),
              helper.make_node("Transpose", ["present.0.key"], ["kt"], perm=[0, 1, 3, 2]),
              helper.make_node("MatMul", ["q", "kt"], ["qk"]),
              helper.make_node("Mul", ["qk", "scale"], ["scores"]),
              helper.make_node("Cast", ["attention_mask"], ["mask_f"], to=TensorProto.FLOAT),
              helper.make_node("Sub", ["one", "mask_f"], ["inv"]),
              helper.make_node("Mul", ["inv", "neg"], ["bias2"]),
              helper.make_node("Unsqueeze", ["bias2", "axes12"], ["bias4"]),
              helper.make_node("Add", ["scores", "bias4"], ["masked"]),
              helper.make_node("Softmax", ["masked"], ["probs"], axis=-1),
              helper.make_node("MatMul", ["probs", "present.0.value"], ["ctx"])]
    _merge(nodes, "ctx", "merged")
    nodes += [helper.make_node("MatMul", ["merged", "wo"], ["attn"]),
              helper.make_node("Add", ["attn", "h"], ["res"]),
              helper.make_node("MatMul", ["res", "lm_head"], ["logits"])]
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [b, s]),
              helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [b, mask_dim]),
              helper.make_tensor_value_info("position_ids", TensorProto.INT64, [b, s]),
              helper.make_tensor_value_info("past_key_values.0.key", TensorProto.FLOAT, [b, HEADS, p, HEAD]),
              helper.make_tensor_value_info("past_key_values.0.value", TensorProto.FLOAT, [b, HEADS, p, HEAD])]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [b, s, VOCAB]),
               helper.make_tensor_value_info("present.0.key", TensorProto.FLOAT, [b, HEADS, None, HEAD]),
               helper.make_tensor_value_info("present.0.value", TensorProto.FLOAT, [b, HEADS, None, HEAD])]
    graph = helper.make_graph(nodes, "kv_decoder", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def cross_decoder(enc_dim: str = "encoder_sequence_length") -> onnx.ModelProto:
    """Decoder step with cross-attention; the encoder mask is expanded to [b, 1, S, E] with
    shapes read from the inputs."""
    inits = [_w("embed", VOCAB, D), _w("wq", D, D), _w("wk", D, D), _w("wv", D, D), _w("wo", D, D),
             _w("lm_head", D, VOCAB), _i64("heads_shape", [0, 0, HEADS, HEAD]), _i64("merge_shape", [0, 0, D]),
             numpy_helper.from_array(np.array(HEAD ** -0.5, np.float32), "scale"),
             numpy_helper.from_array(np.array(-1e4, np.float32), "neg"),
             numpy_helper.from_array(np.array(1.0, np.float32), "one"), _i64("axes12", [1, 2]),
             _i64("i0", [0]), _i64("i1", [1]), _i64("one_dim", [1])]
    nodes = [helper.make_node("Gather", ["embed", "input_ids"], ["h"])]
    _heads(nodes, inits, "h", "wq", "q")
    _heads(nodes, inits, "encoder_hidden_states", "wk", "k")
    _heads(nodes, inits, "encoder_hidden_states", "wv", "v")
    nodes += [helper.make_node("Shape", ["input_ids"], ["ids_shape"]),
              helper.make_node("Shape", ["encoder_hidden_states"], ["enc_shape"]),
              helper.make_node("Gather", ["ids_shape", "i0"], ["bdim"]),
              helper.make_node("Gather", ["ids_shape", "i1"], ["sdim"]),
              helper.make_node("Gather", ["enc_shape", "i1"], ["edim"]),
              helper.make_node("Concat", ["bdim", "one_dim", "sdim", "edim"], ["mask_shape"], axis=0),
              helper.make_node("Unsqueeze", ["encoder_attention_mask", "axes12"], ["m4"]),
              helper.make_node("Expand", ["m4", "mask_shape"], ["m4e"]),
              helper.make_node("Cast", ["m4e"], ["mask_f"], to=TensorProto.FLOAT),
              helper.make_node("Sub", ["one", "mask_f"], ["inv"]),
              helper.make_node("Mul", ["inv", "neg"], ["bias"]),
              helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
              helper.make_node("MatMul", ["q", "kt"], ["qk"]),
              helper.make_node("Mul", ["qk", "scale"], ["scores"]),
              helper.make_node("Add", ["scores", "bias"], ["masked"]),
              helper.make_node("Softmax", ["masked"], ["probs"], axis=-1),
              helper.make_node("MatMul", ["probs", "v"], ["ctx"])]
    _merge(nodes, "ctx", "merged")
    nodes += [helper.make_node("MatMul", ["merged", "wo"], ["attn"]),
              helper.make_node("Add", ["attn", "h"], ["res"]),
              helper.make_node("MatMul", ["res", "lm_head"], ["logits"])]
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch_size", "decoder_sequence_length"]),
              helper.make_tensor_value_info("encoder_hidden_states", TensorProto.FLOAT, ["batch_size", enc_dim, D]),
              helper.make_tensor_value_info("encoder_attention_mask", TensorProto.INT64, ["batch_size", enc_dim])]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch_size", "decoder_sequence_length", VOCAB])]
    graph = helper.make_graph(nodes, "cross_decoder", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model
