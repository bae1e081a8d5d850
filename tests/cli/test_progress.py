"""The status line (graphtool/progress.py): drawn on a terminal, with stage names; nothing in a
pipe or with --json; stdout identical either way; the line is cleared before the program ends."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys

from tests.conftest import FIXTURES

MODEL = os.path.join(FIXTURES, "torch", "bert_ts.onnx")


def _run(args: list[str], tty: bool, tmp_path) -> tuple[int, bytes, bytes]:
    out_path = tmp_path / f"out{len(os.listdir(tmp_path))}"
    with open(out_path, "wb") as out:
        if not tty:
            proc = subprocess.run([sys.executable, "-m", "graphtool", *args], stdout=out, stderr=subprocess.PIPE)
            return proc.returncode, out_path.read_bytes(), proc.stderr
        master, slave = pty.openpty()
        proc = subprocess.Popen([sys.executable, "-m", "graphtool", *args], stdout=out, stderr=slave,
                                stdin=subprocess.DEVNULL)
    os.close(slave)
    err = b""
    while True:
        ready, _, _ = select.select([master], [], [], 0.1)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                chunk = b""
            if not chunk:
                break
            err += chunk
        elif proc.poll() is not None:
            break
    os.close(master)
    return proc.wait(), out_path.read_bytes(), err


def test_a_terminal_gets_stages_a_pipe_and_json_get_nothing(tmp_path):
    out = str(tmp_path / "o.onnx")
    code, stdout_tty, err_tty = _run(["optimize", MODEL, "-o", out], True, tmp_path)
    assert code == 0
    text = err_tty.decode("utf-8", "replace")
    # the line shows the latest stage at each tick: a fast stage may be replaced before it is drawn
    stages = ("loading model", "optimizing", "verifying", "saving")
    assert sum(f"graphtool optimize: {s}" in text for s in stages) >= 2, text
    assert text.endswith("\r\x1b[K")  # cleared at the end: the shell prompt starts on a clean line
    code, stdout_pipe, err_pipe = _run(["optimize", MODEL, "-o", out], False, tmp_path)
    assert code == 0 and err_pipe == b""
    # widths follow the time column: spaces collapse and the table's rule of dashes shortens to one
    strip = lambda b: [re.sub(r"-{2,}", "-", " ".join(ln.split())) for ln in b.decode().splitlines()
                       if " ms" not in ln and "iterations" not in ln and "searching" not in ln]
    assert strip(stdout_tty) == strip(stdout_pipe)  # the report does not depend on the terminal
    code, stdout_json, err_json = _run(["optimize", MODEL, "-o", out, "--json"], True, tmp_path)
    assert code == 0 and b"graphtool optimize" not in err_json and stdout_json.startswith(b"{")


def test_an_error_prints_on_a_clean_line(tmp_path):
    code, _, err = _run(["optimize", MODEL, "-o", MODEL], True, tmp_path)
    assert code == 2
    text = err.decode()
    assert "graphtool: error: -o" in text
    before = text.split("graphtool: error:")[0]
    assert before.endswith("\r\x1b[K")  # the error starts on a cleared line, not after the status text
