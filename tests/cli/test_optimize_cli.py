"""graphtool optimize: report, verification, bisection, plugins through entry points."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import onnx
import pytest

from tests.conftest import FIXTURES

PLUGIN = textwrap.dedent('''
    """A third-party pass package, as a user would ship it."""
    from graphtool.pass_manager import Pass, PassResult

    class SwapReluForSigmoid(Pass):
        """Deliberately wrong: turns every Relu into a Sigmoid (for the bisection test)."""
        level = 1
        priority = 95

        def run(self, graph, ctx):
            changed = 0
            for node in graph.nodes("Relu"):
                new = graph.add_node("Sigmoid", node.inputs, 1, name=node.name + "_sig", near=node)
                graph.replace_all_uses(node.outputs[0], new.outputs[0])
                if graph.is_output(node.outputs[0]):
                    out = node.outputs[0]
                    graph.remove_nodes([node])
                    graph.rename_value(new.outputs[0], out)
                else:
                    graph.remove_nodes([node])
                changed += 1
            return PassResult(changed > 0, {"swapped": changed})
''')


@pytest.fixture
def plugin_path(tmp_path):
    """An installed distribution (dist-info with entry_points.txt) that registers one pass."""
    site = tmp_path / "site"
    (site / "gt_demo_plugin").mkdir(parents=True)
    (site / "gt_demo_plugin" / "__init__.py").write_text(PLUGIN)
    info = site / "gt_demo_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: gt-demo-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[graphtool.passes]\nswap = gt_demo_plugin:SwapReluForSigmoid\n")
    return str(site)


def _graphtool(*args, pythonpath=None):
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-m", "graphtool", *args], capture_output=True, text=True, env=env)


def test_plugin_pass_is_listed(plugin_path):
    proc = _graphtool("passes", "--json", pythonpath=plugin_path)
    assert proc.returncode == 0, proc.stderr
    names = {p["name"]: p for p in json.loads(proc.stdout)}
    assert "swap-relu-for-sigmoid" not in names  # the entry point's name is the pass name
    assert names["swap"]["module"] == "gt_demo_plugin" and names["swap"]["source"] == "plugin gt-demo-plugin 0.1"


def test_breaking_plugin_is_caught_and_named(plugin_path, tmp_path):
    out = tmp_path / "out.onnx"
    proc = _graphtool("optimize", f"{FIXTURES}/conv_bn.onnx", "-o", str(out), pythonpath=plugin_path)
    assert proc.returncode == 0 and "swap" not in proc.stdout  # installed, not asked for: it does not run
    os.remove(out)
    proc = _graphtool("optimize", f"{FIXTURES}/conv_bn.onnx", "-o", str(out), "--plugins", "all", pythonpath=plugin_path)
    assert proc.returncode == 1
    assert "'swap'" in proc.stderr and "relu" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not out.exists() and os.listdir(tmp_path) == ["site"]


CRASHING = textwrap.dedent('''
    from graphtool.pass_manager import Pass

    class Crash(Pass):
        """Raises on every graph."""
        def run(self, graph, ctx):
            return {}[217]
''')


def test_a_crashing_plugin_is_named_not_an_internal_error(tmp_path):
    site = tmp_path / "site"
    (site / "gt_crash").mkdir(parents=True)
    (site / "gt_crash" / "__init__.py").write_text(CRASHING)
    info = site / "gt_crash-3.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: gt-crash\nVersion: 3.1\n")
    (info / "entry_points.txt").write_text("[graphtool.passes]\ncrash = gt_crash:Crash\n")
    out = tmp_path / "out.onnx"
    plain = _graphtool("optimize", f"{FIXTURES}/conv_bn.onnx", "-o", str(out), "--level", "2", pythonpath=str(site))
    assert plain.returncode == 0, plain.stderr  # not asked for: not run
    proc = _graphtool("optimize", f"{FIXTURES}/conv_bn.onnx", "-o", str(out), "--passes", "crash", pythonpath=str(site))
    assert proc.returncode == 2 and "internal error" not in proc.stderr
    assert proc.stderr.strip() == ("graphtool: error: plugin pass 'crash' (gt_crash:Crash from gt-crash 3.1) raised "
                                   "KeyError: 217; nothing written")


def test_optimize_json_report_and_outputs(run_cli, tmp_path):
    out = tmp_path / "out.onnx"
    r = run_cli("optimize", f"{FIXTURES}/dead_branch.onnx", "-o", str(out), "--json")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["verification"]["ok"] is True
    assert doc["report"]["nodes_before"] == 6
    assert doc["report"]["nodes_after"] == len(onnx.load(str(out)).graph.node)
    assert set(doc["node_map"]) == {"matmul", "identity1", "identity2", "relu", "dead_sigmoid", "dead_tanh"}
    onnx.checker.check_model(str(out), full_check=True)


def test_optimize_usage_errors(run_cli, tmp_path):
    r = run_cli("optimize", f"{FIXTURES}/conv_bn.onnx", "-o", str(tmp_path / "o.onnx"), "--passes", "no-such-pass")
    assert r.exit_code == 2 and "unknown pass" in r.stderr
    r = run_cli("optimize", f"{FIXTURES}/conv_bn.onnx", "-o", str(tmp_path / "o.onnx"), "--input-shape", "nope=1x2")
    assert r.exit_code == 2 and "not an input" in r.stderr
    assert not (tmp_path / "o.onnx").exists()


def test_upgrade_opset_unlocks_standard_fusions(run_cli, tmp_path):
    """bert_ts is opset 17: no standard Gelu exists there; --upgrade-opset 20 makes it possible."""
    out = tmp_path / "bert.onnx"
    src = f"{FIXTURES}/torch/bert_ts.onnx"
    r = run_cli("optimize", src, "-o", str(out), "--level", "2", "--upgrade-opset", "20", "--json")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["opset"] == 20 and doc["verification"]["ok"]
    ops = [n.op_type for n in onnx.load(str(out)).graph.node]
    assert ops.count("Gelu") == 2 and ops.count("LayerNormalization") == 5 and "Erf" not in ops
    r = run_cli("optimize", src, "-o", str(tmp_path / "down.onnx"), "--upgrade-opset", "13")
    assert r.exit_code == 2 and "downgrade" in r.stderr


@pytest.mark.parametrize("variant, reason", [
    ({"softmax_axis": 2}, "Softmax #15: axis=2, the pattern wants one of -1, 3"),
    ({"scores_output": True}, "is a graph output"),
    ({"causal": True, "causal_fill": -10.0}, "check: the Where fill -10.0 is not a hard mask"),
])
def test_explain_names_the_constraint_that_stopped_attention(tmp_path, variant, reason):
    """--explain RULE: for the candidate that nearly matched, the first constraint that failed."""
    from tests.passes.test_attention import attention_model

    src, out = tmp_path / "attention.onnx", tmp_path / "out.onnx"
    onnx.save(attention_model(**variant), src)
    proc = _graphtool("optimize", str(src), "-o", str(out), "--level", "2", "--target", "ort",
                      "--explain", "self-attention", "--json")
    assert proc.returncode == 0, proc.stderr
    entries = json.loads(proc.stdout)["explain"]
    near = [e for e in entries if e["depth"] >= 2]
    assert len(near) == 1 and not near[0]["fused"] and near[0]["rule"] == "self-attention"
    assert reason in near[0]["reason"]
    text = _graphtool("optimize", str(src), "-o", str(out), "--level", "2", "--target", "ort",
                      "--explain", "self-attention")
    assert f"self-attention: Reshape #18: refused after" in text.stdout or reason in text.stdout


def test_explain_lists_fused_candidates_and_rejects_unknown_rules(tmp_path):
    from tests.passes.test_attention import attention_model

    src, out = tmp_path / "attention.onnx", tmp_path / "out.onnx"
    onnx.save(attention_model(), src)
    proc = _graphtool("optimize", str(src), "-o", str(out), "--level", "2", "--target", "ort",
                      "--explain", "self-attention")
    assert proc.returncode == 0 and ": fused" in proc.stdout
    bad = _graphtool("optimize", str(src), "-o", str(out), "--level", "2", "--explain", "no-such-rule")
    assert bad.returncode == 2 and "unknown rule 'no-such-rule'" in bad.stderr



def test_a_wrong_rewrite_is_caught_blamed_and_nothing_is_written(run_cli, tmp_path, monkeypatch):
    """A pass that changes the outputs (every Relu becomes a Sigmoid), after a sound one that
    fuses the BatchNormalizations: verification fails, bisection names the wrong pass and not the
    sound one before it — it replays from the file, since the CLI optimized the loaded original in
    place — and no output file is written."""
    from graphtool.pass_manager import REGISTRY, Pass, PassResult, load_builtin_and_plugins, register

    load_builtin_and_plugins()

    class BreakRelu(Pass):
        def run(self, graph, ctx):
            relus = [n for n in graph.nodes() if n.op_type == "Relu"]
            for node in relus:
                inputs, outputs = node.inputs, node.outputs
                graph.remove_nodes([node])
                graph.add_node("Sigmoid", inputs, outputs)
            return PassResult(bool(relus))

    monkeypatch.setitem(REGISTRY, "break-relu", BreakRelu)
    register(level=1, priority=99, name="break-relu")(BreakRelu)
    out = tmp_path / "out.onnx"
    result = run_cli("optimize", os.path.join(FIXTURES, "conv_bn.onnx"), "-o", str(out),
                     "--passes", "fuse-conv-batch-norm,break-relu")
    assert result.exit_code == 1, result.stderr
    assert "verification failed" in result.stderr, result.stderr
    assert "first bad rewrite: pass 'break-relu'" in result.stderr, result.stderr
    assert not out.exists()
