"""What each node of a rewritten graph stands for: trace it back to the original ops it replaced.

Both optimizers graphtool looks at (its own and onnxruntime's) keep the value names at the
boundary of what they rewrite, so for every node of a rewritten graph we walk the *original*
graph back from its outputs until we reach its inputs; the original ops in between are what the
node replaced. Nodes joined by values the original never had (NCHWc ``reorder_token_*``, fresh
names) are traced together as one cluster. See ``trace_fusions``.

Used by ``graphtool compare`` (ORT's rewrites beside graphtool's) and by ``graphtool diff``'s
summary (``graphtool.diff.summary``: ``Conv+BatchNormalization → Conv ×53``). It needs value
names kept across the rewrite; a pair of unrelated or wholly renamed models traces as
"untraced" clusters, never as invented fusions.
"""

from __future__ import annotations

import hashlib
import itertools
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import numpy as np

from graphtool.ir.from_onnx import gc_paused_if_big
from graphtool.ir.graph import Graph, Node, constant_node_value
from graphtool.ir.model import Model

# ops whose result differs from run to run: their outputs are never treated as constants
NONDETERMINISTIC = {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial", "Bernoulli"}
MAX_EXAMPLES = 3


@dataclass
class Fusion:
    """One node (or cluster of nodes) of a rewritten graph and the original ops it stands for."""

    new_ops: list[tuple[str, str]]  # (domain, op_type) of the rewritten node(s)
    new_names: list[str]
    absorbed: list[int]  # ids of original nodes on the data path, in original order
    absorbed_ops: list[str]
    folded: list[int]  # original nodes that only computed constants for it
    kind: str  # "fused" (many → fewer) | "replaced" (as many) | "expanded" (fewer → more) | "unchanged" | "untraced"
    details: Counter = field(default_factory=Counter)  # what the new nodes fused in by attribute (NCHWc)
    new_ids: list[int] = field(default_factory=list)  # ids of the rewritten node(s), to point at them

    @property
    def pattern(self) -> str:
        return f"{join_ops(self.absorbed_ops)} → {join_ops([short_op(d, o) for d, o in self.new_ops], runs=True)}"


@dataclass
class Trace:
    fusions: list[Fusion] = field(default_factory=list)
    removed: Counter = field(default_factory=Counter)  # original op types no rewritten node stands for
    inserted: list[tuple[str, str, str]] = field(default_factory=list)  # (domain, op, name) with no origin


def short_op(domain: str, op_type: str) -> str:
    """``FusedConv`` for com.microsoft (the usual contrib domain), ``nchwc.Conv`` for its sub-domains."""
    if domain in ("", "ai.onnx", "com.microsoft"):
        return op_type
    if domain.startswith("com.microsoft."):
        return f"{domain.rsplit('.', 1)[1]}.{op_type}"
    return f"{domain}:{op_type}"


def join_ops(ops: list[str], limit: int = 10, runs: bool = False) -> str:
    """``A+B+C`` in order (``runs``: repeats in a row as ``B×4``); long lists become counts, most
    frequent first (``Conv×53+Relu×49+…``), so the same fusion found twice reads the same
    whatever order its ops were visited in."""
    if len(ops) <= limit or (runs and len(list(itertools.groupby(ops))) <= limit):
        if not runs:
            return "+".join(ops)
        return "+".join(op if n == 1 else f"{op}×{n}" for op, n in ((k, len(list(g))) for k, g in itertools.groupby(ops)))
    counts = Counter(ops)
    return "+".join(op if n == 1 else f"{op}×{n}" for op, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


class _Original:
    """Indexes of the original main graph that every trace reuses: order, constants, value numbers.

    Value numbering gives equal numbers to values that provably hold the same thing (the same op
    on the same inputs with the same attributes, or equal constants): optimizers merge such
    duplicates (common-subexpression elimination), so a rewritten node may read ``Shape_1`` where
    the original read ``Shape``; comparing numbers instead of names keeps the boundary.
    """

    def __init__(self, graph: Graph):
        self.graph = graph
        order = graph.topological_order()
        self.position = {n.id: i for i, n in enumerate(order)}
        self.constant: set[str] = set()
        numbers: dict[Any, int] = {}
        self.number: dict[str, int] = {}

        def intern(key: Any) -> int:
            return numbers.setdefault(key, len(numbers))

        self._intern = intern

        for name, tensor in graph.initializers.items():
            if graph.overridable_initializers and graph.is_input(name):
                self.number[name] = intern(("input", name))
                continue
            self.constant.add(name)
            self.number[name] = intern(_const_key(tensor.numpy()) if tensor.nbytes <= (1 << 20) else ("init", name))
        constant, num = self.constant, self.num
        records, owners = graph._node, graph._owners  # the op records (graphtool.ir.records.OpData)
        for node in order:
            data = records[node.id]
            op_type, io, n_in = data.op_type, data.io, data.n_in
            inputs, outputs = io[:n_in], io[n_in:]
            opaque = op_type in NONDETERMINISTIC or node.id in owners and bool(node.subgraphs())
            if not opaque and all(v in constant for v in inputs if v):
                constant.update(v for v in outputs if v)
            value = constant_node_value(node) if op_type == "Constant" else None
            if value is not None and value.nbytes <= (1 << 20):
                key: Any = _const_key(value)
            elif opaque:
                key = ("node", node.id)
            else:  # attributes as their bytes, read without keeping them parsed
                attrs = tuple(sorted((k, v.SerializeToString()) for k, v in data.peek_attrs().items()))
                key = (data.domain or "ai.onnx", op_type, attrs, tuple(num(v) for v in inputs))
            if len(outputs) == 1:
                if outputs[0]:
                    self.number[outputs[0]] = intern(key)
                continue
            for slot, out in enumerate(outputs):
                if out:
                    self.number[out] = intern((key, slot)) if len(outputs) > 1 else intern(key)

    def num(self, value: str) -> int:
        """The value number of an original value ('' and unknown names get their own)."""
        found = self.number.get(value)
        if found is None:
            found = self.number[value] = self._intern(("name", value))
        return found

    def is_source(self, value: str) -> bool:
        """Where a backward walk must stop: graph inputs, initializers, values nothing produces."""
        g = self.graph
        return g.is_input(value) or g.is_initializer(value) or g.producer(value) is None


def _const_key(array: np.ndarray) -> tuple[Any, ...]:
    return ("const", str(array.dtype), array.shape, hashlib.sha1(np.ascontiguousarray(array).tobytes()).hexdigest())


# ops that read only their input's metadata: their outputs do not carry the data path
METADATA_OPS = {"Shape", "Size"}


def _layout_op(node: Node) -> bool:
    """An op of a layout region (ORT's NCHWc blocks, a channels-last quantized kernel): the tensors
    between such ops exist only in that layout, so the region is traced as one rewrite."""
    if node.domain == "com.microsoft.nchwc":
        return True
    return node.domain == "com.microsoft" and (node.op_type == "NhwcMaxPool" or bool(node.attr("channels_last", 0)))


def _clusters(og: Graph, rg: Graph, nodes: list[Node]) -> tuple[dict[int, list[Node]], dict[int, list[Node]], dict[int, set[str]]]:
    """Group ``nodes`` (the rewritten graph's, in topological order) into rewrites: (clusters,
    shared helpers, and for each cluster the known values its helpers read, which serve it as
    extra boundary inputs)."""
    parent = {n.id: n.id for n in nodes}

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    def unknown_outputs(members: Iterable[Node]) -> list[str]:
        return [v for n in members for v in n.outputs if v and not og.has_value(v)]

    # 1. values the original lacks, read by one node: producer and reader are one rewrite
    known = og.has_value
    for node in nodes:
        for value in node.outputs:
            if value and not known(value):
                readers = rg.consumers(value)
                if len(readers) == 1:
                    parent[find(readers[0].id)] = find(node.id)

    def grouped() -> dict[int, list[Node]]:
        table: dict[int, list[Node]] = {}
        for node in nodes:
            table.setdefault(find(node.id), []).append(node)
        return table

    def headless(members: list[Node]) -> bool:
        return not any(v and og.has_value(v) for n in members for v in n.outputs)

    # 2. a cluster with no output the original knows (an NCHWc conv feeding two convs) belongs to
    #    what reads it — unless it is a helper several self-standing rewrites share (one attention
    #    mask for every Attention node): those stay apart and read the helper's inputs instead.
    helpers: dict[int, list[Node]] = {}
    while True:
        clusters = grouped()  # after the last round, which merged nothing, still the clusters
        heads = {root for root, members in clusters.items() if headless(members)}
        merged = False
        helpers = {}
        for root in heads:
            readers = {find(c.id) for v in unknown_outputs(clusters[root]) for c in rg.consumers(v)} - {find(root)}
            if not readers:
                continue
            layout = any(_layout_op(n) for n in clusters[root])  # blocked or channels-last tensors: one region
            if len(readers) == 1 or layout or readers & {find(h) for h in heads}:
                for r in readers:
                    parent[find(r)] = find(root)
                merged = True
            else:
                helpers[root] = clusters[root]
        if not merged:
            break
    helper_of = {n.id: root for root, members in helpers.items() for n in members}
    helper_inputs: dict[int, set[str]] = {}

    def inputs_of_helper(root: int) -> set[str]:
        """The known values a helper (and the helpers it reads) computes from."""
        if root not in helper_inputs:
            helper_inputs[root] = set()
            found: set[str] = set()
            for n in helpers[root]:
                for v in n.inputs:
                    producer = rg.producer(v) if v else None
                    if not v:
                        continue
                    if og.has_value(v):
                        found.add(v)
                    elif producer is not None and producer.id in helper_of and helper_of[producer.id] != root:
                        found |= inputs_of_helper(helper_of[producer.id])
            helper_inputs[root] = found
        return helper_inputs[root]

    clusters = {root: members for root, members in clusters.items() if root not in helpers}
    extra: dict[int, set[str]] = {}
    for root, members in clusters.items():
        for n in members:
            for v in n.inputs:
                producer = rg.producer(v) if v else None
                if producer is not None and producer.id in helper_of:
                    extra.setdefault(root, set()).update(inputs_of_helper(helper_of[producer.id]))

    return clusters, helpers, extra


def index_original(original: Model) -> "_Original":
    """The original's indexes (order, constants, value numbers), for callers that trace several
    rewritten models against one original (compare: ORT's graph and graphtool's)."""
    # on a big graph the index and the trace are hundreds of thousands of small objects that live
    # on (one Fusion per op): collections would walk them and the graphs to find nothing (40% of a
    # trace on a 200k-node model; issue 20)
    with gc_paused_if_big(len(original.graph)):
        return _Original(original.graph)


def trace_fusions(original: Model, rewritten: Model, max_region: int = 256, index: "_Original | None" = None) -> Trace:
    """Map every node of ``rewritten``'s main graph to the original ops it replaced.

    1. Values of ``rewritten`` whose names the original does not have are internal to a rewrite:
       nodes joined by such values form one cluster (usually a single node).
    2. A cluster's boundary is its inputs and outputs that the original also has. Walking the
       original back from the producers of the boundary outputs, stopping at boundary inputs
       (or values provably equal to them), graph inputs and initializers, gives the region it
       replaced.
    3. Region nodes fed (transitively) by a non-constant boundary input are the fused data path;
       the rest only computed constants or shapes (a Constant, a Shape→Gather chain) and count
       as folded.
    4. A walk that reaches an original graph input the cluster does not read has lost the
       boundary (a renamed input): the cluster is reported as untraced rather than guessed.
       So is a new helper that several rewrites read (one attention mask for every Attention
       node; each of them is traced on its own), and a cluster whose region outgrows ``max_region`` + 16 per clustered node, which keeps the
       whole trace linear in the graph's size even when many boundaries are lost.
    """
    if index is not None and index.graph is not original.graph:
        raise ValueError("trace_fusions: the index was built for another model")
    return trace_graphs(original.graph, rewritten.graph, max_region, index)


def trace_graphs(og: Graph, rg: Graph, max_region: int = 256, index: "_Original | None" = None) -> Trace:
    """``trace_fusions`` for one pair of graphs (a main graph, or the same subgraph on both sides:
    values read from an enclosing scope are sources, like initializers)."""
    with gc_paused_if_big(len(og)):  # see index_original
        return _trace_graphs(og, rg, max_region, index)


def _trace_graphs(og: Graph, rg: Graph, max_region: int, index: "_Original | None") -> Trace:
    orig = index if index is not None else _Original(og)
    order = rg.topological_order()
    # Most nodes stand as they were: each is a cluster of its own (it reads and makes only values
    # the original has, so no clustering rule joins it to anything), traced without a walk.
    unchanged = {node.id: fusion for node in order if (fusion := _unchanged(orig, node)) is not None}
    clusters, helpers, extra = _clusters(og, rg, [n for n in order if n.id not in unchanged])
    trace = Trace()
    covered: set[int] = set()
    for members in helpers.values():
        trace.inserted.extend((n.domain, n.op_type, n.name) for n in members)
    # every cluster where its first node stands in the graph's order, as grouping them gave it
    first_of = {members[0].id: root for root, members in clusters.items()}
    groups = [[node] if node.id in unchanged else clusters[first_of[node.id]]
              for node in order if node.id in unchanged or node.id in first_of]
    fusions = [unchanged[members[0].id] if members[0].id in unchanged
               else _trace_cluster(orig, rg, members, max_region, extra.get(first_of[members[0].id], set()))
               for members in groups]
    # An original op that still stands unchanged in the rewritten graph was not absorbed by a
    # rewrite whose walk also reached it (e.g. a Shape moved from a Conv's output to its input).
    kept = {i for f in fusions if f.kind == "unchanged" for i in f.absorbed}
    for fusion, members in zip(fusions, groups):
        if fusion.kind not in ("unchanged", "untraced") and kept.intersection(fusion.absorbed):
            path = [i for i in fusion.absorbed if i not in kept]
            if path:
                fusion.folded += [i for i in fusion.absorbed if i in kept]
                fusion.absorbed = path
                fusion.absorbed_ops = [og.node(i).op_type for i in path]
                fusion.kind = _kind([(og.node(i).domain, og.node(i).op_type) for i in path], fusion.new_ops)
        if fusion.kind == "untraced":
            trace.inserted.extend((n.domain, n.op_type, n.name) for n in members)
        covered.update(fusion.absorbed)
        trace.fusions.append(fusion)
    for node in og.nodes():
        if node.id not in covered:
            trace.removed[node.op_type] += 1
    return trace


def _walk_back(orig: _Original, outputs: list[str], stops: set[int], max_region: int,
               through_shapes: bool) -> dict[int, Node] | None:
    """Original nodes between ``outputs`` and the ``stops`` (value numbers); None when the walk
    reaches a graph input outside the stops (the boundary was lost) or grows past ``max_region``."""
    og = orig.graph
    region: dict[int, Node] = {}
    stack = [p for p in (og.producer(v) for v in outputs) if p is not None]
    while stack:
        node = stack.pop()
        if node.id in region:
            continue
        region[node.id] = node
        if len(region) > max_region:
            return None
        if not through_shapes and node.op_type in METADATA_OPS:
            continue
        for v in node.inputs:
            if not v or orig.num(v) in stops:
                continue
            if og.is_input(v) and v not in orig.constant:
                return None  # the walk escaped the cluster's inputs: boundary renamed
            if not orig.is_source(v):
                stack.append(og.producer(v))
    return region


def _is_layout_plumbing(domain: str, op_type: str) -> bool:
    """NCHWc reorders only move data between layouts; they do not count as computing ops."""
    return domain == "com.microsoft.nchwc" and op_type.startswith("Reorder")


def _unchanged(orig: _Original, node: Node) -> Fusion | None:
    """A node that stands in the original as it is (same op, same outputs, inputs holding the same
    values): most nodes of an optimized graph. The general walk gives the same answer, ~5x slower."""
    og = orig.graph
    data = node.graph._node[node.id]  # the op records (graphtool.ir.records.OpData): io is inputs, then outputs
    io, n_in = data.io, data.n_in
    first = next((v for v in io[n_in:] if v), None)
    before = og.producer(first) if first is not None else None
    if before is None:
        return None
    then = og._node[before.id]
    op_type, domain = data.op_type, data.domain
    if (then.op_type != op_type or then.domain != domain or domain == "com.microsoft.nchwc"
            or then.io[then.n_in:] != io[n_in:] or then.n_in != n_in
            or (node.id in node.graph._owners and node.subgraphs())):
        return None
    for a, b in zip(io[:n_in], then.io[:n_in]):
        if a != b and (not a or not b or not og.has_value(a) or orig.num(a) != orig.num(b)):
            return None
    new_ops = [("" if domain == "ai.onnx" else domain, op_type)]
    return Fusion(new_ops, [data.name], [before.id], [op_type], [], "unchanged", Counter(), [node.id])


def _trace_cluster(orig: _Original, rg: Graph, members: list[Node], max_region: int,
                   helper_inputs: Iterable[str] = ()) -> Fusion:
    if len(members) == 1 and not helper_inputs:
        fast = _unchanged(orig, members[0])
        if fast is not None:
            return fast
    og = orig.graph
    ids = {n.id for n in members}
    new_ops = [("" if n.domain == "ai.onnx" else n.domain, n.op_type) for n in members]
    names = [n.name for n in members]
    outputs = [v for n in members for v in n.outputs if v and og.has_value(v)]
    stops: set[int] = set()
    dynamic: set[int] = set()
    boundary = [v for n in members for v in n.inputs] + sorted(helper_inputs)
    for v in boundary:
        producer = rg.producer(v) if v else None
        if not v or (producer is not None and producer.id in ids) or not og.has_value(v):
            continue
        stops.add(orig.num(v))
        if v not in orig.constant and not (rg.is_initializer(v) and not rg.is_input(v)):
            dynamic.add(orig.num(v))
    limit = max_region + 16 * len(members)
    region = _walk_back(orig, outputs, stops, limit, through_shapes=True)
    if region is None:
        # A rewrite may read the shape of another tensor proven to have the same dims (shape
        # inference); the tensor a Shape op reads is then no part of what was rewritten.
        region = _walk_back(orig, outputs, stops, limit, through_shapes=False)
    if not region:
        return Fusion(new_ops, names, [], [], [], "untraced", new_ids=[n.id for n in members])
    ordered = sorted(region.values(), key=lambda n: orig.position[n.id])
    data_path: list[Node] = []
    fed: set[int] = set(dynamic)
    # A shape computation the rewrite replaced by a constant is folded, not fused — unless the
    # rewrite itself reads shapes (then the Shape ops are part of what it rewrote).
    cut = METADATA_OPS if not any(n.op_type in METADATA_OPS for n in members) else set()
    for node in ordered:
        if node.op_type not in cut and any(orig.num(v) in fed for v in node.inputs if v):
            data_path.append(node)
            fed.update(orig.num(v) for v in node.outputs if v)
    if not data_path:
        data_path = [n for n in ordered if n.op_type != "Constant"] or ordered
    path_ids = {n.id for n in data_path}
    folded = [n.id for n in ordered if n.id not in path_ids]
    absorbed_ops = [n.op_type for n in data_path]
    kind = _kind([(n.domain, n.op_type) for n in data_path], new_ops)
    details = Counter(d for d in (_fused_inside(n) for n in members) if d)
    return Fusion(new_ops, names, [n.id for n in data_path], absorbed_ops, folded, kind, details, [n.id for n in members])


def _fused_inside(node: Node) -> str:
    """What one node of a layout cluster fused in through attributes and extra inputs: an NCHWc
    Conv carries its activation as an attribute and the residual Sum as a 4th input."""
    if node.domain != "com.microsoft.nchwc" or node.op_type != "Conv":
        return ""
    ops = ["Conv"]
    inputs = node.inputs
    if len(inputs) > 3 and inputs[3]:
        ops.append("Sum")
    activation = node.attr("activation")
    if activation:
        ops.append(activation.decode() if isinstance(activation, bytes) else str(activation))
    return "+".join(ops) + " → nchwc.Conv"


def _kind(old_ops: list[tuple[str, str]], new_ops: list[tuple[str, str]]) -> str:
    before = sorted((d or "ai.onnx", o) for d, o in old_ops)
    after = sorted((d or "ai.onnx", o) for d, o in new_ops)
    compute = [op for op in new_ops if not _is_layout_plumbing(*op)]
    if before == after:
        return "unchanged"  # the same ops, at most with renamed values between them
    if len(old_ops) > len(compute):
        return "fused"
    if len(old_ops) == len(compute):
        return "replaced"
    return "expanded"  # one op became several: a function inlined, an op decomposed


def group_fusions(fusions: list[Fusion], extra: Callable[[Fusion], dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    groups: dict[str, dict[str, Any]] = {}
    for f in fusions:
        entry = groups.setdefault(f.pattern, {
            "pattern": f.pattern,
            "kind": f.kind,
            "from": f.absorbed_ops,
            "to": [{"domain": d or "ai.onnx", "op_type": o} for d, o in f.new_ops],
            "count": 0,
            "examples": [],
        })
        entry["count"] += 1
        if len(entry["examples"]) < MAX_EXAMPLES:
            shown = [n or "(unnamed)" for n in f.new_names[:MAX_EXAMPLES]]
            more = len(f.new_names) - len(shown)
            entry["examples"].append(" + ".join(shown) + (f" + {more} more" if more > 0 else ""))
        if f.details:
            details = entry.setdefault("details", {})
            for key, n in f.details.items():
                details[key] = details.get(key, 0) + n
        if extra is not None:
            for key, value in extra(f).items():
                bucket = entry.setdefault(key, [])
                if value and value not in bucket:
                    bucket.append(value)
    return sorted(groups.values(), key=lambda g: (-g["count"], g["pattern"]))
