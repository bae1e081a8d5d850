"""graphtool viz MODEL: formats, --around, --max-nodes, bad input."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from tests.conftest import FIXTURES, light_model

DENSENET = light_model("densenet121")


def test_dot_to_stdout(run_cli):
    r = run_cli("viz", f"{FIXTURES}/conv_bn.onnx")
    assert r.exit_code == 0, r.stderr
    assert r.stdout.startswith("digraph") and "W 8×3×3×3" in r.stdout


def test_files_by_extension(run_cli, tmp_path):
    for name in ("m.svg", "m.html", "m.dot", "m.png"):
        r = run_cli("viz", f"{FIXTURES}/if_subgraph.onnx", "-o", str(tmp_path / name))
        assert r.exit_code == 0, r.stderr
        assert r.stdout.startswith("drew 8 of 8 nodes; wrote")
    ET.parse(tmp_path / "m.svg")
    assert (tmp_path / "m.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "cluster_" in (tmp_path / "m.dot").read_text()
    assert (tmp_path / "m.html").read_text().startswith("<!DOCTYPE html>")
    r = run_cli("viz", f"{FIXTURES}/conv_bn.onnx", "-o", str(tmp_path / "x.dat"), "--format", "svg")
    assert r.exit_code == 0
    ET.parse(tmp_path / "x.dat")


def test_around_and_depth(run_cli, tmp_path):
    r = run_cli("viz", light_model("resnet50"), "--around", "n4", "--depth", "1")
    assert r.exit_code == 0, r.stderr
    assert r.stdout.count("<<B>") == 4  # four op boxes


def test_densenet121_whole_and_past_max_nodes(run_cli, tmp_path):
    r = run_cli("viz", DENSENET, "-o", str(tmp_path / "d.svg"))
    assert r.exit_code == 0, r.stderr
    assert "drew 1746 of 1746 nodes" in r.stdout and r.stderr == ""
    ET.parse(tmp_path / "d.svg")
    r = run_cli("viz", DENSENET, "--max-nodes", "300", "-o", str(tmp_path / "part.svg"))
    assert r.exit_code == 0
    assert "graphtool: note: drew 300 of 1746 nodes (--max-nodes 300); use --around NODE" in r.stderr
    assert "… 1446 more nodes" in (tmp_path / "part.svg").read_text()


def test_all_attrs_and_names(run_cli):
    r = run_cli("viz", light_model("resnet50"), "--around", "n1", "--depth", "0")
    assert r.exit_code == 0, r.stderr
    assert "epsilon=" not in r.stdout  # BatchNormalization's default epsilon: hidden like Netron
    r = run_cli("viz", light_model("resnet50"), "--around", "n1", "--depth", "0", "--all-attrs", "--names")
    assert r.exit_code == 0, r.stderr
    assert "epsilon=1e-05" in r.stdout and ">n1<" in r.stdout


def test_bad_input_exits_2(run_cli, tmp_path):
    model = f"{FIXTURES}/conv_bn.onnx"
    cases = [
        (("viz", model, "-o", str(tmp_path / "m.jpg")), "unknown picture format '.jpg'"),
        (("viz", model, "--format", "png"), "PNG goes to a file"),
        (("viz", model, "--around", "conv9"), "no node or value named 'conv9'; did you mean 'conv1', 'conv0'?"),
        (("viz", model, "--max-nodes", "0"), "max-nodes"),
        (("viz", str(tmp_path / "none.onnx")), "no such file"),
        (("viz", model, "-o", str(tmp_path / "no" / "m.svg")), "folder does not exist"),
    ]
    for args, message in cases:
        r = run_cli(*args)
        assert r.exit_code == 2, (args, r.stderr)
        assert message in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert list(tmp_path.iterdir()) == []
