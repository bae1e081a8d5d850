"""Analysis (``--runtime ort``): onnxruntime's CPU provider can run every op of the model.

This replays, per node, the decision onnxruntime makes while loading a model, with onnxruntime's
own schema and kernel registries (so it answers for the installed version, not a stale list):

1. Resolve the op's schema version at the imported opset with *onnxruntime's* schemas — its
   bundled onnx may be older than the onnx package. No schema: onnxruntime refuses the node.
2. Find a CPU kernel the way ``KernelRegistry::VerifyKernelDef`` does: a kernel registered for
   versions [lo, hi] serves schema version v only if ``lo == v``, or ``lo ≤ v ≤ hi`` with a
   *closed* range. An open-ended kernel (lo, ∞) does NOT serve a newer schema version: it was
   written before that version existed (QuantizeLinear-28 vs the 25+ kernel). Then the types:
   for each type constraint of the kernel, the first argument bound to it must have one of the
   kernel's types (checked only where the model declares the value's type).
3. No kernel: if ONNX defines the op as a function, onnxruntime inlines the body — but only if
   the body is still valid at the requested opset (onnx's ``ValidateReferencedOpsInFunction``:
   no op of the body changed definition between the function's opset and the requested one;
   Swish-24's body uses CastLike, which changed in 25, so Swish cannot expand at opset 28), and
   then each body op needs a kernel or an expansion of its own (Bernoulli-22 expands to
   RandomUniformLike-22, which has no kernel). Runs via its function → info; otherwise → error.

Not asked here: Constant (turned into an initializer while loading), calls to model-local
functions (inlined while loading; their bodies are checked as graphs of their own), standard ops
whose ONNX schema is missing or deprecated at the opset, and domains the graph does not import:
``check-schemas`` and ``check-domains`` already report those as errors.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from onnx import AttributeProto, FunctionProto, NodeProto, TensorProto, TypeProto, helper

from graphtool.check import ONNX_DOMAINS, add, local_functions, norm_domain, place_of, schema_at, show_domain
from graphtool.ir.graph import Graph, Node
from graphtool.pass_manager import Pass, PassContext, PassResult, register

INT_MAX = 2**31 - 1
FP16, FP32 = "tensor(float16)", "tensor(float)"
RESOLVED_AT_LOAD = {("", "Constant")}
MAX_EXPANSION_DEPTH = 4


# ---------------------------------------------------------------- onnxruntime's registries


@functools.lru_cache(maxsize=1)
def _ort() -> Any:
    from onnxruntime.capi import onnxruntime_pybind11_state as C

    return C


@functools.lru_cache(maxsize=1)
def ort_schemas() -> dict[tuple[str, str], list[tuple[int, Any]]]:
    """{(domain, op): [(since_version, schema)] ascending} from onnxruntime's schema registry."""
    table: dict[tuple[str, str], list[tuple[int, Any]]] = {}
    for schema in _ort().get_all_operator_schema():
        table.setdefault((norm_domain(schema.domain), schema.name), []).append((schema.since_version, schema))
    for versions in table.values():
        versions.sort(key=lambda pair: pair[0])
    return table


def ort_schema(op_type: str, domain: str, opset: int) -> Any | None:
    """The schema onnxruntime resolves ``op_type`` to at ``opset`` (None: it does not know the op there)."""
    found = None
    for since, schema in ort_schemas().get((norm_domain(domain), op_type), ()):
        if since <= opset:
            found = schema
    return found


@dataclass(frozen=True)
class Kernel:
    lo: int
    hi: int
    types: tuple[tuple[str, frozenset[str]], ...]  # (type constraint name, accepted type strings)

    def serves(self, since: int) -> bool:
        return self.lo == since or (self.hi != INT_MAX and self.lo <= since <= self.hi)

    def range(self) -> str:
        return str(self.lo) if self.hi == INT_MAX or self.hi == self.lo else f"{self.lo}–{self.hi}"


@functools.lru_cache(maxsize=1)
def cpu_kernels() -> dict[tuple[str, str], list[Kernel]]:
    table: dict[tuple[str, str], list[Kernel]] = {}
    for k in _ort().get_all_opkernel_def():
        if k.provider == "CPUExecutionProvider":
            lo, hi = k.version_range
            types = tuple(sorted((name, frozenset(accepted)) for name, accepted in k.type_constraints.items()))
            table.setdefault((norm_domain(k.domain), k.op_name), []).append(Kernel(lo, hi, types))
    return table


def implemented_versions(op_type: str, domain: str) -> str:
    ranges = sorted({(k.lo, k.hi) for k in cpu_kernels().get((norm_domain(domain), op_type), ())})
    return ", ".join(Kernel(lo, hi, ()).range() for lo, hi in ranges)


# ---------------------------------------------------------------- types


@functools.lru_cache(maxsize=None)
def tensor_string(elem: int) -> str | None:
    """'tensor(float)' for TensorProto.FLOAT; None for an unknown (0) element type."""
    return f"tensor({TensorProto.DataType.Name(elem).lower()})" if elem else None


def type_string(tp: TypeProto | None) -> str | None:
    """onnxruntime's spelling of a value type ('tensor(float)', 'seq(tensor(int64))'), None if unknown."""
    if tp is None:
        return None
    which = tp.WhichOneof("value")
    if which == "tensor_type":
        return tensor_string(tp.tensor_type.elem_type)
    if which == "sequence_type":
        inner = type_string(tp.sequence_type.elem_type)
        return f"seq({inner})" if inner else None
    if which == "optional_type":
        inner = type_string(tp.optional_type.elem_type)
        return f"optional({inner})" if inner else None
    return None


@dataclass
class Args:
    """A node's actual argument types by formal parameter, the way onnxruntime binds them."""

    inputs: list[tuple[str, str | None]]  # (value name, type string) per actual input
    outputs: list[tuple[str, str | None]]

    @staticmethod
    def of(graph: Graph, node: Node) -> "Args":
        # Graph.value_type, except that a weight's type string comes from its data type without
        # building a TypeProto (a million-op check asks ~2.5M times; inspect's largest cost)
        def type_of(name: str) -> str | None:
            declared = graph.declared_type(name)
            if declared is not None:
                return type_string(declared)
            tensor = graph.initializers.get(name)
            return tensor_string(tensor.data_type) if tensor is not None else None

        return Args([(n, type_of(n) if n else None) for n in node.inputs],
                    [(n, type_of(n) if n else None) for n in node.outputs])

    def has_fp16(self) -> bool:
        return any(t == FP16 for _, t in self.inputs)

    def as_fp32(self) -> "Args":
        """The types onnxruntime's InsertCastTransformer gives a float16 node it casts to float32."""
        swap = lambda pairs: [(n, FP32 if t == FP16 else t) for n, t in pairs]  # noqa: E731
        return Args(swap(self.inputs), swap(self.outputs))


def mismatched_types(kernel: Kernel, schema: Any, args: Args) -> list[tuple[str, str]]:
    """(value, its type) pairs this kernel does not accept; [] if it accepts all it can see.

    As in onnxruntime's MatchKernelDefTypes: per type constraint, only the first formal argument
    bound to it (inputs first, then outputs) is compared; a missing argument or one of unknown
    type matches.
    """
    bad = []
    for name, accepted in kernel.types:
        arg = _first_arg(schema, args, name)
        if arg is not None and arg[1] is not None and arg[1] not in accepted:
            bad.append((arg[0], arg[1]))
    return bad


def _first_arg(schema: Any, args: Args, constraint: str) -> tuple[str, str | None] | None:
    for formals, actual in ((schema.inputs, args.inputs), (schema.outputs, args.outputs)):
        for i, formal in enumerate(formals):
            if formal.typeStr == constraint:
                if i < len(actual) and actual[i][0]:
                    return actual[i]
                return None  # the first bound argument is absent: onnxruntime stops here too
    return None


# ---------------------------------------------------------------- the decision


@dataclass
class Verdict:
    runs: bool | None  # None: could not tell (a context-dependent body could not be built)
    via: str = ""  # "kernel", "function" or "fp16-cast"
    why: str = ""  # when it does not run: the reason, naming the op that fails
    hint: str = ""


def decide(op_type: str, domain: str, opset: int, args: Args, node: NodeProto | None,
           input_types: list[TypeProto | None], depth: int = 0) -> Verdict:
    """What onnxruntime does with this node: kernel, inlined ONNX function, float16 fallback, or refuse.

    ``args`` carries the argument types that are known (others match anything), ``node`` and
    ``input_types`` what a context-dependent function builder needs.
    """
    domain = norm_domain(domain)
    where = f"{show_domain(domain)} opset {opset}"
    if (domain, op_type) in RESOLVED_AT_LOAD:
        return Verdict(True, "kernel")
    schema = ort_schema(op_type, domain, opset)
    if schema is None:
        if domain in ONNX_DOMAINS:
            return Verdict(False, why=f"onnxruntime {_ort_version()} does not know {op_type} at {where}",
                           hint="its bundled onnx predates the op; a newer onnxruntime or another runtime may run it")
        return Verdict(False, why=f"onnxruntime has no kernel for {show_domain(domain)}:{op_type}",
                       hint=f"register a custom-op library that implements {show_domain(domain)}:{op_type}")
    since = schema.since_version
    kernels = [k for k in cpu_kernels().get((domain, op_type), ()) if k.serves(since)]
    mismatches = [mismatched_types(k, schema, args) for k in kernels]
    if any(not bad for bad in mismatches):
        return Verdict(True, "kernel")
    inlined = expand(op_type, domain, opset, node, input_types, depth)
    if inlined.runs is not False:
        return inlined
    if kernels and args.has_fp16() and any(not mismatched_types(k, schema, args.as_fp32()) for k in kernels):
        return Verdict(True, "fp16-cast")
    if kernels:
        value, got = min(mismatches, key=len)[0]
        accepted = sorted({t for k in kernels for name, types in k.types
                           if _first_arg(schema, args, name) == (value, got) for t in types})
        shown = ", ".join(t.removeprefix("tensor(").removesuffix(")") for t in accepted[:8]) + ("…" if len(accepted) > 8 else "")
        return Verdict(False, why=f"onnxruntime's CPU kernels for {op_type}-{since} do not take {got} (value '{value}')",
                       hint=f"cast to a type it implements ({shown}) or use another execution provider")
    why = f"onnxruntime has no CPU kernel for {op_type}-{since} at {where}"
    if inlined.why:
        why += f", and {inlined.why}"
    versions = implemented_versions(op_type, domain)
    hint = (f"onnxruntime implements {op_type} versions {versions} (an open-ended kernel serves only its first version)"
            if versions else f"onnxruntime's CPU provider does not implement {op_type}; another execution provider or runtime may")
    return Verdict(False, why=why, hint=hint)


def expand(op_type: str, domain: str, opset: int, node: NodeProto | None, input_types: list[TypeProto | None],
           depth: int) -> Verdict:
    """Whether onnxruntime can inline the op's ONNX function at ``opset`` and run every body op.

    Types of the function's inputs flow to the body ops that read them directly; other body
    values are of unknown type (and match any kernel).
    """
    if depth >= MAX_EXPANSION_DEPTH or domain not in ONNX_DOMAINS:
        return Verdict(False)
    schema = schema_at(op_type, domain, opset)
    if schema is None:
        return Verdict(False)
    body = _static_body(schema, opset)
    if body is None:
        if not [v for v in schema.context_dependent_function_opset_versions if v <= opset]:
            if [v for v in schema.function_opset_versions if v <= opset]:
                return Verdict(False, why=f"its ONNX function cannot be inlined at opset {opset} "
                                          "(an op of the body changed definition since the function's opset)")
            return Verdict(False)
        body = _context_body(schema, opset, node, input_types)
        if body is None:
            return Verdict(None, "function")
    imports = {norm_domain(op.domain): op.version for op in body.opset_import}
    imports[domain] = opset
    known: dict[str, TypeProto] = {}
    if node is not None:
        for formal, actual in zip(body.input, input_types):
            if actual is not None:
                known[formal] = actual
    for inner in body.node:
        inner_domain = norm_domain(inner.domain)
        inner_types = [known.get(v) for v in inner.input]
        inner_args = Args([(v, type_string(known.get(v)) if v else None) for v in inner.input],
                          [(v, None) for v in inner.output])
        verdict = decide(inner.op_type, inner_domain, imports.get(inner_domain, opset), inner_args, inner, inner_types, depth + 1)
        if verdict.runs is False:
            return Verdict(False, why=f"its ONNX function needs {inner.op_type}: {verdict.why}", hint=verdict.hint)
        if verdict.runs is None:
            return Verdict(None, "function")
    return Verdict(True, "function")


def _static_body(schema: Any, opset: int) -> FunctionProto | None:
    versions = [v for v in schema.function_opset_versions if v <= opset]
    if not versions:
        return None
    since = max(versions)
    body = _parse_function(schema.get_function_with_opset_version(since))
    if body is None:
        return None
    for inner in body.node:  # onnx's ValidateReferencedOpsInFunction (default domain only)
        if norm_domain(inner.domain) == "" and since != opset:
            now, then = schema_at(inner.op_type, "", opset), schema_at(inner.op_type, "", since)
            if now is None or then is None or now.since_version != then.since_version:
                return None
    return body


def _context_body(schema: Any, opset: int, node: NodeProto | None, input_types: list[TypeProto | None] | None) -> FunctionProto | None:
    """Build a context-dependent body (CastLike, Bernoulli, the losses…) as onnx would for this node;
    unknown input types are stood in by float tensors, which changes the body's types, not its ops."""
    if node is None:
        return None
    placeholder = helper.make_tensor_type_proto(TensorProto.FLOAT, None)
    types = [(t if t is not None else placeholder).SerializeToString() for t in (input_types or [None] * len(node.input))]
    try:
        data = schema.get_context_dependent_function_with_opset_version(opset, node.SerializeToString(), types)
    except Exception:  # onnx raises several types when a builder rejects the node  # noqa: BLE001
        return None
    return _parse_function(data)


def _parse_function(data: bytes | None) -> FunctionProto | None:
    if not data:
        return None
    body = FunctionProto()
    body.ParseFromString(data)
    return body


def node_proto(node: Node) -> NodeProto:
    """The node as onnx's function builders need it (attributes only; subgraphs left out)."""
    proto = NodeProto(op_type=node.op_type, domain=node.domain, name=node.name)
    proto.input.extend(node.inputs)
    proto.output.extend(node.outputs)
    proto.attribute.extend(a for a in node.peek_attrs().values() if isinstance(a, AttributeProto))
    return proto


# ---------------------------------------------------------------- the pass


@register(level=1, target="ort", priority=40)
class CheckOrtKernels(Pass):
    """Check that onnxruntime's CPU provider can run every op: a kernel of that version and type, or an inlinable ONNX function."""

    analysis = True

    def run(self, graph: Graph, ctx: PassContext) -> PassResult:
        place = place_of(ctx.model, graph)
        local_domains = {d for d, _ in local_functions(ctx.model)}
        before = len(ctx.findings)
        self._kernel_found: dict[tuple, Verdict] = {}
        for node in graph.nodes():
            domain, op = norm_domain(node.domain), node.op_type
            if (domain, op) in RESOLVED_AT_LOAD or domain in local_domains or domain not in place.opsets:
                continue
            opset = place.opsets[domain]
            if domain in ONNX_DOMAINS:
                onnx_schema = schema_at(op, domain, opset)
                if onnx_schema is None or onnx_schema.deprecated:
                    continue
            self.check_node(ctx, place, graph, node, domain, opset)
        n = len(ctx.findings) - before
        return PassResult(changed=False, stats={"findings": n} if n else {})

    def check_node(self, ctx: PassContext, place: Any, graph: Graph, node: Node, domain: str, opset: int) -> None:
        op = node.op_type
        args = Args.of(graph, node)
        # A kernel that takes these argument types decides before anything node-specific is read
        # (``decide`` returns before ``expand``): one decision serves every node of that signature.
        key = (op, domain, opset, tuple((bool(n), t) for n, t in args.inputs),
               tuple((bool(n), t) for n, t in args.outputs))
        verdict = self._kernel_found.get(key)
        if verdict is None:
            input_types = [graph.value_type(v) if v else None for v in node.inputs]
            verdict = decide(op, domain, opset, args, node_proto(node), input_types)
            if verdict.runs and verdict.via == "kernel":
                self._kernel_found[key] = verdict
        if verdict.runs is False:
            add(ctx, "error", "no-kernel", verdict.why, place, node, hint=verdict.hint)
        elif verdict.via == "function":
            maybe = "" if verdict.runs else " (if its body's types have kernels)"
            add(ctx, "info", "no-kernel", f"onnxruntime has no CPU kernel for {op} at this opset and types; it inlines the op's ONNX function{maybe}",
                place, node, hint="runs as the function's ops; a fusion may be faster")
        elif verdict.via == "fp16-cast":
            add(ctx, "info", "no-kernel", f"onnxruntime has no float16 CPU kernel for {op}; it inserts Casts and runs it in float32",
                place, node, hint="runs, with two Casts and float32 rounding around the op")


@functools.lru_cache(maxsize=1)
def _ort_version() -> str:
    import onnxruntime

    return onnxruntime.__version__
