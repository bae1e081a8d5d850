"""What the ONNX schemas tell a picture: input slot names ("X", "W", "B") and attribute defaults.

A box, like Netron's, shows only the attributes that say something: one equal to its schema
default (``epsilon=1e-05`` on every BatchNormalization, ``auto_pad=NOTSET``, ``group=1``) is
hidden unless ``--all-attrs`` asks for it. Some defaults are written only in the schema's prose
("If not present, the stride defaults to 1 along each spatial axis"), so for the kernel
attributes below an all-ones / all-zeros list counts as default too. Contrib ops (com.microsoft
FusedConv, …) are looked up in onnxruntime's schemas, which the onnx package does not have.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import onnx
from onnx import AttributeProto, helper

from graphtool.ir.graph import Node

# attribute -> the value every element takes when the attribute is absent (schema prose)
IMPLICIT_DEFAULTS = {"strides": 1, "dilations": 1, "pads": 0, "output_padding": 0}

_NO_DEFAULT = object()


def _same(value: Any, default: Any) -> bool:
    """Equal as a reader would see them: floats to float32 precision, strings as text."""
    if isinstance(default, bytes):
        default = default.decode("utf-8", "replace")
    if isinstance(default, list) and isinstance(value, list):
        return len(value) == len(default) and all(_same(v, d) for v, d in zip(value, default))
    if isinstance(default, float) and isinstance(value, (int, float)):
        # a float32 one ulp away (exporters write 1e-5 as 1.0000000656873453e-05) reads the same
        return math.isclose(value, default, rel_tol=1e-6, abs_tol=0.0)
    if isinstance(default, (int, str)) and type(value) is type(default):
        return value == default
    return False


@dataclass
class OpInfo:
    """The little a picture needs from a schema, from onnx's or from onnxruntime's."""

    inputs: list[tuple[str, bool]]  # (name, variadic)
    outputs: list[str]
    defaults: dict[str, Any]  # attribute -> default value (only attributes that have one)


def _defaults(attributes: dict[str, Any], proto_of: Any) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for name, attr in attributes.items():
        try:
            proto = proto_of(attr)
            if proto is not None and proto.type != AttributeProto.UNDEFINED:
                found[name] = helper.get_attribute_value(proto)
        except Exception:  # noqa: BLE001 — an odd default is simply not hidden
            pass
    return found


def _ort_default(attr: Any) -> AttributeProto | None:
    raw = getattr(attr, "_default_value", b"")
    return AttributeProto.FromString(raw) if raw else None


def _info(schema: Any, default_of: Any) -> OpInfo:
    return OpInfo(
        inputs=[(p.name, str(p.option).endswith("Variadic")) for p in schema.inputs],
        outputs=[p.name for p in schema.outputs],
        defaults=_defaults(dict(schema.attributes), default_of),
    )


@functools.lru_cache(maxsize=1)
def _ort_schemas() -> dict[tuple[str, str], list[Any]]:
    """onnxruntime's contrib-op schemas (com.microsoft FusedConv, …), newest first. Loaded only
    when a model has an op onnx does not know: importing onnxruntime costs a few tenths of a second."""
    try:
        from onnxruntime.capi import onnxruntime_pybind11_state as ort
    except Exception:  # noqa: BLE001 — no onnxruntime: positional names, no defaults
        return {}
    table: dict[tuple[str, str], list[Any]] = {}
    for schema in ort.get_all_operator_schema():
        table.setdefault((schema.domain, schema.name), []).append(schema)
    for versions in table.values():
        versions.sort(key=lambda x: -x.since_version)
    return table


class Schemas:
    """Schema look-ups for the nodes of one model, cached per (domain, op type)."""

    def __init__(self, opsets: dict[str, int]):
        self.opsets = opsets
        self._infos: dict[tuple[str, str], OpInfo | None] = {}

    def info(self, node: Node) -> OpInfo | None:
        """The schema at the model's opset, or None for unknown ops."""
        key = (node.domain, node.op_type)
        if key not in self._infos:
            domain = "" if node.domain == "ai.onnx" else node.domain
            version = self.opsets.get(domain, self.opsets.get("ai.onnx" if domain == "" else domain, 1)) or 1
            found: OpInfo | None = None
            try:
                found = _info(onnx.defs.get_schema(node.op_type, version, domain), lambda a: a.default_value)
            except Exception:  # noqa: BLE001 — not an onnx op: maybe an onnxruntime contrib op
                versions = _ort_schemas().get((domain, node.op_type), [])
                schema = next((x for x in versions if x.since_version <= version), versions[-1] if versions else None)
                if schema is not None:
                    found = _info(schema, _ort_default)
            self._infos[key] = found
        return self._infos[key]

    def slot_name(self, node: Node, slot: int) -> str:
        """The schema's name of input ``slot`` ("W"), numbered past a variadic one, else "inN"."""
        info = self.info(node)
        params = info.inputs if info is not None else []
        if not params:
            return f"in{slot}"
        if slot < len(params):
            return params[slot][0]
        name, variadic = params[-1]
        return f"{name}{slot - len(params) + 1}" if variadic else f"in{slot}"

    def output_name(self, node: Node, slot: int) -> str:
        info = self.info(node)
        if info is not None and slot < len(info.outputs):
            return info.outputs[slot]
        return f"out{slot}"

    def is_default(self, node: Node, name: str, value: Any) -> bool:
        """True when ``value`` is what the op does without the attribute."""
        info = self.info(node)
        default = info.defaults.get(name, _NO_DEFAULT) if info is not None else _NO_DEFAULT
        if default is not _NO_DEFAULT:
            return _same(value, default)
        implicit = IMPLICIT_DEFAULTS.get(name)
        return (implicit is not None and isinstance(value, list) and bool(value)
                and all(isinstance(v, int) and v == implicit for v in value))
