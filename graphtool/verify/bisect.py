"""Find the pass (and the nodes it rewrote) that broke a model's outputs.

Passes are deterministic, so the optimization can be replayed from the original: only the pass
runs that changed something (the report's trace) are repeated, one at a time, verifying after
each. The first run after which outputs differ is the culprit; the nodes it removed or added
name the rewrite.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from graphtool.ir.model import Model
from graphtool.optimize import clone
from graphtool.pass_manager import PassContext, PassManager, PassReport, load_builtin_and_plugins
from graphtool.verify.verification import Verification, verify


@dataclass
class Culprit:
    pass_name: str
    iteration: int
    removed: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    verification: Verification | None = None

    def describe(self) -> str:
        touched = self.removed[:3] or self.added[:3]
        where = f" rewriting {', '.join(repr(n) for n in touched)}" if touched else ""
        more = len(self.removed) - 3 if self.removed else len(self.added) - 3
        if touched and more > 0:
            where += f" (+{more} more)"
        return f"pass '{self.pass_name}' (iteration {self.iteration}){where}"

    def as_dict(self) -> dict[str, Any]:
        return {"pass": self.pass_name, "iteration": self.iteration, "removed": self.removed, "added": self.added,
                "verification": self.verification.as_dict() if self.verification else None}


def _labels(model: Model) -> set[str]:
    return {f"{n.op_type}:{n.name or ('#' + ','.join(n.outputs))}" for n in model.all_nodes()}


def find_culprit(original: Model, report: PassReport, ctx: PassContext, start: Model | None = None,
                 **verify_args: Any) -> Culprit | None:
    """Replay the trace from ``start`` (the model the passes ran on: ``original`` unless it was
    first converted, e.g. by --upgrade-opset), verifying every step against ``original``."""
    registry = load_builtin_and_plugins()
    model = clone(start if start is not None else original)
    replay_ctx = PassContext(model, level=ctx.level, target=ctx.target, max_fold_bytes=ctx.max_fold_bytes,
                             input_shapes=dict(ctx.input_shapes))
    instances: dict[str, Any] = {}
    for iteration, name in report.trace:
        before = _labels(model)
        p = instances.setdefault(name, registry[name]())
        PassManager.run_once(p, model, replay_ctx)
        result = verify(original, model, **verify_args)
        if not result.ok:
            after = _labels(model)
            return Culprit(name, iteration, sorted(before - after), sorted(after - before), result)
    return None
