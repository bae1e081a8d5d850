"""The longest silence on stderr of each command, as a person at a terminal sees it (issue 35).

Every command runs as a user runs it (a fresh ``graphtool`` process) with stderr on a
pseudo-terminal (``pty``: graphtool draws progress only on a terminal) and stdout to a file. The
master side of the pty is read as bytes arrive; the silence is the longest gap between two
arrivals, counting from the process start to the first byte and from the last byte to the exit.

    .venv/bin/python bench/pty_silence.py MODEL [MODEL ...] [--commands inspect,optimize,...]
        [--tune-budget 60] [--out bench/results/pty.json]

Prints one table row per (model, command): wall seconds, exit code, the longest silence and the
status text just before it (what the line said while the terminal was quiet).
"""

from __future__ import annotations

import argparse
import json
import os
import pty
import select
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GT = [sys.executable, "-m", "graphtool"]
COMMANDS = ["inspect", "optimize", "compare", "diff-html", "viz", "convert", "tune"]


def run_on_pty(args: list[str], stdout_path: str, timeout: float = 1800.0, cwd: str | None = None) -> dict:
    """Run ``args`` with stderr on a pty; return wall time, exit code and the silence record."""
    master, slave = pty.openpty()
    import fcntl
    import struct
    import termios

    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))  # a 120-column terminal
    with open(stdout_path, "wb") as out:
        start = time.monotonic()
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=out, stderr=slave, close_fds=True,
                                cwd=cwd, env=dict(os.environ, COLUMNS="120"))
    os.close(slave)
    arrivals: list[tuple[float, bytes]] = []
    closed = False
    end: float | None = None
    while not closed:
        ready, _, _ = select.select([master], [], [], 0.05)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: every writer closed the slave side
                chunk = b""
            if chunk:
                arrivals.append((time.monotonic(), chunk))
                continue
            closed = True  # nobody holds the terminal any more
        if proc.poll() is not None and (closed or not ready):
            end = time.monotonic()
            # the program is done: what it left running (it should leave nothing) may still write
            if not closed:
                time.sleep(0.2)
                while select.select([master], [], [], 0)[0]:
                    try:
                        chunk = os.read(master, 65536)
                    except OSError:
                        break
                    if not chunk:
                        break
                    arrivals.append((time.monotonic(), chunk))
            break
        if time.monotonic() - start > timeout:
            proc.kill()
    if end is None:  # the terminal closed first: the exit follows
        proc.wait()
        end = time.monotonic()
    os.close(master)
    arrivals = [(t, c) for t, c in arrivals if t <= end]
    times = [start] + [t for t, _ in arrivals] + [end]
    gaps = [(b - a, i) for i, (a, b) in enumerate(zip(times, times[1:]))]
    longest, where = max(gaps)
    before = b"".join(c for _, c in arrivals[:where])[-300:].decode("utf-8", "replace")
    status = "(process start)" if where == 0 else before.split("\r")[-1].replace("\x1b[K", "").strip()
    if not status:  # the line had just been cleared: for output, or by the end
        after = b"".join(c for _, c in arrivals[where:where + 2]).decode("utf-8", "replace")
        status = "(cleared) then: " + after.replace("\r", " ").replace("\x1b[K", "").strip()[:60]
    return {"wall": end - start, "code": proc.returncode, "silence": longest, "at": status[:90],
            "first_byte": (arrivals[0][0] - start) if arrivals else None, "bytes": sum(len(c) for _, c in arrivals)}


def command_args(cmd: str, model: str, work: str, tune_budget: float) -> list[str]:
    """The command line of ``cmd`` on ``model`` (outputs in ``work``)."""
    stem = Path(model).stem
    optimized = os.path.join(work, f"{stem}.opt.onnx")
    return {
        "inspect": [*GT, "inspect", model],
        "optimize": [*GT, "optimize", model, "-o", optimized],
        "compare": [*GT, "compare", model],
        "diff-html": [*GT, "diff", model, optimized, "-o", os.path.join(work, f"{stem}.diff.html")],
        "viz": [*GT, "viz", model, "-o", os.path.join(work, f"{stem}.viz.html")],
        "convert": [*GT, "convert", model, "--opset", "21", "-o", os.path.join(work, f"{stem}.op21.onnx")],
        "tune": [*GT, "tune", model, "-o", os.path.join(work, f"{stem}.tuned.onnx"), "--budget", str(tune_budget)],
    }[cmd]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("--commands", default=",".join(COMMANDS))
    ap.add_argument("--tune-budget", type=float, default=60.0)
    ap.add_argument("--work", default=None, help="folder for outputs (default: a temp folder)")
    ap.add_argument("--out", default=None, help="also write the rows as JSON here")
    ap.add_argument("--python", default=sys.executable,
                    help="the interpreter whose graphtool runs (another checkout's venv: a baseline)")
    ns = ap.parse_args()
    GT[0] = ns.python
    work = ns.work or tempfile.mkdtemp(prefix="gt-pty-")
    os.makedirs(work, exist_ok=True)
    rows = []
    print(f"{'model':<22} {'command':<10} {'wall s':>7} {'exit':>4} {'longest silence s':>17}  status before it")
    for model in ns.models:
        for cmd in ns.commands.split(","):
            args = command_args(cmd, model, work, ns.tune_budget)
            r = run_on_pty(args, os.path.join(work, f"{Path(model).stem}.{cmd}.stdout"), cwd=work)
            r.update(model=Path(model).name, command=cmd)
            rows.append(r)
            print(f"{r['model']:<22} {cmd:<10} {r['wall']:7.1f} {r['code']:>4} {r['silence']:17.2f}  {r['at']}", flush=True)
    if ns.out:
        Path(ns.out).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
