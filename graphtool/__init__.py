"""graphtool: see, optimize and prove ONNX graphs.

The front door of the Python API; the CLI and README's example use it::

    import graphtool as gt

    m = gt.load("model.onnx")
    m2, report = gt.optimize(m, level=2)
    gt.save(m2, "model.opt.onnx")
    print(gt.verify(m, m2).summary())

Every function imports its machinery on first call, so ``import graphtool`` (and the CLI's start)
stays cheap: onnxruntime, NetworkX and the passes load only when something needs them.
"""

from __future__ import annotations

import os
import sys
import types
from typing import TYPE_CHECKING, Any, Iterable

if TYPE_CHECKING:  # pragma: no cover - names for type checkers; loaded lazily at run time
    import numpy as np

    from graphtool.check import CheckReport
    from graphtool.diff import DiffResult
    from graphtool.ir.graph import Graph
    from graphtool.ir.model import Model
    from graphtool.ir.records import Node
    from graphtool.pass_manager import PassReport
    from graphtool.verify import Verification

__all__ = ["load", "save", "optimize", "verify", "diff", "check", "inspect", "compare", "tune",
           "Model", "Graph", "Node", "PassReport", "DiffResult", "Verification", "CheckReport"]

# public type -> the module that defines it (imported on first use, like the functions' machinery)
_TYPES = {
    "Model": "graphtool.ir.model",
    "Graph": "graphtool.ir.graph",
    "Node": "graphtool.ir.records",
    "PassReport": "graphtool.pass_manager",
    "DiffResult": "graphtool.diff",
    "Verification": "graphtool.verify",
    "CheckReport": "graphtool.check",
}


def load(path: str | os.PathLike[str]) -> Model:
    """Read an ONNX file into graphtool's IR (external data stays on disk until a pass needs it).

    Bad input raises ``graphtool.errors.GraphtoolError`` with a one-line message."""
    from graphtool import io, shapes  # noqa: F401  (shapes: Graph.shape() answers undeclared values)

    return io.load(path)


def save(model: Model, path: str | os.PathLike[str], external: bool | None = None) -> None:
    """Write ``model`` atomically (temp file, then rename); an untouched model comes back byte-identical.

    ``external=None`` keeps weights external when they were (or would not fit in one protobuf)."""
    from graphtool import io

    io.save(model, path, external=external)


def optimize(model: Model, level: int = 1, target: str = "onnx", passes: Iterable[str] | None = None,
             skip: Iterable[str] = (), **options: Any) -> tuple[Model, PassReport]:
    """Run a level's passes over a copy of ``model``; returns (optimized copy, report).

    Levels mirror onnxruntime: 1 basic, 2 extended (``target="ort"`` adds com.microsoft ops).
    This does not verify: call :func:`verify` (the CLI does both)."""
    from graphtool.optimize import optimize as run

    optimized, report, _ = run(model, level=level, target=target, passes=passes, skip=skip, **options)
    return optimized, report


def verify(original: Model, rewritten: Model, feeds: dict[str, np.ndarray] | None = None,
           **options: Any) -> Verification:
    """Run both models in onnxruntime on the same input sets and compare every output.

    Without ``feeds`` the inputs are discovered (graphtool.verify.discover); the result says how, which
    If branches ran, and which rewrites stayed unverified."""
    from graphtool.verify import verify as run

    return run(original, rewritten, feeds=feeds, **options)


def diff(a: Model, b: Model) -> DiffResult:
    """Match two models' graphs (structure, then names) and list what changed."""
    from graphtool.diff import diff as run

    return run(a, b)


def check(model: Model, runtime: str = "ort") -> CheckReport:
    """Opset, IR, schema and (``runtime="ort"``) onnxruntime kernel-coverage findings."""
    from graphtool.check import check as run

    return run(model, runtime)


def inspect(model: Model, path: str | None = None) -> dict[str, Any]:
    """The ``graphtool inspect`` summary as a dict (no weight byte is read)."""
    from graphtool.inspect import inspect_model

    return inspect_model(model, path)


def compare(model: Model, levels: Iterable[int] = (1, 2, 3), target: str = "onnx", **options: Any) -> dict[str, Any]:
    """graphtool's result beside onnxruntime's own optimized graphs at each level."""
    from graphtool.compare import compare as run

    return run(model, levels, target, **options)


def tune(path: str | os.PathLike[str], output: str | os.PathLike[str], budget: float = 300.0, target: str = "ort",
         threads: int | None = None, feeds: dict[str, np.ndarray] | None = None, **options: Any) -> dict[str, Any]:
    """Measure graphtool's rewrite sets x onnxruntime's settings on this machine and write the
    fastest verified model to ``output`` with its settings in ``output.session.json``
    (``graphtool.runtime.session_for(output)`` opens it so); returns the report ``tune --json`` prints."""
    from graphtool.tune import tune_file

    return tune_file(os.fspath(path), os.fspath(output), target=target, threads=threads, budget=budget,
                     feeds=feeds, **options).as_dict()


def __getattr__(name: str) -> Any:
    """The public types (``graphtool.Model``, ``Graph``, ``Node``, ``PassReport``, ``DiffResult``,
    ``Verification``, ``CheckReport``) without importing their modules at package import."""
    module = _TYPES.get(name)
    if module is None:
        raise AttributeError(f"module 'graphtool' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # resolved once
    return value


class _FrontDoor(types.ModuleType):
    """Keeps the front-door functions when a submodule of the same name is imported.

    ``graphtool.optimize`` is both this API function and the module that implements it; Python's
    import system sets ``graphtool.optimize = <module>`` when the module loads, which would replace
    the function. Submodules stay reachable as ``from graphtool.optimize import …`` (sys.modules).
    """

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _FUNCTIONS and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


_FUNCTIONS = frozenset({"load", "save", "optimize", "verify", "diff", "check", "inspect", "compare", "tune"})
sys.modules[__name__].__class__ = _FrontDoor
