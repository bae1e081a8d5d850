"""The hand-built inputs of the today corpus' recipes (manifest.json), shared by the script that
builds the corpus in the torch venv (today_corpus.py) and the one that measures it in graphtool's
(today_verify.py): numpy and onnx only, so both can import it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx

VOCAB = 512  # every export's vocabulary (today_corpus.py builds them so)
ENCODER = 12  # encoder length of the encoder-decoders' inputs: distinct from every decoder length used


def hand_inputs(model_path: str | Path, recipe: dict, past: int, new: int, enc: int = ENCODER, batch: int = 2,
                keep_all: bool = False) -> dict:
    """The recipe's inputs: mask of past+new with one padded past slot in row 1, positions
    past..past+new-1, past K/V of length ``past``, cross K/V and encoder states of length ``enc``
    (encoder mask: row 1's last two slots padded). Only the model's inputs unless ``keep_all``."""
    rng = np.random.default_rng(1)
    graph_inputs = {i.name: i for i in onnx.load(str(model_path), load_external_data=False).graph.input}

    def float_type(name: str) -> type:
        i = graph_inputs.get(name)
        return onnx.helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type) if i else np.float32

    feeds = {recipe["input_ids"]: rng.integers(0, VOCAB, (batch, new)).astype(np.int64)}
    if "attention_mask" in recipe:
        mask = np.ones((batch, past + new), np.int64)
        if past > 0:
            mask[1, 0] = 0
        feeds[recipe["attention_mask"]] = mask
    if "position_ids" in recipe:
        feeds[recipe["position_ids"]] = np.tile(np.arange(past, past + new, dtype=np.int64), (batch, 1))
    if "encoder_hidden_states" in recipe:
        name = recipe["encoder_hidden_states"]
        feeds[name] = rng.standard_normal((batch, enc, recipe["encoder_hidden"])).astype(float_type(name))
        feeds[recipe["encoder_attention_mask"]] = np.ones((batch, enc), np.int64)
        feeds[recipe["encoder_attention_mask"]][1, -2:] = 0
    for name, kv in recipe["past"].items():
        length = enc if kv["length"] == "encoder" else past
        feeds[name] = rng.standard_normal((batch, kv["heads"], length, kv["head_dim"])).astype(float_type(name))
    return feeds if keep_all else {k: v for k, v in feeds.items() if k in graph_inputs}
