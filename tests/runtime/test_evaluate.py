"""graphtool.runtime.constants: batched constant evaluation, exact numpy kernels, and what may fold."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphtool import io
from graphtool.runtime import can_fold, evaluate, foldable_region, frontier, is_constant, numpy_kernel, session_options


def _model(nodes, inputs=(), outputs=(), inits=(), opset=17, ir=8, functions=()):
    graph = helper.make_graph(nodes, "g", list(inputs), list(outputs), list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid("local", 1)],
                              functions=list(functions))
    model.ir_version = ir
    return model


def _c(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def _out(name, elem=TensorProto.FLOAT, shape=None):
    return helper.make_tensor_value_info(name, elem, shape)


def test_region_is_evaluated_in_one_session():
    nodes = [
        helper.make_node("Add", ["a", "b"], ["s"]),
        helper.make_node("Sin", ["s"], ["t"]),
        helper.make_node("Mul", ["t", "x"], ["y"]),  # reads an input: not foldable
    ]
    m = io.load_proto(_model(nodes, [_out("x", shape=[3])], [_out("y", shape=[3])],
                             [_c("a", np.arange(3, dtype=np.float32)), _c("b", np.ones(3, np.float32))]))
    g = m.graph
    region = foldable_region(g, m)
    assert [n.op_type for n in region] == ["Add", "Sin"]
    assert frontier(g, region) == ["t"]
    result = evaluate(g, m, region, ["t"])
    assert result.sessions == 1 and not result.failed
    np.testing.assert_allclose(result.values["t"], np.sin(np.arange(3, dtype=np.float32) + 1), rtol=1e-6)


def test_data_movement_is_computed_in_numpy_without_a_session():
    nodes = [
        helper.make_node("Unsqueeze", ["k", "axes"], ["u"]),
        helper.make_node("Concat", ["u", "u"], ["c"], axis=0),
        helper.make_node("ConstantOfShape", ["c"], ["z"], value=_c("v", np.array([7], np.int32))),
    ]
    m = io.load_proto(_model(nodes, [], [_out("z", TensorProto.INT32)],
                             [_c("k", np.array(2, np.int64)), _c("axes", np.array([0], np.int64))]))
    region = foldable_region(m.graph, m)
    result = evaluate(m.graph, m, region, ["z"])
    assert result.sessions == 0
    np.testing.assert_array_equal(result.values["z"], np.full((2, 2), 7, np.int32))


def test_a_node_ort_cannot_run_fails_alone():
    """The batched session fails (Gather index out of range); bisection still folds the rest."""
    nodes = [
        helper.make_node("Cos", ["a"], ["ok"]),
        helper.make_node("Gather", ["a", "bad_index"], ["bad"]),
        helper.make_node("Neg", ["bad"], ["after_bad"]),
        helper.make_node("Sin", ["ok"], ["ok2"]),
    ]
    m = io.load_proto(_model(nodes, [], [_out("ok2"), _out("after_bad")],
                             [_c("a", np.arange(3, dtype=np.float32)), _c("bad_index", np.array([5], np.int64))]))
    region = foldable_region(m.graph, m)
    result = evaluate(m.graph, m, region, frontier(m.graph, region))
    failed = {n.op_type for n in region if n.id in result.failed}
    assert failed == {"Gather", "Neg"}
    np.testing.assert_allclose(result.values["ok2"], np.sin(np.cos(np.arange(3, dtype=np.float32))))
    assert "after_bad" not in result.values


def test_overridable_initializer_is_not_constant():
    m = io.load_proto(_model([helper.make_node("Neg", ["w"], ["y"])], [_out("w", shape=[2])], [_out("y", shape=[2])],
                             [_c("w", np.ones(2, np.float32))]))
    assert not is_constant(m.graph, "w")
    assert foldable_region(m.graph, m) == []
    legacy = _model([helper.make_node("Neg", ["w"], ["y"])], [_out("w", shape=[2])], [_out("y", shape=[2])],
                    [_c("w", np.ones(2, np.float32))], opset=9, ir=3)
    m3 = io.load_proto(legacy)
    assert is_constant(m3.graph, "w")  # IR < 4: an initializer listed as input is a constant


@pytest.mark.parametrize("node, ok", [
    (helper.make_node("RandomUniformLike", ["a"], ["y"]), False),
    (helper.make_node("Bernoulli", ["a"], ["y"]), False),
    (helper.make_node("Dropout", ["a", "ratio", "train"], ["y"]), False),
    (helper.make_node("Dropout", ["a", "ratio", "no_train"], ["y"]), True),
    (helper.make_node("DequantizeLinear", ["a", "ratio"], ["y"]), False),
    (helper.make_node("Fn", ["a"], ["y"], domain="local"), False),
    (helper.make_node("Relu", ["a"], ["y"], domain="com.example"), False),
    (helper.make_node("Relu", ["a"], ["y"]), True),
])
def test_what_may_fold(node, ok):
    fn = helper.make_function("local", "Fn", ["i"], ["o"], [helper.make_node("Neg", ["i"], ["o"])],
                              [helper.make_opsetid("", 17)])
    inits = [_c("a", np.ones(2, np.float32)), _c("ratio", np.float32(0.5)), _c("train", np.array(True)),
             _c("no_train", np.array(False))]
    m = io.load_proto(_model([node], [], [_out("y")], inits, functions=[fn]))
    from graphtool.runtime import local_function_ops

    assert can_fold(m.graph.nodes()[0], local_function_ops(m), 17) is ok


def _ort(template: onnx.NodeProto, inputs: list[np.ndarray], opset: int = 17) -> list[np.ndarray]:
    """The same op run alone in onnxruntime with its inputs fed at run time."""
    names = [f"i{k}" for k in range(len(inputs))]
    node = onnx.NodeProto()
    node.CopyFrom(template)
    del node.input[:]
    node.input.extend(names)
    ins = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape))
           for n, a in zip(names, inputs)]
    graph = helper.make_graph([node], "k", ins, [onnx.ValueInfoProto(name=o) for o in node.output])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    sess = ort.InferenceSession(model.SerializeToString(), session_options("off"), providers=["CPUExecutionProvider"])
    return sess.run(None, dict(zip(names, inputs)))


I64 = lambda *v: np.array(v, dtype=np.int64)  # noqa: E731
X = np.arange(24, dtype=np.float32).reshape(2, 3, 4)

KERNEL_CASES = [
    (helper.make_node("Shape", ["x"], ["y"]), [X]),
    (helper.make_node("Shape", ["x"], ["y"], start=-2), [X]),
    (helper.make_node("Shape", ["x"], ["y"], start=1, end=-1), [X]),
    (helper.make_node("Shape", ["x"], ["y"], start=-9, end=9), [X]),
    (helper.make_node("Size", ["x"], ["y"]), [X]),
    (helper.make_node("ConstantOfShape", ["s"], ["y"]), [I64(2, 3)]),
    (helper.make_node("ConstantOfShape", ["s"], ["y"], value=_c("v", np.array([1.5], np.float16))), [I64(4)]),
    (helper.make_node("ConstantOfShape", ["s"], ["y"], value=_c("v", np.array([3], np.int64))), [I64()]),
    (helper.make_node("Unsqueeze", ["x", "a"], ["y"]), [X, I64(-1, 0)]),
    (helper.make_node("Unsqueeze", ["x", "a"], ["y"]), [np.array(5, np.int64), I64(0)]),
    (helper.make_node("Squeeze", ["x", "a"], ["y"]), [X.reshape(1, 2, 1, 12), I64(-2)]),
    (helper.make_node("Squeeze", ["x"], ["y"]), [X.reshape(1, 2, 1, 12)]),
    (helper.make_node("Concat", ["x", "z"], ["y"], axis=-1), [X, X[:, :, :2]]),
    (helper.make_node("Gather", ["x", "i"], ["y"], axis=1), [X, I64(-1, 0, 2)]),
    (helper.make_node("Gather", ["x", "i"], ["y"]), [I64(4, 5, 6), np.array(-1, np.int64)]),
    (helper.make_node("Gather", ["x", "i"], ["y"], axis=2), [X, np.array([[1, 0], [3, -2]], np.int32)]),
    (helper.make_node("Reshape", ["x", "s"], ["y"]), [X, I64(0, -1)]),
    (helper.make_node("Reshape", ["x", "s"], ["y"]), [X, I64(4, 0, 2)]),
    (helper.make_node("Transpose", ["x"], ["y"], perm=[2, 0, 1]), [X]),
    (helper.make_node("Transpose", ["x"], ["y"]), [X]),
    (helper.make_node("Expand", ["x", "s"], ["y"]), [np.array(2.5, np.float32), I64(3, 1, 2)]),
    (helper.make_node("Expand", ["x", "s"], ["y"]), [X[:, :1, :], I64(3, 1)]),
    (helper.make_node("Cast", ["x"], ["y"], to=TensorProto.INT32), [I64(1, -7, 2**20)]),
    (helper.make_node("Cast", ["x"], ["y"], to=TensorProto.INT64), [np.array([True, False])]),
    (helper.make_node("Slice", ["x", "s", "e"], ["y"]), [I64(1, 2, 3, 4), I64(-1), I64(2**62)]),
    (helper.make_node("Slice", ["x", "s", "e", "a", "t"], ["y"]), [X, I64(-1, 5), I64(-2**62, 0), I64(2, 1), I64(-2, -1)]),
    (helper.make_node("Slice", ["x", "s", "e", "a", "t"], ["y"]), [X, I64(0), I64(-1), I64(1), I64(2)]),
    (helper.make_node("Slice", ["x", "s", "e", "a", "t"], ["y"]), [X, I64(10), I64(-10), I64(-1), I64(-3)]),
    (helper.make_node("Range", ["a", "b", "c"], ["y"]), [np.array(10, np.int64), np.array(-3, np.int64), np.array(-4, np.int64)]),
    (helper.make_node("Range", ["a", "b", "c"], ["y"]), [np.array(0, np.int32), np.array(7, np.int32), np.array(3, np.int32)]),
]


@pytest.mark.parametrize("node, inputs", KERNEL_CASES, ids=[f"{n.op_type}{i}" for i, (n, _) in enumerate(KERNEL_CASES)])
def test_numpy_kernels_equal_onnxruntime_bit_for_bit(node, inputs):
    m = io.load_proto(_model([node], [onnx.ValueInfoProto(name=v) for v in node.input], [_out("y")], []))
    got = numpy_kernel(m.graph.nodes()[0], list(inputs), 17)
    assert got is not None, "the numpy kernel declined a case it should handle"
    want = _ort(node, list(inputs))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        assert g.tobytes() == np.ascontiguousarray(w).tobytes()


def test_numpy_kernel_declines_what_it_cannot_prove():
    x = [onnx.ValueInfoProto(name="x")]
    m = io.load_proto(_model([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.INT8)], x, [_out("y")], []))
    assert numpy_kernel(m.graph.nodes()[0], [I64(300)], 17) is None  # would wrap: ORT decides
    m = io.load_proto(_model([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.INT64)], x, [_out("y")], []))
    assert numpy_kernel(m.graph.nodes()[0], [np.array([1.7], np.float32)], 17) is None  # float → int: ORT


def test_numpy_kernels_equal_onnxruntime_on_the_onnx_node_tests():
    """Every ONNX node test of an op with a numpy kernel: where the kernel answers, its answer is
    onnxruntime's bit for bit (same dtype, shape and bytes; NaNs in the same places)."""
    from graphtool.runtime import make_session
    from graphtool.runtime.numpy_kernels import _KERNELS
    from tests.corpus.node_cases import node_testcases

    answered = declined = 0
    for case in node_testcases():
        nodes = case.model.graph.node
        if len(nodes) != 1 or nodes[0].op_type not in _KERNELS or nodes[0].domain not in ("", "ai.onnx"):
            continue
        opset = next((o.version for o in case.model.opset_import if o.domain in ("", "ai.onnx")), 0)
        model = io.load_proto(case.model)
        try:
            sess = make_session(model)
        except Exception:  # noqa: BLE001 - a case onnxruntime cannot load says nothing about numpy
            continue
        names = [i.name for i in sess.get_inputs()]
        for inputs, _ in case.data_sets:
            args = [np.asarray(a) if not isinstance(a, list) else None for a in inputs]
            if any(a is None or a.dtype.kind in "OUS" for a in args):
                continue
            got = numpy_kernel(model.graph.nodes()[0], args, opset)
            if got is None:
                declined += 1
                continue
            want = sess.run(None, dict(zip(names, args)))
            answered += 1
            for g, w in zip(got, want):
                w = np.asarray(w)
                assert g.dtype == w.dtype and g.shape == w.shape, (case.name, g.dtype, w.dtype, g.shape, w.shape)
                assert np.ascontiguousarray(g).tobytes() == np.ascontiguousarray(w).tobytes(), case.name
    print(f"numpy answered {answered} data sets, left {declined} to onnxruntime")
    assert answered > 100, (answered, declined)
