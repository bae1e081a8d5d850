"""``graphtool check``: is this model valid ONNX at the opsets it imports, and can a runtime run it?

The checks themselves are analysis passes (``passes/check_*.py``): each looks at one graph at a
time, never edits it, and appends ``Finding``s to ``ctx.findings``. This module runs them over
every graph (main, subgraphs, function bodies) and turns the findings into a report.

Severities say what happens if you ship the model as it is:

- ``error``: the ONNX checker or the chosen runtime refuses the model (an op missing at the
  imported opset, a deprecated op, a wrong attribute, a domain never imported, no kernel).
- ``warning``: valid, but fragile — another tool may read it differently (duplicate opset
  imports, an IR version far older than the opset needs, an op in a domain nobody knows).
- ``info``: worth knowing, costs nothing (an op that onnxruntime runs by expanding its ONNX
  function instead of a kernel). Info findings never make ``check`` fail.
"""

from __future__ import annotations

import contextlib
import functools
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable

import onnx
from onnx.defs import OpSchema

from graphtool.ir.from_onnx import gc_frozen
from graphtool.ir.graph import Graph, Node
from graphtool.ir.model import Function, Model
from graphtool.pass_manager import FREEZE_NODES, PassContext, PassManager, select_passes

SEVERITIES = ("error", "warning", "info")
RUNTIMES = ("ort", "none")


@dataclass
class Finding:
    severity: str  # error | warning | info
    kind: str  # e.g. op-not-in-opset, attribute, no-kernel (see README)
    message: str  # what is wrong, without the node name (so identical findings group)
    node: str = ""  # node name (or "<op #id>" when unnamed); "" for model-level findings
    scope: str = ""  # "main", "main/then_branch", "function custom:F"...
    hint: str = ""  # what to do about it
    op: str = ""  # "domain:op_type" ("" domain printed as ai.onnx)

    def as_dict(self) -> dict[str, Any]:
        """One finding as JSON."""
        return asdict(self)


@dataclass
class CheckReport:
    """What ``check`` found: one ``Finding`` per problem (severity error, warning or info; the node
    and graph it is in; a message), for ``runtime`` ("ort" or "none")."""

    runtime: str
    findings: list[Finding] = field(default_factory=list)

    def count(self, severity: str) -> int:
        """Findings of one severity ("error", "warning", "info")."""
        return sum(1 for f in self.findings if f.severity == severity)

    @property
    def failed(self) -> bool:
        """Errors or warnings were found (info findings never fail a check)."""
        return any(f.severity in ("error", "warning") for f in self.findings)

    def summary(self) -> str:
        """One line: counts by severity."""
        errors, warnings, infos = (self.count(s) for s in SEVERITIES)
        line = f"{errors} error{'s' * (errors != 1)}, {warnings} warning{'s' * (warnings != 1)}"
        return line + (f", {infos} info" if infos else "")

    def by_kind(self) -> dict[str, int]:
        """Findings per kind (arity, attribute, opset, kernel...)."""
        return dict(Counter(f"{f.severity}:{f.kind}" for f in self.findings))

    def as_dict(self) -> dict[str, Any]:
        """The JSON document (``check --json``)."""
        return {
            "runtime": self.runtime,
            "summary": self.summary(),
            "errors": self.count("error"),
            "warnings": self.count("warning"),
            "info": self.count("info"),
            "findings": [f.as_dict() for f in self.findings],
        }


# ---------------------------------------------------------------- helpers the check passes share


# domains whose ops onnx.defs defines ('' is ai.onnx)
ONNX_DOMAINS = ("", "ai.onnx.ml", "ai.onnx.training", "ai.onnx.preview", "ai.onnx.preview.training")


@functools.lru_cache(maxsize=1)
def _since_versions() -> dict[tuple[str, str], tuple[int, ...]]:
    table: dict[tuple[str, str], list[int]] = {}
    for schema in onnx.defs.get_all_schemas_with_history():
        table.setdefault((norm_domain(schema.domain), schema.name), []).append(schema.since_version)
    return {k: tuple(sorted(v)) for k, v in table.items()}


def since_versions(op_type: str, domain: str) -> tuple[int, ...]:
    """Every opset in which ``op_type`` got a (new) definition; () if onnx never defined it."""
    return _since_versions().get((norm_domain(domain), op_type), ())


@functools.lru_cache(maxsize=4096)
def schema_at(op_type: str, domain: str, opset: int) -> OpSchema | None:
    """The schema ``op_type`` resolves to at ``opset`` (deprecated ones included), or None."""
    try:
        return onnx.defs.get_schema(op_type, opset, norm_domain(domain))
    except onnx.defs.SchemaError:
        return None


@functools.lru_cache(maxsize=1)
def _ir_table() -> dict[str, dict[int, int]]:
    """{normalized domain: {opset version: minimum IR version}}."""
    table: dict[str, dict[int, int]] = {}
    for (domain, version), ir in onnx.helper.OP_SET_ID_VERSION_MAP.items():
        table.setdefault(norm_domain(domain), {})[version] = ir
    return table


def min_ir_for(domain: str, version: int) -> int | None:
    return _ir_table().get(norm_domain(domain), {}).get(version)


def max_opset_for_ir(domain: str, ir: int) -> int | None:
    """The newest opset of ``domain`` released with an IR version ≤ ``ir``."""
    versions = [v for v, need in _ir_table().get(norm_domain(domain), {}).items() if need <= ir]
    return max(versions) if versions else None


def max_known_opset(domain: str) -> int | None:
    versions = _ir_table().get(norm_domain(domain))
    return max(versions) if versions else None


def norm_domain(domain: str) -> str:
    return "" if domain == "ai.onnx" else domain


def show_domain(domain: str) -> str:
    return domain or "ai.onnx"


def op_label(node: Node) -> str:
    return f"{show_domain(norm_domain(node.domain))}:{node.op_type}"


def node_label(node: Node) -> str:
    return node.name or f"<{node.op_type} #{node.id}>"


@dataclass
class Place:
    """Where a graph sits in the model, and which opsets its nodes resolve against."""

    scope: str
    function: Function | None  # the function whose body (or nested subgraph) this is
    opsets: dict[str, int]  # normalized domain -> version
    is_root: bool  # the main graph or a function body itself (not a nested subgraph)


def place_of(model: Model, graph: Graph) -> Place:
    """Cost O(depth + #functions): walk up to the root graph, then find whose root it is."""
    parts: list[str] = []
    root = graph
    while root.parent is not None:
        parts.append(root.name or "subgraph")
        root = root.parent
    function = None
    if root is model.graph:
        label = "main"
        opsets = {norm_domain(d): v for d, v in model.opset_imports.items()}
    else:
        function = next((fn for fn in model.functions if fn.body is root), None)
        label = f"function {fn_label(function)}" if function else "function ?"
        imports = function.proto_shell.opset_import if function else []
        opsets = {norm_domain(op.domain): op.version for op in imports}
    return Place("/".join([label, *reversed(parts)]), function, opsets, graph is root)


def fn_label(fn: Function) -> str:
    return f"{fn.domain}:{fn.name}"


def local_functions(model: Model) -> set[tuple[str, str]]:
    return {(fn.domain, fn.name) for fn in model.functions}


def add(ctx: PassContext, severity: str, kind: str, message: str, place: Place | None = None,
        node: Node | None = None, hint: str = "") -> None:
    ctx.findings.append(
        Finding(severity, kind, message, node_label(node) if node is not None else "",
                place.scope if place else "", hint, op_label(node) if node is not None else "")
    )


# ---------------------------------------------------------------- running the checks


def check(model: Model, runtime: str = "ort", passes: Iterable[str] | None = None) -> CheckReport:
    """Run every analysis pass over every graph of ``model`` (which is not modified).

    ``runtime="ort"`` adds the checks against onnxruntime's CPU kernels (analysis passes with
    ``target="ort"``); ``"none"`` checks the model against the ONNX standard only.
    """
    if runtime not in RUNTIMES:
        from graphtool.errors import UsageError

        raise UsageError(f"unknown runtime '{runtime}' (choose from {', '.join(RUNTIMES)})")
    chosen = select_passes(level=3, target="ort" if runtime == "ort" else "onnx", only=passes, analysis=True)
    ctx = PassContext(model, level=3, target="ort" if runtime == "ort" else "onnx")
    with gc_frozen() if model.node_count() >= FREEZE_NODES else contextlib.nullcontext():  # see PassManager.run
        PassManager(chosen, max_iterations=1).run(model, ctx)
        ctx.findings.extend(spec_findings(model))
    order = {s: i for i, s in enumerate(SEVERITIES)}
    findings = sorted(ctx.findings, key=lambda f: order[f.severity])  # stable: graph order within a severity
    return CheckReport(runtime, findings)


# ---------------------------------------------------------------- spec rules onnx's checker skips
# onnx.checker accepts a function that calls itself and a tensor that holds its values twice;
# onnxruntime then refuses the first at load and silently picks one copy of the second. These
# rules look at the whole model at once (a call graph, every tensor proto), so they live here
# rather than in the per-graph check passes. Cost: one visit of every node and tensor.

_TYPED_FIELDS = ("float_data", "int32_data", "string_data", "int64_data", "double_data", "uint64_data")


def spec_findings(model: Model) -> list[Finding]:
    """Recursive or mutually recursive model-local functions, functions defined twice, and
    tensors whose data is given in more than one field (raw_data, a typed field, external)."""
    return [*_recursion(model), *_duplicate_functions(model), *_tensor_fields(model)]


def _calls(fn: Function, keys: dict[tuple[str, str], Function]) -> list[Function]:
    called: dict[int, Function] = {}
    for graph in fn.body.walk():
        for node in graph.nodes():
            target = keys.get((node.domain, node.op_type))
            if target is not None:
                called[id(target)] = target
    return list(called.values())


def _recursion(model: Model) -> list[Finding]:
    """Every cycle of the call graph among model-local functions, each reported once."""
    keys = {(fn.domain, fn.name): fn for fn in model.functions}
    edges = {id(fn): _calls(fn, keys) for fn in model.functions}
    findings, state, stack = [], {}, []  # state: 1 on the DFS stack, 2 done

    def visit(fn: Function) -> None:  # iterative enough: function call graphs are small
        state[id(fn)] = 1
        stack.append(fn)
        for callee in edges[id(fn)]:
            if state.get(id(callee)) == 1:
                cycle = stack[stack.index(callee):] + [callee]
                path = " -> ".join(fn_label(f) for f in cycle)
                what = "calls itself" if len(cycle) == 2 else "and the functions it calls call it back"
                findings.append(Finding("error", "recursive-function",
                                        f"function {fn_label(callee)} {what} ({path}); ONNX functions may not recurse",
                                        scope=f"function {fn_label(callee)}",
                                        hint="onnxruntime refuses to load the model; inline or unroll the recursion"))
            elif id(callee) not in state:
                visit(callee)
        stack.pop()
        state[id(fn)] = 2

    for fn in model.functions:
        if id(fn) not in state:
            visit(fn)
    return findings


def _duplicate_functions(model: Model) -> list[Finding]:
    seen = Counter(fn.key for fn in model.functions)
    return [Finding("error", "duplicate-function", f"function {d}:{n}{' overload ' + o if o else ''} is defined "
                    f"{k} times", hint="runtimes keep one of them; which one is not specified")
            for (d, n, o), k in seen.items() if k > 1]


def data_fields(proto: onnx.TensorProto) -> list[str]:
    """The fields a tensor holds its values in (one, unless the model contradicts itself)."""
    fields = [f for f in _TYPED_FIELDS if len(getattr(proto, f))]
    if proto.HasField("raw_data"):
        fields.append("raw_data")
    if proto.data_location == onnx.TensorProto.EXTERNAL or len(proto.external_data):
        fields.append("external_data")
    return fields


_TENSOR_TYPES = {onnx.AttributeProto.TENSOR, onnx.AttributeProto.TENSORS, onnx.AttributeProto.SPARSE_TENSOR,
                 onnx.AttributeProto.SPARSE_TENSORS, onnx.AttributeProto.UNDEFINED}


def _attr_tensors(attr: onnx.AttributeProto) -> Iterable[onnx.TensorProto]:
    # An attribute of another type holds no tensor a runtime reads; asking it for its tensor fields
    # anyway made upb build their containers (+120 MB over 190k attributes of a million-op graph).
    if attr.type not in _TENSOR_TYPES:
        return
    if attr.HasField("t"):
        yield attr.t
    yield from attr.tensors
    for sparse in ([attr.sparse_tensor] if attr.HasField("sparse_tensor") else []) + list(attr.sparse_tensors):
        yield sparse.values
        yield sparse.indices


def _tensor_fields(model: Model) -> list[Finding]:
    findings = []

    def visit(proto: onnx.TensorProto, scope: str, node: Node | None = None) -> None:
        fields = data_fields(proto)
        if len(fields) > 1:
            findings.append(Finding("error", "tensor-data", f"tensor '{proto.name}' holds its values in "
                                    f"{' and '.join(fields)}; the spec allows one", node_label(node) if node else "",
                                    scope, "runtimes read one of them and ignore the other; keep one",
                                    op_label(node) if node else ""))

    for scope, graph in model.graphs():
        for tensor in graph.initializers.values():
            visit(tensor.proto, scope)  # metadata only: an external tensor's bytes are not read
        for node in graph.nodes():
            for value in node.peek_attrs().values():
                if isinstance(value, onnx.AttributeProto):
                    for proto in _attr_tensors(value):
                        visit(proto, scope, node)
    return findings


def format_findings(report: CheckReport) -> str:
    """The human table: identical findings (same severity, kind, message) on many nodes share a row."""
    from graphtool.inspect import format_table

    groups: dict[tuple[str, str, str, str], list[Finding]] = {}
    for f in report.findings:
        groups.setdefault((f.severity, f.kind, f.message, f.hint), []).append(f)
    rows = []
    for (severity, kind, message, hint), items in groups.items():
        where = items[0].node or items[0].scope
        if items[0].node and items[0].scope and items[0].scope != "main":
            where = f"{items[0].scope}: {where}"
        if len(items) > 1:
            where += f" (+{len(items) - 1} more)"
        rows.append([severity, kind, where, message, hint])
    out = []
    if rows:
        out.append(format_table(rows, ["severity", "kind", "node", "message", "hint"]))
        out.append("")
    out.append(f"check ({'onnxruntime CPU' if report.runtime == 'ort' else 'ONNX standard only'}): {report.summary()}")
    return "\n".join(out)
