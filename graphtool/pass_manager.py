"""Passes, their registry, and the fixed-point runner.

A pass is a small class with one ``run(graph, ctx)`` method that rewrites one graph. The manager
calls it on every graph of the model — subgraphs first, then the main graph, then function
bodies — so no pass has to know about nesting. Third-party passes register through the entry-point
group ``graphtool.passes``, the way pytest and flake8 plugins do:

* the entry point's *name* is the pass name (``my-pass = "my_pkg:MyPass"`` registers ``my-pass``);
  an entry point naming a module registers what that module registers on import;
* a plugin whose name is a built-in's is refused with one warning line naming both (the built-in
  stays), and so is a plugin module whose ``@register`` would replace a built-in;
* a plugin that fails to import costs one warning line naming it; every command still works;
* plugin passes never join a level's default pipeline: they run when named (``--passes NAME``)
  or opted in (``--plugins NAME,...`` / ``--plugins all``, ``optimize(plugins=...)``), and the
  report lists the ones that ran.
"""

from __future__ import annotations

import os
import re
import sys
import time
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any, Callable, ClassVar, Iterable

from graphtool.errors import GraphtoolError, UsageError
from graphtool.ir.from_onnx import FREEZE_NODES, gc_frozen
from graphtool.ir.graph import Graph, Node
from graphtool.ir.model import Model
from graphtool.shapes import ShapeOracle

ENTRY_POINT_GROUP = "graphtool.passes"


@dataclass
class PassResult:
    """What one run of a pass over one graph returns.

    ``changed``: whether the graph was edited (the manager reruns the level until no pass says so);
    ``stats``: counts for the report (``{"fused": 3}``), summed over graphs and iterations."""

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
        """The model's imported opset of ``domain`` ('' = the default ONNX domain), 0 if none."""
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
        """The first line of the class docstring (what ``graphtool passes`` shows)."""
        doc = (cls.__doc__ or "").strip()
        return doc.splitlines()[0] if doc else ""

    def run(self, graph: Graph, ctx: PassContext) -> PassResult:  # pragma: no cover - interface
        """Rewrite ``graph`` (the main graph, a subgraph or a function body) in place.

        Leave the graph alone where a rewrite cannot be proven safe; return whether it changed."""
        raise NotImplementedError


REGISTRY: dict[str, type[Pass]] = {}
_plugins_loaded = False


@dataclass(frozen=True)
class Plugin:
    """Where a plugin pass came from: its entry point and the distribution that declares it."""

    name: str  # the entry point's name: the pass name
    value: str  # "module:Class" or "module"
    distribution: str
    version: str

    def label(self) -> str:
        """``"my-gt-plugin 0.1"``: what ``passes`` and the report print."""
        return f"{self.distribution} {self.version}".strip()


# pass name -> its plugin (a name absent here is a built-in); the warnings loading printed
PLUGINS: dict[str, Plugin] = {}
PLUGIN_WARNINGS: list[str] = []
# while a plugin imports, ``register`` collects (name, class) here instead of touching REGISTRY
_pending: list[tuple[str, type[Pass]]] | None = None
_WARNED_ENV = "GRAPHTOOL_PLUGINS_WARNED"  # children of this process (sandbox, peers) stay quiet


def kebab(name: str) -> str:
    """``FuseConvBatchNorm`` -> ``fuse-conv-batch-norm`` (a built-in pass's name)."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "-", name).lower()


def register(level: int = 1, target: str = "onnx", priority: int = 50, name: str | None = None) -> Callable[[type[Pass]], type[Pass]]:
    """Class decorator: add a pass to the registry under ``name`` (default: the kebab-case class
    name) with its level (1, 2 or 3), target ("onnx" or "ort") and priority (lower runs first).

    In a plugin, the entry point's name wins over both, and a name a built-in holds is refused."""

    def wrap(cls: type[Pass]) -> type[Pass]:
        chosen = name or cls.__dict__.get("name") or kebab(cls.__name__)
        cls.level, cls.target, cls.priority = level, target, priority
        if _pending is not None:  # a plugin is importing: the loader decides
            _pending.append((chosen, cls))
            return cls
        cls.name = chosen
        REGISTRY[cls.name] = cls
        return cls

    return wrap


def _warn(message: str) -> None:
    """One ``graphtool: warning:`` line on stderr (kept in ``PLUGIN_WARNINGS`` for tests)."""
    PLUGIN_WARNINGS.append(message)
    if not os.environ.get(_WARNED_ENV):
        print(f"graphtool: warning: {message}", file=sys.stderr, flush=True)


def _one_line(err: BaseException) -> str:
    text = str(err).strip()
    return f"{type(err).__name__}: {text.splitlines()[0]}" if text else type(err).__name__


def _distribution(ep: metadata.EntryPoint) -> tuple[str, str]:
    dist = getattr(ep, "dist", None)
    if dist is None:
        return "?", ""
    return dist.metadata["Name"] or dist.name, dist.version or ""


def _add_plugin(plugin: Plugin, name: str, cls: type[Pass]) -> None:
    """Register ``cls`` under ``name`` for ``plugin`` unless a built-in or an earlier plugin has it."""
    where = f"{cls.__module__}:{cls.__qualname__} from {plugin.label()}"
    if name in PLUGINS:
        other = PLUGINS[name]
        _warn(f"plugin pass '{name}' ({where}) is also declared by {other.label()} ({other.value}); "
              "the first one is kept")
    elif name in REGISTRY:
        builtin = REGISTRY[name]
        _warn(f"plugin pass '{name}' ({where}) has the name of the built-in pass '{name}' "
              f"({builtin.__module__}.{builtin.__qualname__}); the built-in is kept, the plugin is ignored")
    else:
        cls.name = name
        REGISTRY[name] = cls
        PLUGINS[name] = Plugin(name, plugin.value, plugin.distribution, plugin.version)


def _load_plugin(ep: metadata.EntryPoint) -> None:
    global _pending
    distribution, version = _distribution(ep)
    plugin = Plugin(ep.name, ep.value, distribution, version)
    if ep.name in REGISTRY and ep.name not in PLUGINS:  # refused before its code runs
        builtin = REGISTRY[ep.name]
        _warn(f"plugin pass '{ep.name}' ({ep.value} from {plugin.label()}) has the name of the built-in pass "
              f"'{ep.name}' ({builtin.__module__}.{builtin.__qualname__}); the built-in is kept, the plugin is ignored")
        return
    _pending = registered = []
    try:
        obj = ep.load()
    except Exception as err:  # noqa: BLE001 - any import failure is the plugin's, never ours
        _warn(f"plugin pass '{ep.name}' ({ep.value} from {plugin.label()}) failed to import: {_one_line(err)}; skipped")
        return
    finally:
        _pending = None
    if isinstance(obj, type) and issubclass(obj, Pass):
        _add_plugin(plugin, ep.name, obj)  # the entry point's name, whatever its @register said
    elif registered:  # a module that registers its passes on import
        for name, cls in registered:
            _add_plugin(plugin, name, cls)
    else:
        _warn(f"plugin pass '{ep.name}' ({ep.value} from {plugin.label()}) names neither a "
              "graphtool.pass_manager.Pass subclass nor a module that registers one; skipped")


def load_builtin_and_plugins() -> dict[str, type[Pass]]:
    """Import the built-in passes and every installed plugin once; returns the registry
    (pass name -> class). ``PLUGINS`` tells which names came from plugins."""
    global _plugins_loaded
    if not _plugins_loaded:
        _plugins_loaded = True
        import graphtool.passes  # noqa: F401  (registers the built-ins)

        warned = len(PLUGIN_WARNINGS)
        for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
            _load_plugin(ep)
        if len(PLUGIN_WARNINGS) > warned:
            os.environ[_WARNED_ENV] = "1"  # child processes load them again: one warning is enough
    return REGISTRY


def is_plugin(name: str) -> bool:
    """Whether the pass ``name`` came from an installed plugin (not graphtool itself)."""
    return name in PLUGINS


def select_passes(
    level: int = 1,
    target: str = "onnx",
    only: Iterable[str] | None = None,
    skip: Iterable[str] = (),
    analysis: bool = False,
    plugins: Iterable[str] | str = (),
) -> list[type[Pass]]:
    """The passes for a level (levels include the ones below) and target, in run order.

    ``only`` names exactly the passes to run (plugins included). Otherwise the built-ins of the
    level run, plus the plugin passes ``plugins`` names (``"all"``: every installed one at this
    level and target); installed plugins never run unasked."""
    registry = load_builtin_and_plugins()
    wanted_plugins = [p for p in ([plugins] if isinstance(plugins, str) else plugins) if p]
    everything = "all" in wanted_plugins
    wanted_plugins = [p for p in wanted_plugins if p != "all"]
    unknown = [n for n in [*(only or []), *skip, *wanted_plugins] if n not in registry]
    if unknown:
        raise UsageError(f"unknown pass '{unknown[0]}'{did_you_mean(unknown[0], registry)} (see `graphtool passes`)")
    not_plugins = [n for n in wanted_plugins if n not in PLUGINS]
    if not_plugins:
        raise UsageError(f"'{not_plugins[0]}' is a built-in pass, not a plugin: --plugins adds installed plugins "
                         "(use --passes to choose built-ins)")
    if only:
        chosen = [registry[n] for n in only]
    else:
        chosen = [
            cls
            for name, cls in registry.items()
            if cls.level <= level and cls.target in ("onnx", target) and cls.analysis == analysis
            and (name not in PLUGINS or everything or name in wanted_plugins)
        ]
    chosen = [c for c in chosen if c.name not in set(skip)]
    return sorted(chosen, key=lambda c: (c.priority, c.name))


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """``"; did you mean 'fold-constants'?"`` for the closest of ``choices`` (difflib), or ''."""
    import difflib

    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"; did you mean '{close[0]}'?" if close else ""


class PluginFailed(GraphtoolError):
    """A plugin pass raised: the plugin's fault, reported by its name and distribution."""


@dataclass
class PassRecord:
    """One pass's line in the report: runs, runs that changed something, nodes removed, time,
    summed stats, and the plugin it came from (``"dist version"``; None for a built-in)."""

    name: str
    runs: int = 0
    changed_runs: int = 0
    nodes_removed: int = 0
    seconds: float = 0.0
    stats: dict[str, int] = field(default_factory=dict)
    plugin: str | None = None

    @property
    def idle(self) -> bool:
        """Ran and did nothing: no change, no node removed, every stat zero (hidden in the text)."""
        return not self.changed_runs and not self.nodes_removed and not any(self.stats.values())


@dataclass
class PassReport:
    """What ``optimize`` did: node counts, iterations, time, and one ``PassRecord`` per pass."""

    nodes_before: int
    nodes_after: int = 0
    iterations: int = 0
    seconds: float = 0.0
    passes: dict[str, PassRecord] = field(default_factory=dict)
    trace: list[tuple[int, str]] = field(default_factory=list)  # (iteration, pass) that changed

    @property
    def plugins(self) -> list[str]:
        """The plugin passes that ran, as ``"name (dist version)"``."""
        return [f"{r.name} ({r.plugin})" for r in self.passes.values() if r.plugin is not None and r.runs]

    def __repr__(self) -> str:
        return (f"<PassReport nodes {self.nodes_before} -> {self.nodes_after}, {len(self.passes)} passes, "
                f"{self.iterations} iterations, {self.seconds:.2f} s>")

    def as_dict(self) -> dict[str, Any]:
        """The JSON form (``optimize --json``'s ``report``)."""
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
                    **({"plugin": r.plugin} if r.plugin is not None else {}),
                }
                for r in self.passes.values()
            ],
            "plugins": self.plugins,
        }


def total_nodes(model: Model) -> int:
    """Op nodes in every graph of the model (subgraphs and function bodies included)."""
    return sum(len(g) for _, g in model.graphs())


class PassManager:
    """Runs passes over every graph of a model until none changes anything (or ``max_iterations``)."""

    def __init__(self, passes: Iterable[type[Pass]], max_iterations: int = 8, on_step: Callable[[str], None] | None = None):
        self.passes = list(passes)
        self.max_iterations = max_iterations
        self.on_step = on_step

    def run(self, model: Model, ctx: PassContext) -> PassReport:
        """Run the passes over ``model`` (edited in place) until a fixed point; the report."""
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
                record = report.passes.get(p.name)
                if record is None:
                    plugin = PLUGINS.get(p.name)
                    record = report.passes[p.name] = PassRecord(p.name, plugin=plugin.label() if plugin else None)
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
        """Run ``p`` once over every graph of ``model``; whether any changed."""
        changed = False
        plugin = PLUGINS.get(p.name)
        for _, graph in list(model.graphs()):
            if plugin is None:
                result = p.run(graph, ctx)
            else:
                try:
                    result = p.run(graph, ctx)
                except GraphtoolError:
                    raise
                except Exception as err:  # noqa: BLE001 - the plugin's bug: say whose
                    raise PluginFailed(f"plugin pass '{p.name}' ({plugin.value} from {plugin.label()}) raised "
                                       f"{type(err).__name__}: {str(err).splitlines()[0] if str(err).strip() else ''}"
                                       "; nothing written") from err
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
