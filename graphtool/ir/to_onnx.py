"""IR → ModelProto. An untouched node is written from its original NodeProto, so a model that
no pass changed serializes to exactly the bytes ``onnx.load`` would give."""

from __future__ import annotations

from typing import Callable

from onnx import AttributeProto, FunctionProto, GraphProto, ModelProto, NodeProto, TensorProto, ValueInfoProto, helper

from graphtool.ir.from_onnx import gc_paused
from graphtool.ir.graph import Graph, Node
from graphtool.ir.model import Model
from graphtool.ir.tensor import Tensor

TensorWriter = Callable[[Tensor], TensorProto]


def _as_is(tensor: Tensor) -> TensorProto:
    return tensor.proto


def _inline_tensor(tensor: Tensor) -> TensorProto:
    return tensor.proto if tensor.external is None else helper.make_tensor(tensor.name, tensor.data_type, tensor.dims, tensor.raw_bytes(), raw=True)


def node_to_proto(node: Node, write_tensor: TensorWriter = _as_is) -> NodeProto:
    data = node._data
    inputs, outputs = node.inputs, node.outputs
    template: NodeProto | None = data["proto"]
    attrs = data["attrs"]
    has_subgraph = any(not isinstance(v, AttributeProto) for v in attrs.values())
    if (
        template is not None
        and not data["attrs_dirty"]
        and not has_subgraph
        and template.op_type == data["op_type"]
        and template.domain == data["domain"]
        and template.name == data["name"]
        and list(template.input) == inputs
        and list(template.output) == outputs
    ):
        return template
    proto = NodeProto()
    if template is not None:
        proto.CopyFrom(template)
        del proto.input[:]
        del proto.output[:]
        del proto.attribute[:]
    if proto.op_type != data["op_type"]:
        proto.op_type = data["op_type"]
    if proto.domain != data["domain"]:
        proto.domain = data["domain"]
    if proto.name != data["name"]:
        proto.name = data["name"]
    proto.input.extend(inputs)
    proto.output.extend(outputs)
    originals = {a.name: a for a in template.attribute} if template is not None else {}
    for key, value in attrs.items():
        if isinstance(value, AttributeProto):
            proto.attribute.append(value)
            continue
        attr = proto.attribute.add()
        if key in originals:
            attr.CopyFrom(originals[key])
            attr.ClearField("g")
            del attr.graphs[:]
        else:
            attr.name = key
            attr.type = AttributeProto.GRAPH if isinstance(value, Graph) else AttributeProto.GRAPHS
        if isinstance(value, Graph):
            graph_to_proto(value, write_tensor, into=attr.g)
        else:
            for sub in value:
                graph_to_proto(sub, write_tensor, into=attr.graphs.add())
    return proto


def _value_info(name: str, info: ValueInfoProto | None) -> ValueInfoProto:
    return info if info is not None else ValueInfoProto(name=name)


def graph_to_proto(graph: Graph, write_tensor: TensorWriter = _as_is, into: GraphProto | None = None,
                   initializers: bool = True) -> GraphProto:
    out = into if into is not None else GraphProto()
    if graph.proto_shell is not None:
        out.CopyFrom(graph.proto_shell)
    elif graph.name:
        out.name = graph.name
    out.node.extend(node_to_proto(n, write_tensor) for n in graph.topological_order())
    if initializers:
        out.initializer.extend(write_tensor(t) for t in graph.initializers.values())
    out.input.extend(_value_info(k, v) for k, v in graph.inputs.items())
    if not graph.overridable_initializers and graph.parent is None:
        # IR < 4: every initializer must also be a graph input (passes add initializers freely)
        out.input.extend(
            helper.make_tensor_value_info(name, t.data_type, t.dims)
            for name, t in graph.initializers.items() if name not in graph.inputs
        )
    out.output.extend(_value_info(k, v) for k, v in graph.outputs.items())
    out.value_info.extend(graph.value_info.values())
    return out


def function_to_proto(body: Graph, shell: FunctionProto) -> FunctionProto:
    out = FunctionProto()
    out.CopyFrom(shell)
    # functions have no initializers: constants a pass added become Constant nodes
    out.node.extend(
        helper.make_node("Constant", [], [name], value=_inline_tensor(t)) for name, t in body.initializers.items()
    )
    out.node.extend(node_to_proto(n) for n in body.topological_order())
    out.input.extend(body.inputs)
    out.output.extend(body.outputs)
    out.value_info.extend(body.value_info.values())
    return out


def to_onnx(model: Model, write_tensor: TensorWriter = _as_is, main_initializers: bool = True) -> ModelProto:
    """The ModelProto for ``model``; ``write_tensor`` decides how each initializer is stored
    (as it is, or redirected to an external-data file while saving). Without
    ``main_initializers`` the main graph's weights are left out (``stream`` writes them)."""
    out = ModelProto()
    out.CopyFrom(model.proto_shell)
    with gc_paused():
        graph_to_proto(model.graph, write_tensor, into=out.graph, initializers=main_initializers)
        out.functions.extend(function_to_proto(fn.body, fn.proto_shell) for fn in model.functions)
    return out
