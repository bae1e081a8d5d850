"""Analysis: every standard-domain node matches its schema at the opset its graph imports.

This is the node half of ``onnx.checker`` (and of what onnxruntime verifies while loading), done
per node so each problem names its node and says what to do. Cases, all errors because the
checker and onnxruntime refuse them:

1. No schema at the imported opset, but one in a later opset ("Gelu needs opset ≥ 20") →
   ``op-not-in-opset``; no schema in any opset → ``unknown-op``.
2. The schema at that opset is deprecated (Upsample from 10, Scatter from 11,
   GroupNormalization-18 from 21…) → ``deprecated-op``.
3. An attribute the schema does not define, a required one missing, or one of the wrong type →
   ``attribute``. Names starting with "__" are internal and allowed, as in the checker.
4. Input or output count outside the schema's [min, max], or an empty name in a slot that is not
   optional → ``arity``.

Calls to model-local functions are not schema ops (their body is checked as a graph of its own);
ops in non-standard domains have no onnx schema and are left to the other checks.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from onnx import AttributeProto
from onnx.defs import OpSchema

from graphtool.check import (
    ONNX_DOMAINS, Place, add, local_functions, norm_domain, place_of, schema_at, show_domain, since_versions,
)
from graphtool.ir.graph import Graph, Node
from graphtool.pass_manager import Pass, PassContext, PassResult, register

REPLACEMENTS = {
    ("", "Upsample"): "use Resize (`graphtool convert --opset 10` turns an opset-9 Upsample into Resize)",
    ("", "Scatter"): "use ScatterElements (same semantics)",
    ("", "GroupNormalization"): "import opset ≥ 21 and use GroupNormalization-21 (scale/bias per channel)",
    ("ai.onnx.ml", "TreeEnsembleClassifier"): "use ai.onnx.ml TreeEnsemble",
    ("ai.onnx.ml", "TreeEnsembleRegressor"): "use ai.onnx.ml TreeEnsemble",
}

_ATTR_TYPE_NAMES = {v: k for k, v in AttributeProto.AttributeType.items()}

# which field holds the value, for attributes written without a type (old exporters)
_FIELD_TYPES = (
    ("floats", AttributeProto.FLOATS), ("ints", AttributeProto.INTS), ("strings", AttributeProto.STRINGS),
    ("tensors", AttributeProto.TENSORS), ("graphs", AttributeProto.GRAPHS),
    ("sparse_tensors", AttributeProto.SPARSE_TENSORS), ("type_protos", AttributeProto.TYPE_PROTOS),
)
_SCALAR_FIELDS = (
    ("f", AttributeProto.FLOAT), ("i", AttributeProto.INT), ("s", AttributeProto.STRING), ("t", AttributeProto.TENSOR),
    ("g", AttributeProto.GRAPH), ("sparse_tensor", AttributeProto.SPARSE_TENSOR), ("tp", AttributeProto.TYPE_PROTO),
)


@dataclass(frozen=True)
class _Schema:
    """What the checks read of an OpSchema, read once per (op, domain, opset): onnx's bindings
    build ``attributes`` and ``inputs`` anew at every access (several µs per node otherwise)."""

    since_version: int
    deprecated: bool
    attributes: dict[str, Any]
    required: tuple[str, ...]
    inputs: list[Any]
    outputs: list[Any]
    min_input: int
    max_input: int
    min_output: int
    max_output: int


@functools.lru_cache(maxsize=4096)
def schema_facts(op_type: str, domain: str, opset: int) -> _Schema | None:
    schema = schema_at(op_type, domain, opset)
    if schema is None:
        return None
    attributes = schema.attributes
    return _Schema(schema.since_version, schema.deprecated, attributes,
                   tuple(name for name, spec in attributes.items() if spec.required), schema.inputs, schema.outputs,
                   schema.min_input, schema.max_input, schema.min_output, schema.max_output)


def attr_type(value: Any) -> int:
    """The type of an attribute as the IR holds it (an AttributeProto, a Graph or a list of them)."""
    if not isinstance(value, AttributeProto):  # held as a Graph (or a list of them) by the IR
        return AttributeProto.GRAPHS if isinstance(value, list) else AttributeProto.GRAPH
    proto = value
    if proto.type != AttributeProto.UNDEFINED:
        return proto.type
    for field_name, kind in _FIELD_TYPES:
        if len(getattr(proto, field_name)):
            return kind
    for field_name, kind in _SCALAR_FIELDS:
        if proto.HasField(field_name):
            return kind
    return AttributeProto.UNDEFINED


@register(level=1, priority=30)
class CheckSchemas(Pass):
    """Check each standard-domain node against its ONNX schema: exists at the opset, not deprecated, attributes, arity."""

    analysis = True

    def run(self, graph: Graph, ctx: PassContext) -> PassResult:
        place = place_of(ctx.model, graph)
        local = local_functions(ctx.model)
        before = len(ctx.findings)
        checked = 0
        # What the checks read of a node is its op, attribute names and types, and which of its
        # input and output slots are filled: a node that matches one already found clean is clean
        # too (most ops of a big graph repeat a few dozen such shapes).
        clean: set[tuple[Any, ...]] = set()
        for node in graph.nodes():
            domain = norm_domain(node.domain)
            if domain not in ONNX_DOMAINS or (node.domain, node.op_type) in local or domain not in place.opsets:
                continue
            checked += 1
            present = node.peek_attrs()  # looked at, not kept parsed
            shape = (domain, node.op_type, node.wiring, tuple((name, attr_type(value)) for name, value in present.items()))
            if shape in clean:
                continue
            found = len(ctx.findings)
            self.check_node(ctx, place, node, domain, place.opsets[domain], present)
            if len(ctx.findings) == found:
                clean.add(shape)
        stats = {"checked": checked}
        if len(ctx.findings) > before:
            stats["findings"] = len(ctx.findings) - before
        return PassResult(changed=False, stats=stats)

    def check_node(self, ctx: PassContext, place: Place, node: Node, domain: str, opset: int,
                   present: Any) -> None:
        op = node.op_type
        schema = schema_facts(op, domain, opset)
        where = f"{show_domain(domain)} opset {opset}"
        if schema is None:
            later = [v for v in since_versions(op, domain) if v > opset]
            if later:
                add(ctx, "error", "op-not-in-opset", f"{op} does not exist at {where}; it needs opset ≥ {later[0]}",
                    place, node, hint=f"import {show_domain(domain)} opset ≥ {later[0]}, where the op is defined, "
                    f"or replace it with ops of opset {opset}")
            else:
                add(ctx, "error", "unknown-op", f"{op} is not an op of {show_domain(domain)} at any opset",
                    place, node, hint="a misspelled op, or a custom op that belongs in its own domain")
            return
        if schema.deprecated:
            add(ctx, "error", "deprecated-op",
                f"{op} is deprecated at {where} (its definition since opset {schema.since_version} is marked removed)",
                place, node, hint=REPLACEMENTS.get((domain, op), "use the op that replaced it in this opset"))
            return
        self.check_attributes(ctx, place, node, present, schema, where)
        self.check_arity(ctx, place, node, schema, where)

    @staticmethod
    def check_attributes(ctx: PassContext, place: Place, node: Node, present: Any, schema: _Schema, where: str) -> None:
        defined = schema.attributes
        for name in present:
            spec = defined.get(name)
            if spec is None:
                if not name.startswith("__"):
                    allowed = ", ".join(sorted(defined)) or "none"
                    add(ctx, "error", "attribute", f"{node.op_type} at {where} has no attribute '{name}'",
                        place, node, hint=f"remove it (attributes of {node.op_type}-{schema.since_version}: {allowed})")
                continue
            got, want = attr_type(present[name]), int(spec.type.value)
            if got != want:
                add(ctx, "error", "attribute",
                    f"{node.op_type} attribute '{name}' is {_ATTR_TYPE_NAMES.get(got, got)}, the schema wants {_ATTR_TYPE_NAMES.get(want, want)}",
                    place, node, hint=f"write '{name}' as {_ATTR_TYPE_NAMES.get(want, want)}")
        for name in schema.required:
            spec = defined[name]
            if name not in present:
                add(ctx, "error", "attribute", f"{node.op_type} at {where} requires attribute '{name}'",
                    place, node, hint=f"add '{name}' ({_ATTR_TYPE_NAMES.get(int(spec.type.value))})")

    @staticmethod
    def check_arity(ctx: PassContext, place: Place, node: Node, schema: _Schema, where: str) -> None:
        for kind, names, formals, lo, hi in (
            ("input", node.inputs, schema.inputs, schema.min_input, schema.max_input),
            ("output", node.outputs, schema.outputs, schema.min_output, schema.max_output),
        ):
            n = len(names)
            if n < lo or n > hi:
                span = f"{lo}" if lo == hi else f"{lo}–{'∞' if hi >= 2**31 - 1 else hi}"
                add(ctx, "error", "arity", f"{node.op_type}-{schema.since_version} takes {span} {kind}{'' if span == '1' else 's'}, this node has {n}",
                    place, node, hint=f"check the {kind}s against the {node.op_type} schema at {where}")
                continue
            for slot, (name, formal) in enumerate(zip(names, formals)):
                if not name and formal.option != OpSchema.FormalParameterOption.Optional:
                    add(ctx, "error", "arity", f"{node.op_type} {kind} {slot} ('{formal.name}') is required but empty",
                        place, node, hint=f"connect {kind} '{formal.name}'")
