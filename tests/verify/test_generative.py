"""Inputs that cannot hide a rewrite's assumption: distinct dims, KV caches, encoder lengths.

Mutation tests plant passes (through the entry-point group, as a user's plugin would) that are
correct only when two distinct symbolic dims are equal, or only for a past of length 0; default-flag
``graphtool optimize`` must refuse each (exit 1, no output). With every free dim = 2 (what
discovery did before) each of them passed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from graphtool.verify import verify
from graphtool.verify.dims import analyse
from graphtool.verify.discover import InputSpec, discover
from tests.verify.generative import cross_decoder, kv_decoder


def _specs(model: onnx.ModelProto) -> list[InputSpec]:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return [InputSpec(a.name, a.type, [d if isinstance(d, int) else (d or None) for d in a.shape])
            for a in sess.get_inputs()]


def _discover(model: onnx.ModelProto):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return discover(model, lambda feeds: dict(zip(names, sess.run(None, feeds))), _specs(model))


@pytest.mark.parametrize("mask_dim,dynamo", [("past_sequence_length + sequence_length", False), (None, False),
                                             ("total_sequence_length", False), ("past_sequence_length + sequence_length", True)])
def test_kv_cache_sets_are_consistent_and_distinct(mask_dim, dynamo):
    found = _discover(kv_decoder(mask_dim, dynamo))
    assert found.attempts == 1, found.failures
    assert "KV cache" in found.how
    shapes = [(s.label, s.feeds) for s in found.sets]
    pasts = []
    for label, feeds in shapes:
        b, s = feeds["input_ids"].shape
        p = feeds["past_key_values.0.key"].shape[2]
        assert feeds["attention_mask"].shape == (b, p + s), label
        assert (feeds["attention_mask"] == 1).all()
        assert (feeds["position_ids"] == np.arange(p, p + s)).all(), label
        pasts.append((p, s))
    labels = " | ".join(label for label, _ in shapes)
    assert "distinct dims" in labels and "realistic size" in labels and "prefill" in labels and "decode" in labels
    assert any(p >= 1 and s >= 1 and p != s and b != s for (p, s), b in zip(pasts, [2] * len(pasts)))
    assert any(p == 0 for p, _ in pasts) and any(s == 1 and p >= 1 for p, s in pasts)
    assert any(s >= 16 for _, s in pasts)


def test_encoder_length_differs_from_decoder_length():
    for enc_dim in ("encoder_sequence_length", None):
        found = _discover(cross_decoder(enc_dim))
        distinct = [s.feeds for s in found.sets if "distinct" in s.label]
        assert distinct, found.how
        feeds = distinct[0]
        assert feeds["encoder_hidden_states"].shape[1] == feeds["encoder_attention_mask"].shape[1]
        assert feeds["encoder_hidden_states"].shape[1] != feeds["input_ids"].shape[1]
        assert feeds["input_ids"].shape[0] not in (feeds["input_ids"].shape[1], feeds["encoder_hidden_states"].shape[1])


def _model(nodes, inputs, outputs, inits=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _vi(name, dims, t=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, t, dims)


def test_graph_ties_distinct_symbols_only_where_the_graph_needs_them_equal():
    # x[a, b] + y[c, b2] ties a~c and b~b2 (through broadcasting); z[d] concatenated on axis 0 with
    # the sum's rows is free along that axis but ties its columns; w[e] is independent
    model = _model([helper.make_node("Add", ["x", "y"], ["s"]),
                    helper.make_node("Concat", ["s", "z"], ["c"], axis=0),
                    helper.make_node("Relu", ["w"], ["r"])],
                   [_vi("x", ["a", "b"]), _vi("y", ["c", None]), _vi("z", ["d", "f"]), _vi("w", [None])],
                   [_vi("c", None), _vi("r", None)])
    dm = analyse(model, _specs(model))
    cls = dm.cls
    assert cls[("x", 0)] == cls[("y", 0)] and cls[("x", 1)] == cls[("y", 1)] == cls[("z", 1)]
    assert len({cls[("x", 0)], cls[("x", 1)], cls[("z", 0)], cls[("w", 0)]}) == 4
    sizes = dm.sizes("distinct")
    shapes = {s.name: dm.shape(s, sizes) for s in _specs(model)}
    assert shapes["x"] == shapes["y"] and shapes["z"][1] == shapes["x"][1]
    assert len({shapes["x"][0], shapes["x"][1], shapes["z"][0], shapes["w"][0]}) == 4


def test_matmul_inner_dim_and_constant_pin():
    # x[n, k] @ W[6, 3]: k must be 6; h[n, m] @ g[p, q] ties m~p
    w = onnx.numpy_helper.from_array(np.ones((6, 3), np.float32), "W")
    model = _model([helper.make_node("MatMul", ["x", "W"], ["y"]), helper.make_node("MatMul", ["h", "g"], ["o"])],
                   [_vi("x", ["n", "k"]), _vi("h", ["n", "m"]), _vi("g", ["p", "q"])],
                   [_vi("y", None), _vi("o", None)], [w])
    dm = analyse(model, _specs(model))
    sizes = dm.sizes("distinct")
    shapes = {s.name: dm.shape(s, sizes) for s in _specs(model)}
    assert shapes["x"][1] == 6
    assert shapes["h"][1] == shapes["g"][0] and shapes["g"][1] not in (shapes["h"][0], shapes["h"][1])
    result = verify(_ir(model), _ir(model))
    assert result.ok and len(result.input_sets) >= 2


def _ir(model: onnx.ModelProto):
    from graphtool.ir.from_onnx import from_onnx

    return from_onnx(model)


# --------------------------------------------------------------------------- mutation tests

MUTATIONS = textwrap.dedent('''
    """Rewrites that are wrong in ways only some input shapes show (planted for verification's tests)."""
    from graphtool.pass_manager import Pass, PassResult

    class ReadDecoderLengthForEncoder(Pass):
        """Correct only when encoder length == decoder length: the encoder mask's expand shape
        reads the decoder's ids instead of the encoder's states (the cross-attention bug)."""
        level = 1
        priority = 95

        def run(self, graph, ctx):
            changed = 0
            for node in graph.nodes("Shape"):
                if node.inputs[0] == "encoder_hidden_states" and graph.has_value("input_ids"):
                    graph.set_input(node, 0, "input_ids")
                    changed += 1
            return PassResult(changed > 0, {"mutated": changed})

    class DropThePast(Pass):
        """Correct only for past length 0: attention reads the new keys/values, not the cache."""
        level = 1
        priority = 96

        def run(self, graph, ctx):
            changed = 0
            for concat in graph.nodes("Concat"):
                if not any("past" in v for v in concat.inputs):
                    continue
                new = concat.inputs[-1]
                for user in graph.consumers(concat.outputs[0]):
                    if user.op_type in ("Transpose", "MatMul") and graph.is_output(concat.outputs[0]):
                        graph.set_input(user, list(user.inputs).index(concat.outputs[0]), new)
                        changed += 1
            return PassResult(changed > 0, {"mutated": changed})
''')


@pytest.fixture(scope="module")
def mutations(tmp_path_factory):
    site = tmp_path_factory.mktemp("site")
    (site / "gt_mutations").mkdir()
    (site / "gt_mutations" / "__init__.py").write_text(MUTATIONS)
    info = site / "gt_mutations-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: gt-mutations\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[graphtool.passes]\n"  # the entry-point name is the pass name
                                           "read-decoder-length-for-encoder = gt_mutations:ReadDecoderLengthForEncoder\n"
                                           "drop-the-past = gt_mutations:DropThePast\n")
    return str(site)


def _optimize(path: str, out: str, site: str, *flags: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=site + os.pathsep + os.environ.get("PYTHONPATH", ""))
    # installed plugins run only when asked (issue 35): the planted passes are opted in, the
    # verification's flags stay the defaults
    return subprocess.run([sys.executable, "-m", "graphtool", "optimize", path, "-o", out, "--plugins", "all", *flags],
                          capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.parametrize("builder,pass_name", [(lambda: cross_decoder(), "read-decoder-length-for-encoder"),
                                               (lambda: cross_decoder(None), "read-decoder-length-for-encoder"),
                                               (lambda: kv_decoder(), "drop-the-past"),
                                               (lambda: kv_decoder(None, dynamo=True), "drop-the-past")])
def test_mutation_is_caught_with_default_flags(builder, pass_name, mutations, tmp_path):
    path, out = str(tmp_path / "m.onnx"), str(tmp_path / "out.onnx")
    onnx.save(builder(), path)
    proc = _optimize(path, out, mutations)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "verification failed" in proc.stderr and pass_name in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not os.path.exists(out)
    # the mutation is harmless where the dims it assumes equal are equal (every free dim = 2, a
    # past of length 0): given such inputs, the same command verifies and writes the model, which is
    # why inputs with every free dim = 2 missed it
    if pass_name == "drop-the-past":
        feeds = {"input_ids": np.array([[1, 2]]), "attention_mask": np.ones((1, 2), np.int64),
                 "position_ids": np.array([[0, 1]]), "past_key_values.0.key": np.zeros((1, 2, 0, 4), np.float32),
                 "past_key_values.0.value": np.zeros((1, 2, 0, 4), np.float32)}
    else:
        feeds = {"input_ids": np.array([[1, 2], [3, 0]]), "encoder_hidden_states": np.ones((2, 2, 8), np.float32),
                 "encoder_attention_mask": np.ones((2, 2), np.int64)}
    np.savez(tmp_path / "equal.npz", **feeds)
    proc = _optimize(path, out, mutations, "--inputs", str(tmp_path / "equal.npz"))
    assert proc.returncode == 0 and os.path.exists(out), proc.stderr


def test_cli_text_report_prints_every_input_set(tmp_path):
    path, out = str(tmp_path / "kv.onnx"), str(tmp_path / "out.onnx")
    onnx.save(kv_decoder(), path)
    proc = subprocess.run([sys.executable, "-m", "graphtool", "optimize", path, "-o", out],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    sets = [line for line in proc.stdout.splitlines() if line.startswith("  set ")]
    assert len(sets) == 5 and all("past_key_values.0.key=" in line for line in sets)
    assert any("2x2x0x4" in line for line in sets) and any("input_ids=2x1" in line for line in sets)


# --------------------------------------------------------------------------- what graphtool writes

WRITERS = textwrap.dedent('''
    """Passes that write what onnxruntime refuses, planted for the tests of what graphtool writes."""
    from graphtool.pass_manager import Pass, PassResult

    class TwinNames(Pass):
        """Turns each Relu into Relu then Abs, both named "twin" (a namer bug's shape)."""
        level = 1
        priority = 95

        def run(self, graph, ctx):
            changed = 0
            for node in graph.nodes("Relu"):
                if node.name.startswith("twin"):
                    continue
                out = node.outputs[0]
                relu = graph.add_node("Relu", node.inputs, 1, name="twin", near=node)
                ident = graph.add_node("Abs", relu.outputs, 1, name="twin", near=node)
                graph.replace_all_uses(out, ident.outputs[0])
                graph.remove_nodes([node])
                graph.rename_value(ident.outputs[0], out)
                changed += 1
            return PassResult(changed > 0, {"twins": changed})
''')

UNLOADABLE = textwrap.dedent('''
    from graphtool.pass_manager import Pass, PassResult

    class InventAnOp(Pass):
        """Turns Relu into an op onnxruntime does not have."""
        level = 1
        priority = 95

        def run(self, graph, ctx):
            changed = 0
            for node in graph.nodes("Relu"):
                new = graph.add_node("Frobnicate", node.inputs, 1, domain="com.example", name="frob", near=node)
                out = node.outputs[0]
                graph.replace_all_uses(out, new.outputs[0])
                graph.remove_nodes([node])
                graph.rename_value(new.outputs[0], out)
                changed += 1
            return PassResult(changed > 0, {"invented": changed})
''')


def _site(root, name: str, module: str, entry: str, pass_name: str):
    (root / name).mkdir()
    (root / name / "__init__.py").write_text(module)
    info = root / f"{name}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[graphtool.passes]\n{pass_name} = {name}:{entry}\n")
    return str(root)


def _relu_model(path: str) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["r"], name="relu"),
                               helper.make_node("Neg", ["r"], ["y"], name="neg")], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)


def test_two_new_nodes_of_one_name_are_renamed_and_the_written_model_runs(tmp_path):
    site = _site(tmp_path, "gt_twins", WRITERS, "TwinNames", "twin-names")
    path, out = str(tmp_path / "m.onnx"), str(tmp_path / "out.onnx")
    _relu_model(path)
    proc = _optimize(path, out, site, "--json")
    assert proc.returncode == 0, proc.stderr
    names = [n.name for n in onnx.load(out).graph.node]
    assert names.count("twin") == 1 and "twin_1" in names
    ort.InferenceSession(out, providers=["CPUExecutionProvider"])  # two "twin"s: it refused this
    import json

    stats = {p["name"]: p["stats"] for p in json.loads(proc.stdout)["report"]["passes"]}
    assert stats["twin-names"]["renamed-duplicate-node-names"] >= 1


def test_a_written_model_onnxruntime_refuses_is_a_failed_rewrite_not_bad_input(tmp_path):
    site = _site(tmp_path, "gt_invent", UNLOADABLE, "InventAnOp", "invent-an-op")
    path, out = str(tmp_path / "m.onnx"), str(tmp_path / "out.onnx")
    _relu_model(path)
    proc = _optimize(path, out, site)
    assert proc.returncode == 1, proc.stderr
    assert "does not load in onnxruntime" in proc.stderr and "invent-an-op" in proc.stderr
    assert "error:" not in proc.stderr and not os.path.exists(out)


def test_a_symbol_that_is_a_number_is_that_size():
    """Some exporters write a static size as a symbol ("16"): every input set keeps it."""
    w = onnx.numpy_helper.from_array(np.ones((4, 3), np.float32), "W")
    model = _model([helper.make_node("MatMul", ["x", "W"], ["y"])], [_vi("x", ["batch", "4"])], [_vi("y", None)], [w])
    result = verify(_ir(model), _ir(model))
    assert result.ok and len(result.input_sets) >= 2
    assert all(s.feeds["x"].shape[1] == 4 for s in result.input_sets)
