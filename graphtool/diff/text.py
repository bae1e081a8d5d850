"""The text form of a diff: what changed, grouped and named, then a few examples of each group.

A terminal is the reader, so the default output is at most ``max_lines`` lines (40) whatever the
two models are: the counts, one line per group (``Conv+BatchNormalization → Conv ×53``), then up
to ``EXAMPLES`` examples per group while lines are left. ``show_all`` prints every change instead,
grouped the same way (``graphtool diff --all``; ``--json`` has every change as data).
"""

from __future__ import annotations

from collections import Counter

from graphtool.diff import run as run_module
from graphtool.diff.run import ADDED, CHANGED, REMOVED, DiffResult, NodeDiff, change_text, describe, detail_text
from graphtool.diff.summary import CONSTANT_OPS, GRAPH, RENAMED, ChangeGroup, summarize
from graphtool.fusion_trace import short_op
from graphtool.ir.graph import Node

MAX_LINES = 40
EXAMPLES = 3
SUMMARY_GROUPS = 14  # summary lines before "… N more groups" (keeps room for examples)
WIDTH = 120  # example lines are cut here: one change, one terminal line
_MARK = {ADDED: "+", REMOVED: "-", CHANGED: "~"}


def _cut(text: str, width: int = WIDTH) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _qualified(node: Node) -> str:
    return node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}::{node.op_type}"


def node_line(nd: NodeDiff) -> str:
    """``- BatchNormalization n17 (removed)`` / ``~ Conv n32: pads: [0, 0] -> [1, 1]``."""
    node = nd.node
    head = f"{_MARK[nd.change]} {_qualified(node)} {describe(node)}"
    if nd.change != CHANGED:
        return f"{head} ({nd.change})"
    return head + ": " + "; ".join(detail_text(d) for d in nd.details)


def occurrence_line(nodes: list[NodeDiff]) -> str:
    """One rewrite: the new node(s) ⇐ the removed ones they stand for (computing ops first)."""
    if len(nodes) == 1:
        return node_line(nodes[0])
    new = [f"{short_op(nd.b.domain, nd.b.op_type)} {describe(nd.b)}" for nd in nodes if nd.b is not None]
    old = sorted((nd.a for nd in nodes if nd.change == REMOVED and nd.a is not None),
                 key=lambda n: (n.op_type in CONSTANT_OPS, n.order))
    shown = [f"{short_op(n.domain, n.op_type)} {describe(n)}" for n in old[:4]]
    if len(old) > 4:
        shown.append(f"+{len(old) - 4} more")
    if not new:
        return ", ".join(shown)
    return f"{', '.join(new)} ⇐ {', '.join(shown) or '(nothing removed)'}"


def tally_text(group: ChangeGroup) -> str:
    t = group.tally()
    parts = [f"{_MARK[c]}{t[c]}" for c in (REMOVED, ADDED, CHANGED) if t[c]]
    return " ".join(parts)


def _change_line(d: dict) -> str:
    scope = d.get("scope")
    text = change_text({k: v for k, v in d.items() if k != "scope"})
    return f"{scope}: {text}" if scope else text


def group_line(group: ChangeGroup) -> str:
    """The summary line of a group; a graph-level group of one change says the change itself."""
    if group.kind in (GRAPH, RENAMED) and group.count == 1:
        return f"{group.title}: {_change_line(group.changes[0])}"
    text = f"{group.title} ×{group.count}"
    if group.max_abs_diff is not None:
        text += f" (max |diff| {group.max_abs_diff:.4g})"
    return text


def _examples(group: ChangeGroup) -> list[str]:
    if group.kind in (GRAPH, RENAMED):
        return [_change_line(d) for d in group.changes]
    return [occurrence_line(occ) for occ in group.occurrences]


def _summary_lines(groups: list[ChangeGroup], room: int) -> list[str]:
    shown = groups if len(groups) <= room else groups[: room - 1]
    width = min(max((len(group_line(g)) for g in shown), default=0), 72)
    lines = []
    for g in shown:
        tally = tally_text(g)
        lines.append(_cut(f"  {group_line(g).ljust(width)}  {tally}".rstrip()))
    rest = groups[len(shown):]
    if rest:
        nodes = {c: sum(g.tally()[c] for g in rest) for c in (REMOVED, ADDED, CHANGED)}
        graph = sum(g.count for g in rest if g.kind in (GRAPH, RENAMED))
        parts = [f"{_MARK[c]}{n}" for c, n in nodes.items() if n] + ([f"{graph} graph-level"] if graph else [])
        lines.append(f"  … {len(rest)} more groups ({' '.join(parts)})")
    return lines


def format_diff(result: DiffResult, label_a: str = "A", label_b: str = "B", *, show_all: bool = False,
                max_lines: int = MAX_LINES, groups: list[ChangeGroup] | None = None) -> str:
    """The human report: counts, the groups largest first, then examples (or, with ``show_all``,
    every change). Without ``show_all`` it is at most ``max_lines`` lines (min 12)."""
    c = result.counts
    lines = [
        f"A: {label_a} ({result.a.node_count()} nodes)",
        f"B: {label_b} ({result.b.node_count()} nodes)",
    ]
    if result.equal:
        lines.append(f"no differences ({c['unchanged']} nodes matched)")
        return "\n".join(lines)
    lines.append(
        f"{c[REMOVED]} removed, {c[ADDED]} added, {c[CHANGED]} changed, {c['unchanged']} unchanged; "
        f"{c['graph_changes']} graph-level change{'s' if c['graph_changes'] != 1 else ''}"
    )
    values = [v for gd in result.graphs for v in gd.value_changes]
    groups = summarize(result) if groups is None else groups
    if show_all:
        extra = [f"  = {v['value']}: {v['what']} ({v['old']} -> {v['new']})" for v in values]
        return "\n".join(lines + _all_lines(groups) + (["values made differently:"] + extra if extra else []))
    max_lines = max(max_lines, 12)
    lines.append("what changed, largest first (nodes: -removed +added ~changed):")
    lines += _summary_lines(groups, min(SUMMARY_GROUPS, max_lines - len(lines) - 5))
    if values:
        kinds = Counter(v["what"] for v in values)
        lines.append(_cut("values read by the same name, made differently: " +
                          ", ".join(f"{n} {what}" for what, n in sorted(kinds.items())) +
                          " (not changes of their readers)"))
    room = max_lines - len(lines) - 2  # the details header and the closing hint
    details: list[str] = []
    omitted = 0
    for g in groups:
        examples = _examples(g)
        if g.kind in (GRAPH, RENAMED) and g.count == 1:
            continue  # its summary line said it all
        if room < 2:
            omitted += 1
            continue
        k = min(EXAMPLES, len(examples), room - 1)
        more = f" ({k} of {len(examples)} shown)" if k < len(examples) else ""
        details.append(_cut(f"{group_line(g)}{more}:"))
        details += [_cut(f"  {e}") for e in examples[:k]]
        room -= 1 + k
        omitted += k < len(examples)
    if details:
        lines.append("examples:")
        lines += details
    if omitted:
        lines.append("(--all prints every change; --json keeps them all as data)")
    return "\n".join(lines)


run_module.REPORT, run_module.GROUPS = format_diff, summarize


def _all_lines(groups: list[ChangeGroup]) -> list[str]:
    """Every change, grouped: each rewrite as one line with its nodes under it."""
    lines: list[str] = []
    for g in groups:
        tally = tally_text(g)
        lines.append(f"{group_line(g)}" + (f"  [{tally}]" if tally else "") + ":")
        if g.kind in (GRAPH, RENAMED):
            lines += [f"  * {_change_line(d)}" for d in g.changes]
            continue
        listed: set[int] = set()
        for occ in g.occurrences:
            if len(occ) == 1:
                lines.append(f"  {node_line(occ[0])}")
            else:
                lines.append(f"  • {occurrence_line(occ)}")
                lines += [f"    {node_line(nd)}" for nd in occ]
            listed.update(id(nd) for nd in occ)
        lines += [f"  {node_line(nd)}" for nd in g.nodes if id(nd) not in listed]
    return lines
