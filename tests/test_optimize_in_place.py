"""``graphtool optimize --no-verify`` optimizes the loaded model in place (issue 19: no second
copy of a million-node graph); what it writes and reports must be what the copying path gives."""

from __future__ import annotations

import json
import os

import pytest

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures")


@pytest.mark.parametrize("name", ["dead_branch.onnx", "conv_bn.onnx", "if_subgraph.onnx", "local_function.onnx"])
def test_in_place_matches_the_copy(run_cli, tmp_path, name):
    outs, docs = [], []
    for flags in ([], ["--no-verify"]):  # verified: optimizes a copy; --no-verify: in place
        out = tmp_path / f"out{len(outs)}.onnx"
        r = run_cli("optimize", os.path.join(FIXTURES, name), "-o", str(out), "--json", *flags)
        assert r.exit_code == 0, r.stderr
        outs.append(out.read_bytes())
        docs.append(json.loads(r.stdout))
    assert outs[0] == outs[1]
    assert docs[0]["node_map"] == docs[1]["node_map"] and docs[0]["opset"] == docs[1]["opset"]
    assert docs[0]["report"]["nodes_after"] == docs[1]["report"]["nodes_after"]
