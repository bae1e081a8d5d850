"""``--explain RULE``: for each candidate root, whether it fused and, if not, the first thing that failed.

"First" means the deepest point the match reached before pattern and graph parted: that is the
constraint a user has to look at. Candidates refused at the root itself (a Reshape that is not
the end of an attention block) are counted, not listed — they are noise, not near-matches.
"""

from __future__ import annotations

from typing import Any, Iterable

from graphtool.errors import UsageError
from graphtool.pass_manager import load_builtin_and_plugins

NEAR = 2  # a candidate whose match reached this many ops is a near-match worth a line


def known_rules() -> dict[str, str]:
    """Rule name → the pass that runs it (passes count too: naming a pass explains all its rules)."""
    from graphtool.rewrite.rule import RulePass

    names: dict[str, str] = {}
    for cls in load_builtin_and_plugins().values():
        if isinstance(cls, type) and issubclass(cls, RulePass):
            names[cls.name] = cls.name
            names.update({rule.name: cls.name for rule in cls.rules})
    return names


def validate(wanted: Iterable[str]) -> set[str]:
    known = known_rules()
    chosen = set(wanted)
    unknown = sorted(chosen - set(known))
    if unknown:
        raise UsageError(f"--explain: unknown rule '{unknown[0]}' (rules: {', '.join(sorted(known))})")
    return chosen


def entries(explanations: dict[Any, dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(explanations.values(), key=lambda e: (e["rule"], not e["fused"], -e["depth"], e["node"]))


def format_explanations(explanations: dict[Any, dict[str, Any]]) -> str:
    if not explanations:
        return "explain: no candidate root (no node of the rules' anchor op type)"
    lines, far = [], {}
    for e in entries(explanations):
        if e["fused"]:
            lines.append(f"{e['rule']}: {e['node']}: fused")
        elif e["depth"] >= NEAR:
            lines.append(f"{e['rule']}: {e['node']}: refused after {e['depth']} ops: {e['reason']}")
        else:
            far[e["rule"]] = far.get(e["rule"], 0) + 1
    for rule, count in sorted(far.items()):
        lines.append(f"{rule}: {count} other candidate(s) refused at the root (not this pattern)")
    return "\n".join(lines)
