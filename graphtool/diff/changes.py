"""What changed between two matched graphs: per matched node pair (op type, attributes, inputs,
outputs) and per graph (inputs, outputs, initializers no node reads).

Split from ``diff_match`` (issue 19: one job per module): matching decides *which* nodes pair
up; this module describes how each pair differs. Both read the same ``Matcher``.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from onnx import TensorProto, numpy_helper

from graphtool.diff.match import Matcher, pair_names
from graphtool.diff.values import format_value, qualified, same_array, type_string, value_change
from graphtool.ir.graph import Graph, Node
from graphtool.ir.tensor import Tensor


def node_changes(m: Matcher, a: Node, b: Node, values: dict[str, dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """How matched node ``b`` differs from ``a``: op type, attributes, inputs (a constant input
    counts by value, not name), number of outputs.

    An input that reads the same-named value on both sides is not a change of this node even when
    what makes the value changed (a new producer: ``Mul`` became ``QuickGelu``; a computed value
    became a constant of the same name): that is said once, on the value, in ``values`` (value
    name -> change), however many ops read it."""
    details: list[dict[str, Any]] = []
    ha, hb = m.ha, m.hb  # what the hashes read of each op: no look-up of the ops' records (issue 19)
    if ha.kinds[a.id] != hb.kinds[b.id]:
        details.append({"what": "op_type", "old": qualified(a), "new": qualified(b)})
    ka, kb = ha.canon_key[a.id], hb.canon_key[b.id]
    ca, cb = (m.ha.canon(a.id), m.hb.canon(b.id)) if ka != kb else ({}, {})
    for key in sorted(set(ca) | set(cb)):
        if ca.get(key) == cb.get(key):
            continue
        old, new = a.attr(key), b.attr(key)
        entry: dict[str, Any] = {
            "what": "attribute",
            "name": key,
            "old": None if key not in ca else format_value(old),
            "new": None if key not in cb else format_value(new),
        }
        if isinstance(old, TensorProto) and isinstance(new, TensorProto):
            entry.update(value_change(numpy_helper.to_array(old), numpy_helper.to_array(new)))
        details.append(entry)
    ins_a: list[str] | None = None
    ins_b: list[str] = []
    for slot in range(max(len(ha.feeds[a.id]), len(hb.feeds[b.id]))):
        if m.token_a_at(a.id, slot) == m.token_b_at(b.id, slot):
            continue
        if ins_a is None:
            ins_a, ins_b = a.inputs, b.inputs
        va = ins_a[slot] if slot < len(ins_a) else ""
        vb = ins_b[slot] if slot < len(ins_b) else ""
        const_a = m.ga.const(va) if va else None
        const_b = m.gb.const(vb) if vb else None
        if va and va == vb and (const_a is None or const_b is None):
            if values is not None and vb not in values:
                values[vb] = _value_change(m, va, const_a is not None, const_b is not None)
            continue
        if const_a is not None and const_b is not None:
            if same_array(const_a, const_b):
                continue  # e.g. a Constant node became an initializer: the value is what counts
            both_init = _initializer(m.ga, va) is not None and _initializer(m.gb, vb) is not None
            entry = {"what": "initializer" if both_init else "constant", "slot": slot, "old": va, "new": vb}
            entry.update(value_change(const_a, const_b))
            details.append(entry)
        else:
            details.append({"what": "input", "slot": slot, "old": va or None, "new": vb or None})
    if ha.n_out[a.id] != hb.n_out[b.id]:
        details.append({"what": "outputs", "old": ha.n_out[a.id], "new": hb.n_out[b.id]})
    return details

def _value_change(m: Matcher, value: str, const_a: bool, const_b: bool) -> dict[str, Any]:
    """What became of a value both sides read by the same name: a new producer, or a constant."""
    from graphtool.diff.values import describe

    def maker(graph: Graph, const: bool) -> str:
        if const:
            return "initializer" if _initializer(graph, value) is not None else "Constant"
        producer = graph.producer(value)
        if producer is None:
            return "graph input" if value in graph.inputs else "outer scope"
        return f"{producer.op_type} {describe(producer)}"

    old, new = maker(m.ga, const_a), maker(m.gb, const_b)
    what = "became a constant" if const_b and not const_a else (
        "no longer a constant" if const_a and not const_b else "new producer")
    return {"what": what, "value": value, "old": old, "new": new}


def _initializer(graph: Graph, value: str) -> Tensor | None:
    """The initializer ``value`` resolves to in ``graph`` or an enclosing scope, if any."""
    g: Graph | None = graph
    while g is not None and value:
        if value in g.initializers:
            return g.initializers[value]
        if g.producer(value) is not None or value in g.inputs:
            return None
        g = g.parent
    return None

def graph_changes(m: Matcher, main: bool) -> list[dict[str, Any]]:
    """Graph-level changes: inputs and outputs renamed, retyped, added or removed, and unused
    initializers. ``main``: the main graph, whose inputs and outputs pair by name."""
    ga, gb = m.ga, m.gb
    changes: list[dict[str, Any]] = []
    out_pairs, outs_a, outs_b = pair_names(list(ga.outputs), list(gb.outputs), main)
    for kind, pairs, only_a, only_b in (
        ("input", m.input_pairs, m.inputs_only_a, m.inputs_only_b),
        ("output", out_pairs, outs_a, outs_b),
    ):
        for va, vb in pairs:
            if main and va != vb:
                changes.append({"what": f"{kind} renamed", "old": va, "new": vb})
            ta, tb = type_string(ga, va), type_string(gb, vb)
            if ta != tb:
                changes.append({"what": f"{kind} type", "name": vb, "old": ta, "new": tb})
        changes += [{"what": f"{kind} removed", "name": v, "type": type_string(ga, v)} for v in only_a]
        changes += [{"what": f"{kind} added", "name": v, "type": type_string(gb, v)} for v in only_b]
    return changes + _initializer_changes(m)

def _initializer_changes(m: Matcher) -> list[dict[str, Any]]:
    """Initializers no node reads. Used ones show up in their consumers' changes; unused
    ones would go unnoticed: dead weight that appeared, disappeared, or was left behind."""
    ga, gb = m.ga, m.gb
    # an initializer some op reads (``Hashes.sources_read``, a set of the few sources) is used; the
    # graph's uses (one lookup in its million-entry adjacency each) are asked about the others only
    read_a, read_b = set(m.ha.sources_read), set(m.hb.sources_read)
    unused_a = {n: m.ha.init_key(n) for n in ga.initializers
                if n not in read_a and not ga.uses(n) and not ga.is_output(n)}
    unused_b = {n: m.hb.init_key(n) for n in gb.initializers
                if n not in read_b and not gb.uses(n) and not gb.is_output(n)}
    if not unused_a and not unused_b:
        return []
    all_a = Counter(m.ha.init_key(n) for n in ga.initializers)
    all_b = Counter(m.hb.init_key(n) for n in gb.initializers)
    still_unused = Counter(unused_a.values())
    changes: list[dict[str, Any]] = []
    for name, key in unused_b.items():
        if all_b[key] > all_a[key]:
            all_b[key] -= 1
            changes.append({"what": "unused initializer added", "name": name})
        elif still_unused[key] > 0:
            still_unused[key] -= 1
        else:
            changes.append({"what": "initializer no longer used", "name": name})
    for name, key in unused_a.items():
        if all_a[key] > all_b[key]:
            all_a[key] -= 1
            changes.append({"what": "unused initializer removed", "name": name})
    return changes
