"""ModelProto → IR. The only place (with ``to_onnx``) that knows the protobuf layout.

Each op keeps its original NodeProto as a template and each graph a "shell" of the fields the IR
does not model, so ``to_onnx`` can write back an untouched model byte for byte.
"""

from __future__ import annotations

import contextlib
import gc
from typing import Any, Iterable, Iterator


from onnx import (AttributeProto, FunctionProto, GraphProto, ModelProto, NodeProto, SparseTensorProto, TensorProto,
                  TypeProto)

from graphtool.errors import BadModel
from graphtool.ir.graph import CAPTURE, Graph
from graphtool.ir.model import Function, Model
from graphtool.ir.protos import shell_of
from graphtool.ir.tensor import Tensor, check_tensor, is_external, resolve_external



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

    def graph(self, proto: GraphProto, parent: Graph | None, ir_version: int) -> Graph:
        graph = Graph(proto.name, parent)
        graph.proto_shell = shell_of(proto, ("node", "initializer", "input", "output", "value_info"))
        graph.overridable_initializers = ir_version >= 4
        g = graph.nx
        for tensor in proto.initializer:
            if tensor.name in graph.initializers:
                raise BadModel(f"initializer '{tensor.name}' is defined twice")
            graph.initializers[tensor.name] = self.tensor(tensor)
            g.add_node(tensor.name)
        for sparse in proto.sparse_initializer:
            self.sparse(sparse)
            graph.sparse_initializers.add(sparse.values.name)
            g.add_node(sparse.values.name)
        for info in (*proto.input, *proto.output, *proto.value_info):
            check_value_type(info.type, info.name)
        for info in proto.input:
            graph.inputs[info.name] = info
            g.add_node(info.name)
        for info in proto.output:
            if info.name in graph.outputs:
                raise BadModel(f"graph '{proto.name}' lists output '{info.name}' twice")
            graph.outputs[info.name] = info
            g.add_node(info.name)
        for info in proto.value_info:
            graph.value_info[info.name] = info
        self.nodes(graph, proto.node, ir_version)
        self.check_defined(graph, f"graph '{proto.name}'")
        return graph

    def nodes(self, graph: Graph, nodes: Iterable[NodeProto], ir_version: int) -> None:
        for index, node in enumerate(nodes):
            if not node.op_type:
                raise BadModel(f"node {index} ('{node.name}') has no op_type")
            attrs: dict[str, Any] = {}
            for attr in node.attribute:
                if attr.type not in _ATTR_TYPES:  # onnx's checker and onnxruntime refuse these too
                    raise BadModel(f"node '{node.name or node.op_type}': attribute '{attr.name}' has no valid type "
                                   f"({attr.type})")
                if attr.type == AttributeProto.GRAPH:
                    attrs[attr.name] = self.graph(attr.g, graph, ir_version)
                elif attr.type == AttributeProto.GRAPHS:
                    attrs[attr.name] = [self.graph(sub, graph, ir_version) for sub in attr.graphs]
                else:
                    if attr.type == AttributeProto.TENSOR and not attr.ref_attr_name:
                        self.tensor(attr.t)  # size and path guard only; Constant keeps its proto
                    elif attr.type == AttributeProto.TENSORS:
                        for t in attr.tensors:
                            self.tensor(t)
                    elif attr.type == AttributeProto.SPARSE_TENSOR and not attr.ref_attr_name:
                        self.sparse(attr.sparse_tensor)
                    elif attr.type == AttributeProto.SPARSE_TENSORS:
                        for sparse in attr.sparse_tensors:
                            self.sparse(sparse)
                    attrs[attr.name] = attr
            node_id = graph._new_op(node.op_type, node.domain, node.name, attrs, node, (index, 0))
            try:
                graph._connect(node_id, list(node.input), list(node.output))
            except ValueError as err:
                raise BadModel(f"node '{node.name or node.op_type}': {err}") from None

    def check_defined(self, graph: Graph, where: str) -> None:
        """Every value must come from somewhere: a producer, an input, an initializer, or — in a
        subgraph — an enclosing scope (checked when the parent is checked)."""
        if graph.parent is not None:
            return
        for value in graph.values():
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
            body.nx.add_node(name)
        for name in proto.output:
            body.outputs[name] = None
            body.nx.add_node(name)
        for info in proto.value_info:
            check_value_type(info.type, info.name)
            body.value_info[info.name] = info
        self.nodes(body, proto.node, ir_version)
        self.check_defined(body, f"function '{proto.domain}:{proto.name}'")
        return Function(body, shell_of(proto, ("node", "input", "output", "value_info")))


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


def from_onnx(proto: ModelProto, base_dir: str | None = None) -> Model:
    """Build the IR. Raises BadModel/UnsafePath for models that cannot be represented safely."""
    with gc_paused():
        try:
            return _from_onnx(proto, base_dir)
        except UnicodeDecodeError:
            # proto2 strings are not validated by the parser; Python decodes them on access
            raise BadModel("a name or string field of the model is not valid UTF-8") from None


def _from_onnx(proto: ModelProto, base_dir: str | None) -> Model:
    if not proto.HasField("graph"):
        raise BadModel("the file holds no graph (not an ONNX model?)")
    if proto.ir_version <= 0:
        raise BadModel(f"IR version {proto.ir_version} is not valid")
    loader = _Loader(base_dir)
    graph = loader.graph(proto.graph, None, proto.ir_version)
    functions = [loader.function(fn, proto.ir_version) for fn in proto.functions]
    shell = shell_of(proto, ("graph", "functions"))
    return Model(graph=graph, proto_shell=shell, functions=functions, base_dir=base_dir)
