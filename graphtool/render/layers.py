"""The data of the layered page (``render.html.layered_page``): every op and value of a model of
any size, folded into a hierarchy of layers the page expands on click and lays out itself.

Layers come from where the exporter put each op: name scopes (``/model.1/conv/Conv``,
``/encoder/layer.3/attention/...``), torch dynamo's ``pkg.torch.onnx.name_scopes`` metadata,
an If/Loop/Scan op holding its bodies, and — where a layer still holds more than ``MAX_ITEMS``
items (a flat chain of a million ops) — runs of consecutive items in topological order. A
scope with one child and nothing else is merged into it (``model/layers.0`` is one step).

Ops are numbered so that every layer's ops are one contiguous range (its own ops first, then its
children's), so the page finds a layer's edges by scanning one range. Columns, not objects: a
million ops are a handful of flat arrays of numbers and strings (strings through one table).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from onnx import AttributeProto

from graphtool.ir.graph import Graph, constant_node_value
from graphtool.ir.model import Model
from graphtool.ir.tensor import dtype_name
from graphtool.render.layer_tree import CATEGORY_COLORS, Layer, category, scopes
from graphtool.render.schemas import Schemas
from graphtool.render.text import attr_text, cut, shape_text, small_value
from graphtool.shapes import ShapeOracle, dims_of

MAX_ITEMS = 80  # items (ops and sub-layers) a layer shows when expanded; more become runs

# Netron's colours for op categories (its grapher.css: layer, activation, pool, normalization ...)
class LayeredData:
    """Builds the page data of one model (``layered_data``)."""

    def __init__(self, model: Model, shapes: bool = True):
        self.model = model
        # inferred types come from the one shape oracle (segmented past 150k ops, one shared
        # TypeProto per distinct type); the file's declarations win, as everywhere
        self.oracle = ShapeOracle(model) if shapes else None
        self.type_texts: dict[Any, tuple[int, int]] = {}  # a distinct type -> (short, full) strings
        self.tiny: dict[int, str | None] = {}  # a constant value id -> its short value text
        self.attr_texts: dict[Any, list[tuple[str, str | None]]] = {}  # op + attributes -> their texts
        self.schemas = Schemas(model.opset_imports)
        self.strings: dict[str, int] = {"": 0}
        self.string_list: list[str] = [""]
        self.ops: dict[str, int] = {}
        # per op, in visit order
        self.op: list[int] = []
        self.name: list[int] = []
        self.layer: list[Layer] = []
        self.ins: list[list[int]] = []
        self.outs: list[list[int]] = []
        self.sub: list[int] = []
        self.attrs: list[int] = []
        # per value
        self.v_name: list[int] = []
        self.v_type: list[int] = []
        self.v_full: list[int] = []  # the type with symbolic dims unshortened (0: the same)
        self.v_prod: list[int] = []
        self.v_const: list[int] = []
        self.value_ids: dict[tuple[int, str], int] = {}
        self.root = Layer(model.graph.name or "graph", "", "root", None)
        self.graph_io: list[dict[str, Any]] = []

    def s(self, text: str) -> int:
        index = self.strings.get(text)
        if index is None:
            index = self.strings[text] = len(self.string_list)
            self.string_list.append(text)
        return index

    # -- values

    def _owner(self, graph: Graph, value: str) -> Graph:
        if graph.parent is None:
            return graph
        g: Graph | None = graph
        while g is not None:
            if value in g._node or value in g.initializers or value in g.inputs:
                if g.parent is None or not g.is_free(value) or value in g.initializers:
                    return g
            g = g.parent
        return graph

    def _value(self, graph: Graph, value: str) -> int:
        owner = self._owner(graph, value)
        key = (id(owner), value)
        vid = self.value_ids.get(key)
        if vid is None:
            vid = self.value_ids[key] = len(self.v_name)
            self.v_name.append(self.s(value))
            short, full = self._type(owner, value)
            self.v_type.append(short)
            self.v_full.append(full)
            self.v_prod.append(-1)
            const = 0
            if value in owner.initializers:
                const = 1
            else:
                producer = owner.producer(value)
                if producer is not None and producer.op_type == "Constant" and producer.domain in ("", "ai.onnx"):
                    const = 1
            self.v_const.append(const)
        return vid

    def _type(self, graph: Graph, value: str) -> tuple[int, int]:
        """(the type as the page shows it, its unshortened form or 0 when the same) as strings.
        Computed once per distinct type: a model's values have few (a million-op chain: a handful)."""
        tensor = graph.initializers.get(value)
        if tensor is not None:
            key: Any = (tensor.data_type, tuple(tensor.dims))
            dtype, dims = key[0], list(key[1])
        else:
            t = graph.declared_type(value)
            if t is None and self.oracle is not None:
                t = self.oracle.type_of(graph, value)
            key = t.SerializeToString() if t is not None else b""
            known = self.type_texts.get(key)
            if known is not None:
                return known
            dtype = t.tensor_type.elem_type if t is not None and t.HasField("tensor_type") else 0
            dims = dims_of(t)
        known = self.type_texts.get(key)
        if known is None:
            name = dtype_name(dtype) if dtype else ""
            short, full = (" ".join(x for x in (name, shape_text(dims, f) or "") if x) for f in (False, True))
            known = self.type_texts[key] = (self.s(short), self.s(full) if full != short else 0)
        return known

    # -- ops

    def _add(self, op: str, name: str, layer: Layer, ins: list[int], outs: list[int], sub: str = "",
             attrs: str = "") -> int:
        k = len(self.op)
        index = self.ops.get(op)
        if index is None:
            index = self.ops[op] = len(self.ops)
        self.op.append(index)
        self.name.append(self.s(name))
        self.layer.append(layer)
        self.ins.append(ins)
        self.outs.append(outs)
        self.sub.append(self.s(sub) if sub else 0)
        self.attrs.append(self.s(attrs) if attrs else 0)
        layer.direct.append(k)
        if layer.kind == "scope" and not layer.pre and "/" in name:
            layer.pre = name[: name.rfind("/") + 1]
        for vid in outs:
            self.v_prod[vid] = k
        return k

    def _walk(self, graph: Graph, base: Layer, main: bool) -> None:
        data = graph._node
        for value in graph.inputs:
            if value in graph.initializers:
                continue
            vid = self._value(graph, value)
            k = self._add("input", value, base, [], [vid])
            if main:
                self.graph_io.append({"kind": "input", "op": k})
        for i in graph.topological_ids():
            record = data[i]
            if record.op_type == "Constant" and record.domain in ("", "ai.onnx") and \
                    not any(graph.is_output(v) for v in record.io[record.n_in:]):
                continue  # folded into its readers, as in the small picture
            layer = base
            for label, full in scopes(record):
                layer = layer.child(full, label, full, "scope")
            node = graph.node(i)
            subs = node.subgraphs() if i in graph._owners else []
            if subs:
                layer = layer.child(("op", id(graph), i), f"{record.op_type} {record.name}".strip(),
                                    record.name, "op")
            ins = [self._value(graph, v) if v else -1 for v in record.io[: record.n_in]]
            outs = [self._value(graph, v) for v in record.io[record.n_in:] if v]
            sub, attrs = self._texts(graph, node, record, ins)
            op = record.op_type if record.domain in ("", "ai.onnx") else f"{record.domain}::{record.op_type}"
            self._add(op, record.name, layer, ins, outs, sub, attrs)
            for key, value in (node.attrs.items() if subs else ()):
                bodies = value if isinstance(value, list) else [value]
                for b, body in enumerate(bodies):
                    if not isinstance(body, Graph):
                        continue
                    label = key if len(bodies) == 1 else f"{key}[{b}]"
                    self._walk(body, layer.child(("body", key, b), label, f"{record.name} · {label}", "body"),
                               False)
        for value in graph.outputs:
            vid = self._value(graph, value)
            k = self._add("output", value, base, [vid], [])
            if main:
                self.graph_io.append({"kind": "output", "op": k})

    def _texts(self, graph: Graph, node: Any, record: Any, ins: list[int]) -> tuple[str, str]:
        """(the box's second line: weights folded in and non-default attributes; every attribute).
        What depends only on a constant (its short value) or on an op's attributes (their texts)
        is computed once and reused: a chain of a million ops has a few dozen of each."""
        lines: list[str] = []
        for slot, vid in enumerate(ins):
            if vid >= 0 and self.v_const[vid]:
                tiny = self.tiny.get(vid, self)
                if tiny is self:
                    tiny = self.tiny[vid] = self._tiny(graph, record.io[slot])
                slot_name = self.schemas.slot_name(node, slot)
                typed = self.string_list[self.v_type[vid]]
                shape = typed.split(" ", 1)[-1] if typed else "?"
                lines.append(f"{slot_name} = {tiny}" if tiny is not None else f"{slot_name} {shape}")
        texts: list[str] = []
        if record.template is not None or record._attrs:
            table = record.peek_attrs()  # not kept parsed: +268 MB on a million ops
            key = (record.op_type, record.domain,
                   tuple((k, v.SerializeToString()) for k, v in table.items() if isinstance(v, AttributeProto)))
            known = self.attr_texts.get(key)
            if known is None:
                known = []
                for name, value in node.attrs.items():
                    if isinstance(value, Graph) or (isinstance(value, list) and value and isinstance(value[0], Graph)):
                        continue
                    text = attr_text(name, value)
                    known.append((f"{name} = {cut(text, 200)}",
                                  None if self.schemas.is_default(node, name, value) else f"{name}={cut(text, 28)}"))
                self.attr_texts[key] = known
            for full, short in known:
                texts.append(full)
                if len(lines) < 4 and short is not None:
                    lines.append(short)
        return " · ".join(lines[:3]), "\n".join(texts)

    def _tiny(self, graph: Graph, value: str) -> str | None:
        """A constant's value as its reader's box shows it (shapes, axes: ``= [1,4,4]``), or None."""
        owner = self._owner(graph, value)
        if value not in owner.initializers:
            producer = owner.producer(value)
            array = constant_node_value(producer) if producer is not None else None
            return small_value(array) if array is not None and array.size <= 8 else None
        tensor = owner.initializers[value]
        return small_value(tensor.numpy()) if tensor.size <= 8 and tensor.external is None else None

    # -- layers

    def _place_io(self) -> None:
        """A graph input sits in the innermost layer holding all its readers, an output beside its
        producer (a KV cache's 64 inputs land in their 32 layers, not in one row at the top)."""
        ops = list(self.ops)
        pseudo_in = {k for k, o in enumerate(self.op) if ops[o] == "input"}
        readers: dict[int, list[Layer]] = {}
        for k, ins in enumerate(self.ins):
            for vid in ins:
                if vid >= 0:
                    p = self.v_prod[vid]
                    if p in pseudo_in:
                        readers.setdefault(p, []).append(self.layer[k])
        moves: list[tuple[int, Layer]] = []
        for k, layers in readers.items():
            base = self.layer[k]
            chains = []
            for layer in layers:
                chain = []
                while layer is not None:
                    chain.append(layer)
                    if layer is base:
                        break
                    layer = layer.parent
                chains.append(chain[::-1])
            common = base
            for depth in range(1, min(len(c) for c in chains)):
                if all(c[depth] is chains[0][depth] for c in chains) and chains[0][depth].kind != "op":
                    common = chains[0][depth]
                else:
                    break
            moves.append((k, common))
        for k, o in enumerate(self.op):
            if ops[o] == "output" and self.ins[k] and self.ins[k][0] >= 0:
                p = self.v_prod[self.ins[k][0]]
                if p >= 0 and self.layer[p].kind != "op" and self.layer[p] is not self.layer[k] and \
                        self._inside(self.layer[p], self.layer[k]):
                    moves.append((k, self.layer[p]))
        for k, layer in moves:
            if layer is self.layer[k]:
                continue
            self.layer[k].direct.remove(k)
            layer.direct.append(k)
            layer.direct.sort()
            self.layer[k] = layer

    @staticmethod
    def _inside(layer: Layer, outer: Layer) -> bool:
        while layer is not None:
            if layer is outer:
                return True
            layer = layer.parent
        return False

    def _merge_and_split(self, layer: Layer) -> None:
        for child in list(layer.children.values()):
            self._merge_and_split(child)
        # a scope whose only content is one scope: one step (model/layers.0)
        while (layer.kind == "scope" and not layer.direct and len(layer.children) == 1
               and next(iter(layer.children.values())).kind == "scope"):
            only = next(iter(layer.children.values()))
            layer.label = f"{layer.label}/{only.label}"
            layer.full = only.full
            layer.pre = only.pre
            layer.direct, layer.children = only.direct, only.children
            for c in layer.children.values():
                c.parent = layer
        first = min((c.first for c in layer.children.values()), default=1 << 62)
        layer.first = min(first, layer.direct[0] if layer.direct else 1 << 62)
        items: list[Any] = sorted(list(layer.children.values()) + layer.direct,
                                  key=lambda x: x.first if isinstance(x, Layer) else x)
        level = 0
        while len(items) > MAX_ITEMS:
            level += 1
            runs = []
            count = -(-len(items) // MAX_ITEMS)
            step = -(-len(items) // count)  # equal runs: 81 items are two runs of 41 and 40
            for k in range(0, len(items), step):
                part = items[k: k + step]
                run = Layer("", "", "run", layer)
                for x in part:
                    if isinstance(x, Layer):
                        run.children[id(x)] = x
                        x.parent = run
                    else:
                        run.direct.append(x)
                        self.layer[x] = run
                run.first = part[0].first if isinstance(part[0], Layer) else part[0]
                run.label = f"{self._item_label(part[0])} … {self._item_label(part[-1])}"
                runs.append(run)
            items = runs
        if level:
            layer.children = {id(r): r for r in items}
            layer.direct = []

    def _item_label(self, item: Any) -> str:
        if isinstance(item, Layer):
            return item.label.split(" … ")[0] if item.kind == "run" else item.label
        name = self.string_list[self.name[item]].rstrip("/").rsplit("/", 1)[-1]
        return cut(name or self._op_name(item), 32)

    def _op_name(self, k: int) -> str:
        return next(op for op, index in self.ops.items() if index == self.op[k])

    def build(self, title: str) -> dict[str, Any]:
        self._walk(self.model.graph, self.root, True)
        self._place_io()
        self._merge_and_split(self.root)
        # number the layers depth first; each layer's ops: its own, then its children's
        order: list[int] = []
        layers: list[Layer] = []

        def number(layer: Layer) -> None:
            layer.index = len(layers)
            layers.append(layer)
            layer.lo = len(order)
            for k in layer.direct:
                self.layer[k] = layer
            order.extend(layer.direct)
            layer.mid = len(order)
            for child in sorted(layer.children.values(), key=lambda c: c.first):
                number(child)
            layer.hi = len(order)

        number(self.root)
        # a name that starts with its scope's prefix is sent as the rest, as -(index + 1): the
        # prefix is in the layer's ``pre`` (a million "b123/MatMul" are 13 strings, not a million)
        pre_of: list[str] = []
        for layer in layers:
            scope = layer
            while scope is not None and scope.kind in ("run", "op"):
                scope = scope.parent
            pre_of.append(scope.pre if scope is not None and scope.kind == "scope" else "")
        strings = self.string_list
        rest: dict[str, int] = {}

        def short(index: int, pre: str) -> int:
            text = strings[index]
            if pre and text.startswith(pre) and len(text) > len(pre):
                tail = text[len(pre):]
                k = rest.get(tail)
                if k is None:
                    k = rest[tail] = self.s(tail)
                return -k - 1
            return index

        node_pre = [pre_of[self.layer[old].index] for old in order]
        names = [short(self.name[old], node_pre[new]) for new, old in enumerate(order)]
        position = [0] * len(order)
        for new, old in enumerate(order):
            position[old] = new
        producer = [-1] * len(self.v_name)
        for vid, p in enumerate(self.v_prod):
            if p >= 0:
                producer[vid] = position[p]
        v_names = [short(n, node_pre[producer[vid]]) if producer[vid] >= 0 else n
                   for vid, n in enumerate(self.v_name)]
        # value ids as steps from the largest id sent so far (most ops read what was just made)
        ins_flat: list[int | None] = []
        outs_flat: list[int] = []
        n_in: list[int] = []
        n_out: list[int] = []
        top = 0
        for old in order:
            ins, outs = self.ins[old], self.outs[old]
            n_in.append(len(ins))
            n_out.append(len(outs))
            for vid in ins:
                if vid < 0:
                    ins_flat.append(None)
                else:
                    ins_flat.append(vid - top)
                    top = max(top, vid)
            for vid in outs:
                outs_flat.append(vid - top)
                top = max(top, vid)
        op_names = list(self.ops)
        # the string table keeps only what is sent (full names that went out as prefix + rest are
        # dropped), most used first so the commonest indices are the shortest numbers
        uses: Counter[int] = Counter()
        for column in (names, v_names):
            uses.update(i if i >= 0 else -i - 1 for i in column)
        sub = [self.sub[o] for o in order]
        attrs = [self.attrs[o] for o in order]
        uses.update(sub)
        uses.update(attrs)
        uses.update(self.v_type)
        uses.update(f for f in self.v_full if f)
        kept = [i for i, _ in uses.most_common()]
        if 0 in kept:
            kept.remove(0)
        kept.insert(0, 0)
        remap = {old: new for new, old in enumerate(kept)}
        string_list = [strings[i] for i in kept]

        def again(i: int) -> int:
            return remap[i] if i >= 0 else -remap[-i - 1] - 1

        names = [again(i) for i in names]
        v_names = [again(i) for i in v_names]
        return {
            "title": title,
            "strings": string_list,
            "ops": op_names,
            "cats": [category(op.split("::")[-1]) if op not in ("input", "output") else
                     ("io" if op == "input" else "output") for op in op_names],
            "colors": CATEGORY_COLORS,
            "op": [self.op[o] for o in order],
            "name": names,
            "sub": [remap[i] for i in sub],
            "attrs": [remap[i] for i in attrs],
            "nIn": n_in, "ins": ins_flat, "nOut": n_out, "outs": outs_flat,
            "vName": v_names, "vType": [remap[i] for i in self.v_type],
            "vFull": [[vid, remap[f]] for vid, f in enumerate(self.v_full) if f],
            "vConst": [vid for vid, c in enumerate(self.v_const) if c],
            "layers": {
                "label": [x.label for x in layers],
                "full": [x.full for x in layers],
                "pre": pre_of,
                "kind": [x.kind for x in layers],
                "parent": [x.parent.index if x.parent is not None else -1 for x in layers],
                "lo": [x.lo for x in layers], "mid": [x.mid for x in layers], "hi": [x.hi for x in layers],
            },
            "graphIo": [dict(io, op=position[io["op"]]) for io in self.graph_io],
            "opCount": sum(1 for o in self.op if op_names[o] not in ("input", "output")),
        }


def layered_data(model: Model, title: str, shapes: bool = True) -> dict[str, Any]:
    """The layered page's data for ``model`` (see the module docstring). ``shapes``: complete the
    file's declared types by ONNX shape inference (the shape oracle); False shows only what the
    file declares."""
    return LayeredData(model, shapes).build(title)
