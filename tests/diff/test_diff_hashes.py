"""graphtool.diff.hashes: the value-id view the hashes and pair checks read instead of names
must say exactly what the graph says (producers, uses, captures by subgraphs)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphtool import io
from graphtool.diff import NONE, Hashes, Matcher, diff, positional_tokens
from graphtool.diff import hashes as diff_hashes
from graphtool.ir.model import Model
from graphtool.optimize import optimize
from tests.conftest import FIXTURES, light_model
from tests.render.models import hand_edit, scramble


def _odd_graph() -> Model:
    """Mul(x, x), an omitted optional input, a two-output Split with one output unread, a value
    that is both a graph output and read, an initializer read twice by one op, an input that is
    also the first output."""
    w = numpy_helper.from_array(np.ones(4, np.float32), "w")
    nodes = [
        helper.make_node("Mul", ["x", "x"], ["sq"]),
        helper.make_node("Split", ["sq"], ["s0", "s1"], axis=0, num_outputs=2),
        helper.make_node("Clip", ["s0", "", "w"], ["c"]),
        helper.make_node("Add", ["w", "w"], ["ww"]),
        helper.make_node("Mul", ["c", "ww"], ["y"]),
        helper.make_node("Relu", ["y"], ["z"]),
    ]
    vi = lambda n, s=(4,): helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s))
    graph = helper.make_graph(nodes, "g", [vi("x", (8,))], [vi("x", (8,)), vi("y"), vi("z")], [w])
    return io.load_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]))


MODELS = {
    "odd": _odd_graph,
    "if_subgraph": lambda: io.load(f"{FIXTURES}/if_subgraph.onnx"),  # captures an initializer and a value
    "resnet50": lambda: io.load(light_model("resnet50")),
}


@pytest.mark.parametrize("window", [4096, 2])  # 2: most inputs are found through the graph
@pytest.mark.parametrize("name", sorted(MODELS))
def test_value_ids_and_backward_hashes_agree_with_the_graph(name, window, monkeypatch):
    monkeypatch.setattr(diff_hashes, "_WINDOW", window)
    graph = MODELS[name]().graph
    h = Hashes(graph, positional_tokens(graph))
    for node in h.order:
        feed = h.feeds[node.id]
        assert len(feed) == len(node.inputs)
        for vid, value in zip(feed, node.inputs):
            if not value:
                assert vid == NONE
                continue
            assert h.names[vid] == value and h.value_id(value) == vid
            producer = graph.producer(value)
            assert h.producers[vid] == (producer.id if producer is not None else -1)
            if producer is not None:
                assert producer.outputs[vid - h.first_out[producer.id]] == value
    # the backward hashes recomputed the way they were before the view: uses asked by name
    out_pos = {v: k for k, v in enumerate(graph.outputs)}
    expected = {}
    for node in reversed(h.order):
        outs = tuple(
            hash((tuple(sorted((expected[c.id], slot) for c, slot in graph.uses(v))), out_pos.get(v, -1))) if v else 0
            for v in node.outputs
        )
        expected[node.id] = hash((node.op_type, node.domain, h.canon_key[node.id], outs, len(node.inputs)))
    assert {n.id: h.backward[n.id] for n in h.order} == expected
    # and the forward hashes do not depend on how the inputs were found
    monkeypatch.setattr(diff_hashes, "_WINDOW", 4096 if window == 2 else 2)
    other = Hashes(graph, positional_tokens(graph))
    assert (other.forward, other.feeds) == (h.forward, h.feeds)


def test_a_value_read_only_inside_a_subgraph_counts_its_capture():
    """``then_branch`` reads the outer initializer ``bias`` and the outer value ``x_scaled``: the
    capture is a use (the backward hash of x_scaled's producer sees it; bias is not unused)."""
    model = io.load(f"{FIXTURES}/if_subgraph.onnx")
    graph = model.graph
    h = Hashes(graph, positional_tokens(graph))
    assert {"bias", "x_scaled"} <= h.captured
    assert "bias" not in h.sources_read  # no op of the main graph reads it as an input
    assert diff(model, io.load(f"{FIXTURES}/if_subgraph.onnx")).equal


def test_unused_initializers_are_still_found():
    model = _odd_graph()
    edited = onnx.load_from_string(io.to_bytes(model))
    edited.graph.initializer.append(numpy_helper.from_array(np.zeros(3, np.float32), "dead"))
    result = diff(model, io.load_proto(edited))
    assert result.graphs[0].graph_changes == [{"what": "unused initializer added", "name": "dead"}]


def _check_tokens(m: Matcher) -> int:
    checked = 0
    for a_id, b_id in m.a2b.items():
        na, nb = m.ga.node(a_id), m.gb.node(b_id)
        for slot in range(max(len(na.inputs), len(nb.inputs))):
            va = na.inputs[slot] if slot < len(na.inputs) else ""
            vb = nb.inputs[slot] if slot < len(nb.inputs) else ""
            assert m.token_a_at(a_id, slot) == m.token_a(va)
            assert m.token_b_at(b_id, slot) == m.token_b(vb)
            checked += 1
    return checked


@pytest.mark.parametrize("how", ["optimized", "hand_edit", "scrambled"])
def test_pair_tokens_from_value_ids_equal_the_tokens_by_name(how):
    a = io.load(light_model("resnet50"))
    if how == "optimized":
        b = optimize(io.load(light_model("resnet50")), level=2)[0]
    elif how == "hand_edit":
        b = hand_edit(io.load(light_model("resnet50")))
    else:
        b = io.load_proto(scramble(onnx.load(light_model("resnet50")), seed=5))
    m = Matcher(a.graph, b.graph, by_name=True)
    m.run()
    assert _check_tokens(m) > 200


def test_pair_tokens_inside_subgraphs_equal_the_tokens_by_name():
    """A branch reads outer values: its tokens go through the enclosing matcher's."""
    a = io.load(f"{FIXTURES}/if_subgraph.onnx")
    b = io.load_proto(scramble(onnx.load(f"{FIXTURES}/if_subgraph.onnx"), seed=2))
    m = Matcher(a.graph, b.graph, by_name=True)
    m.run()
    checked = _check_tokens(m)
    (if_a,) = a.graph.nodes("If")
    if_b = b.graph.node(m.a2b[if_a.id])
    for key in ("then_branch", "else_branch"):
        inner = Matcher(if_a.attr(key), if_b.attr(key), by_name=False, parent=m)
        inner.run()
        assert len(inner.a2b) == len(if_a.attr(key))
        checked += _check_tokens(inner)
    assert checked >= 10
