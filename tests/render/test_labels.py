"""Boxes like Netron's: attributes at their schema default are hidden (``all_attrs`` shows them),
names only on request; contrib ops get onnxruntime's slot names; weight statistics are right
and bounded; the page's script and style ship in the wheel."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphtool import io
from graphtool.render.dot import model_picture
from graphtool.render.schemas import Schemas
from graphtool.render.weights import WeightRef, array_stats, weight_stats
from tests.conftest import FIXTURES, light_model

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _model(nodes, inits, opset=17, domains=()):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, 1) for d in domains]
    return io.load_proto(helper.make_model(graph, opset_imports=opsets))


def test_defaults_are_hidden_and_all_attrs_shows_them():
    w = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w")
    conv = helper.make_node("Conv", ["x", "w"], ["c"], name="conv", strides=[1, 1], dilations=[1, 1],
                            pads=[0, 0, 0, 0], group=1, auto_pad="NOTSET", kernel_shape=[3, 3])
    bn_params = [numpy_helper.from_array(np.ones(4, np.float32), n) for n in ("s", "b", "m", "v")]
    bn = helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["y"], name="bn",
                          epsilon=1.0000000656873453e-05, momentum=0.5)  # epsilon 1 ulp off 1e-5: still default
    model = _model([conv, bn], [w, *bn_params])
    source = model_picture(model).source
    assert "kernel_shape=3×3" in source and "momentum=0.5" in source and "W 4×3×3×3" in source
    for hidden in ("strides=", "dilations=", "pads=", "group=", "auto_pad=", "epsilon="):
        assert hidden not in source, hidden
    assert ">conv<" not in source  # Netron's default: no names in boxes
    every = model_picture(model, all_attrs=True, names=True).source
    for shown in ("strides=1×1", "pads=[0,0,0,0]", "group=1", "auto_pad=NOTSET", "epsilon=1e-05", ">conv<"):
        assert shown in every, shown
    info = next(i for i in model_picture(model).info.values() if i.get("op_type") == "Conv")
    assert set(info["defaults"]) == {"strides", "dilations", "pads", "group", "auto_pad"}
    assert info["attributes"]["strides"] == "1×1"  # the panel keeps every attribute
    assert [r["slot"] for r in info["inputs"]] == ["X", "W"] and info["inputs"][1]["weight"]


def test_resnet50_batchnorm_epsilon_is_hidden():
    source = model_picture(io.load(light_model("resnet50"))).source
    assert "epsilon=" not in source and "kernel_shape=7×7" in source and "strides=2×2" in source


def test_contrib_ops_use_onnxruntime_schemas():
    w = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w")
    b = numpy_helper.from_array(np.ones(4, np.float32), "b")
    fused = helper.make_node("FusedConv", ["x", "w", "b"], ["y"], domain="com.microsoft", activation="Relu",
                             group=1, strides=[1, 1], kernel_shape=[3, 3])
    model = _model([fused], [w, b], domains=("com.microsoft",))
    schemas = Schemas(model.opset_imports)
    node = model.graph.nodes("FusedConv")[0]
    assert [schemas.slot_name(node, k) for k in range(4)] == ["X", "W", "B", "Z"]
    assert schemas.is_default(node, "group", 1) and not schemas.is_default(node, "activation", "Relu")
    source = model_picture(model).source
    assert "W 4×3×3×3" in source and "B [4]" in source and "activation=Relu" in source and "group=" not in source
    unknown = _model([helper.make_node("Mystery", ["x"], ["y"], domain="my.ops", strides=[1, 1], k=3)], [],
                     domains=("my.ops",))
    source = model_picture(unknown).source
    assert "k=3" in source and "strides=" not in source  # unknown op: implicit kernel defaults only


def test_array_stats_match_numpy_and_skip_nans():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(3, 1000, 700)).astype(np.float32)  # > one CHUNK: accumulated across slices
    s = array_stats(a)
    assert s["min"] == f"{float(a.min()):.5g}" and s["max"] == f"{float(a.max()):.5g}"
    assert float(s["mean"]) == np.float64(f"{a.astype(np.float64).mean():.5g}")
    assert abs(float(s["std"]) - a.astype(np.float64).std()) < 1e-4
    b = np.array([1.0, np.nan, 3.0], np.float32)
    assert array_stats(b) == {"min": "1", "max": "3", "mean": "2", "std": "1", "nan": "1"}
    assert array_stats(np.array([True, False]))["mean"] == "0.5"


def test_weight_stats_are_bounded():
    loads = []

    def ref(n):
        def load():
            loads.append(n)
            return np.arange(n, dtype=np.float32)
        return WeightRef((n,), TensorProto.FLOAT, load)

    out = weight_stats({"w0": ref(10), "w1": ref(1000), "w2": ref(60), "w3": ref(50)}, max_elements=500, budget=100)
    assert out["w0"]["max"] == "9" and out["w0"]["shape"] == "[10]" and out["w0"]["dtype"] == "float"
    assert "over 500 elements" in out["w1"]["stats"]  # never read
    assert out["w2"]["mean"] == "29.5"
    assert "budget" in out["w3"]["stats"]  # 10 + 60 read; 50 more would pass 100
    assert loads == [10, 60]
    strings = WeightRef((1,), TensorProto.STRING, lambda: np.array(["a"], dtype=object))
    assert weight_stats({"s": strings})["s"]["stats"] == "not numeric"


def test_svg_output_reads_no_weight():
    calls = []
    picture = model_picture(io.load(light_model("resnet50")))
    for ref in picture.weights.values():
        original = ref.load
        ref.load = lambda original=original: calls.append(1) or original()
    picture.render("svg")
    assert calls == []
    assert len(picture.weights) > 0


def test_page_assets_ship_as_package_data():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        config = tomllib.load(f)
    shipped = set(config["tool"]["setuptools"]["package-data"]["graphtool.render"])
    on_disk = {n for n in os.listdir(os.path.join(ROOT, "graphtool", "render")) if n.endswith((".js", ".css"))}
    assert on_disk and on_disk <= shipped


def test_constant_nodes_fold_with_their_values():
    const = helper.make_node("Constant", [], ["axes"], value=numpy_helper.from_array(np.array([0], np.int64)))
    unsq = helper.make_node("Unsqueeze", ["x", "axes"], ["y"])
    info = next(i for i in model_picture(_model([const, unsq], [])).info.values() if i.get("op_type") == "Unsqueeze")
    assert info["inputs"][1]["values"] == "[0]" and info["inputs"][1]["slot"] == "axes"
    assert onnx.__version__  # the schema names come from the installed onnx


def test_external_weights_are_streamed_not_loaded(monkeypatch):
    from graphtool.ir.tensor import Tensor

    model = io.load(f"{FIXTURES}/external_data.onnx")
    expected = {name: t.numpy() for name, t in model.graph.initializers.items()}
    model = io.load(f"{FIXTURES}/external_data.onnx")

    def refuse(self):
        raise AssertionError("an external weight was loaded whole")

    monkeypatch.setattr(Tensor, "numpy", refuse)
    picture = model_picture(model)
    stats = picture.weight_stats()
    by_value = {row["value"]: row["weight"] for info in picture.info.values() for row in info.get("inputs", [])
                if row.get("weight")}
    assert set(by_value) == set(expected)
    for name, array in expected.items():
        entry = stats[by_value[name]]
        assert entry["min"] == f"{float(array.min()):.5g}" and entry["max"] == f"{float(array.max()):.5g}"
