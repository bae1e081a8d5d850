"""Bad input: exit 2, exactly one line on stderr, no traceback, nothing written."""

from __future__ import annotations

import os
import subprocess
import sys

import onnx
import pytest

from tests.conftest import FIXTURES


def _cases(tmp_path):
    good = open(f"{FIXTURES}/conv_bn.onnx", "rb").read()
    ext = onnx.load(f"{FIXTURES}/external_data.onnx", load_external_data=False)

    def with_location(loc):
        m = onnx.ModelProto()
        m.CopyFrom(ext)
        for t in m.graph.initializer:
            for e in t.external_data:
                if e.key == "location":
                    e.value = loc
        return m.SerializeToString()

    (tmp_path.parent / "outside.bin").write_bytes(b"\0" * 20000)
    return {
        "empty": b"",
        "random": os.urandom(4096),
        "truncated": good[: len(good) // 2],
        "text": b"this is not a model\nat all\n",
        "dotdot": with_location("../outside.bin"),
        "absolute": with_location(str(tmp_path.parent / "outside.bin")),
    }


@pytest.mark.parametrize("case", ["empty", "random", "truncated", "text", "dotdot", "absolute"])
def test_bad_input_one_line_exit_2(run_cli, tmp_path, case):
    folder = tmp_path / "in"
    folder.mkdir()
    path = folder / f"{case}.onnx"
    path.write_bytes(_cases(folder)[case])
    before = sorted(os.listdir(folder))
    r = run_cli("inspect", str(path))
    assert r.exit_code == 2, (r.stdout, r.stderr)
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "Traceback" not in r.stderr and r.stderr.startswith("graphtool: error:")
    assert sorted(os.listdir(folder)) == before


def test_bad_input_through_real_process(tmp_path):
    path = tmp_path / "random.onnx"
    path.write_bytes(b"\x12\x34garbage" * 100)
    proc = subprocess.run([sys.executable, "-m", "graphtool", "inspect", str(path)], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


def test_missing_file_and_usage_errors(run_cli):
    r = run_cli("inspect", "/nonexistent/model.onnx")
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1
    r = run_cli("inspect")
    assert r.exit_code == 2 and "Traceback" not in r.stderr
