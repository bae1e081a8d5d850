"""Lazy initializers: a tensor's metadata is free, its bytes are read only when asked for.

A ``Tensor`` wraps the ``TensorProto`` exactly as it was in the file. When the proto points at
external data, the bytes stay on disk until ``numpy()`` or ``raw_bytes()`` is called, and then
only that tensor's byte range is mapped. That is what lets ``inspect`` read a 10 GB model without
touching a weight, and ``save`` stream weights one at a time.

Paths are validated when the model is loaded (``graphtool.io``); a ``Tensor`` trusts the
absolute ``data_path`` it is given.
"""

from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass
from typing import Iterator

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from graphtool import fileguard


DATA_FIELDS = ("raw_data", "float_data", "int32_data", "int64_data", "double_data", "uint64_data",
               "string_data", "external_data", "data_location")


@dataclass(frozen=True)
class ExternalRef:
    """Where a tensor's bytes live on disk (already resolved and checked by ``io``)."""

    path: str
    offset: int
    length: int


def external_fields(proto: TensorProto) -> dict[str, str]:
    """The ``external_data`` key/value entries of a tensor proto as a dict."""
    return {e.key: e.value for e in proto.external_data}


def is_external(proto: TensorProto) -> bool:
    return proto.data_location == TensorProto.EXTERNAL


def element_size(data_type: int) -> float:
    """Bytes per element; 0.5 for 4-bit types, 0 for strings (size unknown from metadata)."""
    if data_type in (TensorProto.STRING, TensorProto.UNDEFINED):
        return 0
    if data_type in (TensorProto.INT4, TensorProto.UINT4, getattr(TensorProto, "FLOAT4E2M1", -1)):
        return 0.5
    return np.dtype(helper.tensor_dtype_to_np_dtype(data_type)).itemsize


class Tensor:
    """One initializer: the original TensorProto (``external`` says where its bytes live on disk),
    or — for tensors a pass computed — just a numpy array, whose proto is built only when saved."""

    __slots__ = ("_proto", "external", "_array", "_name")

    def __init__(self, proto: TensorProto | None = None, external: ExternalRef | None = None,
                 *, array: np.ndarray | None = None, name: str = ""):
        if proto is None and array is None:
            raise ValueError("a Tensor needs a proto or an array")
        self._proto = proto
        self.external = external
        self._array = array
        self._name = name

    @classmethod
    def from_numpy(cls, array: np.ndarray, name: str) -> "Tensor":
        return cls(array=np.asarray(array), name=name)

    @property
    def proto(self) -> TensorProto:
        """The TensorProto; for array-backed tensors a fresh one each call (not kept in memory)."""
        if self._proto is not None:
            return self._proto
        return numpy_helper.from_array(np.asarray(self._array), self._name)

    def metadata_proto(self) -> TensorProto:
        """The proto without its data: name, dims, type, doc string (for external-data writes)."""
        if self._proto is not None:
            from graphtool.ir.protos import shell_of

            return shell_of(self._proto, DATA_FIELDS)
        return TensorProto(name=self._name, dims=self.dims, data_type=self.data_type)

    def copy(self) -> "Tensor":
        """The same tensor for a copied model: the proto is shared (no one edits it in place),
        an array-backed tensor's array is copied (its reader may)."""
        if self._proto is not None:
            return Tensor(self._proto, self.external)
        return Tensor(array=np.array(self._array, copy=True), name=self._name)

    def renamed(self, name: str) -> "Tensor":
        if self._proto is None:
            return Tensor(array=self._array, name=name)
        proto = TensorProto()
        proto.CopyFrom(self._proto)
        proto.name = name
        return Tensor(proto, self.external)

    @property
    def name(self) -> str:
        return self._proto.name if self._proto is not None else self._name

    @property
    def dims(self) -> tuple[int, ...]:
        return tuple(self._proto.dims) if self._proto is not None else tuple(self._array.shape)

    @property
    def data_type(self) -> int:
        if self._proto is not None:
            return self._proto.data_type
        return helper.np_dtype_to_tensor_dtype(self._array.dtype)

    @property
    def size(self) -> int:
        """Number of elements, from the dims alone."""
        return math.prod(self.dims)  # Python ints: no int64 wrap on absurd dims, ~10x cheaper than np.prod

    @property
    def nbytes(self) -> int:
        """Bytes of data, from metadata only (external length, raw_data length or dims × dtype)."""
        if self.external is not None:
            return self.external.length
        if self._proto is None:
            return int(self._array.nbytes)
        per_element = element_size(self._proto.data_type)
        if per_element:  # from dims: reading raw_data would copy the bytes out of protobuf
            return math.ceil(self.size * per_element)
        return self._proto.ByteSize()

    def numpy(self) -> np.ndarray:
        """The values; reads (and caches) only this tensor's bytes."""
        if self._array is None:
            if self.external is None:
                self._array = numpy_helper.to_array(self._proto)
            elif self._proto.data_type in _PLAIN_DTYPES and sys.byteorder == "little":
                # straight from the file into the array: a 256 MB weight costs 256 MB, not the
                # ~3x of bytes -> inline TensorProto -> numpy_helper
                array = np.empty(self.dims, _PLAIN_DTYPES[self._proto.data_type])
                with fileguard.open_data(self.external.path, self.name) as f:
                    f.seek(self.external.offset)
                    view, done = memoryview(array.reshape(-1).view(np.uint8)), 0
                    while done < len(view):
                        n = f.readinto(view[done:])
                        if not n:
                            raise OSError(f"{self.external.path}: file shrank while reading '{self.name}'")
                        done += n
                self._array = array
            else:
                inline = TensorProto()
                inline.CopyFrom(self.proto)
                del inline.external_data[:]
                inline.data_location = TensorProto.DEFAULT
                inline.raw_data = self.raw_bytes()
                self._array = numpy_helper.to_array(inline)
        return self._array

    def raw_bytes(self) -> bytes:
        """The little-endian bytes as stored in ``raw_data`` or in the external file."""
        if self.external is None:
            if self._proto is not None and self._proto.HasField("raw_data"):
                return self._proto.raw_data
            return numpy_helper.from_array(np.asarray(self.numpy())).raw_data
        return b"".join(self.iter_chunks())

    def iter_chunks(self, chunk: int = 64 << 20) -> Iterator[bytes]:
        """The bytes in chunks, so a 1 GB weight can be copied without holding it whole."""
        if self.external is None:
            yield self.raw_bytes()
            return
        ref = self.external
        if ref.length == 0:
            return
        # Plain reads, not mmap: pages mapped while copying count in the process's RSS until
        # unmapped (a 256 MB weight added 256 MB to a save's peak); a read holds one chunk.
        with fileguard.open_data(ref.path, self.name) as f:
            f.seek(ref.offset)
            left = ref.length
            while left:
                data = f.read(min(chunk, left))
                if not data:
                    raise OSError(f"{ref.path}: file shrank while reading '{self.name}'")
                left -= len(data)
                yield data

    def release(self) -> None:
        """Drop the cached array of a file-backed tensor (used while streaming a save)."""
        if self.external is not None and self._proto is not None:
            self._array = None


# ONNX types whose external bytes are exactly this numpy dtype's little-endian layout
_PLAIN_DTYPES = {
    TensorProto.FLOAT: np.float32, TensorProto.DOUBLE: np.float64, TensorProto.FLOAT16: np.float16,
    TensorProto.INT8: np.int8, TensorProto.INT16: np.int16, TensorProto.INT32: np.int32,
    TensorProto.INT64: np.int64, TensorProto.UINT8: np.uint8, TensorProto.UINT16: np.uint16,
    TensorProto.UINT32: np.uint32, TensorProto.UINT64: np.uint64, TensorProto.BOOL: np.bool_,
}

_PACKED_BITS = {TensorProto.INT4: 4, TensorProto.UINT4: 4, getattr(TensorProto, "FLOAT4E2M1", -1): 4,
                getattr(TensorProto, "INT2", -2): 2, getattr(TensorProto, "UINT2", -3): 2,
                getattr(TensorProto, "FLOAT6E2M3", -4): 6, getattr(TensorProto, "FLOAT6E3M2", -5): 6}
# the typed field a dense tensor of this type keeps its values in, and how many entries per element
_TYPED_FIELD = {
    TensorProto.FLOAT: ("float_data", 1), TensorProto.COMPLEX64: ("float_data", 2),
    TensorProto.DOUBLE: ("double_data", 1), TensorProto.COMPLEX128: ("double_data", 2),
    TensorProto.INT64: ("int64_data", 1), TensorProto.UINT32: ("uint64_data", 1), TensorProto.UINT64: ("uint64_data", 1),
    TensorProto.STRING: ("string_data", 1),
    **{t: ("int32_data", 1) for t in (TensorProto.INT32, TensorProto.INT16, TensorProto.INT8, TensorProto.UINT16,
                                      TensorProto.UINT8, TensorProto.BOOL, TensorProto.FLOAT16, TensorProto.BFLOAT16)},
}


def _data_bytes(proto: TensorProto) -> int | None:
    """Bytes the dims need in raw form (exact integers: dims may multiply past int64), or None
    when the type has no fixed size (strings)."""
    size = 1
    for d in proto.dims:
        size *= d
    bits = _PACKED_BITS.get(proto.data_type)
    if bits:
        return (size * bits + 7) // 8
    width = element_size(proto.data_type)
    return size * int(width) if width else None


def check_tensor(proto: TensorProto) -> None:
    """Refuse a tensor whose metadata lies, from metadata alone (no decode): an unknown data
    type, a negative dim, or inline data whose length disagrees with the dims. Such a tensor would
    otherwise fail deep inside numpy, or make ``save`` materialize a claimed 10**12 elements."""
    from graphtool.errors import BadModel

    name = proto.name
    if proto.data_type == TensorProto.UNDEFINED or proto.data_type not in TensorProto.DataType.values():
        raise BadModel(f"tensor '{name}' has an unknown data type {proto.data_type}")
    if any(d < 0 for d in proto.dims):
        raise BadModel(f"tensor '{name}' has a negative dim: {list(proto.dims)}")
    if proto.data_type == TensorProto.STRING and (is_external(proto) or proto.HasField("raw_data")):
        raise BadModel(f"tensor '{name}': a string tensor keeps its values in string_data, not raw or external data")
    if proto.data_type == TensorProto.STRING:  # the spec says UTF-8; Python decodes it wherever values are read
        for i, value in enumerate(proto.string_data):
            try:
                value.decode("utf-8")
            except UnicodeDecodeError:
                raise BadModel(f"tensor '{name}': string value #{i} is not valid UTF-8") from None
    if is_external(proto) or proto.HasField("segment"):
        return
    size = 1
    for d in proto.dims:
        size *= d
    if proto.HasField("raw_data"):
        expected, got, unit = _data_bytes(proto), len(proto.raw_data), "bytes"
    else:
        field, per = _TYPED_FIELD.get(proto.data_type, ("int32_data", 1))
        bits = _PACKED_BITS.get(proto.data_type)
        if bits == 6:
            return  # no settled int32_data layout for 6-bit floats
        expected = (size * bits + 7) // 8 if bits else size * per  # 2/4-bit: one packed byte per entry
        got, unit = len(getattr(proto, field)), f"{field} entries"
    if got != expected:
        raise BadModel(f"tensor '{name}' holds {got} {unit} of data, but dims {list(proto.dims)} need {expected}")


def resolve_external(proto: TensorProto, base_dir: str) -> ExternalRef:
    """The checked location of an external tensor's bytes. Raises UnsafePath / BadModel.

    The guard runs before any byte is read: absolute locations, '..' and symlinks that leave
    the model's folder are refused, and the byte range must lie inside the file.
    """
    from graphtool.errors import BadModel, UnsafePath

    fields = external_fields(proto)
    location = fields.get("location", "")
    if not location:
        raise BadModel(f"tensor '{proto.name}' has external data without a location")
    if "\0" in location:
        raise UnsafePath(f"tensor '{proto.name}': external data path {location!r} contains a NUL byte")
    if os.path.isabs(location) or location.startswith(("/", "\\")) or ":" in location[:3]:
        raise UnsafePath(f"tensor '{proto.name}': external data path '{location}' is absolute")
    parts = location.replace("\\", "/").split("/")
    if ".." in parts:
        raise UnsafePath(f"tensor '{proto.name}': external data path '{location}' leaves the model's folder")
    root = os.path.realpath(base_dir)
    path = os.path.realpath(os.path.join(root, location))
    if os.path.commonpath([root, path]) != root:
        raise UnsafePath(f"tensor '{proto.name}': external data path '{location}' leaves the model's folder")
    size = fileguard.check_data_file(path, location, proto.name)  # regular, one link: before any byte is read
    try:
        offset = int(fields.get("offset", 0) or 0)
        length = int(fields["length"]) if fields.get("length") else size - offset
    except ValueError:
        raise BadModel(f"tensor '{proto.name}': external data offset/length is not a number") from None
    if offset < 0 or length < 0 or offset + length > size:
        raise BadModel(
            f"tensor '{proto.name}': external data range {offset}+{length} is past the end of "
            f"'{location}' ({size} bytes)"
        )
    expected = _data_bytes(proto)
    if expected is not None and length != expected:
        raise BadModel(
            f"tensor '{proto.name}': external data holds {length} bytes, dims {list(proto.dims)} need {int(expected)}"
        )
    return ExternalRef(path, offset, length)


def dtype_name(data_type: int) -> str:
    try:
        return onnx.TensorProto.DataType.Name(data_type).lower()
    except ValueError:
        return f"dtype{data_type}"
