"""Constant evaluation: compute the values of ops whose inputs are all constant.

Folding must give exactly what the model would compute at run time, so values come from
onnxruntime — the kernels that will run the model — in ONE session per foldable region (session
creation, not kernel time, dominates: one session per node would cost milliseconds × nodes).
A handful of data-movement ops (Shape, ConstantOfShape, Unsqueeze, Concat, Gather, Reshape,
Slice, Transpose, Expand, integer Cast/Range…) are computed in numpy (graphtool.runtime.numpy_kernels), because there the
result is bit-identical by construction and a 411 MB ``ConstantOfShape`` weight is fastest as
``np.full``. If the batched session fails (an op ORT cannot run, a kernel error), the region is
split in halves, recursively, down to single nodes; a node that still fails is reported in
``EvalResult.failed`` and left in the graph.

Which ops may be folded at all is decided here too (``can_fold``): never nondeterministic ops,
ops with subgraphs, sequence/optional producers, ops of unknown or model-local-function domains,
and never DequantizeLinear (folding it would turn a quantized model's int8 weights back into
float ones — the model would grow 4× and lose its QDQ structure).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable

import numpy as np
import onnx
import onnxruntime as ort
from onnx import AttributeProto, TensorProto, helper, numpy_helper

from graphtool.ir.graph import Graph, Node, constant_node_value
from graphtool.ir.model import Model
from graphtool.ir.tensor import Tensor
from graphtool.ir.to_onnx import node_to_proto
from graphtool.runtime import sandbox
from graphtool.runtime.numpy_kernels import numpy_kernel
from graphtool.runtime.session import session_options

# Inputs of one folded node (or one ORT folding session) past this are not evaluated: ORT's own
# constant folding stops at 1 GB per output; a 24 GB Concat of broadcast views must not be tried.
MAX_EVAL_BYTES = 2 << 30

NONDETERMINISTIC = frozenset(
    {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli"}
)
# Ops that produce or consume sequences/optionals, own subgraphs, or must stay for other reasons.
NEVER_FOLD = frozenset(
    {
        "If", "Loop", "Scan",
        "SequenceConstruct", "SequenceEmpty", "SequenceInsert", "SequenceErase", "SequenceAt",
        "SequenceLength", "SequenceMap", "SplitToSequence", "ConcatFromSequence",
        "Optional", "OptionalGetElement", "OptionalHasElement",
        "DequantizeLinear",  # keeps QDQ models quantized (see module docstring)
    }
)
FOLD_DOMAINS = frozenset({"", "ai.onnx", "ai.onnx.ml", "com.microsoft"})
_ORT_INPUT_DTYPES = frozenset(
    np.dtype(t) for t in (np.float16, np.float32, np.float64, np.int8, np.int16, np.int32, np.int64,
                          np.uint8, np.uint16, np.uint32, np.uint64, np.bool_)
)


# ---------------------------------------------------------------------------- what is constant


def is_constant(graph: Graph, value: str) -> bool:
    """Like ``graph.const(value) is not None`` but without reading any tensor's bytes."""
    if not value or not graph.has_value(value):
        return False
    if value in graph.initializers:
        return not (graph.overridable_initializers and graph.is_input(value))
    producer = graph.producer(value)
    if producer is not None:
        return is_plain_constant_node(producer)
    if graph.parent is not None and graph.is_free(value):
        return is_constant(graph.parent, value)
    return False


def is_plain_constant_node(node: Node) -> bool:
    """A Constant op whose value is a dense tensor (not sparse, not a function attribute ref)."""
    if node.op_type != "Constant" or node.domain not in ("", "ai.onnx"):
        return False
    protos = [node.attr_proto(k) for k in node._data["attrs"]]
    if len(protos) != 1 or protos[0] is None or protos[0].ref_attr_name:
        return False
    proto = protos[0]
    if proto.name == "value":
        return proto.t.data_location != TensorProto.EXTERNAL
    return proto.name in ("value_float", "value_floats", "value_int", "value_ints")


def constant_tensor_proto(node: Node, name: str) -> TensorProto | None:
    """The TensorProto a plain Constant op holds, renamed (no numpy round trip for big tensors)."""
    proto = node.attr_proto("value")
    if proto is not None and not proto.ref_attr_name:
        out = TensorProto()
        out.CopyFrom(proto.t)
        out.name = name
        return out
    array = constant_node_value(node)
    return None if array is None else numpy_helper.from_array(array, name)


def local_function_ops(model: Model) -> set[tuple[str, str]]:
    return {(fn.domain, fn.name) for fn in model.functions}


def can_fold(node: Node, local_ops: set[tuple[str, str]], opset: int) -> bool:
    """True when ``node``'s op may be replaced by its value once all its inputs are constant."""
    if node.domain not in FOLD_DOMAINS or (node.domain, node.op_type) in local_ops:
        return False
    if node.op_type in NONDETERMINISTIC or node.op_type in NEVER_FOLD or node.op_type == "Constant":
        return False
    if node.domain == "com.microsoft" and node.op_type in ("BiasDropout", "BitmaskDropout", "BitmaskBiasDropout"):
        return False
    if not node.outputs or not any(node.outputs):
        return False
    for value in node._data["attrs"].values():
        if not isinstance(value, AttributeProto) or value.ref_attr_name:
            return False  # subgraph, or a reference to a function's attribute
    if node.op_type == "Dropout":
        return _dropout_is_inference(node, opset)
    graph = node.graph
    for out in node.outputs:
        t = graph.value_type(out) if out else None
        if t is not None and t.WhichOneof("value") not in (None, "tensor_type", "sparse_tensor_type"):
            return False  # sequence / optional / map
    return True


def _dropout_is_inference(node: Node, opset: int) -> bool:
    if opset < 7:
        return bool(node.attr("is_test", 0))
    if opset < 12:
        return True
    inputs = node.inputs
    if len(inputs) < 3 or not inputs[2]:
        return True
    mode = node.graph.const(inputs[2])
    return mode is not None and not bool(np.asarray(mode).any())


def foldable_region(graph: Graph, model: Model, blocked: set[int] | frozenset[int] = frozenset(),
                    order: list[Node] | None = None) -> list[Node]:
    """Nodes all of whose inputs are constant, transitively, in topological order (Constant ops
    themselves are leaves, not part of the region). ``blocked`` node ids are treated as unfoldable."""
    local_ops = local_function_ops(model)
    opset = model.opset("") or 0
    # what ``is_constant`` says of each value, found once: initializers and plain Constant ops'
    # outputs (a subgraph also reads its enclosing graphs' constants, asked value by value)
    known: set[str] = set() if graph.parent is not None else {
        *(name for name in graph.initializers if not (graph.overridable_initializers and graph.is_input(name))),
        *(v for node in graph.nodes("Constant") if is_plain_constant_node(node) for v in node.outputs if v)}
    region: list[Node] = []
    for node in order if order is not None else graph.topological_order():
        if node.id in blocked:
            continue
        # inputs first: most ops fail there, and it is cheaper than asking whether the op may fold
        if all(not v or v in known or (graph.parent is not None and is_constant(graph, v)) for v in node.inputs) \
                and can_fold(node, local_ops, opset):
            region.append(node)
            known.update(v for v in node.outputs if v)
    return region


def frontier(graph: Graph, region: Iterable[Node]) -> list[str]:
    """Values the region produces that something outside it reads (or that are graph outputs)."""
    ids = {n.id for n in region}
    out: list[str] = []
    for node in region:
        for value in node.outputs:
            if value and (graph.is_output(value) or any(u.id not in ids for u, _ in graph.uses(value))):
                out.append(value)
    return out


# ---------------------------------------------------------------------------- evaluation


@dataclass
class EvalResult:
    values: dict[str, np.ndarray] = field(default_factory=dict)
    failed: set[int] = field(default_factory=set)  # ids of nodes that could not be evaluated
    sessions: int = 0


def opset_imports_for(model: Model, graph: Graph) -> list[onnx.OperatorSetIdProto]:
    """The opsets that apply to ``graph``: the model's, or its function's for a function body."""
    root = graph
    while root.parent is not None:
        root = root.parent
    for fn in model.functions:
        if fn.body is root and fn.proto_shell.opset_import:
            imports = {o.domain: o.version for o in model.proto_shell.opset_import}
            imports.update({o.domain: o.version for o in fn.proto_shell.opset_import})
            return [helper.make_opsetid(d, v) for d, v in imports.items()]
    return list(model.proto_shell.opset_import)


def evaluate(graph: Graph, model: Model, nodes: list[Node], wanted: Iterable[str],
             leaf: Callable[[str], np.ndarray | None] | None = None) -> EvalResult:
    """Values of ``wanted`` (outputs of ``nodes``, given in topological order).

    Inputs not produced by ``nodes`` are read with ``leaf`` (default ``graph.const``). Only the
    ancestors of ``wanted`` are computed. Nodes that fail (and the ones that need their outputs)
    are listed in ``failed``; the values they would have produced are absent from ``values``.
    """
    leaf = leaf or graph.const
    wanted = [w for w in dict.fromkeys(wanted) if w]
    produced = {v: n for n in nodes for v in n.outputs if v}
    needed = _ancestors(wanted, produced)
    nodes = [n for n in nodes if n.id in needed]
    opsets = opset_imports_for(model, graph)
    opset = next((o.version for o in opsets if o.domain in ("", "ai.onnx")), 0)
    result = EvalResult()
    env: dict[str, np.ndarray] = {}  # numpy-computed and leaf values
    leaves: dict[str, np.ndarray | None] = {}

    def leaf_value(name: str) -> np.ndarray | None:
        if name not in leaves:
            leaves[name] = leaf(name)
        return leaves[name]

    # Pass 1: numpy for exact data movement while every input is already known in numpy.
    ort_nodes: list[Node] = []
    in_ort: set[str] = set()
    for node in nodes:
        ins = node.inputs
        if any(v in in_ort for v in ins if v):
            ort_nodes.append(node)
            in_ort.update(v for v in node.outputs if v)
            continue
        args = []
        ok = True
        for v in ins:
            if not v:
                args.append(None)
                continue
            a = env.get(v) if v in env else (None if v in produced else leaf_value(v))
            if a is None:
                ok = False
                break
            args.append(a)
        if not ok or _logical_bytes(args) > MAX_EVAL_BYTES:
            # an input that failed upstream or is not readable; or inputs so large (a broadcast
            # view of a huge Expand) that computing from them could exhaust memory: not folded
            result.failed.add(node.id)
            continue
        try:
            outs = numpy_kernel(node, args, opset)
        except MemoryError:
            result.failed.add(node.id)
            continue
        if outs is None:
            ort_nodes.append(node)
            in_ort.update(v for v in node.outputs if v)
            continue
        for name, arr in zip(node.outputs, outs):
            if name:
                env[name] = arr

    if ort_nodes:
        # A node with an ORT-computed input runs in ORT too, so the ORT part only needs its own
        # wanted outputs; numpy-computed values reach it as session inputs.
        ort_wanted = [w for w in wanted if w in in_ort]
        ort_leaf = lambda name: env[name] if name in env else leaf_value(name)  # noqa: E731
        _evaluate_ort(ort_nodes, ort_wanted, ort_leaf, opsets, model.ir_version, produced, result)
    for name in wanted:
        if name in env:
            result.values[name] = env[name]
    return result


def _logical_bytes(arrays: Iterable[np.ndarray | None]) -> int:
    """Bytes the arrays would take materialized (a zero-stride broadcast view counts in full)."""
    return sum(int(a.size) * a.dtype.itemsize for a in arrays if isinstance(a, np.ndarray))


def _ancestors(wanted: list[str], produced: dict[str, Node]) -> set[int]:
    seen: set[int] = set()
    stack = [produced[w] for w in wanted if w in produced]
    while stack:
        node = stack.pop()
        if node.id in seen:
            continue
        seen.add(node.id)
        stack.extend(produced[v] for v in node.inputs if v in produced)
    return seen


def _evaluate_ort(nodes: list[Node], wanted: list[str], leaf: Callable[[str], np.ndarray | None],
                  opsets: list[onnx.OperatorSetIdProto], ir_version: int, produced: dict[str, Node],
                  result: EvalResult) -> None:
    """One session for ``nodes``; on failure split in halves (topological order) and recurse."""
    if not nodes or not wanted:
        return
    try:
        values = _run_session(nodes, wanted, leaf, opsets, ir_version)
        result.sessions += 1
        result.values.update(values)
        return
    except sandbox.LimitHit:  # out of memory or time: smaller pieces would hit it again, one by one
        result.sessions += 1
        result.failed.update(n.id for n in nodes)
        return
    except Exception:  # noqa: BLE001 - any ORT failure means: try smaller pieces
        result.sessions += 1
    if len(nodes) == 1:
        result.failed.add(nodes[0].id)
        return
    mid = len(nodes) // 2
    first, second = nodes[:mid], nodes[mid:]
    first_out = {v for n in first for v in n.outputs if v}
    bridge = [v for n in second for v in n.inputs if v in first_out]
    first_wanted = list(dict.fromkeys([w for w in wanted if w in first_out] + bridge))
    first_wanted = [w for w in first_wanted if produced.get(w) is not None]
    _evaluate_ort(_prune(first, first_wanted, produced), first_wanted, leaf, opsets, ir_version, produced, result)
    known = result.values

    def second_leaf(name: str) -> np.ndarray | None:
        if name in first_out:
            return known.get(name)
        return leaf(name)

    runnable: list[Node] = []
    dead = {v for v in first_out if v not in known}
    for node in second:
        if any(v in dead for v in node.inputs if v):
            result.failed.add(node.id)
            dead.update(v for v in node.outputs if v)
        else:
            runnable.append(node)
    runnable_ids = {n.id for n in runnable}
    second_wanted = [w for w in wanted if w in produced and produced[w].id in runnable_ids]
    _evaluate_ort(_prune(runnable, second_wanted, produced), second_wanted, second_leaf, opsets, ir_version,
                  produced, result)


def _prune(nodes: list[Node], wanted: list[str], produced: dict[str, Node]) -> list[Node]:
    ids = {n.id for n in nodes}
    local = {v: n for v, n in produced.items() if n.id in ids}
    keep = _ancestors(wanted, local)
    return [n for n in nodes if n.id in keep]


def _run_session(nodes: list[Node], wanted: list[str], leaf: Callable[[str], np.ndarray | None],
                 opsets: list[onnx.OperatorSetIdProto], ir_version: int) -> dict[str, np.ndarray]:
    outputs = {v for n in nodes for v in n.outputs if v}
    feeds: dict[str, np.ndarray] = {}
    inputs: list[onnx.ValueInfoProto] = []
    initializers: dict[str, TensorProto] = {}
    for node in nodes:
        for v in node.inputs:
            if not v or v in outputs or v in feeds or v in initializers:
                continue
            arr = leaf(v)
            if arr is None:
                raise ValueError(f"input '{v}' has no value")
            arr = np.asarray(arr)
            if arr.dtype in _ORT_INPUT_DTYPES or arr.dtype.kind in "OU":
                elem = TensorProto.STRING if arr.dtype.kind in "OU" else helper.np_dtype_to_tensor_dtype(arr.dtype)
                inputs.append(helper.make_tensor_value_info(v, elem, list(arr.shape)))
                feeds[v] = arr.astype(object) if arr.dtype.kind == "U" else np.ascontiguousarray(arr)
            else:  # bfloat16, float8, int4 ...: ORT takes them as initializers only
                initializers[v] = numpy_helper.from_array(arr, v)
    graph = helper.make_graph([node_to_proto(n) for n in nodes], "graphtool_fold", inputs,
                              [onnx.ValueInfoProto(name=w) for w in wanted], list(initializers.values()))
    model = helper.make_model(graph, opset_imports=opsets)
    try:
        needed = helper.find_min_ir_version_for(opsets, ignore_unknown=True)
    except Exception:  # noqa: BLE001 - an opset this onnx does not know: keep the model's
        needed = 4
    model.ir_version = max(ir_version, needed, 4)
    if _logical_bytes(feeds.values()) > MAX_EVAL_BYTES:
        raise sandbox.LimitHit("inputs too large to fold")
    # in the sandbox child: an intermediate that does not fit ends that child, not graphtool
    if not sandbox.enabled():
        sess = ort.InferenceSession(model.SerializeToString(), session_options("off"), providers=["CPUExecutionProvider"])
        return {w: np.asarray(v) for w, v in zip(wanted, sess.run(wanted, feeds))}
    return sandbox.call("evaluating constants", sandbox.run_model, model.SerializeToString(), wanted, feeds)


# ---------------------------------------------------------------------------- placing values


def holds_initializers(graph: Graph, model: Model) -> bool:
    """Whether a folded value in ``graph`` can be an initializer (else it becomes a Constant op):
    not in function bodies (FunctionProto has none), not in IR < 4 subgraphs (there an
    initializer must also be a graph input, which would change a Loop body's signature)."""
    root = graph
    while root.parent is not None:
        root = root.parent
    if root is not model.graph:
        return False
    return graph.parent is None or graph.overridable_initializers


def place_constant(graph: Graph, model: Model, name: str, value: np.ndarray | TensorProto) -> None:
    """Make ``name`` (whose producer was just removed) a constant holding ``value``.

    An array stays an array (its proto is built only when the model is saved), so a folded
    weight is held once, not twice."""
    if holds_initializers(graph, model):
        tensor = Tensor(_named(value, name)) if isinstance(value, TensorProto) else Tensor.from_numpy(value, name)
        graph.set_initializer(name, tensor)
        if not graph.overridable_initializers and graph.parent is None and not graph.is_input(name):
            # IR < 4: every initializer must also be a graph input.
            graph.inputs[name] = helper.make_tensor_value_info(name, tensor.data_type, list(tensor.dims))
    else:
        proto = value if isinstance(value, TensorProto) else numpy_helper.from_array(value, name)
        graph.add_node("Constant", [], [name], {"value": _named(proto, name)}, name=name)


def _named(proto: TensorProto, name: str) -> TensorProto:
    if proto.name != name:
        proto.name = name
    return proto
