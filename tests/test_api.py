"""The front door: the one-liner README shows works in a fresh interpreter, exactly as written."""

from __future__ import annotations

import os
import subprocess
import sys

import onnx

from tests.conftest import FIXTURES


def test_readme_one_liner_in_a_fresh_process(tmp_path):
    p, q = os.path.join(FIXTURES, "conv_bn.onnx"), str(tmp_path / "q.onnx")
    code = (f"import graphtool as gt; m = gt.load({p!r}); m2, r = gt.optimize(m, level=2); gt.save(m2, {q!r}); "
            "print(r.nodes_before, r.nodes_after, gt.verify(m, m2).ok)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    before, after, ok = proc.stdout.split()
    assert int(after) < int(before) and ok == "True"
    assert len(onnx.load(q).graph.node) == int(after)


def test_front_door_names_survive_submodule_imports():
    import graphtool as gt
    import graphtool.check  # noqa: F401  (modules named like the functions)
    import graphtool.diff.run  # noqa: F401
    import graphtool.optimize  # noqa: F401
    import graphtool.verify.verification  # noqa: F401

    for name in ("load", "save", "optimize", "verify", "diff", "check", "inspect", "compare"):
        assert callable(getattr(gt, name)) and getattr(gt, name).__module__ == "graphtool", name
    assert gt.Model.__name__ == "Model" and gt.Graph.__name__ == "Graph"
