"""Bridge to onnx-graphsurgeon, for users with gs scripts: ``to_gs(model)`` / ``from_gs(graph)``.

The bridge goes through a ModelProto, which both sides read and write losslessly for what
graphsurgeon models; what it does not (doc strings, value_info of removed tensors) comes from
``like`` when a graph returns.
"""

from __future__ import annotations

import onnx_graphsurgeon as gs

from graphtool.io import load_proto, to_bytes
from graphtool.ir.model import Model


def to_gs(model: Model) -> "gs.Graph":
    import onnx

    return gs.import_onnx(onnx.load_from_string(to_bytes(model)))


def from_gs(graph: "gs.Graph", like: Model | None = None) -> Model:
    """The IR of a graphsurgeon graph; ``like`` supplies model metadata graphsurgeon drops."""
    proto = gs.export_onnx(graph, do_type_check=False)
    if like is not None:
        for key in ("producer_name", "producer_version", "doc_string", "domain", "model_version"):
            setattr(proto, key, getattr(like.proto_shell, key))
        del proto.metadata_props[:]
        proto.metadata_props.extend(like.proto_shell.metadata_props)
        proto.ir_version = like.ir_version
    return load_proto(proto, like.base_dir if like is not None else None)
