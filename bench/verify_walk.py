"""The path a verification takes through graphtool's modules, measured by running it (issue 31).

A static walk over the code cannot see through a package's ``__init__`` or a callback, so this
script traces the calls: ``graphtool.verify(original, rewritten)`` on a real model, with sessions
sandboxed as the CLI runs them, and every Python call from one graphtool module into another is
one step of the walk. Each module's floor comes from the import graph (one above everything it
imports; a name imported from a package counts as an import of the module that defines it).

Printed: the modules entered, in order; the climbs (a call into a module on a higher floor than
the caller: the code going back up the floors, by a callback or a lazy import); the returns (a
call into a module the walk had already left for another). Run it in two checkouts to compare::

    python bench/verify_walk.py [MODEL]            # default: the onnx wheel's light squeezenet
"""

from __future__ import annotations

import json
import os
import sys
import threading

import networkx as nx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def floors() -> dict[str, int]:
    """Each module's floor over the import graph ``tests/test_imports.py`` checks (names taken from
    a package resolve to the module that defines them; a circle is one floor)."""
    from tests.test_imports import import_graph

    graph = import_graph()
    dag = nx.condensation(graph)
    floor: dict[int, int] = {}
    for c in reversed(list(nx.topological_sort(dag))):
        floor[c] = 1 + max((floor[s] for s in dag.successors(c)), default=0)
    return {m: floor[dag.graph["mapping"][m]] for m in graph}


GENERATORS = 0x20 | 0x80 | 0x200  # CO_GENERATOR, CO_COROUTINE, CO_ASYNC_GENERATOR


def trace(model_path: str) -> list[tuple[str, str]]:
    """(caller module, callee module) for every call between two graphtool modules."""
    import graphtool as gt
    from graphtool import io

    try:
        from graphtool.runtime import sandbox
    except ImportError:  # before the move (issue 31)
        from graphtool import sandbox  # type: ignore[no-redef]
    sandbox.SESSIONS = True  # as the CLI runs verification
    original, rewritten = io.load(model_path), io.load(model_path)
    steps: list[tuple[str, str]] = []

    def profile(frame, event, arg):  # noqa: ANN001 - sys.setprofile's signature
        if event != "call" or frame.f_code.co_flags & GENERATORS:
            return  # a generator resumed is data flowing to its reader, not a call
        callee = frame.f_globals.get("__name__", "")
        caller = frame.f_back.f_globals.get("__name__", "") if frame.f_back else ""
        if callee.startswith("graphtool") and caller.startswith("graphtool") and callee != caller:
            steps.append((caller, callee))

    threading.setprofile(profile)
    sys.setprofile(profile)
    try:
        result = gt.verify(original, rewritten)
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    assert result.ok, result
    return steps


def walk(steps: list[tuple[str, str]], floor: dict[str, int]) -> dict:
    """The walk's figures. A loop (a serializer calling the tensor module once per weight) is one
    step, so every figure counts distinct moves: a climb is a (caller, callee) pair going up the
    floors, a return a (caller, callee) pair that re-enters a module the walk had left."""
    first: list[str] = []
    climbs: set[tuple[str, str]] = set()
    returns: set[tuple[str, str]] = set()
    left: set[str] = set()
    for caller, callee in steps:
        if callee.endswith("__init__") or callee not in floor or caller not in floor:
            continue
        if floor[callee] > floor[caller]:
            climbs.add((caller, callee))
        if callee in left:
            returns.add((caller, callee))
        if callee not in first:
            first.append(callee)
        left.add(caller)
    short = lambda m: m.removeprefix("graphtool.")  # noqa: E731
    return {"calls between modules": len(steps), "modules entered": len(first),
            "climbs back up": sorted(f"{short(a)} -> {short(b)}" for a, b in climbs),
            "returns to a module left": len(returns), "path": first}


def main() -> None:
    import onnx

    default = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light", "light_squeezenet.onnx")
    model = sys.argv[1] if len(sys.argv) > 1 else default
    floor = floors()
    result = walk(trace(model), floor)
    result["path"] = " -> ".join(f"{m.removeprefix('graphtool.')} ({floor[m]})" for m in result["path"])
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
