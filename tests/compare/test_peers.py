"""graphtool compare --peers: peer results beside graphtool's, with the rewrites only one did."""

from __future__ import annotations

import os

import onnx

from graphtool import io
from graphtool.compare import compare_peers, format_peers, missing
from graphtool.optimize import optimize
from tests.conftest import FIXTURES


def test_stub_peer_results_name_the_rewrites_only_they_did(tmp_path):
    path = os.path.join(FIXTURES, "conv_bn.onnx")
    model = io.load(path)
    fused, _, _ = optimize(model, level=2, target="ort")  # a "peer" that fuses Conv+Relu into FusedConv
    same, _, _ = optimize(model, level=1)                 # a "peer" that does exactly what graphtool does
    broken = onnx.load(path)
    broken.graph.node[-1].op_type = "Sigmoid"             # a "peer" whose result is wrong
    stubs = {"fuser": str(tmp_path / "fuser.onnx"), "twin": str(tmp_path / "twin.onnx"),
             "wrong": str(tmp_path / "wrong.onnx")}
    io.save(fused, stubs["fuser"])
    io.save(same, stubs["twin"])
    onnx.save(broken, stubs["wrong"])
    report = compare_peers(model, path, ["fuser", "twin", "wrong", "onnxsim-not-a-peer"], level=1, peer_results=stubs)
    by_tool = {p["tool"]: p for p in report["peers"]}
    assert any("FusedConv" in g["pattern"] for g in by_tool["fuser"]["only_peer"])
    assert by_tool["fuser"]["outputs"]["ok"] and by_tool["fuser"]["nodes"] < report["graphtool"]["nodes"]
    assert by_tool["twin"]["only_peer"] == [] and by_tool["twin"]["nodes"] == report["graphtool"]["nodes"]
    assert not by_tool["wrong"]["outputs"]["ok"]
    assert "unknown peer" in by_tool["onnxsim-not-a-peer"]["skipped"]
    text = format_peers(report)
    assert "rewrites only twin did: none" in text and "WRONG" in text and "FusedConv" in text


def test_missing_peer_is_named():
    assert missing("onnxsim") is None  # installed with the bench extra in this environment
    assert "unknown peer" in missing("tvm")
