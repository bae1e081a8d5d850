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
