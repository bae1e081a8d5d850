"""The one shape/type oracle every pass asks (``oracle``), and ONNX shape inference run in segments
on very large graphs (``segments``)."""

from __future__ import annotations

from graphtool.shapes.oracle import SMALL_TENSOR_BYTES, ShapeOracle, dims_of, infer

__all__ = ["SMALL_TENSOR_BYTES", "ShapeOracle", "dims_of", "infer"]
