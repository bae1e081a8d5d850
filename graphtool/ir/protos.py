"""Protobuf helpers the IR's lowest modules share (tensor.py and from_onnx.py both need them;
living here, neither imports the other for them)."""

from __future__ import annotations

from typing import Any, Iterable

from google.protobuf.message import Message


def shell_of(proto: Message, skip: Iterable[str]) -> Message:
    """A copy of ``proto`` without the (large) fields the IR holds itself."""
    skipped = set(skip)
    shell = type(proto)()
    for fd, value in proto.ListFields():
        if fd.name in skipped:
            continue
        if _is_repeated(fd):
            getattr(shell, fd.name).extend(value)
        elif fd.type == fd.TYPE_MESSAGE:
            getattr(shell, fd.name).CopyFrom(value)
        else:
            setattr(shell, fd.name, value)
    return shell


def _is_repeated(fd: Any) -> bool:
    # protobuf ≥ 6 has FieldDescriptor.is_repeated and no longer .label
    flag = getattr(fd, "is_repeated", None)
    return bool(flag) if flag is not None else fd.label == fd.LABEL_REPEATED


# ------------------------------------------------------------------ the wire format, by hand
# Protobuf writes a message's fields in field-number order, each as key, length, bytes: so a big
# repeated field (nodes, initializers) can be written record by record where it belongs.

MODEL_GRAPH_FIELD = 7
GRAPH_INITIALIZER_FIELD = 5
_LEN = 2  # wire type of length-delimited fields


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


def record(field_key: bytes, body: bytes) -> bytes:
    """One length-delimited record: ``field_key`` (``key(n)``), the length, ``body``."""
    return b"".join((field_key, varint(len(body)), body))


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
        if _read_varint(data, pos)[0] >> 3 > field:
            return data[:start], data[start:]
        pos += _record_size(data, pos)
    return data, b""


def graph_field(model: bytes) -> bytes | None:
    """The serialized GraphProto of a serialized ModelProto; None when there is not one graph."""
    graphs = [(start, end) for number, start, end in top_level_records(model) if number == MODEL_GRAPH_FIELD]
    if len(graphs) != 1:
        return None
    _, body = _read_varint(model, graphs[0][0])
    length, body = _read_varint(model, body)
    return model[body:body + length]


def graph_without_nodes(model: bytes) -> bytes | None:
    """``graph_field`` without its node records (for readers of value infos only: parsed nodes
    cost ~350 bytes each, too many to hold at once on a big graph)."""
    graph = graph_field(model)
    return None if graph is None else split_repeated(graph, 1, 1 << 62)[1]


def top_level_records(data: bytes) -> list[tuple[int, int, int]]:
    """(field number, start, end) of each top-level record of a serialized message (for the few
    records of a ModelProto; ``split_repeated`` walks the many of a graph)."""
    found, pos, end = [], 0, len(data)
    while pos < end:
        start = pos
        pos += _record_size(data, pos)
        if pos > end:
            raise ValueError("a record runs past the end of the message")
        found.append((_read_varint(data, start)[0] >> 3, start, pos))
    return found


def split_repeated(data: bytes, field: int, per_chunk: int) -> tuple[list[bytes], bytes]:
    """Split a serialized message into its records of a repeated message ``field`` (< 16: one-byte
    key), as chunks of at most ``per_chunk`` records each (every chunk parses as the message
    holding just those), and the message without them (its other records, in order)."""
    tag = (field << 3) | _LEN
    chunks: list[bytes] = []
    rest: list[bytes] = []
    pos, end = 0, len(data)
    chunk_start, count = -1, 0
    while pos < end:
        start = pos
        if data[pos] == tag:
            pos += 1
            length = data[pos]
            pos += 1
            if length & 0x80:
                length, pos = _read_varint(data, pos - 1)
            pos += length
            if chunk_start < 0:
                chunk_start = start
            count += 1
            if count == per_chunk:
                chunks.append(data[chunk_start:pos])
                chunk_start, count = -1, 0
            continue
        if chunk_start >= 0:  # another field between the records: close the chunk here
            chunks.append(data[chunk_start:start])
            chunk_start, count = -1, 0
        pos = start + _record_size(data, start)
        rest.append(data[start:pos])
    if pos > end:
        raise ValueError("a record runs past the end of the message")
    if chunk_start >= 0:
        chunks.append(data[chunk_start:pos])
    return chunks, b"".join(rest)


def _record_size(data: bytes, start: int) -> int:
    tag, pos = _read_varint(data, start)
    wire = tag & 7
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
        raise ValueError(f"unexpected wire type {wire}")
    return pos - start
