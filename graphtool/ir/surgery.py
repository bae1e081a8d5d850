"""The graph-editing verbs people reach for from onnx-graphsurgeon, on ``Graph``.

``GraphSurgery`` (a mixin ``Graph`` extends, like ``GraphEdits``) adds what a person editing a
model by hand asks for; passes keep to the small vocabulary of ``graph.py`` and ``edit.py``::

    g = m.graph
    conv = g.find(op_type="Conv")[0]                    # find by op type and/or node name
    relu = g.insert_after(conv.outputs[0], "Relu")      # a new node on an edge: its readers follow
    g.bypass(g.find(name="dropout")[0])                 # remove a node, its readers read its input
    g.replace_node(relu, "LeakyRelu", attrs={"alpha": 0.1})
    g.set_graph_outputs([relu.outputs[0]])              # choose the outputs (types inferred)
    g.cleanup().toposort()                              # drop what no output needs; check order
    sub = m.extract(["input"], [conv.outputs[0]])       # a new Model: the subgraph between tensors

Costs: ``insert_after``, ``bypass`` and ``replace_node`` are O(degree) of what they touch;
``find(name=...)``, ``cleanup``, ``toposort`` and ``extract`` walk the graph once (O(nodes + edges)),
and setting inputs or outputs asks the shape oracle for types the graph does not declare.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable

from onnx import TypeProto, ValueInfoProto, helper

from graphtool.ir.edit import GraphEdits
from graphtool.ir.records import Node

if TYPE_CHECKING:
    from graphtool.ir.graph import Graph


class GraphSurgery(GraphEdits):
    """Hand-editing verbs of ``Graph`` (see the module docstring for a session)."""

    def find(self, name: str | None = None, op_type: str | None = None) -> list[Node]:
        """Op nodes by ONNX node name and/or op type, in graph order.

        ``g.find(op_type="Conv")`` reads the per-type index; ``g.find(name="conv1")`` walks the ops
        (names need not be unique, so it is a list).

        >>> g.find(op_type="Softmax", name="attn/softmax")
        """
        graph: Graph = self  # type: ignore[assignment]
        candidates = graph.nodes(op_type) if op_type is not None else graph.nodes()
        if name is None:
            return candidates
        return [n for n in candidates if n.name == name]

    def insert_after(self, value: str, op_type: str, extra_inputs: Iterable[str] = (),
                     attrs: dict[str, Any] | None = None, domain: str = "", name: str = "",
                     readers: Iterable[Node] | None = None) -> Node:
        """Put a new ``op_type`` node on the edge leaving ``value``: it reads ``value`` (then
        ``extra_inputs``), and the readers of ``value`` — all of them, or only ``readers`` — read
        its output instead. A graph output named ``value`` becomes the new node's output.

        >>> g.insert_after("conv1_out", "Relu")
        """
        graph: Graph = self  # type: ignore[assignment]
        moving = list(graph.consumers(value)) if readers is None else list(readers)
        near = graph.producer(value)
        node = graph.add_node(op_type, [value, *extra_inputs], 1, attrs=attrs, domain=domain, name=name, near=near)
        new = node.outputs[0]
        for reader in moving:
            if reader == node:
                continue
            for slot, v in enumerate(reader.inputs):
                if v == value:
                    graph.set_input(reader, slot, new)
        if readers is None and graph.is_output(value):
            if near is None:  # an input or initializer that is also an output: the output moves
                self._swap_output(value, new)
            else:  # the graph output keeps its name, now made by the new node
                before = graph.fresh_name(value)
                graph.rename_value(value, before)
                self._swap_output(before, new)
                graph.rename_value(new, value)
        return node

    def bypass(self, node: Node, input_slot: int = 0) -> None:
        """Remove ``node``; readers of its first output read its input ``input_slot`` instead.

        Where that output is a graph output, the input takes the output's name when it is made by
        an op of this graph (so the model's interface keeps its names); otherwise the graph output
        becomes the input itself. Other outputs of ``node`` must be unread.

        >>> g.bypass(g.find(op_type="Dropout")[0])
        """
        graph: Graph = self  # type: ignore[assignment]
        source, out = node.inputs[input_slot], node.outputs[0]
        for other in node.outputs[1:]:
            if other and (graph.uses(other) or graph.is_output(other)):
                raise ValueError(f"cannot bypass '{node.name or node.op_type}': its output '{other}' is read")
        keep_name = graph.is_output(out)
        graph.replace_all_uses(out, source)
        graph.remove_nodes([node])
        if keep_name:
            maker = graph.producer(source)
            if maker is not None and not graph.is_output(source) and not graph.uses(source):
                graph.rename_value(source, out)
            else:
                self._swap_output(out, source)

    def replace_node(self, node: Node, op_type: str, inputs: Iterable[str] | None = None,
                     attrs: dict[str, Any] | None = None, domain: str | None = None,
                     name: str | None = None) -> Node:
        """A new ``op_type`` node in ``node``'s place, making the same output values (names, types
        and readers kept). Inputs, domain and name default to the old node's; attributes do not.

        >>> g.replace_node(relu, "LeakyRelu", attrs={"alpha": 0.1})
        """
        graph: Graph = self  # type: ignore[assignment]
        outputs = node.outputs
        ins = node.inputs if inputs is None else list(inputs)
        infos = {v: graph.value_info[v] for v in outputs if v in graph.value_info}
        dom = node.domain if domain is None else domain
        label = node.name if name is None else name
        graph.remove_nodes([node])
        new = graph.add_node(op_type, ins, outputs, attrs=attrs, domain=dom, name=label)
        for value, info in infos.items():
            graph.set_value_info(value, info)
        return new

    def set_graph_outputs(self, names: Iterable[str]) -> None:
        """Make ``names`` the graph's outputs, in this order. A value without a declared type gets
        the inferred one (the shape oracle); old outputs keep their types as value_info. Ops no
        output needs any more stay until ``cleanup()``.

        >>> g.set_graph_outputs(["logits", "hidden_7"])
        """
        graph: Graph = self  # type: ignore[assignment]
        wanted = list(dict.fromkeys(names))
        for v in wanted:
            if not graph.has_value(v):
                raise ValueError(f"no value named '{v}' in this graph")
        infos = {v: self._value_info_for(v) for v in wanted}
        for old, info in list(graph.outputs.items()):
            if old not in infos and info is not None and info.HasField("type"):
                graph.value_info[old] = info
        graph.outputs = infos
        for v in wanted:
            graph.value_info.pop(v, None)
        graph._edited()

    def set_graph_inputs(self, names: Iterable[str]) -> None:
        """Make ``names`` the graph's inputs, in this order. A value some op made is cut off from
        it (the op no longer makes it; ``cleanup()`` drops what is then dead). Old inputs not
        listed stop being inputs; ``cleanup()`` drops them when nothing reads them.

        >>> g.set_graph_inputs(["encoder_hidden"])
        """
        graph: Graph = self  # type: ignore[assignment]
        wanted = list(dict.fromkeys(names))
        for v in wanted:
            if not graph.has_value(v):
                raise ValueError(f"no value named '{v}' in this graph")
        infos = {v: graph.inputs.get(v) or self._value_info_for(v) for v in wanted}
        for v in wanted:
            maker = graph.producer(v)
            if maker is not None:
                outputs = maker.outputs
                slot = outputs.index(v)
                graph._detach_output(maker, slot)
            graph.value_info.pop(v, None)
        if not graph.overridable_initializers:  # IR < 4: every initializer is listed as an input too
            infos.update((k, info) for k, info in graph.inputs.items() if k in graph.initializers and k not in infos)
        graph.inputs = infos
        graph._edited()

    def cleanup(self) -> "Graph":
        """Remove the ops no graph output depends on, then initializers and value_info nothing
        reads and inputs nothing reads; returns the graph (``g.cleanup().toposort()``).

        Unlike the ``dead-code-elimination`` pass, unread graph inputs go too (graphsurgeon's
        ``cleanup`` does the same): after cutting a subgraph the old inputs are no longer its."""
        graph: Graph = self  # type: ignore[assignment]
        live, seen = live_nodes(graph)
        dead = [n for n in graph.nodes() if n.id not in live]
        if dead:
            graph.remove_nodes(dead)
        for name in [n for n in graph.initializers if n not in seen and not graph.is_output(n)]:
            if graph.is_input(name) and graph.overridable_initializers:
                continue
            graph.remove_initializer(name)
        for name in [n for n in graph.inputs if n not in seen and not graph.is_output(n)]:
            graph.remove_input(name)
        for name in [n for n in graph.value_info if not graph.has_value(n)]:
            del graph.value_info[name]
        graph._edited()
        return graph

    def toposort(self) -> "Graph":
        """Check the ops form a DAG (ValueError naming a node on a cycle) and return the graph.

        Saving always writes ops in a topological order (the file's own order wherever it still
        is one): ``g.topological_order()`` is that order."""
        graph: Graph = self  # type: ignore[assignment]
        graph.topological_ids()
        return graph

    # ------------------------------------------------------------------ helpers

    def _value_info_for(self, value: str) -> ValueInfoProto:
        """A ValueInfoProto for ``value``: its declared type, else the inferred one, else none."""
        graph: Graph = self  # type: ignore[assignment]
        declared = graph.declared_type(value)
        t: TypeProto | None = declared if declared is not None else graph.inferred_type(value)
        info = ValueInfoProto(name=value)
        if t is not None:
            info.type.CopyFrom(t)
        return info

    def _swap_output(self, old: str, new: str) -> None:
        """The graph output ``old`` becomes ``new`` at the same position (type kept)."""
        graph: Graph = self  # type: ignore[assignment]
        out: dict[str, ValueInfoProto | None] = {}
        for key, info in graph.outputs.items():
            if key == old:
                copy = ValueInfoProto()
                if info is not None:
                    copy.CopyFrom(info)
                copy.name = new
                out[new] = copy
            else:
                out[key] = info
        graph.outputs = out
        graph._drop_if_orphan(old)
        graph._edited()

    def _detach_output(self, node: Node, slot: int) -> None:
        """``node`` no longer makes its output ``slot``'s value: that slot gets a fresh name."""
        graph: Graph = self  # type: ignore[assignment]
        data = graph._node[node.id]
        value = data.io[data.n_in + slot]
        fresh = graph.fresh_name(f"{value}_cut")
        graph._unlink(node.id, value, slot)
        graph._add_value(fresh)
        graph._link(node.id, fresh, slot)
        io = list(data.io)
        io[data.n_in + slot] = fresh
        graph._set_io(data, tuple(io))


def make_value_info(name: str, elem_type: int, shape: Iterable[int | str | None] | None) -> ValueInfoProto:
    """A tensor ValueInfoProto (``shape`` None: unknown rank; a None dim: unknown)."""
    return helper.make_tensor_value_info(name, elem_type, None if shape is None else list(shape))


def live_nodes(graph: Graph) -> tuple[set[int], set[str]]:
    """Ids of the ops some graph output depends on, and the values they (and the outputs) read.

    Subgraph reads come from the subgraphs themselves (``free_values``), not from the owner's
    capture edges, so a capture edge not yet refreshed after a nested edit cannot mislead.
    """
    live: set[int] = set()
    seen: set[str] = set()
    stack = [v for v in graph.outputs if v]
    while stack:
        value = stack.pop()
        if value in seen:
            continue
        seen.add(value)
        node = graph.producer(value)
        if node is None or node.id in live:
            continue
        live.add(node.id)
        stack.extend(v for v in node.inputs if v and v not in seen)
        for sub in node.subgraphs():
            stack.extend(v for v in sub.free_values() if v not in seen)
    return live, seen
