"""Constant folding: ops whose inputs are all constant become initializers holding their values.

The rewrite, case by case:

1. A ``Constant`` op becomes an initializer of the same name (one node less, same bytes). Not in
   function bodies (FunctionProto has no initializers) and not in subgraphs of IR < 4 models
   (there an initializer must be a graph input, which would change a Loop body's signature).
2. The *foldable region* — ops all of whose inputs are constant, transitively — is evaluated in
   one onnxruntime session (``graphtool.runtime.constants``). Its *frontier* values (read by an op outside
   the region, by a subgraph, or a graph output) become initializers under their own names, so
   graph outputs keep their names; every op of the region is removed.
3. Refused: nondeterministic ops (RandomNormal…, Bernoulli, Multinomial, training-mode Dropout),
   If/Loop/Scan, sequence/optional ops, DequantizeLinear, ops of unknown or model-local-function
   domains, and ops that onnxruntime fails to evaluate — those stay, and so do their consumers.
4. Size guard: a frontier value whose bytes exceed the bytes of the constants it is computed
   from by more than ``ctx.max_fold_bytes`` is not materialized (its producer stays; the region
   is recomputed without it) and counted in ``skipped_size`` — unless it is a *weight*: every
   reader uses it in a parameter slot (Conv/ConvTranspose W and B, Gemm/MatMul/Add/Sub/Mul/Div
   operand whose other operand is not constant, BatchNormalization/InstanceNormalization/
   LayerNormalization scale/bias/mean/var, PRelu slope, Gather data, RNN/GRU/LSTM W/R/B). A
   weight is bytes the model would hold anyway, and ONNX Runtime folds it too: the onnx wheel's
   light/ models build every weight with ``ConstantOfShape`` (light_vgg19's 411 MB FC matrix).
   Never a weight: a graph output, and a value broadcast by ``Expand`` or ``Tile`` (e.g. a mask
   expanded to [B, H, S, S]) — there the runtime broadcasts for free what the file would store.
5. Never a second copy: a value over the size limit computed from constants of more than the
   limit that *stay* in the model (read outside the folded region) is not materialized either,
   weight or not. Tied embeddings are the case: ``MatMul(h, Transpose(W))`` while ``W`` stays for
   the embedding ``Gather`` — folding would store W twice (SmolLM: 671 -> 1,074 MB). The Transpose
   stays; at level 2 ``--target ort`` it becomes FusedMatMul's ``transB``.

In IR < 4 models, a new main-graph initializer is also listed as a graph input, as that IR
version requires.
"""

from __future__ import annotations

import weakref

import numpy as np
from onnx import numpy_helper

from graphtool.ir.graph import CAPTURE, Graph, Node
from graphtool.pass_manager import Pass, PassContext, PassResult, register
from graphtool.runtime import (
    constant_tensor_proto,
    evaluate,
    foldable_region,
    frontier,
    holds_initializers,
    is_constant,
    is_plain_constant_node,
    place_constant,
)

# op type -> input slots that hold parameters (weights) whatever the other inputs are
PARAM_SLOTS: dict[str, frozenset[int]] = {
    "Conv": frozenset({1, 2}),
    "ConvTranspose": frozenset({1, 2}),
    "BatchNormalization": frozenset({1, 2, 3, 4}),
    "InstanceNormalization": frozenset({1, 2}),
    "LayerNormalization": frozenset({1, 2}),
    "GroupNormalization": frozenset({1, 2}),
    "PRelu": frozenset({1}),
    "Gather": frozenset({0}),
    "RNN": frozenset({1, 2, 3}),
    "GRU": frozenset({1, 2, 3}),
    "LSTM": frozenset({1, 2, 3}),
}
# ops where a constant operand next to a non-constant one is a parameter
OPERAND_OPS = frozenset({"Gemm", "MatMul", "Add", "Sub", "Mul", "Div"})
# ops whose output is a broadcast of their input: never a "weight" (see the docstring)
BROADCAST_OPS = frozenset({"Expand", "Tile"})
MAX_ROUNDS = 8


@register(level=1, priority=10)
class FoldConstants(Pass):
    """Replace ops whose inputs are all constant by their values (evaluated in onnxruntime)."""

    def __init__(self) -> None:
        # Nodes refused once (too big, or ORT failed) stay refused for this run: the manager calls
        # the pass again every iteration and re-evaluating a refused 64 MB fold would be waste.
        self._refused: weakref.WeakKeyDictionary[Graph, set[int]] = weakref.WeakKeyDictionary()

    def run(self, graph: Graph, ctx: PassContext) -> PassResult:
        stats = {"folded": 0, "constants": 0, "skipped_size": 0, "failed": 0}
        if holds_initializers(graph, ctx.model):
            for node in graph.nodes("Constant"):
                if is_plain_constant_node(node) and node.outputs and node.outputs[0]:
                    name = node.outputs[0]
                    proto = constant_tensor_proto(node, name)
                    if proto is None:
                        continue
                    graph.remove_nodes([node])
                    place_constant(graph, ctx.model, name, proto)
                    stats["constants"] += 1

        order = graph.topological_order()
        blocked = self._refused.setdefault(graph, set())
        computed: dict[str, np.ndarray] = {}
        region: list[Node] = []
        for _ in range(MAX_ROUNDS):
            region = foldable_region(graph, ctx.model, blocked, order)
            if not region:
                break
            wanted = frontier(graph, region)
            todo = [w for w in wanted if w not in computed]
            if todo:
                result = evaluate(graph, ctx.model, region, todo)
                computed.update(result.values)
                blocked_by_failure = result.failed
            else:
                blocked_by_failure = set()
            newly: set[int] = set(blocked_by_failure)
            for value in wanted:
                producer = graph.producer(value)
                if value not in computed:
                    newly.add(producer.id)
                    stats["failed"] += 1
                elif _too_big(graph, region, value, computed[value], ctx.max_fold_bytes):
                    newly.add(producer.id)
                    stats["skipped_size"] += 1
                    del computed[value]
            if not newly:
                break
            blocked |= newly
        else:
            region = []  # did not settle: fold nothing rather than something unproven

        if region:
            wanted = frontier(graph, region)
            if all(v in computed for v in wanted):
                graph.remove_nodes(region)
                for value in wanted:
                    if not graph.has_value(value):
                        continue
                    place_constant(graph, ctx.model, value, computed.pop(value))
                stats["folded"] += len(region)
        stats = {k: v for k, v in stats.items() if v}
        return PassResult(changed=bool(stats.get("folded") or stats.get("constants")), stats=stats)


def _too_big(graph: Graph, region: list[Node], value: str, array: np.ndarray, limit: int) -> bool:
    """True when materializing ``value`` grows the model by more than ``limit`` bytes and it is
    not a weight (see the module docstring)."""
    if array.nbytes <= limit:
        return False
    source_bytes, broadcast, kept = _cone(graph, region, value)
    if kept > limit:
        return True  # a second copy of a large constant that stays (tied embeddings' Transpose(W))
    if not broadcast and _is_weight(graph, value):
        return False
    return array.nbytes - source_bytes > limit


def _is_weight(graph: Graph, value: str) -> bool:
    if graph.is_output(value):
        return False
    uses = graph.uses(value)
    if not uses:
        return False
    for node, slot in uses:
        if slot == CAPTURE:
            return False
        if slot in PARAM_SLOTS.get(node.op_type, ()):
            continue
        if node.op_type in OPERAND_OPS:
            others = [v for i, v in enumerate(node.inputs) if i != slot and v and i < 2]
            if others and not any(is_constant(graph, v) for v in others):
                continue
        return False
    return True


def _cone(graph: Graph, region: list[Node], value: str) -> tuple[int, bool, int]:
    """Bytes of the constants ``value`` is computed from, whether Expand/Tile broadcast it, and
    the bytes of those constants that stay in the model after the fold (read outside the region)."""
    produced = {v: n for n in region for v in n.outputs if v}
    inside = {n.id for n in region}
    seen: set[str] = set()
    total = kept = 0
    broadcast = False
    stack = [value]
    while stack:
        v = stack.pop()
        if v in seen:
            continue
        seen.add(v)
        node = produced.get(v)
        if node is not None:
            broadcast |= node.op_type in BROADCAST_OPS
            stack.extend(x for x in node.inputs if x)
            continue
        tensor = graph.initializers.get(v)
        if tensor is not None:
            total += tensor.nbytes
            if graph.is_output(v) or any(slot == CAPTURE or n.id not in inside for n, slot in graph.uses(v)):
                kept += tensor.nbytes
        else:
            array = graph.const(v)
            total += 0 if array is None else int(np.asarray(array).nbytes)
    return total, broadcast, kept
