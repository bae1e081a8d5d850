"""Shared builders for the cleanup/fold pass tests: tiny onnx.helper models, optimize-and-prove, op lists."""

from __future__ import annotations

from typing import Callable, Iterable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from graphtool import io
from graphtool.ir.graph import Graph
from graphtool.ir.model import Model
from graphtool.ir.to_onnx import to_onnx
from graphtool.optimize import optimize
from graphtool.verify import verify

F = TensorProto.FLOAT


def vi(name: str, shape, dtype: int = F) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, dtype, shape)


def const(name: str, array) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(array), name)


def make_proto(nodes, inputs=(), outputs=(), inits=(), opset: int = 17, ir_version: int = 8, *,
               value_info=(), functions=(), extra_opsets=(), check: bool = True) -> onnx.ModelProto:
    """A one-graph ModelProto; ``check`` runs the full onnx checker so a test never starts from an invalid model."""
    graph = helper.make_graph(nodes, "g", list(inputs), list(outputs), list(inits), value_info=list(value_info))
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset), *extra_opsets],
                              functions=list(functions))
    proto.ir_version = ir_version
    if check:
        onnx.checker.check_model(proto, full_check=True)
    return proto


def model(nodes, inputs=(), outputs=(), inits=(), opset: int = 17, value_info=(), *, check: bool = True) -> Model:
    """``make_proto`` loaded into the graphtool IR."""
    return io.load_proto(make_proto(nodes, inputs, outputs, inits, opset, value_info=value_info, check=check))


def runner(default_passes: Iterable[str]) -> Callable:
    """A ``run(m, passes=default_passes, feeds=None)`` that optimizes with only ``passes``, checks the result is a
    valid model, proves the outputs equal through onnxruntime and returns ``(optimized, report)``."""
    default = tuple(default_passes)

    def run(m: Model, passes: Iterable[str] = default, feeds=None):
        out, report, _ = optimize(m, passes=list(passes))
        onnx.checker.check_model(to_onnx(out), full_check=True)
        result = verify(m, out, feeds=feeds)
        assert result.ok, result.summary()
        return out, report

    return run


def ops(graph_or_model: Graph | Model) -> list[str]:
    """Op types in topological order (of the main graph when given a Model)."""
    graph = graph_or_model.graph if isinstance(graph_or_model, Model) else graph_or_model
    return [n.op_type for n in graph.topological_order()]
