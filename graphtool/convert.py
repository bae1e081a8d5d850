"""``graphtool convert --opset N``: move a model to another ai.onnx opset, and prove it.

onnx's ``version_converter`` does the op rewrites (one adapter per op and version step). Around it
this module adds what a user needs to trust the result:

1. Nothing is lost. The converter drops model-local functions and leaves the IR version where it
   was (IR 3 with opset 17). The result starts from the original ModelProto — metadata, doc
   strings, producer, training info — and takes only the graph and opset imports from the
   converter; function bodies are converted on their own (below); the IR version is raised to
   what the new opset needs; value_info the converter inferred but the file did not have is
   dropped, so the diff is the conversion and nothing else.
2. Ops the converter has no adapter for are *pinned* when that is provably harmless: the op's
   schema at the target differs only in what this model does not use (the same inputs in the
   same slots, every attribute the node sets exists with the same type at the target, every
   attribute it leaves unset keeps its default, the types it declares are allowed). Relu-14 →
   Relu-13 (14 only added bfloat16) is the common case: onnx has no down adapter for it, so
   without pinning no CNN exported at opset ≥ 14 could go down to 13. Pinned nodes are hidden
   from the converter in a private domain and put back unchanged. Pinning happens only when the
   result is verified numerically (the default), never with ``verify=False``.
3. The result is checked (``graphtool.check``, ONNX rules only): a conversion that produces
   errors the original did not have is refused (the converter sometimes writes a model that
   loads nowhere, e.g. ReduceMean-18 → 17 keeping ``noop_with_empty_axes``).
4. Outputs are compared through onnxruntime (``graphtool.verify.verification``) on seeded random inputs;
   the caller decides what a mismatch means (the CLI: exit 1, no file written).

Function bodies: a body whose ops all keep their definition between its opset and the target
just gets its import bumped; otherwise it is wrapped in a one-graph model and converted the same
way — unless a node that must change reads a caller attribute (``ref_attr_name``), which the
converter silently drops: then the conversion is refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

import numpy as np
import onnx
from onnx import AttributeProto, FunctionProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, helper

from graphtool import io
from graphtool.check import check, min_ir_for, norm_domain, schema_at
from graphtool.errors import BadModel, GraphtoolError, ModelDoesNotRun, UsageError
from graphtool.ir.model import Model
from graphtool.ir.to_onnx import to_onnx
from graphtool.verify import Verification, verify

PIN_DOMAIN = "graphtool.pinned"
MAX_PINNED_OPS = 64
_GRAPH_ATTRS = (AttributeProto.GRAPH, AttributeProto.GRAPHS)


class ConversionRefused(GraphtoolError):
    """onnx's converter cannot do (part of) this conversion, or its result would be invalid."""


@dataclass
class ConvertResult:
    model: Model
    source: int
    target: int
    ir_version: tuple[int, int]
    pinned: list[str] = field(default_factory=list)  # op types kept as they were (see module doc, 2)
    functions: dict[str, str] = field(default_factory=dict)  # "domain:name" -> "kept" | "import bumped" | "converted"
    verification: Verification | None = None

    @property
    def ok(self) -> bool:
        return self.verification is None or self.verification.ok

    def as_dict(self) -> dict[str, Any]:
        return {
            "from_opset": self.source,
            "to_opset": self.target,
            "ir_version": {"before": self.ir_version[0], "after": self.ir_version[1]},
            "nodes": self.model.node_count(),
            "pinned_ops": self.pinned,
            "functions": self.functions,
            "verified": self.verification is not None,
            "ok": self.ok,
            "verification": self.verification.as_dict() if self.verification else None,
        }


def convert(model: Model, opset: int, verify_outputs: bool = True, feeds: dict[str, np.ndarray] | None = None,
            seed: int = 0, input_shapes: dict[str, list[int]] | None = None,
            input_values: dict[str, list[Any]] | None = None) -> ConvertResult:
    """``model`` at ai.onnx ``opset`` (a new Model; ``model`` is untouched).

    Raises ConversionRefused (exit 2) when the conversion cannot be done safely, GraphtoolError
    when the original cannot be verified; a numeric mismatch is reported in the result (``ok``).
    """
    source = model.opset("")
    if source is None:
        raise ConversionRefused("the model imports no ai.onnx opset to convert from")
    newest = onnx.defs.onnx_opset_version()
    if not 1 <= opset <= newest:
        raise UsageError(f"--opset {opset} is not an ai.onnx opset this onnx knows (1–{newest})")
    original = to_onnx(model)
    before_errors = _error_kinds(model)
    if opset == source:
        converted_proto = original
        pinned: list[str] = []
        functions = {f"{fn.domain}:{fn.name}": "kept" for fn in original.functions}
    else:
        graph_proto, pinned = _convert_graph_model(original, opset, allow_pins=verify_outputs, what="the model")
        functions = {}
        converted_functions = []
        for fn in original.functions:
            new_fn, how = _convert_function(fn, opset, allow_pins=verify_outputs)
            converted_functions.append(new_fn)
            functions[f"{fn.domain}:{fn.name}"] = how
        converted_proto = _assemble(original, graph_proto, converted_functions, opset)
    try:
        result_model = io.load_proto(converted_proto, model.base_dir)
    except BadModel as err:
        raise ConversionRefused(f"onnx's converter produced a model graphtool cannot read: {err}") from None
    _refuse_new_errors(before_errors, result_model, opset)
    result = ConvertResult(result_model, source, opset, (model.ir_version, result_model.ir_version), pinned, functions)
    if verify_outputs and opset != source:
        result.verification = _verify(model, result_model, feeds, seed, input_shapes, input_values)
    return result


# ---------------------------------------------------------------- the converter, with pins


def _convert_graph_model(original: ModelProto, opset: int, allow_pins: bool, what: str) -> tuple[GraphProto, list[str]]:
    """Run onnx's converter on ``original`` (functions left out), pinning ops it has no adapter for
    when that is safe; returns the converted main graph (pins undone) and the pinned op types."""
    base = ModelProto()
    base.CopyFrom(original)
    del base.functions[:]
    pinned: list[str] = []
    source = _default_version(base.opset_import) or opset
    while True:
        attempt = _with_pins(base, set(pinned), opset)
        try:
            converted = onnx.version_converter.convert_version(attempt, opset)
            break
        except Exception as err:  # the converter raises RuntimeError/ConvertError/IndexError…  # noqa: BLE001
            message = _name_unformatted_op(_converter_message(err), base.graph)
            op = _failing_op(message)
            if op and allow_pins and op not in pinned and len(pinned) < MAX_PINNED_OPS:
                reason = _unpinnable(base.graph, op, source, opset)
                if reason is None:
                    pinned.append(op)
                    continue
                raise ConversionRefused(f"cannot convert {what} from opset {source} to {opset}: {message} ({reason})") from None
            raise ConversionRefused(f"cannot convert {what} from opset {source} to {opset}: {message}") from None
    graph = converted.graph
    _unpin(graph)
    _strip_unknown_defaults(graph, source, opset)
    return graph, pinned


def _with_pins(model: ModelProto, ops: set[str], target: int) -> ModelProto:
    """A copy where the ``ops`` nodes sit in a private domain the converter leaves alone; attributes
    the target schema lacks are dropped (``_unpinnable`` proved each holds its default)."""
    if not ops:
        return model
    pinned = ModelProto()
    pinned.CopyFrom(model)
    for node in _all_nodes(pinned.graph):
        if node.domain in ("", "ai.onnx") and node.op_type in ops:
            node.domain = PIN_DOMAIN
            schema = schema_at(node.op_type, "", target)
            kept = [a for a in node.attribute if schema is not None and a.name in schema.attributes]
            del node.attribute[:]
            node.attribute.extend(kept)
    pinned.opset_import.append(OperatorSetIdProto(domain=PIN_DOMAIN, version=1))
    return pinned


def _unpin(graph: GraphProto) -> None:
    for node in _all_nodes(graph):
        if node.domain == PIN_DOMAIN:
            node.domain = ""


def _all_nodes(graph: GraphProto) -> Iterator[NodeProto]:
    return _walk_nodes(graph.node)


def _walk_nodes(nodes: Iterable[NodeProto]) -> Iterator[NodeProto]:
    """``nodes`` and, depth first, every node of their subgraph attributes (the converter rewrites those too)."""
    for node in nodes:
        yield node
        for attr in node.attribute:
            if attr.type == AttributeProto.GRAPH:
                yield from _walk_nodes(attr.g.node)
            elif attr.type == AttributeProto.GRAPHS:
                for sub in attr.graphs:
                    yield from _walk_nodes(sub.node)


def _converter_message(err: Exception) -> str:
    text = str(err).strip().splitlines()
    line = text[-1] if text else type(err).__name__
    line = re.sub(r"^.*?Assertion `[^`]*` failed:\s*", "", line)  # keep the converter's own words
    return re.sub(r"^/\S+:\d+:\s*\w*:?\s*", "", line).strip() or type(err).__name__


# onnx's converter raises this printf text unformatted, with its arguments (op type, from, to) glued on the end
_UNFORMATTED_NO_SCHEMA = re.compile(r"Op '%s' has no registered schema; cannot convert it from version %lld to %lld\.(\S*)$")


def _name_unformatted_op(message: str, graph: GraphProto) -> str:
    """Put the op type back into the converter's unformatted "Op '%s' has no registered schema" message
    (found as the graph op type that the glued-on arguments start with, followed by digits only)."""
    found = _UNFORMATTED_NO_SCHEMA.search(message)
    if found is None:
        return message
    args = found.group(1)
    ops = {n.op_type for n in _all_nodes(graph) if n.op_type and args.startswith(n.op_type) and args[len(n.op_type):].isdigit()}
    subject = f"op '{ops.pop()}'" if len(ops) == 1 else "an op"
    return message[:found.start()] + f"{subject} has no registered schema, so onnx's converter cannot convert it"


_OP_PATTERNS = (
    re.compile(r"No Adapter (?:From|To) Version \$?\d+ for (\w+)"),
    re.compile(r"No (?:Previous|Next) Version of (\w+) exists"),
    re.compile(r"\bfor (?:op|operator) (\w+)"),
)


def _failing_op(message: str) -> str | None:
    for pattern in _OP_PATTERNS:
        found = pattern.search(message)
        if found:
            return found.group(1)
    return None


def _unpinnable(graph: GraphProto, op: str, source: int, target: int) -> str | None:
    """Why the ``op`` nodes of this graph cannot be kept as they are at ``target`` (None: they can)."""
    old, new = schema_at(op, "", source), schema_at(op, "", target)
    if new is None:
        return f"{op} does not exist at opset {target}"
    if old is None or new.deprecated:
        return f"{op} is not defined the same way at opset {target}"
    changed_defaults = [
        name for name, spec in old.attributes.items()
        if name in new.attributes
        and new.attributes[name].default_value.SerializeToString() != spec.default_value.SerializeToString()
    ]
    for node in _all_nodes(graph):
        if node.op_type != op or node.domain not in ("", "ai.onnx"):
            continue
        for attr in node.attribute:
            spec = new.attributes.get(attr.name)
            if spec is None:
                if not _is_default(attr, old):
                    return f"node '{node.name or op}' sets attribute '{attr.name}', which {op}-{new.since_version} does not take"
            elif int(spec.type.value) != attr.type:
                return f"node '{node.name or op}' sets attribute '{attr.name}' as another type than {op}-{new.since_version} takes"
        unset = [name for name in changed_defaults if all(a.name != name for a in node.attribute)]
        if unset:
            return f"the default of {op} attribute '{unset[0]}' differs at opset {target} and node '{node.name or op}' relies on it"
        n_in, n_out = len(node.input), len(node.output)
        if not (new.min_input <= n_in <= new.max_input and new.min_output <= n_out <= new.max_output):
            return f"node '{node.name or op}' has an input/output count {op}-{new.since_version} does not allow"
    if not _types_allowed(graph, op, new):
        return f"a {op} node uses a type {op}-{new.since_version} does not allow"
    return None


def _is_default(attr: AttributeProto, schema: Any) -> bool:
    """``attr`` holds the default value ``schema`` gives it (so leaving it out changes nothing)."""
    spec = schema.attributes.get(attr.name) if schema is not None else None
    if spec is None or not spec.default_value.name or attr.ref_attr_name:
        return False
    return helper.get_attribute_value(attr) == helper.get_attribute_value(spec.default_value)


def _strip_unknown_defaults(graph: GraphProto, source: int, target: int) -> None:
    """Drop attributes the converter left on a node that its target schema does not define, when
    they hold the source schema's default (ReduceMean-18 → 17 keeps ``noop_with_empty_axes=0``)."""
    for node in _all_nodes(graph):
        if node.domain not in ("", "ai.onnx"):
            continue
        new = schema_at(node.op_type, "", target)
        if new is None:
            continue
        stray = [a for a in node.attribute if a.name not in new.attributes]
        if stray and all(_is_default(a, schema_at(node.op_type, "", source)) for a in stray):
            kept = [a for a in node.attribute if a.name in new.attributes]
            del node.attribute[:]
            node.attribute.extend(kept)


def _types_allowed(graph: GraphProto, op: str, schema: Any) -> bool:
    """The declared types of the op's arguments (where the file declares them) fit ``schema``."""
    declared: dict[str, str] = {}
    for info in [*graph.input, *graph.output, *graph.value_info]:
        if info.type.HasField("tensor_type") and info.type.tensor_type.elem_type:
            declared[info.name] = f"tensor({onnx.TensorProto.DataType.Name(info.type.tensor_type.elem_type).lower()})"
    for tensor in graph.initializer:
        declared[tensor.name] = f"tensor({onnx.TensorProto.DataType.Name(tensor.data_type).lower()})"
    allowed = {c.type_param_str: set(c.allowed_type_strs) for c in schema.type_constraints}
    for node in graph.node:
        if node.op_type != op or node.domain not in ("", "ai.onnx"):
            continue
        for names, formals in ((node.input, schema.inputs), (node.output, schema.outputs)):
            for i, name in enumerate(names):
                if not name or name not in declared or not formals:
                    continue
                formal = formals[min(i, len(formals) - 1)]
                types = allowed.get(formal.type_str)
                if types is not None and declared[name] not in types:
                    return False
    return True


# ---------------------------------------------------------------- functions


def _convert_function(fn: FunctionProto, opset: int, allow_pins: bool) -> tuple[FunctionProto, str]:
    version = _default_version(fn.opset_import)
    label = f"function {fn.domain}:{fn.name}"
    if version is None or version == opset:
        return fn, "kept"
    changing = [n for n in _function_nodes(fn) if norm_domain(n.domain) == "" and _since(n.op_type, version) != _since(n.op_type, opset)]
    out = FunctionProto()
    out.CopyFrom(fn)
    if not changing:
        _set_default_version(out.opset_import, opset)
        return out, "import bumped"
    for node in changing:
        if any(a.ref_attr_name for a in node.attribute):
            raise ConversionRefused(
                f"cannot convert {label}: its {node.op_type} node must change between opset {version} and {opset} "
                "but reads a caller attribute, which onnx's converter drops")
    wrapper = helper.make_model(
        helper.make_graph(list(fn.node), fn.name, [onnx.ValueInfoProto(name=i) for i in fn.input],
                          [onnx.ValueInfoProto(name=o) for o in fn.output], value_info=list(fn.value_info)),
        opset_imports=list(fn.opset_import),
    )
    graph, _ = _convert_graph_model(wrapper, opset, allow_pins, label)
    del out.node[:]
    out.node.extend(graph.node)
    _set_default_version(out.opset_import, opset)
    return out, "converted"


def _function_nodes(fn: FunctionProto) -> Iterator[NodeProto]:
    return _walk_nodes(fn.node)


def _since(op: str, opset: int) -> int | None:
    schema = schema_at(op, "", opset)
    return schema.since_version if schema is not None else None


def _default_version(imports: Iterable[OperatorSetIdProto]) -> int | None:
    for op in imports:
        if op.domain in ("", "ai.onnx"):
            return op.version
    return None


def _set_default_version(imports: Any, version: int) -> None:
    for op in imports:
        if op.domain in ("", "ai.onnx"):
            op.version = version


# ---------------------------------------------------------------- putting the model back together


def _assemble(original: ModelProto, graph: GraphProto, functions: list[FunctionProto], opset: int) -> ModelProto:
    """The original model with the converted graph, functions and default-domain import."""
    out = ModelProto()
    out.CopyFrom(original)
    out.graph.CopyFrom(graph)
    _keep_value_info(out.graph, _value_info_names(original.graph))
    del out.functions[:]
    out.functions.extend(functions)
    _set_default_version(out.opset_import, opset)
    needed = [min_ir_for(op.domain, op.version) for op in out.opset_import]
    out.ir_version = max([original.ir_version, *[n for n in needed if n]])
    return out


def _value_info_names(graph: GraphProto) -> set[str]:
    names = {v.name for v in graph.value_info}
    for node in graph.node:
        for attr in node.attribute:
            for sub in ([attr.g] if attr.type == AttributeProto.GRAPH else list(attr.graphs)):
                names |= _value_info_names(sub)
    return names


def _keep_value_info(graph: GraphProto, keep: set[str]) -> None:
    kept = [v for v in graph.value_info if v.name in keep]
    del graph.value_info[:]
    graph.value_info.extend(kept)
    for node in graph.node:
        for attr in node.attribute:
            for sub in ([attr.g] if attr.type == AttributeProto.GRAPH else list(attr.graphs)):
                _keep_value_info(sub, keep)


def _error_kinds(model: Model) -> dict[str, int]:
    counts: dict[str, int] = {}
    for f in check(model, runtime="none").findings:
        if f.severity == "error":
            counts[f.kind] = counts.get(f.kind, 0) + 1
    return counts


def _refuse_new_errors(before: dict[str, int], model: Model, opset: int) -> None:
    report = check(model, runtime="none")
    errors = [f for f in report.findings if f.severity == "error"]
    counts: dict[str, int] = {}
    for f in errors:
        counts[f.kind] = counts.get(f.kind, 0) + 1
    worse = [kind for kind, n in counts.items() if n > before.get(kind, 0)]
    if worse:
        first = next(f for f in errors if f.kind in worse)
        where = f" (node '{first.node}')" if first.node else ""
        raise ConversionRefused(f"onnx's converter produced an invalid model at opset {opset}: {first.message}{where}")


def _verify(original: Model, converted: Model, feeds: dict[str, np.ndarray] | None, seed: int,
            input_shapes: dict[str, list[int]] | None = None,
            input_values: dict[str, list[Any]] | None = None) -> Verification:
    """Verify like optimize does (input discovery, several sets); a converted model that does not
    load is a mismatch in the result, an original that does not run is the user's one line."""
    from graphtool.runtime import make_session

    try:
        make_session(original)
    except BadModel as err:
        raise GraphtoolError(f"cannot verify: {err} (rerun with --no-verify to convert without proof)") from None
    try:
        return verify(original, converted, seed=seed, feeds=feeds, input_shapes=input_shapes, input_values=input_values)
    except ModelDoesNotRun:
        raise
    except BadModel as err:
        from graphtool.verify import OutputDiff

        result = Verification(False, 0.0, 0.0)
        result.outputs.append(OutputDiff("(model)", float("inf"), float("inf"), False, f"converted model: {err}"))
        return result