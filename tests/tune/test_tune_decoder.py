"""graphtool tune on a model with a KV cache: a prefill and a decode step timed in every run, both
latencies reported for every candidate, the decode step ranks them, the chosen model verified.
(Nothing here compares timings: speed is measured by bench/decoder_latency.py.)"""

from __future__ import annotations

import json
import os
import tempfile

import numpy as np

from graphtool import io
from graphtool.runtime import make_session, session_for
from graphtool.tune import (
    Candidate,
    OrtSettings,
    RewriteSet,
    Sample,
    TuneResult,
    step_medians,
)
from graphtool.verify import find_step_inputs
from tests.conftest import FIXTURES

DECODER = os.path.join(FIXTURES, "decoder", "llama_kv.onnx")
BERT = os.path.join(FIXTURES, "torch", "bert_ts.onnx")


def test_step_inputs_are_a_prefill_and_a_decode_step() -> None:
    steps = find_step_inputs(io.load(DECODER), DECODER, prefill=12, past=20)
    assert steps is not None and list(steps.steps) == ["prefill", "decode"]
    prefill, decode = steps.steps["prefill"].feeds, steps.steps["decode"].feeds
    assert prefill["input_ids"].shape == (1, 12) and prefill["past_key_values.0.key"].shape == (1, 2, 0, 8)
    assert prefill["attention_mask"].shape == (1, 12) and prefill["position_ids"].tolist() == [list(range(12))]
    assert decode["input_ids"].shape == (1, 1) and decode["past_key_values.1.value"].shape == (1, 2, 20, 8)
    assert decode["attention_mask"].shape == (1, 21) and decode["position_ids"].tolist() == [[20]]
    # the original ran on both (its outputs are kept): the present grows by the new tokens
    assert steps.steps["decode"].outputs["present.0.key"].shape == (1, 2, 21, 8)
    assert find_step_inputs(io.load(BERT), BERT, 12, 20) is None  # no KV cache: tune times as before


def _learned_positions_decoder(table: int) -> str:
    """A one-layer KV-cache decoder whose positions index a learned table of ``table`` rows (as
    GPT-2's and Whisper's do): a position past the table is out of range in onnxruntime."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((32, 4)).astype(np.float32), "tokens"),
             numpy_helper.from_array(rng.standard_normal((table, 4)).astype(np.float32), "positions"),
             numpy_helper.from_array(np.array([1], np.int64), "axis1")]
    nodes = [helper.make_node("Gather", ["tokens", "input_ids"], ["emb"]),
             helper.make_node("Gather", ["positions", "position_ids"], ["pos"]),
             helper.make_node("Add", ["emb", "pos"], ["h"]),
             helper.make_node("Unsqueeze", ["h", "axis1"], ["k"]),
             helper.make_node("Concat", ["past_key_values.0.key", "k"], ["present.0.key"], axis=2),
             helper.make_node("Concat", ["past_key_values.0.value", "k"], ["present.0.value"], axis=2),
             helper.make_node("Cast", ["attention_mask"], ["maskf"], to=TensorProto.FLOAT),
             helper.make_node("ReduceSum", ["maskf"], ["seen"], keepdims=0),
             helper.make_node("Mul", ["h", "seen"], ["logits"])]
    i64, f32 = TensorProto.INT64, TensorProto.FLOAT
    inputs = [helper.make_tensor_value_info("input_ids", i64, ["batch", "seq"]),
              helper.make_tensor_value_info("attention_mask", i64, ["batch", "total"]),
              helper.make_tensor_value_info("position_ids", i64, ["batch", "seq"]),
              helper.make_tensor_value_info("past_key_values.0.key", f32, ["batch", 1, "past", 4]),
              helper.make_tensor_value_info("past_key_values.0.value", f32, ["batch", 1, "past", 4])]
    outputs = [helper.make_tensor_value_info("logits", f32, ["batch", "seq", 4]),
               helper.make_tensor_value_info("present.0.key", f32, ["batch", 1, "total", 4]),
               helper.make_tensor_value_info("present.0.value", f32, ["batch", 1, "total", 4])]
    model = helper.make_model(helper.make_graph(nodes, "learned", inputs, outputs, inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    path = os.path.join(tempfile.mkdtemp(prefix="graphtool-test-"), "learned_positions.onnx")
    onnx.save(model, path)
    return path


def test_a_step_longer_than_the_position_table_is_timed_at_the_largest_half_that_runs() -> None:
    """Positions index a table of 64 rows: a prefill of 100 tokens and a decode step over 100
    cached ones are refused by the original (position 64 and up), so each halves until it runs (50
    tokens; 50 past) and says so; a step that fits is left as asked."""
    path = _learned_positions_decoder(64)
    steps = find_step_inputs(io.load(path), path, prefill=100, past=100)
    assert steps.sizes == {"prefill": (50, 0), "decode": (1, 50)}
    assert steps.steps["decode"].feeds["past_key_values.0.key"].shape == (1, 1, 50, 4)
    assert steps.steps["prefill"].feeds["input_ids"].shape == (1, 50)
    assert len(steps.smaller) == 2 and "past 100" in steps.smaller[1] and "50 past tokens" in steps.smaller[1]
    fits = find_step_inputs(io.load(path), path, prefill=12, past=20)
    assert fits.sizes == {"prefill": (12, 0), "decode": (1, 20)} and not fits.smaller


def test_each_run_times_both_steps_and_the_sample_is_the_picked_one() -> None:
    from graphtool.tune.ort import OrtTimer

    steps = find_step_inputs(io.load(DECODER), DECODER, prefill=32, past=4)
    feeds = {name: s.feeds for name, s in steps.steps.items()}
    original = Candidate(RewriteSet("original"), OrtSettings("all", (), 1))
    with tempfile.TemporaryDirectory() as work:
        for pick in ("decode", "prefill"):
            timer = OrtTimer(io.load(DECODER), DECODER, {}, "ort", work, steps=feeds, pick=pick)
            assert timer.feeds is feeds[pick]  # the kernel micro-benchmarks see the picked step's inputs
            got = timer.time([original], 3)[original]
            assert all(isinstance(x, Sample) and set(x.steps) == {"prefill", "decode"} for x in got)
            assert all(float(x) == x.steps[pick] for x in got)
            assert set(step_medians(got)) == {"prefill", "decode"}
            timer.close()


def test_tune_reports_both_steps_for_every_candidate_and_verifies_the_winner(run_cli, tmp_path) -> None:
    out = str(tmp_path / "tuned.onnx")
    result = run_cli("tune", DECODER, "-o", out, "--budget", "12", "--threads", "1", "--prefill", "16",
                     "--past", "24", "--json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    decoder = report["decoder"]
    assert decoder["pick"] == "decode" and decoder["prefill_tokens"] == 16 and decoder["past_tokens"] == 24
    assert decoder["steps"]["prefill"]["input_ids"] == [1, 16]
    assert decoder["steps"]["decode"]["past_key_values.0.key"] == [1, 2, 24, 8]
    measured = [r for r in report["tried"] if r["status"] == "measured"]
    assert len(measured) >= 3 and any(r["rewrite"]["level"] == 2 for r in measured)
    for row in measured:  # both latencies on every row; the ranked median is the decode step's
        assert set(row["steps_ms"]) == {"prefill", "decode"}
        assert row["median_ms"] == row["steps_ms"]["decode"]
    assert set(decoder["winner_ms"]) == {"prefill", "decode"} == set(decoder["original_ms"])
    assert any(f.startswith("KV cache: every run timed a prefill of 16 tokens") for f in report["findings"])
    # the chosen model is verified (or is the original) and gives the original's outputs on a decode step
    winner = report["winner"]["rewrite"]
    assert report["verification"] == "the original (no rewrite)" if winner["level"] == 0 else \
        report["verification"].startswith("outputs equal")
    feeds = find_step_inputs(io.load(DECODER), DECODER, prefill=5, past=9).steps["decode"].feeds
    want = make_session(DECODER).run(None, feeds)
    got = session_for(out).run(None, feeds)
    for a, b in zip(want, got):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-4)


def test_the_text_report_has_a_column_per_step() -> None:
    from graphtool.cli.tune_cmd import format_result
    from graphtool.tune.space import Row

    base = Candidate(RewriteSet("original"), OrtSettings("all", (), 1))
    fused = Candidate(RewriteSet("level 2", 2), OrtSettings("all", (), 1))
    rows = [Row(base, "rewrite sets", 0.004, 0.004, 0.01, 10, 0.5, steps={"prefill": 0.02, "decode": 0.004}),
            Row(fused, "rewrite sets", 0.003, 0.004, 0.01, 10, 0.99, steps={"prefill": 0.018, "decode": 0.003})]
    text = format_result(TuneResult(fused, base, 1.33, 0.99, None, rows))
    header = text.splitlines()[0]
    assert "prefill ms" in header and "decode ms" in header
    assert "18.00" in text and "3.00" in text
