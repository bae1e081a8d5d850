"""Serialize a model to a file one initializer at a time, byte-identical to SerializeToString.

Building the whole ModelProto and calling SerializeToString holds the weights three times
(the tensors, the proto, the bytes). Protobuf's wire format is a sequence of records in field
order, so the small part of the model (everything but the main graph's initializers) is
serialized normally and each initializer record — key, length, tensor bytes — is spliced in
where ``GraphProto.initializer`` (field 5) belongs, written and dropped before the next.
"""

from __future__ import annotations

from typing import BinaryIO, Callable

import numpy as np
from onnx import ModelProto, TensorProto, helper

from graphtool.ir.model import Model
from graphtool.ir.tensor import Tensor

MODEL_GRAPH_FIELD = 7
GRAPH_INITIALIZER_FIELD = 5
TENSOR_RAW_DATA_FIELD = 9
_LEN = 2  # wire type of length-delimited fields

# dtypes whose onnx.numpy_helper.from_array is exactly {dims, data_type, name, raw_data=tobytes()}
_RAW_DTYPES = {np.dtype(t) for t in ("float32", "float64", "float16", "int8", "int16", "int32", "int64",
                                     "uint8", "uint16", "uint32", "uint64", "bool")}


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def key(field: int) -> bytes:
    return varint((field << 3) | _LEN)


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def split_at_field(data: bytes, field: int) -> tuple[bytes, bytes]:
    """Split a serialized message before its first top-level record numbered above ``field``."""
    pos = 0
    while pos < len(data):
        start = pos
        tag, pos = _read_varint(data, pos)
        number, wire = tag >> 3, tag & 7
        if number > field:
            return data[:start], data[start:]
        if wire == 0:
            _, pos = _read_varint(data, pos)
        elif wire == 1:
            pos += 8
        elif wire == 2:
            length, pos = _read_varint(data, pos)
            pos += length
        elif wire == 5:
            pos += 4
        else:
            raise ValueError(f"unexpected wire type {wire} in a serialized model")
    return data, b""


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


def write_model(model: Model, shell: ModelProto, handle: BinaryIO, write_tensor: Callable[[Tensor], TensorProto]) -> int:
    """Write ``shell`` (the model's proto whose main graph has no initializers) with the main
    graph's initializers spliced in. Returns the number of bytes written."""
    graph_bytes = shell.graph.SerializeToString()
    shell.ClearField("graph")
    head, tail = split_at_field(shell.SerializeToString(), MODEL_GRAPH_FIELD)
    g_head, g_tail = split_at_field(graph_bytes, GRAPH_INITIALIZER_FIELD)
    records = [_Record(t, write_tensor) for t in model.graph.initializers.values()]
    graph_size = len(graph_bytes) + sum(r.framed_size for r in records)
    handle.write(head)
    handle.write(key(MODEL_GRAPH_FIELD) + varint(graph_size))
    handle.write(g_head)
    for record in records:
        record.write(handle)
    handle.write(g_tail)
    handle.write(tail)
    return len(head) + len(key(MODEL_GRAPH_FIELD) + varint(graph_size)) + graph_size + len(tail)
