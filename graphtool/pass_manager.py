"""Passes, their registry, and the fixed-point runner.

A pass is a small class with one ``run(graph, ctx)`` method that rewrites one graph. The manager
calls it on every graph of the model — subgraphs first, then the main graph, then function
bodies — so no pass has to know about nesting. Third-party passes register through the entry-point
group ``graphtool.passes`` (each entry point names a ``Pass`` subclass or a module that registers
its passes on import).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any, Callable, ClassVar, Iterable

from graphtool.errors import UsageError
from graphtool.ir.from_onnx import FREEZE_NODES, gc_frozen
from graphtool.ir.graph import Graph, Node
from graphtool.ir.model import Model
from graphtool.shapes import ShapeOracle

ENTRY_POINT_GROUP = "graphtool.passes"


@dataclass
class PassResult:
    changed: bool
    stats: dict[str, int] = field(default_factory=dict)


@dataclass
class PassContext:
    """What a pass may know besides the graph: the model (opsets), the options, a provenance log."""

    model: Model
    level: int = 1
    target: str = "onnx"
    max_fold_bytes: int = 16 << 20
    input_shapes: dict[str, list[int]] = field(default_factory=dict)
    # new node name -> the original node names it absorbed; filled by ``ctx.absorbed``
    provenance: dict[str, list[str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    findings: list[Any] = field(default_factory=list)  # graphtool.check.Finding, from analysis passes
    # rule or pass names whose every candidate root is explained (--explain), and what was found:
    # (rule, node) -> {"rule", "node", "fused", "depth", "reason"}
    explain: set[str] = field(default_factory=set)
    explanations: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    # the one shape oracle every pass asks; the manager invalidates it when a pass changed the model
    shapes: ShapeOracle = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.shapes = ShapeOracle(self.model)

    def opset(self, domain: str = "") -> int:
        return self.model.opset(domain) or 0

    def absorbed(self, new: Node | str, old: Iterable[Node | str]) -> None:
        """Record that ``new`` replaces ``old`` nodes, for the old→new name map of the report."""
        key = new if isinstance(new, str) else (new.name or f"{new.op_type}#{new.id}")
        names = self.provenance.setdefault(key, [])
        for node in old:
            name = node if isinstance(node, str) else node.name
            if name and name != key:
                names.extend(self.provenance.pop(name, []) if name in self.provenance else [])
                names.append(name)


class Pass:
    """Base class. Subclasses set ``level`` (and ``target``) via ``@register`` and implement ``run``."""

    name: ClassVar[str] = ""
    level: ClassVar[int] = 1
    target: ClassVar[str] = "onnx"  # "onnx": standard ops only; "ort": emits com.microsoft ops
    priority: ClassVar[int] = 50  # lower runs earlier within an iteration
    analysis: ClassVar[bool] = False  # analysis passes report findings and never edit
    # One run leaves nothing for a second run on the same graph (CSE's single topological sweep,
    # DCE's one reverse walk). The manager then skips the rerun a fixed point would cost, on
    # models of one graph only: a subgraph runs before the graph that owns it, so an edit to the
    # owner can still give the subgraph's pass something new.
    idempotent: ClassVar[bool] = False

    @classmethod
    def describe(cls) -> str:
        doc = (cls.__doc__ or "").strip()
        return doc.splitlines()[0] if doc else ""

    def run(self, graph: Graph, ctx: PassContext) -> PassResult:  # pragma: no cover - interface
        raise NotImplementedError


REGISTRY: dict[str, type[Pass]] = {}
_plugins_loaded = False


def kebab(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "-", name).lower()


def register(level: int = 1, target: str = "onnx", priority: int = 50, name: str | None = None) -> Callable[[type[Pass]], type[Pass]]:
    """Class decorator: add a pass to the registry under its kebab-case class name."""

    def wrap(cls: type[Pass]) -> type[Pass]:
        cls.name = name or cls.__dict__.get("name") or kebab(cls.__name__)
        cls.level, cls.target, cls.priority = level, target, priority
        REGISTRY[cls.name] = cls
        return cls

    return wrap


def load_builtin_and_plugins() -> dict[str, type[Pass]]:
    """Import the built-in passes and every installed plugin once; returns the registry."""
    global _plugins_loaded
    if not _plugins_loaded:
        _plugins_loaded = True
        import graphtool.passes  # noqa: F401  (registers the built-ins)

        for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
            obj = ep.load()
            if isinstance(obj, type) and issubclass(obj, Pass) and obj.name not in REGISTRY:
                register(obj.level, obj.target, obj.priority)(obj)
    return REGISTRY


def select_passes(
    level: int = 1,
    target: str = "onnx",
    only: Iterable[str] | None = None,
    skip: Iterable[str] = (),
    analysis: bool = False,
) -> list[type[Pass]]:
    """The passes for a level (levels include the ones below) and target, in run order."""
    registry = load_builtin_and_plugins()
    unknown = [n for n in [*(only or []), *skip] if n not in registry]
    if unknown:
        raise UsageError(f"unknown pass '{unknown[0]}' (see `graphtool passes`)")
    if only:
        chosen = [registry[n] for n in only]
    else:
        chosen = [
            cls
            for cls in registry.values()
            if cls.level <= level and cls.target in ("onnx", target) and cls.analysis == analysis
        ]
    chosen = [c for c in chosen if c.name not in set(skip)]
    return sorted(chosen, key=lambda c: (c.priority, c.name))


@dataclass
class PassRecord:
    name: str
    runs: int = 0
    changed_runs: int = 0
    nodes_removed: int = 0
    seconds: float = 0.0
    stats: dict[str, int] = field(default_factory=dict)


@dataclass
class PassReport:
    nodes_before: int
    nodes_after: int = 0
    iterations: int = 0
    seconds: float = 0.0
    passes: dict[str, PassRecord] = field(default_factory=dict)
    trace: list[tuple[int, str]] = field(default_factory=list)  # (iteration, pass) that changed

    def as_dict(self) -> dict[str, Any]:
        return {
            "nodes_before": self.nodes_before,
            "nodes_after": self.nodes_after,
            "iterations": self.iterations,
            "seconds": round(self.seconds, 4),
            "passes": [
                {
                    "name": r.name,
                    "runs": r.runs,
                    "changed_runs": r.changed_runs,
                    "nodes_removed": r.nodes_removed,
                    "seconds": round(r.seconds, 4),
                    "stats": r.stats,
                }
                for r in self.passes.values()
            ],
        }


def total_nodes(model: Model) -> int:
    return sum(len(g) for _, g in model.graphs())


class PassManager:
    """Runs passes over every graph of a model until none changes anything (or ``max_iterations``)."""

    def __init__(self, passes: Iterable[type[Pass]], max_iterations: int = 8, on_step: Callable[[str], None] | None = None):
        self.passes = list(passes)
        self.max_iterations = max_iterations
        self.on_step = on_step

    def run(self, model: Model, ctx: PassContext) -> PassReport:
        if total_nodes(model) < FREEZE_NODES:
            return self._run(model, ctx)
        with gc_frozen():  # the model's objects live through the run: no collection need walk them
            return self._run(model, ctx)

    def _run(self, model: Model, ctx: PassContext) -> PassReport:
        start = time.perf_counter()
        report = PassReport(nodes_before=total_nodes(model))
        instances = [cls() for cls in self.passes]
        # A pass is skipped while the model is as it last left the pass with nothing to do:
        # ``edits`` counts changing runs, ``settled[name]`` is that count when it last had none.
        edits = 0
        settled: dict[str, int] = {}
        one_graph = sum(1 for _ in model.graphs()) == 1
        for iteration in range(1, self.max_iterations + 1):
            report.iterations = iteration
            any_change = False
            for p in instances:
                record = report.passes.setdefault(p.name, PassRecord(p.name))
                if settled.get(p.name) == edits:
                    continue
                before = total_nodes(model)
                t0 = time.perf_counter()
                changed = self.run_once(p, model, ctx, record)
                record.seconds += time.perf_counter() - t0
                record.runs += 1
                record.nodes_removed += before - total_nodes(model)
                if changed:
                    record.changed_runs += 1
                    report.trace.append((iteration, p.name))
                    any_change = True
                    edits += 1
                if not changed or (p.idempotent and one_graph):
                    settled[p.name] = edits
                if self.on_step:
                    self.on_step(p.name)
            if not any_change:
                break
        report.nodes_after = total_nodes(model)
        report.seconds = time.perf_counter() - start
        return report

    @staticmethod
    def run_once(p: Pass, model: Model, ctx: PassContext, record: PassRecord | None = None) -> bool:
        changed = False
        for _, graph in list(model.graphs()):
            result = p.run(graph, ctx)
            if result.changed:
                changed = True
                ctx.shapes.invalidate()
                renamed = graph.unique_op_names()  # two nodes of one name: onnxruntime refuses the model
                if renamed:
                    result.stats["renamed-duplicate-node-names"] = result.stats.get("renamed-duplicate-node-names", 0) + renamed
                if graph.parent is not None:
                    _refresh_owner(graph)
            if record is not None:
                for key, value in result.stats.items():
                    record.stats[key] = record.stats.get(key, 0) + value
        return changed


def _refresh_owner(sub: Graph) -> None:
    """After a subgraph changed, its owner's capture edges (and theirs, up the chain) must
    follow what it now reads."""
    while sub.parent is not None and sub.owner is not None and sub.owner in sub.parent.nx:
        sub.parent.refresh_captures(sub.parent.node(sub.owner))
        sub = sub.parent
