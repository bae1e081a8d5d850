"""value_info entries that share one TypeProto: what infer-shapes records on a big model.

A ValueInfoProto of its own per value costs ~890 bytes beside the IR (measured on the 1M-node
transformer-like graph of bench/gen_models.py: +890 MB for 1M recorded values) — its message and
its TypeProto copy in a upb arena, and the Python wrapper the graph's dict keeps alive. Inferred
types are few (three distinct ones in that whole graph) and the shape oracle already keeps one
TypeProto per distinct type, so a recorded fact is a name and a reference to that shared
TypeProto (``TypeOnly``, 48 bytes).

``TypeOnly`` answers what readers of ``Graph.value_info`` use (``name``, ``type``,
``HasField``); the IR makes a real ValueInfoProto only where one leaves it (``as_proto``) and
writes records straight to bytes when it serializes a graph (``records``): the same bytes upb
writes for ``ValueInfoProto(name=..., type=...)``. Nothing edits a ``TypeOnly``'s type: it is
shared, so a rename makes a new ``TypeOnly`` (``renamed``).
"""

from __future__ import annotations

from typing import Iterable, Union

from onnx import TypeProto, ValueInfoProto

from graphtool.ir.protos import key, record

GRAPH_VALUE_INFO_FIELD = 13
_RECORD_KEY = key(GRAPH_VALUE_INFO_FIELD)
_NAME_KEY, _TYPE_KEY = key(1), key(2)  # ValueInfoProto.name, ValueInfoProto.type


class TypeOnly:
    """A value_info entry: a name and a shared, never edited TypeProto."""

    __slots__ = ("name", "type")
    doc_string = ""

    def __init__(self, name: str, type_: TypeProto) -> None:
        self.name = name
        self.type = type_

    def HasField(self, field: str) -> bool:  # noqa: N802 - ValueInfoProto's spelling
        return field == "type"

    def renamed(self, name: str) -> "TypeOnly":
        return TypeOnly(name, self.type)

    def __repr__(self) -> str:
        return f"TypeOnly({self.name!r})"


ValueInfo = Union[ValueInfoProto, TypeOnly]


def as_proto(info: ValueInfo) -> ValueInfoProto:
    """A ValueInfoProto of its own for ``info`` (``info`` itself when it is one)."""
    if type(info) is TypeOnly:
        return ValueInfoProto(name=info.name, type=info.type)
    return info


def records(infos: Iterable[ValueInfo]) -> bytes:
    """``infos`` as serialized ``GraphProto.value_info`` records, in order: byte for byte what
    ``GraphProto(value_info=...)`` would write, without building a message per shared type."""
    type_bytes: dict[int, bytes] = {}  # id of a shared TypeProto → its serialized field
    parts: list[bytes] = []
    append = parts.append
    for info in infos:
        if type(info) is TypeOnly:
            typed = type_bytes.get(id(info.type))
            if typed is None:
                typed = type_bytes[id(info.type)] = record(_TYPE_KEY, info.type.SerializeToString())
            body = record(_NAME_KEY, info.name.encode()) + typed
        else:
            body = info.SerializeToString()
        append(record(_RECORD_KEY, body))
    return b"".join(parts)
