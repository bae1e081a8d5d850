"""Models the diff and render tests share: scrambled copies, a hand edit, hostile names."""

from __future__ import annotations

import random

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from graphtool import io
from graphtool.ir.model import Model

# Names a picture must show as text and never interpret: DOT syntax, escString escapes
# (\N is the node's id to dot), HTML/XML markup and entities, control characters, unicode.
EVIL = [
    'quote"name',
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(2)>",
    "line1\nline2",
    "ünïcødé ☃ 😀 \u2028sep",
    "back\\slash \\N \\G \\l end\\",
    "{braces} [brackets] |pipe| ;semi",
    "&amp; &lt; &#60; &",
    "--> ]]> <!-- ?>",
    "bell\x07ctl\x1b[31m",
    "it's <b>bold</b>",
]


def scramble(proto: onnx.ModelProto, seed: int = 0, keep_io: bool = True) -> onnx.ModelProto:
    """A copy with every node renamed, every internal value renamed (initializers and subgraph
    values too) and the node order of every graph shuffled. ``keep_io`` keeps the main graph's
    input and output names, which callers feed by name."""
    model = onnx.ModelProto()
    model.CopyFrom(proto)
    rng = random.Random(seed)
    inits = {t.name for t in model.graph.initializer}
    keep = set()
    if keep_io:
        keep = {i.name for i in model.graph.input if i.name not in inits} | {o.name for o in model.graph.output}
    mapping: dict[str, str] = {}

    def new(name: str) -> str:
        if not name or name in keep:
            return name
        if name not in mapping:
            mapping[name] = f"t{len(mapping)}_{rng.randrange(10**6)}"
        return mapping[name]

    def walk(graph: onnx.GraphProto) -> None:
        for tensor in graph.initializer:
            tensor.name = new(tensor.name)
        for table in (graph.input, graph.output, graph.value_info):
            for info in table:
                info.name = new(info.name)
        nodes = []
        for node in graph.node:
            copy = onnx.NodeProto()
            copy.CopyFrom(node)
            copy.name = f"node{rng.randrange(10**9)}"
            copy.input[:] = [new(v) for v in node.input]
            copy.output[:] = [new(v) for v in node.output]
            for attr in copy.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    walk(attr.g)
                for sub in attr.graphs:
                    walk(sub)
            nodes.append(copy)
        rng.shuffle(nodes)
        del graph.node[:]
        graph.node.extend(nodes)

    walk(model.graph)
    for fn in model.functions:  # function bodies: rename their values and nodes too
        body_map = {}
        for node in fn.node:
            node.name = f"fnode{rng.randrange(10**9)}"
            for k, v in enumerate(node.output):
                if v not in fn.output:
                    body_map[v] = f"f{len(body_map)}_{v[::-1]}"
                    node.output[k] = body_map[v]
        for node in fn.node:
            node.input[:] = [body_map.get(v, v) for v in node.input]
        nodes = list(fn.node)
        rng.shuffle(nodes)
        copies = [onnx.NodeProto() for _ in nodes]
        for c, n in zip(copies, nodes):
            c.CopyFrom(n)
        del fn.node[:]
        fn.node.extend(copies)
    return model


def hand_edit(model: Model) -> Model:
    """Three known edits on light_resnet50: one BatchNormalization removed (its consumer now
    reads the Conv), one Conv's pads changed, one Sigmoid inserted after a Relu."""
    g = model.graph
    bn = g.nodes("BatchNormalization")[5]
    g.replace_all_uses(bn.outputs[0], bn.inputs[0])
    g.remove_nodes([bn])
    g.set_attr(g.nodes("Conv")[10], "pads", [1, 1, 1, 1])
    relu = g.nodes("Relu")[20]
    sigmoid = g.add_node("Sigmoid", [relu.outputs[0]], 1, near=relu)
    for consumer, slot in g.uses(relu.outputs[0]):
        if consumer != sigmoid:
            g.set_input(consumer, slot, sigmoid.outputs[0])
    return model


def evil_model() -> onnx.ModelProto:
    """A valid model whose node, value, input/output names, dims and attributes are EVIL."""
    nodes = []
    prev = EVIL[1] + " input"
    for i, name in enumerate(EVIL):
        out = f"{name} v{i}"
        op = ("Relu", "Sigmoid", "Tanh", "Abs")[i % 4]
        nodes.append(helper.make_node(op, [prev], [out], name=name))
        prev = out
    nodes.append(helper.make_node("Add", [prev, EVIL[2] + " w"], [EVIL[0] + " out"], name=""))
    nodes.append(helper.make_node("Shape", [EVIL[0] + " out"], ["shape <&>"], name="shape"))
    nodes.append(helper.make_node("Cast", ["shape <&>"], ["cast \\N out"], to=TensorProto.FLOAT, name=EVIL[5]))
    nodes.append(helper.make_node("Evil", ["cast \\N out"], ["custom out"], domain="evil.<dom>", name=EVIL[10],
                                  note=EVIL[1] + EVIL[5], tag=EVIL[3]))
    weight = numpy_helper.from_array(np.full((1, 4), 0.5, np.float32), EVIL[2] + " w")
    graph = helper.make_graph(
        nodes, 'graph <"evil">',
        [helper.make_tensor_value_info(EVIL[1] + " input", TensorProto.FLOAT, ['N<&">', 4])],
        [helper.make_tensor_value_info(EVIL[0] + " out", TensorProto.FLOAT, ['N<&">', 4]),
         helper.make_tensor_value_info("custom out", TensorProto.FLOAT, None)],
        [weight],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("evil.<dom>", 1)])


def load_evil() -> Model:
    return io.load_proto(evil_model())
