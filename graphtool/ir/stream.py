"""Serialize a model to a file one initializer at a time, byte-identical to SerializeToString.

Building the whole ModelProto and calling SerializeToString holds the weights three times
(the tensors, the proto, the bytes). Protobuf's wire format is a sequence of records in field
order, so the small part of the model (everything but the main graph's initializers) is
serialized as ``to_onnx.graph_pieces`` gives it and each initializer record — key, length, tensor
bytes — is spliced in where ``GraphProto.initializer`` (field 5) belongs, written and dropped
before the next. (``varint``, ``key`` and ``split_at_field`` live in ``protos``; they are
re-exported here.)
"""

from __future__ import annotations

from typing import BinaryIO, Callable

import numpy as np
from onnx import TensorProto, helper

from graphtool.ir.from_onnx import gc_paused
from graphtool.ir.model import Model
from graphtool.ir.protos import GRAPH_INITIALIZER_FIELD, MODEL_GRAPH_FIELD, key, split_at_field, varint  # noqa: F401
from graphtool.ir.tensor import Tensor
from graphtool.ir.to_onnx import graph_pieces, model_frame

TENSOR_RAW_DATA_FIELD = 9

# dtypes whose onnx.numpy_helper.from_array is exactly {dims, data_type, name, raw_data=tobytes()}
_RAW_DTYPES = {np.dtype(t) for t in ("float32", "float64", "float16", "int8", "int16", "int32", "int64",
                                     "uint8", "uint16", "uint32", "uint64", "bool")}


class _Record:
    """One initializer's serialized form, sized without being built (for raw-able arrays)."""

    def __init__(self, tensor: Tensor, write_tensor: Callable[[Tensor], TensorProto]):
        array = tensor._array if tensor._proto is None else None
        self.array = None
        self.proto: TensorProto | None = None
        if array is not None and array.dtype in _RAW_DTYPES:
            meta = TensorProto()
            meta.dims.extend(array.shape)
            meta.data_type = helper.np_dtype_to_tensor_dtype(array.dtype)
            if tensor.name:
                meta.name = tensor.name
            self.head = meta.SerializeToString() + key(TENSOR_RAW_DATA_FIELD) + varint(array.nbytes)
            self.array = array
            self.size = len(self.head) + array.nbytes
        else:
            self.proto = write_tensor(tensor)
            self.size = self.proto.ByteSize()

    def write(self, handle: BinaryIO) -> None:
        handle.write(key(GRAPH_INITIALIZER_FIELD) + varint(self.size))
        if self.array is not None:
            handle.write(self.head)
            contiguous = np.ascontiguousarray(self.array)
            if contiguous.dtype.byteorder == ">":
                contiguous = contiguous.astype(contiguous.dtype.newbyteorder("<"))
            handle.write(memoryview(contiguous.reshape(-1).view(np.uint8)))
        else:
            assert self.proto is not None
            handle.write(self.proto.SerializeToString())

    @property
    def framed_size(self) -> int:
        return len(key(GRAPH_INITIALIZER_FIELD)) + len(varint(self.size)) + self.size


def write_model(model: Model, handle: BinaryIO, write_tensor: Callable[[Tensor], TensorProto]) -> int:
    """Write ``model`` with the main graph's initializers spliced in one at a time (the nodes come
    from ``to_onnx.graph_pieces``, untouched ones as their template bytes). Returns the bytes written."""
    with gc_paused():  # the records too: 150k of them made while a 1M-node IR is alive cost
        head, tail = model_frame(model)  # two or three full collections (3 s; issue 19)
        nodes, g_head, g_tail = graph_pieces(model.graph, write_tensor)
        records = [_Record(t, write_tensor) for t in model.graph.initializers.values()]
    graph_size = sum(map(len, nodes)) + len(g_head) + len(g_tail) + sum(r.framed_size for r in records)
    frame = key(MODEL_GRAPH_FIELD) + varint(graph_size)
    handle.write(head)
    handle.write(frame)
    handle.writelines(nodes)
    del nodes
    handle.write(g_head)
    from graphtool.progress import progress_iter

    for record in progress_iter(records, "saving weights", unit="tensor"):
        record.write(handle)
    handle.write(g_tail)
    handle.write(tail)
    return len(head) + len(frame) + graph_size + len(tail)
