"""The plugin package of docs/writing-a-pass.md (examples/graphtool-plugin-example), installed
into a fresh venv as a user would, beside two more plugins: one whose entry-point name is a
built-in's (and whose module @registers a class named like one), one that fails to import.

Checks (issue 35): the entry-point name runs; the colliding name is refused with one warning line
naming both and the built-in kept; an import failure costs one warning line naming it and
``inspect`` still works; plugins run only when asked and the report lists those that ran;
``passes`` marks plugins with distribution and version; the plugin's own tests pass there.
"""

from __future__ import annotations

import json
import os
import textwrap

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.docs.freshvenv import make_venv

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(ROOT, "examples", "graphtool-plugin-example")


def _package(where: str, name: str, entry_points: dict[str, str], module: str, code: str) -> str:
    root = os.path.join(where, name)
    os.makedirs(os.path.join(root, module))
    eps = "\n".join(f'{k} = "{v}"' for k, v in entry_points.items())
    with open(os.path.join(root, "pyproject.toml"), "w") as f:
        f.write(textwrap.dedent(f"""\
            [build-system]
            requires = ["setuptools"]
            build-backend = "setuptools.build_meta"
            [project]
            name = "{name}"
            version = "2.5"
            [project.entry-points."graphtool.passes"]
            """) + eps + "\n")
    with open(os.path.join(root, module, "__init__.py"), "w") as f:
        f.write(textwrap.dedent(code))
    return root


COLLIDING = """
from graphtool.pass_manager import Pass, PassResult, register

class Evil(Pass):
    '''A plugin that wants the built-in's name.'''
    def run(self, graph, ctx):
        graph.remove_nodes(graph.nodes())
        return PassResult(True)

@register(level=1)  # its kebab name is the built-in 'eliminate-no-ops': refused too
class EliminateNoOps(Pass):
    '''A look-alike of the built-in, registered under the entry point name instead.'''
    def run(self, graph, ctx):
        return PassResult(False)
"""


def _model(path: str) -> None:
    """x -> Identity -> Mul(., 2) -> Mul(3, .) -> Identity -> y"""
    nodes = [helper.make_node("Identity", ["x"], ["i"]), helper.make_node("Mul", ["i", "two"], ["m1"]),
             helper.make_node("Mul", ["three", "m1"], ["m2"]), helper.make_node("Identity", ["m2"], ["y"])]
    inits = [numpy_helper.from_array(np.array(2.0, np.float32), "two"),
             numpy_helper.from_array(np.array(3.0, np.float32), "three")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def _warnings(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("graphtool: warning:")]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    tmp = str(tmp_path_factory.mktemp("plugins"))
    venv = make_venv(os.path.join(tmp, "venv"))
    colliding = _package(tmp, "gt-colliding", {"eliminate-no-ops": "gt_colliding:Evil",
                                                "look-alike": "gt_colliding:EliminateNoOps"}, "gt_colliding", COLLIDING)
    venv.pip_install(EXAMPLE, colliding)
    model = os.path.join(tmp, "m.onnx")
    _model(model)
    return venv, tmp, model


def _ops(path: str) -> list[str]:
    return [n.op_type for n in onnx.load(path).graph.node]


def test_passes_marks_plugins_and_refuses_the_collision(env):
    venv, _, _ = env
    proc = venv.gt("passes", "--json", check=True)
    rows = {r["name"]: r for r in json.loads(proc.stdout)}
    assert rows["my-identity-remover"]["source"] == "plugin graphtool-plugin-example 0.1.0"
    assert rows["merge-scalar-muls"]["source"] == "plugin graphtool-plugin-example 0.1.0"
    assert rows["look-alike"]["source"] == "plugin gt-colliding 2.5"  # the entry point's name won
    # the built-in kept its name, class and text
    assert rows["eliminate-no-ops"]["source"] == "built-in"
    assert rows["eliminate-no-ops"]["module"] == "graphtool.passes.eliminate"
    warned = _warnings(proc.stderr)
    assert len(warned) == 1, proc.stderr
    assert "plugin pass 'eliminate-no-ops' (gt_colliding:Evil from gt-colliding 2.5)" in warned[0]
    assert "built-in pass 'eliminate-no-ops' (graphtool.passes.eliminate." in warned[0]
    assert "the built-in is kept" in warned[0]
    text = venv.gt("passes", check=True).stdout
    assert any(line.startswith("my-identity-remover") and "plugin graphtool-plugin-example 0.1.0" in line
               for line in text.splitlines())


def test_the_entry_point_name_runs(env):
    venv, tmp, model = env
    out = os.path.join(tmp, "ident.onnx")
    proc = venv.gt("optimize", model, "-o", out, "--passes", "my-identity-remover", check=True)
    assert _ops(out) == ["Mul", "Mul"]
    assert "plugins run (*): my-identity-remover (graphtool-plugin-example 0.1.0)" in proc.stdout
    assert "my-identity-remover *" in proc.stdout and "verification: outputs equal" in proc.stdout


def test_plugins_run_only_when_asked(env):
    venv, tmp, model = env
    out = os.path.join(tmp, "plain.onnx")
    proc = venv.gt("optimize", model, "-o", out, "--json", check=True)
    report = json.loads(proc.stdout)["report"]
    assert report["plugins"] == []
    assert not {p["name"] for p in report["passes"]} & {"my-identity-remover", "merge-scalar-muls", "look-alike"}
    assert _ops(out) == ["Mul", "Mul"]  # the built-ins removed the Identities; nothing merged the Muls
    proc = venv.gt("optimize", model, "-o", out, "--plugins", "merge-scalar-muls", "--json", check=True)
    report = json.loads(proc.stdout)["report"]
    assert report["plugins"] == ["merge-scalar-muls (graphtool-plugin-example 0.1.0)"]
    assert _ops(out) == ["Mul"]
    assert json.loads(proc.stdout)["verification"]["ok"]
    # the colliding name, asked for, runs the built-in (the Evil plugin would empty the graph)
    proc = venv.gt("optimize", model, "-o", out, "--passes", "eliminate-no-ops", "--json", check=True)
    rows = json.loads(proc.stdout)["report"]["passes"]
    assert [r["name"] for r in rows] == ["eliminate-no-ops"] and "plugin" not in rows[0]
    assert _ops(out) == ["Mul", "Mul"]


def test_the_plugins_own_tests_pass_there(env):
    venv, _, _ = env
    proc = venv.run(venv.python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests", cwd=EXAMPLE)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_an_import_failure_costs_one_warning_line(env, tmp_path):
    venv, _, model = env
    broken = _package(str(tmp_path), "gt-broken", {"broken-pass": "gt_broken:Pass"}, "gt_broken",
                      "import gt_no_such_dependency  # noqa\n")
    venv.pip_uninstall("gt-colliding")
    venv.pip_install(broken)
    for args in (["inspect", model], ["check", model], ["passes"]):
        proc = venv.gt(*args)
        assert proc.returncode in (0, 1) and "internal error" not in proc.stderr, proc.stderr
        warned = _warnings(proc.stderr)
        assert len(warned) == 1, proc.stderr
        assert warned[0].startswith("graphtool: warning: plugin pass 'broken-pass' (gt_broken:Pass from gt-broken 2.5) "
                                    "failed to import: ModuleNotFoundError: No module named 'gt_no_such_dependency'")
    assert "nodes" in venv.gt("inspect", model).stdout
    out = str(tmp_path / "o.onnx")
    proc = venv.gt("optimize", model, "-o", out, "--passes", "broken-pass")
    assert proc.returncode == 2 and "unknown pass 'broken-pass'" in proc.stderr
