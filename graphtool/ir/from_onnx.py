"""ModelProto → IR. The only place (with ``to_onnx``) that knows the protobuf layout.

Each op keeps its original NodeProto as a template (serialized) and each graph a "shell" of the
fields the IR does not model, so ``to_onnx`` can write back an untouched model byte for byte.
Nothing in the IR points into the parsed ModelProto afterwards (except big initializers), so the
parse is freed once the IR is built.
"""

from __future__ import annotations

import contextlib
import gc
import sys
from typing import Any, Iterable, Iterator


from onnx import (AttributeProto, FunctionProto, GraphProto, ModelProto, NodeProto, SparseTensorProto, TensorProto,
                  TypeProto)

from graphtool.errors import BadModel
from graphtool.ir.graph import CAPTURE, NO_ATTRS, Graph
from graphtool.ir.model import Function, Model
from graphtool.ir.protos import shell_of
from graphtool.ir.tensor import Tensor, check_tensor, is_external, resolve_external



# Initializers are copied out of the parsed model when they total at most this (so the parse can
# be freed); bigger ones stay views into it: there the weights are the parse, and a copy would
# double the peak.
COPY_TENSORS_BYTES = 64 << 20
_ELEM_TYPES = frozenset(TensorProto.DataType.values())
_ATTR_TYPES = frozenset(AttributeProto.AttributeType.values()) - {AttributeProto.UNDEFINED}


def check_value_type(tp: TypeProto, name: str) -> None:
    """Refuse an element type no ONNX version defines (every dtype table downstream raises on it)."""
    which = tp.WhichOneof("value")
    if which in ("tensor_type", "sparse_tensor_type"):
        elem = getattr(tp, which).elem_type
        if elem not in _ELEM_TYPES:
            raise BadModel(f"value '{name}' has an unknown element type {elem}")
    elif which == "sequence_type":
        check_value_type(tp.sequence_type.elem_type, name)
    elif which == "optional_type":
        check_value_type(tp.optional_type.elem_type, name)
    elif which == "map_type":
        if tp.map_type.key_type not in _ELEM_TYPES:
            raise BadModel(f"value '{name}' has an unknown map key type {tp.map_type.key_type}")
        check_value_type(tp.map_type.value_type, name)


class _Loader:
    def __init__(self, base_dir: str | None):
        self.base_dir = base_dir

    def tensor(self, proto: TensorProto) -> Tensor:
        check_tensor(proto)
        if is_external(proto):
            if self.base_dir is None:
                raise BadModel(f"tensor '{proto.name}' uses external data but the model has no folder")
            return Tensor(proto, resolve_external(proto, self.base_dir))
        return Tensor(proto)

    def sparse(self, proto: SparseTensorProto) -> None:
        """Sparse tensors stay protos, but their parts get the same size and path guard: onnx and
        onnxruntime would otherwise follow an external location we never checked."""
        self.tensor(proto.values)
        if proto.HasField("indices"):
            self.tensor(proto.indices)

    def graph(self, proto: GraphProto, parent: Graph | None, ir_version: int,
              nodes: Iterable[NodeProto] | None = None) -> Graph:
        graph = Graph(proto.name, parent)
        graph.proto_shell = shell_of(proto, ("node", "initializer", "input", "output", "value_info"))
        graph.overridable_initializers = ir_version >= 4
        # The IR keeps its own copies of the protos it holds on to (value infos; initializers
        # unless they are most of the model): a view into the parsed model would keep all of it
        # alive, ~360 bytes per node after the nodes themselves are in the IR (issue 19).
        own = GraphProto()
        own.input.extend(proto.input)
        own.output.extend(proto.output)
        own.value_info.extend(proto.value_info)
        tensors = proto.initializer
        if sum(t.ByteSize() for t in tensors) <= COPY_TENSORS_BYTES:
            own.initializer.extend(tensors)
            tensors = own.initializer
        add_value = graph._add_value
        for tensor in tensors:
            if tensor.name in graph.initializers:
                raise BadModel(f"initializer '{tensor.name}' is defined twice")
            graph.initializers[tensor.name] = self.tensor(tensor)
            add_value(tensor.name)
        for sparse in proto.sparse_initializer:
            self.sparse(sparse)
            graph.sparse_initializers.add(sparse.values.name)
            add_value(sparse.values.name)
        for info in (*own.input, *own.output, *own.value_info):
            check_value_type(info.type, info.name)
        for info in own.input:
            graph.inputs[info.name] = info
            add_value(info.name)
        for info in own.output:
            if info.name in graph.outputs:
                raise BadModel(f"graph '{proto.name}' lists output '{info.name}' twice")
            graph.outputs[info.name] = info
            add_value(info.name)
        for info in own.value_info:
            graph.value_info[info.name] = info
        self.nodes(graph, proto.node if nodes is None else nodes, ir_version)
        self.check_defined(graph, f"graph '{proto.name}'")
        return graph

    def nodes(self, graph: Graph, nodes: Iterable[NodeProto], ir_version: int) -> None:
        """Each op keeps its NodeProto serialized (``OpData.template``; ~24 bytes for a Relu)
        and its attributes unparsed until a pass reads them; ops with subgraphs keep a parsed
        copy without the bodies, which become nested ``Graph``s."""
        current: list[Any] = [None]

        def records() -> Iterator[tuple]:
            intern = sys.intern
            for index, node in enumerate(nodes):
                current[0] = node
                op_type = node.op_type
                if not op_type:
                    raise BadModel(f"node {index} ('{node.name}') has no op_type")
                if len(node.attribute):
                    attrs, template = self.attributes(graph, node, ir_version)
                else:
                    attrs, template = NO_ATTRS, node.SerializeToString()
                yield intern(op_type), intern(node.domain), node.name, attrs, template, tuple(node.input), \
                    tuple(node.output)

        try:
            graph._load_ops(records())
        except ValueError as err:
            node = current[0]
            raise BadModel(f"node '{node.name or node.op_type}': {err}") from None

    def attributes(self, graph: Graph, node: NodeProto, ir_version: int) -> tuple[dict[str, Any] | None, Any]:
        """(attrs, template) of an op with attributes: (None, its bytes) when it has no
        subgraph; else the attribute dict with nested ``Graph``s and a parsed template whose
        graph attributes are emptied (``to_onnx`` writes the bodies back from the IR)."""
        bodies: dict[str, Any] = {}
        for attr in node.attribute:
            if attr.type not in _ATTR_TYPES:  # onnx's checker and onnxruntime refuse these too
                raise BadModel(f"node '{node.name or node.op_type}': attribute '{attr.name}' has no valid type "
                               f"({attr.type})")
            if attr.type == AttributeProto.GRAPH:
                bodies[attr.name] = self.graph(attr.g, graph, ir_version)
            elif attr.type == AttributeProto.GRAPHS:
                bodies[attr.name] = [self.graph(sub, graph, ir_version) for sub in attr.graphs]
            elif attr.type == AttributeProto.TENSOR and not attr.ref_attr_name:
                self.tensor(attr.t)  # size and path guard only; Constant keeps its proto
            elif attr.type == AttributeProto.TENSORS:
                for t in attr.tensors:
                    self.tensor(t)
            elif attr.type == AttributeProto.SPARSE_TENSOR and not attr.ref_attr_name:
                self.sparse(attr.sparse_tensor)
            elif attr.type == AttributeProto.SPARSE_TENSORS:
                for sparse in attr.sparse_tensors:
                    self.sparse(sparse)
        if not bodies:
            return None, node.SerializeToString()
        shell = NodeProto()
        shell.CopyFrom(node)
        attrs: dict[str, Any] = {}
        for attr in shell.attribute:
            if attr.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS):
                attr.ClearField("g")
                del attr.graphs[:]
            attrs[attr.name] = attr
        for name, body in bodies.items():
            attrs[name] = body
        return attrs, shell

    def check_defined(self, graph: Graph, where: str) -> None:
        """Every value must come from somewhere: a producer, an input, an initializer, or — in a
        subgraph — an enclosing scope (checked when the parent is checked)."""
        if graph.parent is not None:
            return
        for value in [v for v, producers in graph._pred.items() if type(v) is str and not producers]:
            if graph.is_free(value):
                user = next(iter(graph.nx.successors(value)), None)
                via = ""
                if user is not None:
                    data = graph.nx.nodes[user]
                    kind = " (inside its subgraph)" if graph.nx.has_edge(value, user, key=CAPTURE) else ""
                    via = f" used by node '{data['name'] or data['op_type']}'{kind}"
                if graph.is_output(value) and user is None:
                    raise BadModel(f"{where}: output '{value}' is not produced by any node")
                raise BadModel(f"{where}: value '{value}'{via} is never defined")
        try:
            for scope in graph.walk():  # subgraphs too: a capture can close a cycle inside one
                scope.topological_order()
        except ValueError as err:
            raise BadModel(f"{where}: {err}") from None

    def function(self, proto: FunctionProto, ir_version: int) -> Function:
        body = Graph(proto.name)
        body.proto_shell = shell_of(proto, ("node", "input", "output", "value_info"))
        for name in proto.input:
            body.inputs[name] = None
            body._add_value(name)
        for name in proto.output:
            body.outputs[name] = None
            body._add_value(name)
        own = FunctionProto()
        own.value_info.extend(proto.value_info)
        for info in own.value_info:
            check_value_type(info.type, info.name)
            body.value_info[info.name] = info
        self.nodes(body, proto.node, ir_version)
        self.check_defined(body, f"function '{proto.domain}:{proto.name}'")
        return Function(body, shell_of(proto, ("node", "input", "output", "value_info")))


# From this many nodes a whole-graph job keeps the collector off the model's objects
# (``gc_frozen``, ``gc_paused_if_big``): on a 200k-node graph, full collections walking the model
# cost 40% of the passes' time. Not below: a collection during a freeze forgets how big the heap
# is, so the first one after costs a walk of all of it — nothing on one big model, a lot for
# thousands of small ones in one process.
FREEZE_NODES = 20_000


def gc_paused_if_big(nodes: int) -> contextlib.AbstractContextManager:
    """``gc_paused`` for a job over ``nodes`` nodes that makes objects living as long as the model
    (a diff's tables, a trace's fusions), from ``FREEZE_NODES`` on; nothing below."""
    return gc_paused() if nodes >= FREEZE_NODES else contextlib.nullcontext()


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while building or writing a whole model.

    A 100k-node graph is millions of small dicts; the collector would rescan them again and
    again while they are being created (load took 2x longer at 100k nodes). Nothing made here
    is garbage, so pausing loses nothing; the previous state is restored on exit.

    On exit the new objects are filed straight into the oldest generation (freeze + unfreeze),
    so the next collections do not scan a million fresh dicts three times over (that cost 1.4 s,
    paid by whatever ran after a 100k-node load). Skipped when the application froze objects
    itself, since unfreeze would release those too.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            if gc.get_freeze_count() == 0:
                gc.freeze()
                gc.unfreeze()
            gc.enable()


@contextlib.contextmanager
def gc_frozen() -> Iterator[None]:
    """Keep the cyclic collector off the objects that exist now, for the block's duration.

    The IR of a big model is millions of tracked containers that the block (a pass manager
    run, an analysis) keeps alive anyway; a full collection during it would walk all of them
    (1.6 s per collection on a million-node graph) to find nothing. Frozen, they are skipped;
    objects the block makes are collected as usual, and ``unfreeze`` gives the old ones back to
    the collector afterwards, so nothing is kept past its time. A no-op when something froze
    objects already (an outer ``gc_frozen``, or the application itself).
    """
    if gc.get_freeze_count():
        yield
        return
    thresholds = gc.get_threshold()
    gc.freeze()
    # Young collections stay, less often: a pass that lists a million nodes makes a million
    # handles, and at the default 700 allocations the collector would walk that growing list
    # ~20 times (its full collections see a small heap while the model is frozen).
    gc.set_threshold(max(thresholds[0], YOUNG_THRESHOLD_FROZEN), *thresholds[1:])
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()


YOUNG_THRESHOLD_FROZEN = 100_000


def from_onnx(proto: ModelProto, base_dir: str | None = None, main_nodes: Iterable[NodeProto] | None = None) -> Model:
    """Build the IR. Raises BadModel/UnsafePath for models that cannot be represented safely.
    ``main_nodes``: the main graph's nodes, when ``proto`` holds them elsewhere (``io.load``
    parses a huge graph's nodes in chunks)."""
    with gc_paused():
        try:
            return _from_onnx(proto, base_dir, main_nodes)
        except UnicodeDecodeError:
            # proto2 strings are not validated by the parser; Python decodes them on access
            raise BadModel("a name or string field of the model is not valid UTF-8") from None


def _from_onnx(proto: ModelProto, base_dir: str | None, main_nodes: Iterable[NodeProto] | None = None) -> Model:
    if not proto.HasField("graph"):
        raise BadModel("the file holds no graph (not an ONNX model?)")
    if proto.ir_version <= 0:
        raise BadModel(f"IR version {proto.ir_version} is not valid")
    loader = _Loader(base_dir)
    graph = loader.graph(proto.graph, None, proto.ir_version, main_nodes)
    functions = [loader.function(fn, proto.ir_version) for fn in proto.functions]
    shell = shell_of(proto, ("graph", "functions"))
    return Model(graph=graph, proto_shell=shell, functions=functions, base_dir=base_dir)
