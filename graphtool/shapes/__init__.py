"""The one shape/type oracle every pass asks (``oracle``), and ONNX shape inference run in segments
on very large graphs (``segments``)."""

from __future__ import annotations

import graphtool.ir.model as _model
from graphtool.shapes.oracle import SMALL_TENSOR_BYTES, ShapeOracle, declared_dims, dims_of, infer

__all__ = ["SMALL_TENSOR_BYTES", "ShapeOracle", "declared_dims", "dims_of", "infer"]

_model.SHAPE_ORACLE = ShapeOracle  # Graph.shape() asks it for what a file does not declare
