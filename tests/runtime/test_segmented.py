"""A huge graph runs as segments of sessions (graphtool.runtime.segmented): the same outputs, bit for bit,
as one session of the whole model — checked on real models cut into tiny segments."""

from __future__ import annotations

import glob
import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from graphtool.runtime import segmented
from graphtool.runtime import session as runtime
from tests.bad_inputs.make_bad_inputs import chain_model_bytes
from tests.conftest import BACKEND_DATA

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _plain(data: bytes, folder: str | None = None) -> ort.InferenceSession:
    opts = runtime.session_options("off")
    if folder:
        opts.add_session_config_entry("session.model_external_initializers_file_folder_path", folder)
    return ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])


def _feeds(sess, seed: int = 0) -> dict[str, np.ndarray]:
    return runtime.random_inputs(sess, seed)


def _same(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a, b, equal_nan=a.dtype.kind == "f")


MODELS = sorted(glob.glob(os.path.join(BACKEND_DATA, "light", "*.onnx"))) + [
    os.path.join(ROOT, "fixtures", name) for name in ("if_subgraph.onnx", "local_function.onnx", "external_data.onnx")
] + sorted(glob.glob(os.path.join(ROOT, "fixtures", "torch", "*.onnx")))


@pytest.mark.parametrize("path", MODELS, ids=os.path.basename)
def test_segments_give_the_outputs_of_one_session(path: str) -> None:
    model = onnx.load(path, load_external_data=False)
    folder = os.path.dirname(path)
    whole = ort.InferenceSession(path, runtime.session_options("off"), providers=["CPUExecutionProvider"])
    cut = segmented.SegmentedSession(model, _plain, folder, segment_nodes=3)
    assert [(a.name, a.type) for a in cut.get_inputs()] == [(a.name, a.type) for a in whole.get_inputs()]
    assert [o.name for o in cut.get_outputs()] == [o.name for o in whole.get_outputs()]
    assert [o.type for o in cut.get_outputs()] == [o.type for o in whole.get_outputs()]
    assert cut.segments <= -(-len(model.graph.node) // 3)  # segments only dead nodes make are left out
    feeds = _feeds(whole)
    for got, want in zip(cut.run(None, feeds), whole.run(None, feeds)):
        assert _same(got, want)


def test_segments_past_the_open_bound_are_closed_and_reopened(monkeypatch) -> None:
    """At most MAX_OPEN_NODES nodes' sessions stay open; closed segments reopen from their bytes
    and every run still gives one session's outputs."""
    path = os.path.join(ROOT, "fixtures", "torch", "cnn_ts.onnx")
    model = onnx.load(path)
    monkeypatch.setattr(segmented, "MAX_OPEN_NODES", 4)
    opened: list[int] = []

    def counting(data: bytes, folder: str | None = None) -> ort.InferenceSession:
        opened.append(1)
        return _plain(data, folder)

    cut = segmented.SegmentedSession(model, counting, None, segment_nodes=2)
    whole = _plain(model.SerializeToString())
    assert sum(1 for seg in cut._segments if seg.session is not None) <= 2
    for seed in (0, 1):
        feeds = _feeds(whole, seed)
        for got, want in zip(cut.run(None, feeds), whole.run(None, feeds)):
            assert _same(got, want)
        assert sum(1 for seg in cut._segments if seg.session is not None) <= 2
    assert len(opened) > cut.segments  # closed ones were reopened


def test_a_captured_value_reaches_the_segment_whose_subgraph_reads_it() -> None:
    """x is made in segment 1 and read only inside an If branch in segment 3."""
    then = helper.make_graph([helper.make_node("Neg", ["x"], ["t"])], "then", [],
                             [helper.make_tensor_value_info("t", TensorProto.FLOAT, None)])
    other = helper.make_graph([helper.make_node("Abs", ["x"], ["e"])], "else", [],
                              [helper.make_tensor_value_info("e", TensorProto.FLOAT, None)])
    nodes = [helper.make_node("Relu", ["a"], ["x"]), helper.make_node("Sigmoid", ["a"], ["s"]),
             helper.make_node("ReduceSum", ["s"], ["r"], keepdims=0), helper.make_node("Greater", ["r", "zero"], ["c"]),
             helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    cut = segmented.SegmentedSession(model, _plain, None, segment_nodes=1)
    feeds = {"a": np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)}
    want = _plain(model.SerializeToString()).run(None, feeds)
    assert _same(cut.run(None, feeds)[0], want[0])


def test_small_or_unsorted_models_stay_one_session(monkeypatch) -> None:
    data = chain_model_bytes(50)
    assert segmented.open_segmented(data, _plain) is None  # under MIN_BYTES: not even parsed
    monkeypatch.setattr(segmented, "MIN_BYTES", 0)
    assert segmented.open_segmented(data, _plain) is None  # under MIN_NODES
    monkeypatch.setattr(segmented, "MIN_NODES", 10)
    monkeypatch.setattr(segmented, "SEGMENT_NODES", 7)
    cut = segmented.open_segmented(data, _plain)
    assert cut is not None and cut.segments == 8
    model = onnx.load_from_string(data)
    nodes = list(model.graph.node)
    del model.graph.node[:]
    model.graph.node.extend(reversed(nodes))  # consumers before producers: not cut
    assert segmented.open_segmented(model.SerializeToString(), _plain) is None


def test_segments_of_dead_branches_are_left_out() -> None:
    """x read by 50 Relus of which one is the output: 49 dead nodes. A segment holding only dead
    ones hands nothing on; onnxruntime refused to run it ("At least one output should be
    requested") and verification blamed the model."""
    nodes = [helper.make_node("Relu", ["x"], [f"r{i}"]) for i in range(50)]
    graph = helper.make_graph(nodes, "fan", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("r7", TensorProto.FLOAT, [4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    cut = segmented.SegmentedSession(model, _plain, None, segment_nodes=4)
    assert cut.segments == 1  # the one with r7
    x = np.array([-1, 2, -3, 4], np.float32)
    (got,) = cut.run(None, {"x": x})
    assert _same(got, np.maximum(x, 0))


def test_make_session_segments_a_huge_graph_and_verification_agrees(monkeypatch) -> None:
    """runtime.make_session (in-process) hands a segmented session to verification for a graph
    past the threshold; optimize's verification passes on it."""
    from graphtool import io
    from graphtool.optimize import optimize
    from graphtool.verify import verify

    monkeypatch.setattr(segmented, "MIN_BYTES", 0)
    monkeypatch.setattr(segmented, "MIN_NODES", 100)
    monkeypatch.setattr(segmented, "SEGMENT_NODES", 64)
    data = chain_model_bytes(300)
    assert isinstance(runtime.make_session(data), segmented.SegmentedSession)
    assert not isinstance(runtime.make_session(data, "basic"), segmented.SegmentedSession)  # ORT optimizes: whole
    assert not isinstance(runtime.make_session(data, local=True), segmented.SegmentedSession)  # timed: whole
    model = io.load_proto(io.parse_model(data))
    optimized = optimize(model, level=1)[0]
    assert verify(model, optimized).ok


@pytest.mark.parametrize("path", [p for p in MODELS if "if_subgraph" not in p], ids=os.path.basename)
def test_graphtools_plan_is_the_cut_the_child_finds(path: str) -> None:
    """graphtool.runtime.plan works the cuts out from the IR so the child need not read every
    node's names: for the bytes io.to_bytes makes, and for the file of a model as loaded, the
    plan is the child's own cut, and a session opened with it answers like one session."""
    from graphtool import io
    from graphtool.runtime.plan import _plan

    model = io.load(path)
    graph = model.graph
    sources = [io.to_bytes(model)] + ([open(path, "rb").read()] if model.pristine() else [])
    for segment_nodes in (1, 3, 7):
        plan = _plan(graph, graph.topological_ids(), segment_nodes)
        assert plan is not None
        for source in sources:
            proto = onnx.load_from_string(source)
            child = segmented.SegmentedSession.__new__(segmented.SegmentedSession)
            child._output_names = [o.name for o in proto.graph.output]
            cut = child._cut(proto.graph, {t.name: t for t in proto.graph.initializer}, segment_nodes)
            assert [(s.start, s.stop, s.inputs, s.initializers, s.outputs, s.done_with) for s in cut] \
                == plan["segments"], segment_nodes
    plan = _plan(graph, graph.topological_ids(), 3)
    folder = os.path.dirname(path)
    whole = ort.InferenceSession(path, runtime.session_options("off"), providers=["CPUExecutionProvider"])
    planned = segmented.SegmentedSession(onnx.load(path, load_external_data=False), _plain, folder, plan=plan)
    feeds = _feeds(whole)
    for got, want in zip(planned.run(None, feeds), whole.run(None, feeds)):
        assert _same(got, want)


def test_a_plan_for_other_bytes_is_not_used() -> None:
    from graphtool import io
    from graphtool.runtime.plan import _plan

    path = MODELS[0]
    model = io.load(path)
    plan = _plan(model.graph, model.graph.topological_ids(), 3)
    plan = {"nodes": plan["nodes"] + 1, "segments": plan["segments"][:1]}  # not this model's
    cut = segmented.SegmentedSession(onnx.load(path, load_external_data=False), _plain, os.path.dirname(path),
                                     segment_nodes=3, plan=plan)
    assert cut.segments == -(-len(model.graph) // 3)  # the child cut it itself
