"""Shape folding: shape arithmetic that reads only static dims becomes a constant, and equal
shape values are computed once.

Exporters compute reshape targets at run time: ``Shape(x) → Gather(2) → Unsqueeze → Concat →
Reshape``. Whatever in that chain depends only on static dims (a hidden size, a head count) is a
constant, even when other dims of ``x`` are symbolic (batch, sequence). This pass gives every
small integer tensor built from ``Shape``/``Size`` and constants a *symbolic value*: its
elements, each an ``int`` (static), a ``str`` (a named symbolic dim) or a ``(value, i)`` token
("dim i of value", when nothing better is known). Values flow through Gather, Slice, Concat,
Unsqueeze, Squeeze, Cast, Identity, Reshape, Equal, Where and integer Add/Sub/Mul/Div (where the
result is decided: ``S - S = 0``, ``S * 1 = S``, a dim never equals -1). The rewrites, in order:

1. **Static values** (every element an ``int``) become initializers of the same name (``Constant``
   ops in function bodies); the ops that only fed them are removed. ``Shape``/``Size`` of a fully
   static tensor is the simplest instance; ``Shape(x)[2]`` of an ``[N, S, 64]`` tensor another.
2. **Reshape copies**: ``Reshape(x, t)`` whose every non-static element ``i`` of ``t`` is dim ``i``
   of ``x`` itself gets the constant target with 0 there ("keep input dim", allowzero=0 only).
3. **Equal values are one value**: a scalar dim whose name a graph input declares is read from
   that input (``Gather(Shape(input), j)``); any other value equal to an earlier one (same
   elements, rank and dtype) is replaced by the earlier one. This trusts, as ONNX Runtime's
   ShapeInputMerge does, that one dim name is one size — names that ONNX shape inference made up
   (``unk__N``) come from one inference run and are compared only within it.
4. **Rebuild**: a non-static 1-D value whose computation is costlier than ``Concat`` of pieces
   that already exist (earlier 1-D values holding one symbolic dim, or ``Unsqueeze`` of an
   earlier scalar, plus constant runs) is rebuilt from them when that removes more ops than it adds.

Refused: values with an element nothing is known about, dtypes other than int32/int64/bool,
graph outputs (their producers stay), and in subgraphs and functions rewrites 3–4.

Shapes come from the graph's value_info and, where that lacks them, from the pass context's
shape oracle (graphtool.shapes.oracle: ONNX inference over the whole model, rerun after the model
changed), consulted only when a declaration falls short. Shapes the user fixed
(``ctx.input_shapes``) are written into the model's input declarations first.
"""

from __future__ import annotations

import numpy as np
from graphtool.passes._shape_values import MAX_REBUILD, SHAPE_OPS, Dim, DimsView, SymValue, propagate, tokens
from onnx import helper, numpy_helper

from graphtool.ir.graph import Graph, Node
from graphtool.pass_manager import Pass, PassContext, PassResult, register
from graphtool.runtime import is_constant, place_constant


@register(level=1, priority=15)
class FoldShapes(Pass):
    """Turn shape computations that read only static dims into constants; compute equal shape values once."""

    def __init__(self) -> None:
        self._pinned = False

    def run(self, graph: Graph, ctx: PassContext) -> PassResult:
        if not graph.nodes("Shape") and not graph.nodes("Size"):
            return PassResult(changed=False)
        if not self._pinned:
            self._pinned = True
            _pin_input_shapes(ctx)
        oracle = DimsView(graph, ctx)
        oracle.prepare([n.inputs[0] for op in ("Shape", "Size", "Reshape") for n in graph.nodes(op) if n.inputs])
        order = graph.topological_order()
        values = propagate(graph, oracle, order)
        stats = {"folded": _fold_static(graph, ctx, values)}
        stats["reshape_zeros"] = _reshape_copy_dims(graph, ctx, values, oracle)
        if graph is ctx.model.graph:
            stats["merged"] = _merge_equal(graph, ctx, values, oracle, order)
            stats["rebuilt"] = _rebuild(graph, ctx, values, order)
        stats = {k: v for k, v in stats.items() if v}
        return PassResult(changed=bool(stats), stats=stats)


def _pin_input_shapes(ctx: PassContext) -> None:
    """Write the user-fixed input shapes (``ctx.input_shapes``) into the input declarations."""
    graph = ctx.model.graph
    for name, dims in (ctx.input_shapes or {}).items():
        info = graph.inputs.get(name)
        if info is None or not info.type.HasField("tensor_type"):
            continue
        pinned = helper.make_tensor_value_info(name, info.type.tensor_type.elem_type, [int(d) for d in dims])
        pinned.doc_string = info.doc_string
        graph.inputs[name] = pinned
        ctx.shapes.invalidate()


# ---------------------------------------------------------------------------- rewrites


def _fold_static(graph: Graph, ctx: PassContext, values: dict[str, SymValue]) -> int:
    """Case 1: replace static symbolic values by constants; drop the ops that only fed them."""
    static_nodes: list[Node] = []
    static_ids: set[int] = set()
    for name, sym in values.items():
        node = graph.producer(name)
        if sym.static and node is not None and node.op_type != "Constant":
            static_nodes.append(node)
            static_ids.add(node.id)
    if not static_nodes:
        return 0
    frontier = [
        n.outputs[0] for n in static_nodes
        if graph.is_output(n.outputs[0]) or any(u.id not in static_ids for u, _ in graph.uses(n.outputs[0]))
    ]
    feeders = [p for n in static_nodes for v in n.inputs if v and (p := graph.producer(v)) and p.id not in static_ids]
    graph.remove_nodes(static_nodes)
    for name in frontier:
        if graph.has_value(name):
            place_constant(graph, ctx.model, name, numpy_helper.from_array(values[name].array(), name))
    for node in feeders:  # Shape/Gather chains that only fed the folded values
        _remove_if_dead(graph, node)
    return len(static_nodes)


def _reshape_copy_dims(graph: Graph, ctx: PassContext, values: dict[str, SymValue], oracle: DimsView) -> int:
    """Case 2: ``Reshape(x, t)`` where each non-static element ``i`` of ``t`` is dim ``i`` of
    ``x`` itself: that element becomes 0 ("copy the input dim"), so the target is a constant.
    One non-static element that is no such copy may remain: it becomes -1, since a valid
    Reshape keeps the element count and every other element is now fixed (YOLOv8's DFL head:
    ``[batch, 4, 16, anchors]`` → ``[0, 4, 16, -1]``)."""
    done = 0
    for node in graph.nodes("Reshape"):
        ins = node.inputs
        if len(ins) != 2 or not ins[1] or node.attr("allowzero", 0) or is_constant(graph, ins[1]):
            continue
        sym = values.get(ins[1])
        if sym is None or sym.scalar or sym.static or sym.dtype != "int64":
            continue
        dims = oracle.dims(ins[0])
        if dims is None:
            continue
        own = tokens(ins[0], dims)
        target: list[int] = []
        for i, d in enumerate(sym.dims):
            if isinstance(d, int):
                if d == 0:
                    break  # a literal 0 already means "copy"; keep the target as it is
                target.append(d)
            elif i < len(own) and own[i] == d:
                target.append(0)
            elif -1 not in target:
                target.append(-1)  # the one element the others determine
            else:
                break
        else:
            if target.count(-1) > 1:
                continue
            old = graph.producer(ins[1])
            name = graph.fresh_name(f"{ins[1]}_static")
            place_constant(graph, ctx.model, name, numpy_helper.from_array(np.array(target, dtype=np.int64), name))
            graph.set_input(node, 1, name)
            if old is not None:
                _remove_if_dead(graph, old)
            done += 1
    return done


def _merge_equal(graph: Graph, ctx: PassContext, values: dict[str, SymValue], oracle: DimsView,
                 order: list[Node]) -> int:
    """Case 3: equal symbolic values are computed once (see the module docstring)."""
    sources = _symbol_sources(graph)
    first: dict[SymValue, str] = {}
    dead: list[Node] = []
    merged = 0
    for node in order:
        if not graph.has_node(node) or len(node.outputs) != 1:
            continue
        out = node.outputs[0]
        sym = values.get(out)
        if sym is None or sym.static or graph.is_output(out):
            continue
        canonical = first.get(sym)
        if canonical is None:
            source = sources.get(sym.dims[0]) if sym.scalar and sym.dtype == "int64" else None  # type: ignore[arg-type]
            if source is None or not graph.has_value(source[0]) or _reads_dim(graph, node, oracle) == source:
                first[sym] = out
                continue
            canonical = first[sym] = _input_dim(graph, ctx, source, node)
        if canonical == out:
            continue
        graph.replace_all_uses(out, canonical)
        dead.append(node)
        merged += 1
    for node in dead:  # only now: a canonical value must not vanish while the loop can still pick it
        _remove_if_dead(graph, node)
    return merged


def _reads_dim(graph: Graph, node: Node, oracle: DimsView) -> tuple[str, int | None] | None:
    """(x, dim) when ``node`` reads dim ``dim`` of x straight off its shape: ``Gather(Shape(x), k)``,
    or ``Squeeze(Shape(x, start=k, end=k+1))`` (dynamo's ``sym_size``)."""
    if node.op_type == "Squeeze" and node.inputs:
        index = np.asarray(0)  # the one element of the sliced shape
    elif node.op_type == "Gather" and len(node.inputs) == 2:
        index = graph.const(node.inputs[1])
    else:
        return None
    shape_node = graph.producer(node.inputs[0])
    if shape_node is None or shape_node.op_type != "Shape":
        return None
    if index is None or np.asarray(index).ndim != 0:
        return None
    dims = oracle.dims(shape_node.inputs[0])
    if dims is None:
        return None
    rank = len(dims)
    start, end = shape_node.attr("start", 0), shape_node.attr("end", rank)
    start = min(max(start + rank if start < 0 else start, 0), rank)
    end = min(max(end + rank if end < 0 else end, 0), rank)
    if node.op_type == "Squeeze" and end - start != 1:
        return None
    i = int(index)
    i = i + (end - start) if i < 0 else i
    return shape_node.inputs[0], (start + i if 0 <= i < end - start else None)


def _symbol_sources(main: Graph) -> dict[Dim, tuple[str, int]]:
    """dim_param → (main-graph input, dim) for the symbols the model's inputs declare."""
    sources: dict[Dim, tuple[str, int]] = {}
    for name in main.inputs:
        if name in main.initializers:
            continue
        for j, d in enumerate(main.declared_shape(name) or []):
            if isinstance(d, str) and d and d not in sources:
                sources[d] = (name, j)
    return sources


def _input_dim(graph: Graph, ctx: PassContext, source: tuple[str, int], near: Node) -> str:
    """``Gather(Shape(input), j)``, reusing one already in the graph."""
    value, j = source
    shape_out = ""
    for use, slot in graph.uses(value):
        if use.op_type != "Shape" or slot != 0 or use.attr("start") is not None or use.attr("end") is not None:
            continue
        shape_out = shape_out or use.outputs[0]
        for g in graph.consumers(use.outputs[0]):
            if g.op_type == "Gather" and g.inputs[0] == use.outputs[0] and g.attr("axis", 0) == 0 and len(g.inputs) == 2:
                idx = graph.const(g.inputs[1])
                if idx is not None and idx.ndim == 0 and int(idx) == j:
                    return g.outputs[0]
    if not shape_out:
        shape_out = graph.add_node("Shape", [value], 1, name=f"{value}_shape", near=near).outputs[0]
    index = _new_const(graph, ctx, np.array(j, dtype=np.int64), f"{value}_dim{j}_index")
    gather = graph.add_node("Gather", [shape_out, index], 1, {"axis": 0}, name=f"{value}_dim{j}", near=near)
    return gather.outputs[0]


def _new_const(graph: Graph, ctx: PassContext, array: np.ndarray, hint: str) -> str:
    name = graph.fresh_name(hint)
    place_constant(graph, ctx.model, name, numpy_helper.from_array(array, name))
    return name


def _rebuild(graph: Graph, ctx: PassContext, values: dict[str, SymValue], order: list[Node]) -> int:
    """Case 4: rebuild a 1-D value from existing pieces when that removes more ops than it adds."""
    pos = {n.id: i for i, n in enumerate(order)}
    vec: dict[Dim, tuple[int, str]] = {}  # symbol -> (position, earliest 1-D [symbol] value)
    sca: dict[Dim, tuple[int, str]] = {}  # symbol -> (position, earliest scalar symbol value)
    for node in order:
        if not graph.has_node(node) or len(node.outputs) != 1 or node.outputs[0] not in values:
            continue
        sym = values[node.outputs[0]]
        if len(sym.dims) == 1 and not sym.static and sym.dtype == "int64":
            (sca if sym.scalar else vec).setdefault(sym.dims[0], (pos[node.id], node.outputs[0]))
    rebuilt = 0
    dead: list[Node] = []
    opset = ctx.opset("")
    for node in order:
        if not graph.has_node(node) or len(node.outputs) != 1 or node.op_type == "Concat":
            continue
        out = node.outputs[0]
        sym = values.get(out)
        if (sym is None or sym.scalar or sym.static or sym.dtype != "int64" or not 2 <= len(sym.dims) <= MAX_REBUILD
                or graph.is_output(out)):
            continue
        here = pos[node.id]
        pieces: list[tuple[str, object]] = []  # ("const", [ints]) | ("vec", name) | ("sca", name)
        for d in sym.dims:
            if isinstance(d, int):
                if pieces and pieces[-1][0] == "const":
                    pieces[-1][1].append(d)  # type: ignore[union-attr]
                else:
                    pieces.append(("const", [d]))
            elif d in vec and vec[d][0] < here and vec[d][1] != out:
                pieces.append(("vec", vec[d][1]))
            elif d in sca and sca[d][0] < here:
                pieces.append(("sca", sca[d][1]))
            else:
                break
        else:
            kept = {name for kind, name in pieces if kind != "const"}
            cost = sum(1 for kind, _ in pieces if kind == "sca") + (1 if len(pieces) > 1 else 0)
            if len(pieces) == 1 and pieces[0][0] == "const":
                continue  # static: case 1's job
            if _exclusive_cone(graph, node, kept) <= cost:
                continue
            parts: list[str] = []
            for kind, what in pieces:
                if kind == "const":
                    parts.append(_new_const(graph, ctx, np.array(what, dtype=np.int64), f"{out}_part"))
                elif kind == "vec":
                    parts.append(what)  # type: ignore[arg-type]
                else:
                    parts.append(_unsqueeze0(graph, ctx, what, opset, node))  # type: ignore[arg-type]
            new = parts[0] if len(parts) == 1 else graph.add_node(
                "Concat", parts, 1, {"axis": 0}, name=f"{node.name or out}_rebuilt", near=node).outputs[0]
            graph.replace_all_uses(out, new)
            dead.append(node)
            rebuilt += 1
    for node in dead:  # only now: a piece must not vanish while a later rebuild can still use it
        _remove_if_dead(graph, node)
    return rebuilt


def _unsqueeze0(graph: Graph, ctx: PassContext, scalar: str, opset: int, near: Node) -> str:
    if opset >= 13:
        axes = _new_const(graph, ctx, np.array([0], dtype=np.int64), "axes0")
        return graph.add_node("Unsqueeze", [scalar, axes], 1, name=f"{scalar}_unsqueeze", near=near).outputs[0]
    return graph.add_node("Unsqueeze", [scalar], 1, {"axes": [0]}, name=f"{scalar}_unsqueeze", near=near).outputs[0]


def _exclusive_cone(graph: Graph, node: Node, kept: set[str]) -> int:
    """How many ops die when ``node``'s output is no longer read (``kept`` values stay read)."""
    cone = {node.id}
    stack = [node]
    while stack:
        n = stack.pop()
        for v in n.inputs:
            p = graph.producer(v) if v else None
            if p is None or p.id in cone or p.op_type not in SHAPE_OPS or v in kept:
                continue
            outs = [o for o in p.outputs if o]
            if any(o in kept or graph.is_output(o) for o in outs):
                continue
            if all(u.id in cone for o in outs for u, _ in graph.uses(o)):
                cone.add(p.id)
                stack.append(p)
    return len(cone)


def _remove_if_dead(graph: Graph, node: Node) -> None:
    """Drop ``node`` and then its shape-op producers while nothing reads them any more."""
    stack = [node]
    while stack:
        n = stack.pop()
        if not graph.has_node(n) or any(graph.uses(v) or graph.is_output(v) for v in n.outputs if v):
            continue
        producers = [graph.producer(v) for v in n.inputs if v]
        graph.remove_nodes([n])
        stack.extend(p for p in producers if p is not None and (p.op_type in SHAPE_OPS or p.op_type == "Constant"))
