"""IR → ModelProto. An untouched node is written from its original NodeProto, so a model that
no pass changed serializes to exactly the bytes ``onnx.load`` would give.

The main path builds the serialized model directly (``model_bytes``): an untouched op's record
is its template's bytes, framed as field 1 of the GraphProto, so saving a million-node model
builds no NodeProto at all. This relies on protobuf writing a message's fields in field-number
order (``GraphProto.node`` is field 1: the nodes come first), as ``stream`` does for
initializers. ``to_onnx`` parses those bytes once when a caller wants the ModelProto.
"""

from __future__ import annotations

from typing import Callable, Iterable

from onnx import AttributeProto, FunctionProto, GraphProto, ModelProto, NodeProto, TensorProto, ValueInfoProto, helper

from graphtool.ir.from_onnx import gc_paused
from graphtool.ir.graph import EDITED, Graph, Node, OpData
from graphtool.ir.model import Model
from graphtool.ir.protos import GRAPH_INITIALIZER_FIELD, MODEL_GRAPH_FIELD, _read_varint, key, record, split_at_field, varint
from graphtool.ir.tensor import Tensor
from graphtool.ir.value_infos import GRAPH_VALUE_INFO_FIELD, as_proto
from graphtool.ir.value_infos import records as value_info_records

TensorWriter = Callable[[Tensor], TensorProto]
_NODE_KEY = key(1)  # GraphProto.node
_INITIALIZER_KEY = key(GRAPH_INITIALIZER_FIELD)
_FRAME = [_NODE_KEY + bytes([n]) for n in range(128)]  # key + one-byte length


def _as_is(tensor: Tensor) -> TensorProto:
    return tensor.proto


def _inline_tensor(tensor: Tensor) -> TensorProto:
    return tensor.proto if tensor.external is None else helper.make_tensor(tensor.name, tensor.data_type, tensor.dims, tensor.raw_bytes(), raw=True)


def _has_subgraph(data: OpData) -> bool:
    attrs = data._attrs
    return bool(attrs) and any(not isinstance(v, AttributeProto) for v in attrs.values())


def node_to_proto(node: Node, write_tensor: TensorWriter = _as_is) -> NodeProto:
    data = node._data
    template = data.template
    if not data.dirty and template is not None and not _has_subgraph(data):
        return NodeProto.FromString(template) if isinstance(template, bytes) else template
    if isinstance(template, bytes):
        template = NodeProto.FromString(template)
    attrs = data.attrs
    proto = NodeProto()
    if template is not None:
        proto.CopyFrom(template)
        del proto.input[:]
        del proto.output[:]
        del proto.attribute[:]
    if proto.op_type != data.op_type:
        proto.op_type = data.op_type
    if proto.domain != data.domain:
        proto.domain = data.domain
    if proto.name != data.name:
        proto.name = data.name
    proto.input.extend(data.inputs)
    proto.output.extend(data.outputs)
    originals = {a.name: a for a in template.attribute} if template is not None else {}
    for name, value in attrs.items():
        if isinstance(value, AttributeProto):
            proto.attribute.append(value)
            continue
        attr = proto.attribute.add()
        if name in originals:
            attr.CopyFrom(originals[name])
            attr.ClearField("g")
            del attr.graphs[:]
        else:
            attr.name = name
            attr.type = AttributeProto.GRAPH if isinstance(value, Graph) else AttributeProto.GRAPHS
        if isinstance(value, Graph):
            attr.g.ParseFromString(graph_bytes(value, write_tensor))
        else:
            for sub in value:
                attr.graphs.add().ParseFromString(graph_bytes(sub, write_tensor))
    return proto


def _node_bytes(node: Node, write_tensor: TensorWriter) -> bytes:
    data = node._data
    template = data.template
    if data.dirty != EDITED and template is not None and not _has_subgraph(data):
        body = template if isinstance(template, bytes) else template.SerializeToString()
        return _with_io(data, body) if data.dirty else body
    return node_to_proto(node, write_tensor).SerializeToString()


_INPUT_TAG, _OUTPUT_TAG = 0x0A, 0x12  # NodeProto.input (1), NodeProto.output (2), length-delimited


def _with_io(data: OpData, template: bytes) -> bytes:
    """``template`` (a serialized NodeProto) with the op's current inputs and outputs: they are
    its first records (fields 1 and 2, in field order), so the rest is reused as it is — what
    ``node_to_proto`` builds field by field, for an op whose edges alone were edited."""
    pos, end = 0, len(template)
    while pos < end and template[pos] in (_INPUT_TAG, _OUTPUT_TAG):
        length, pos = _read_varint(template, pos + 1)
        pos += length
    parts: list[bytes] = []
    for tag, names in ((_INPUT_TAG, data.io[: data.n_in]), (_OUTPUT_TAG, data.io[data.n_in:])):
        for name in names:
            raw = name.encode()
            parts.append(bytes((tag, len(raw))) if len(raw) < 128 else bytes((tag,)) + varint(len(raw)))
            parts.append(raw)
    parts.append(template[pos:])
    return b"".join(parts)


def _value_info(name: str, info: ValueInfoProto | None) -> ValueInfoProto:
    return info if info is not None else ValueInfoProto(name=name)


def node_records(graph: Graph, ids: Iterable[int], write_tensor: TensorWriter = _as_is) -> list[bytes]:
    """The ``GraphProto.node`` records of ops ``ids``, in that order (keys and bodies, alternating)."""
    parts: list[bytes] = []
    append, frame, records = parts.append, _FRAME, graph._node
    for i in ids:
        data = records[i]
        template = data.template
        if not data.dirty and type(template) is bytes and not _has_subgraph(data):
            body = template
        else:
            body = _node_bytes(Node(graph, i), write_tensor)
        size = len(body)
        append(frame[size] if size < 128 else _NODE_KEY + varint(size))
        append(body)
    return parts


def graph_pieces(graph: Graph, write_tensor: TensorWriter = _as_is) -> tuple[list[bytes], bytes, bytes]:
    """The serialized GraphProto without its initializers, in three parts: node records (field 1,
    which comes first), then the rest split where the initializer records (field 5) belong."""
    parts = node_records(graph, graph.topological_ids(), write_tensor)
    rest = GraphProto()
    if graph.proto_shell is not None:
        rest.CopyFrom(graph.proto_shell)
    elif graph.name:
        rest.name = graph.name
    rest.input.extend(_value_info(k, v) for k, v in graph.inputs.items())
    if not graph.overridable_initializers and graph.parent is None:
        # IR < 4: every initializer must also be a graph input (passes add initializers freely)
        rest.input.extend(
            helper.make_tensor_value_info(name, t.data_type, t.dims)
            for name, t in graph.initializers.items() if name not in graph.inputs
        )
    rest.output.extend(_value_info(k, v) for k, v in graph.outputs.items())
    head, tail = split_at_field(rest.SerializeToString(), GRAPH_INITIALIZER_FIELD)
    if graph.value_info:  # written as records where upb would write them: after the outputs
        before, after = split_at_field(tail, GRAPH_VALUE_INFO_FIELD - 1)
        tail = b"".join((before, value_info_records(graph.value_info.values()), after))
    return parts, head, tail


def tensor_record(proto: TensorProto) -> bytes:
    """One ``GraphProto.initializer`` record."""
    return record(_INITIALIZER_KEY, proto.SerializeToString())


def graph_bytes(graph: Graph, write_tensor: TensorWriter = _as_is, initializers: bool = True) -> bytes:
    """The serialized GraphProto (exactly ``graph_to_proto(graph).SerializeToString()``)."""
    parts, head, tail = graph_pieces(graph, write_tensor)
    parts.append(head)
    if initializers:
        parts.extend(tensor_record(write_tensor(t)) for t in graph.initializers.values())
    parts.append(tail)
    return b"".join(parts)


def graph_to_proto(graph: Graph, write_tensor: TensorWriter = _as_is, into: GraphProto | None = None,
                   initializers: bool = True) -> GraphProto:
    out = into if into is not None else GraphProto()
    out.ParseFromString(graph_bytes(graph, write_tensor, initializers))
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
    out.value_info.extend(as_proto(v) for v in body.value_info.values())
    return out


def model_frame(model: Model) -> tuple[bytes, bytes]:
    """The serialized model around its graph: (fields before ``graph``, fields after it)."""
    out = ModelProto()
    out.CopyFrom(model.proto_shell)
    out.functions.extend(function_to_proto(fn.body, fn.proto_shell) for fn in model.functions)
    return split_at_field(out.SerializeToString(), MODEL_GRAPH_FIELD)


def framed(head: bytes, graph: bytes, tail: bytes) -> bytes:
    """A serialized model from ``model_frame``'s two parts and a serialized GraphProto."""
    return b"".join((head, key(MODEL_GRAPH_FIELD), varint(len(graph)), graph, tail))


def model_bytes(model: Model, write_tensor: TensorWriter = _as_is, main_initializers: bool = True) -> bytes:
    """The serialized model (what ``to_onnx(model).SerializeToString()`` gives, without the proto)."""
    with gc_paused():
        head, tail = model_frame(model)
        graph = graph_bytes(model.graph, write_tensor, initializers=main_initializers)
    return framed(head, graph, tail)


def to_onnx(model: Model, write_tensor: TensorWriter = _as_is, main_initializers: bool = True) -> ModelProto:
    """The ModelProto for ``model``; ``write_tensor`` decides how each initializer is stored
    (as it is, or redirected to an external-data file while saving). Without
    ``main_initializers`` the main graph's weights are left out (``stream`` writes them)."""
    out = ModelProto.FromString(model_bytes(model, write_tensor, main_initializers=False))
    if main_initializers:  # added as protos, not parsed from bytes: big weights are copied once
        out.graph.initializer.extend(write_tensor(t) for t in model.graph.initializers.values())
    return out
