"""graphtool diff A B: formats, exit codes (0 equal, 1 different, 2 bad input), atomic output."""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET

import onnx

from graphtool import io
from tests.conftest import FIXTURES, light_model
from tests.render.models import hand_edit, scramble

RESNET = light_model("resnet50")


def _scrambled(tmp_path, path=RESNET):
    out = tmp_path / "scrambled.onnx"
    onnx.save(scramble(onnx.load(path), seed=11), out)
    return str(out)


def _edited(tmp_path):
    out = tmp_path / "edited.onnx"
    io.save(hand_edit(io.load(RESNET)), out)
    return str(out)


def test_equal_models_exit_0(run_cli, tmp_path):
    r = run_cli("diff", RESNET, _scrambled(tmp_path))
    assert r.exit_code == 0, r.stderr
    assert "no differences (415 nodes matched)" in r.stdout


def test_different_models_exit_1_with_a_text_summary(run_cli, tmp_path):
    r = run_cli("diff", RESNET, _edited(tmp_path))
    assert r.exit_code == 1, r.stderr
    assert r.stderr == ""
    assert "1 removed, 1 added, 3 changed, 411 unchanged; 4 graph-level changes" in r.stdout
    assert "- BatchNormalization n17 (removed)" in r.stdout
    assert "~ Conv n32: pads: [0, 0, 0, 0] -> [1, 1, 1, 1]" in r.stdout
    assert "+ Sigmoid" in r.stdout


def test_json_format(run_cli, tmp_path):
    edited = _edited(tmp_path)
    r = run_cli("diff", "--json", RESNET, edited)
    assert r.exit_code == 1
    doc = json.loads(r.stdout)
    assert doc["equal"] is False and doc["a"] == RESNET and doc["b"] == edited
    assert doc["counts"] == {"added": 1, "removed": 1, "changed": 3, "unchanged": 411, "graph_changes": 4}
    assert json.loads(run_cli("diff", "--format", "json", RESNET, edited).stdout)["counts"] == doc["counts"]
    r = run_cli("diff", "--json", RESNET, _scrambled(tmp_path))
    assert r.exit_code == 0 and json.loads(r.stdout)["equal"] is True


def test_picture_formats_written_atomically(run_cli, tmp_path):
    edited = _edited(tmp_path)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    for name in ("d.svg", "d.html", "d.dot", "d.json", "d.txt"):
        r = run_cli("diff", RESNET, edited, "-o", str(out_dir / name))
        assert r.exit_code == 1, r.stderr
        assert r.stdout.startswith("different: 1 removed, 1 added, 3 changed, 4 graph-level; wrote")
    assert sorted(os.listdir(out_dir)) == ["d.dot", "d.html", "d.json", "d.svg", "d.txt"]  # no temp files left
    ET.parse(out_dir / "d.svg")
    assert (out_dir / "d.dot").read_text().startswith("digraph")
    assert "<svg" in (out_dir / "d.html").read_text()
    assert json.loads((out_dir / "d.json").read_text())["counts"]["removed"] == 1
    assert "BatchNormalization" in (out_dir / "d.txt").read_text()
    r = run_cli("diff", "--format", "svg", RESNET, edited)  # to stdout
    assert r.exit_code == 1 and r.stdout.lstrip().startswith("<?xml")


def test_bad_input_exits_2_without_traceback_or_file(run_cli, tmp_path):
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"not a model at all")
    cases = [
        (("diff", RESNET, str(tmp_path / "missing.onnx")), "no such file"),
        (("diff", str(junk), RESNET), "not an ONNX model"),
        (("diff", RESNET, RESNET, "-o", str(tmp_path / "nope" / "d.svg")), "folder does not exist"),
        (("diff", "--json", "--format", "svg", RESNET, RESNET), "contradict"),
        (("diff", "--context", "-1", RESNET, RESNET), "context"),
        (("diff", RESNET), "Missing argument"),
    ]
    for args, message in cases:
        r = run_cli(*args)
        assert r.exit_code == 2, (args, r.stdout, r.stderr)
        assert message in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "nope").exists()


def test_resnet50_vs_level1_optimized_svg(run_cli, tmp_path):
    """The measured case: the optimized model's diff as an SVG, timed end to end."""
    from graphtool.optimize import optimize

    model = io.load(RESNET)
    optimized, report, _ = optimize(model, level=1)
    opt_path = tmp_path / "resnet50_l1.onnx"
    io.save(optimized, opt_path)
    r = run_cli("diff", RESNET, str(opt_path), "-o", str(tmp_path / "d.svg"))
    assert r.exit_code == 1, r.stderr
    doc = json.loads(run_cli("diff", "--json", RESNET, str(opt_path)).stdout)
    assert doc["counts"]["removed"] - doc["counts"]["added"] == report.nodes_before - report.nodes_after
    ET.parse(tmp_path / "d.svg")


def test_subgraph_models(run_cli, tmp_path):
    path = f"{FIXTURES}/if_subgraph.onnx"
    r = run_cli("diff", path, _scrambled(tmp_path, path))
    assert r.exit_code == 0, r.stdout + r.stderr
    r = run_cli("diff", "-o", str(tmp_path / "if.html"), path, f"{FIXTURES}/conv_bn.onnx")
    assert r.exit_code == 1
    assert "<svg" in (tmp_path / "if.html").read_text()


def _level2(tmp_path, path=RESNET):
    from graphtool.optimize import optimize

    optimized, _, _ = optimize(io.load(path), level=2, target="ort")
    out = tmp_path / "l2.onnx"
    io.save(optimized, out)
    return str(out)


def test_text_tells_what_happened_in_a_screenful(run_cli, tmp_path):
    """The issue's case: hundreds of node changes, read as a handful of named rewrites."""
    for model in (RESNET, light_model("densenet121")):
        r = run_cli("diff", model, _level2(tmp_path, model))
        assert r.exit_code == 1 and r.stderr == ""
        lines = r.stdout.splitlines()
        assert len(lines) <= 40, r.stdout
        assert lines[3] == "what changed, largest first (nodes: -removed +added ~changed):"
        assert "Conv+BatchNormalization" in lines[4] and "FusedConv ×" in lines[4]
        assert "opset/IR version: opset com.microsoft: None -> 1" in r.stdout
        assert lines[-1] == "(--all prints every change; --json keeps them all as data)"


def test_json_keeps_every_change_and_adds_the_groups(run_cli, tmp_path):
    r = run_cli("diff", "--json", RESNET, _level2(tmp_path))
    assert r.exit_code == 1
    doc = json.loads(r.stdout)
    c = doc["counts"]
    every = [(g, i) for g, graph in enumerate(doc["graphs"]) for i in range(len(graph["nodes"]))]
    assert len(every) == c["added"] + c["removed"] + c["changed"] == 410  # (411 before a same-named input that became a constant stopped counting as a change)
    refs = sorted(tuple(ref) for group in doc["groups"] for ref in group["nodes"])
    assert refs == every  # each change in exactly one group
    fusions = {g["title"]: g["count"] for g in doc["groups"] if g["kind"] == "fusion"}
    assert sum(n for title, n in fusions.items() if title.startswith("Conv+BatchNormalization")) == 53
    assert sum(g["count"] for g in doc["groups"] if g["kind"] in ("graph", "renamed")) == c["graph_changes"]


def test_all_prints_every_change_grouped(run_cli, tmp_path):
    optimized = _level2(tmp_path)
    r = run_cli("diff", "--all", RESNET, optimized)
    assert r.exit_code == 1
    node_lines = [line for line in r.stdout.splitlines() if line.lstrip()[:2] in ("- ", "+ ", "~ ")]
    assert len(node_lines) == 410 and len(r.stdout.splitlines()) > 400
    assert r.stdout.splitlines()[3].startswith("Conv+BatchNormalization+Relu → FusedConv ×33")
    out = tmp_path / "d.txt"  # a text file gets everything too: it has no screen to fit
    assert run_cli("diff", RESNET, optimized, "-o", str(out)).exit_code == 1
    assert out.read_text() == r.stdout.rstrip("\n")
