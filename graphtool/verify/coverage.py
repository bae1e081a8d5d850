"""Which If branches the verification inputs actually ran, and which rewrites that leaves unproven.

A rewrite inside a branch no input reached was never compared with anything, so "verified" would
be a claim the check cannot back. The original model is instrumented (a copy): every If, in the
main graph and nested inside If branches, gets one extra int64 scalar output per branch site,
its *marker*: 1 when the then-branch ran, 0 for else, -1 when the If itself was not reached.
Each branch outputs its own constant and passes up the markers of the Ifs nested in it (the
other branch outputs -1 for those), so the top-level graph sees every site. Ifs inside Loop and
Scan bodies are not instrumented (their bodies run many times; they are listed as such).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper

PREFIX = "__graphtool_cov_"


@dataclass
class Site:
    """One If node, by its path of names from the main graph (e.g. ``If_0/decoder/If``)."""

    path: str
    then_ran: bool = False
    else_ran: bool = False
    instrumented: bool = True

    def as_dict(self) -> dict[str, Any]:
        return {"if": self.path, "then": self.then_ran, "else": self.else_ran, "instrumented": self.instrumented}


@dataclass
class Coverage:
    sites: list[Site] = field(default_factory=list)
    unverified: list[str] = field(default_factory=list)  # "If_0 else" rewritten but never run

    def summary(self) -> str:
        """One line: the first Ifs in detail, counts for the rest, then what stayed unverified."""
        sites = [s for s in self.sites if s.instrumented]
        if not sites:
            return ""
        shown = [f"{s.path}: then {'✔' if s.then_ran else '✘'} else {'✔' if s.else_ran else '✘'}" for s in sites[:2]]
        if len(sites) > 2:
            both = sum(1 for s in sites if s.then_ran and s.else_ran)
            none = sum(1 for s in sites if not (s.then_ran or s.else_ran))
            shown.append(f"{len(sites)} Ifs in all: {both} both branches, {len(sites) - both - none} one, {none} none")
        text = "; ".join(shown)
        if self.unverified:
            more = f" (+{len(self.unverified) - 2} more)" if len(self.unverified) > 2 else ""
            text += f"; UNVERIFIED, rewritten but never run: {', '.join(self.unverified[:2])}{more}"
        return text

    def as_dict(self) -> dict[str, Any]:
        return {"sites": [s.as_dict() for s in self.sites], "unverified": self.unverified}


def _marker(name: str, value: int) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], value=helper.make_tensor(name + "_v", TensorProto.INT64, [], [value]))


def instrument(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[Site]] | None:
    """A copy of ``model`` with marker outputs, and the sites in marker order; None if no If."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    sites: list[Site] = []
    markers = _instrument_graph(copy.graph, "", sites)
    if not sites:
        return None
    for name in markers:
        copy.graph.output.append(helper.make_tensor_value_info(name, TensorProto.INT64, []))
    return copy, sites


def _instrument_graph(graph: onnx.GraphProto, prefix: str, sites: list[Site]) -> list[str]:
    """Instrument every If in ``graph``; returns the marker value names now available in it."""
    available: list[str] = []
    for index, node in enumerate(graph.node):
        if node.op_type in ("Loop", "Scan") or (node.op_type == "If" and node.domain not in ("", "ai.onnx")):
            _list_unreached(node, f"{prefix}{node.name or node.op_type + '#' + str(index)}/", sites)
            continue
        if node.op_type != "If":
            continue
        path = prefix + (node.name or f"If#{index}")
        site_id = len(sites)
        sites.append(Site(path))
        branches = {a.name: a for a in node.attribute if a.name in ("then_branch", "else_branch")}
        if len(branches) != 2:
            sites[-1].instrumented = False
            continue
        nested = {key: _instrument_graph(attr.g, path + "/", sites) for key, attr in branches.items()}
        own = f"{PREFIX}{site_id}"
        for key, attr in branches.items():
            g = attr.g
            mine = f"{own}_{key}"
            g.node.append(_marker(mine, 1 if key == "then_branch" else 0))
            g.output.append(helper.make_tensor_value_info(mine, TensorProto.INT64, []))
            for side in ("then_branch", "else_branch"):  # same slot order in both branches
                for name in nested[side]:
                    if side != key:  # an If nested in the other branch: "not reached" here
                        local = f"{name}_in_{key}_{site_id}"
                        g.node.append(_marker(local, -1))
                        name = local
                    g.output.append(helper.make_tensor_value_info(name, TensorProto.INT64, []))
        node.output.append(own)
        outer = [f"{name}@{site_id}" for name in nested["then_branch"] + nested["else_branch"]]
        node.output.extend(outer)
        available += [own] + outer
    return available


def _list_unreached(node: onnx.NodeProto, prefix: str, sites: list[Site]) -> None:
    """Ifs inside a Loop/Scan body (or a non-standard If): listed, not instrumented."""
    for attr in node.attribute:
        if attr.type == onnx.AttributeProto.GRAPH:
            for i, inner in enumerate(attr.g.node):
                if inner.op_type == "If":
                    sites.append(Site(prefix + (inner.name or f"If#{i}"), instrumented=False))


def record(sites: list[Site], outputs: dict[str, Any]) -> None:
    """Mark the branches one run took, from the marker outputs (in instrumentation order)."""
    markers = [(k, v) for k, v in outputs.items() if k.startswith(PREFIX)]
    instrumented = [s for s in sites if s.instrumented]
    for site, (_, value) in zip(_marker_order(instrumented), markers):
        v = int(np.asarray(value).reshape(-1)[0]) if np.asarray(value).size else -1
        site.then_ran |= v == 1
        site.else_ran |= v == 0


def _marker_order(sites: list[Site]) -> list[Site]:
    """Top-level marker outputs come out in the order the graph made them available: each If's own
    marker, then its nested ones (then-branch first); sites were appended in the same DFS order."""
    return sites


def strip_markers(outputs: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in outputs.items() if not k.startswith(PREFIX)}


def branch_bodies(model: onnx.ModelProto) -> dict[tuple[str, str], bytes]:
    """(If path, "then"/"else") → the branch's serialized body, for every If outside loops."""
    bodies: dict[tuple[str, str], bytes] = {}

    def walk(graph: onnx.GraphProto, prefix: str) -> None:
        for index, node in enumerate(graph.node):
            if node.op_type != "If" or node.domain not in ("", "ai.onnx"):
                continue
            path = prefix + (node.name or f"If#{index}")
            for attr in node.attribute:
                if attr.name in ("then_branch", "else_branch"):
                    bodies[(path, attr.name[:4])] = attr.g.SerializeToString(deterministic=True)
                    walk(attr.g, path + "/")

    walk(model.graph, "")
    return bodies


def unverified_rewrites(original: onnx.ModelProto, rewritten: onnx.ModelProto, sites: list[Site]) -> list[str]:
    """Branches no input reached whose body the rewrite changed (matched by If path)."""
    before, after = branch_bodies(original), branch_bodies(rewritten)
    ran = {(s.path, "then"): s.then_ran for s in sites} | {(s.path, "else"): s.else_ran for s in sites}
    return [f"{path} {side}" for (path, side), body in before.items()
            if not ran.get((path, side), False) and (path, side) in after and after[(path, side)] != body]
