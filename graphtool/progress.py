"""Progress on stderr for long work: a status line with the stage, a bar where work is countable,
and the seconds elapsed — only when stderr is a terminal and the command is not ``--json``.

Scripts, CI, pipes and ``--json`` runs see nothing: the line appears only for a person watching,
and never on stdout, so a command's output is the same with or without it.

The line is drawn by a small helper process (``_TICKER``) that redraws it every 0.4 s from the
last status the command sent down a pipe. A thread would stall whenever the command is inside a
long C call that holds the GIL (protobuf parsing a 400 MB model, ONNX shape inference); a process
keeps the clock moving, so the terminal never goes quiet for long while graphtool works.

    progress.start("optimize")                  # the CLI group does this for every command
    progress.stage("loading model")
    with progress_steps("optimizing", total=len(passes)) as step:
        for p in passes:
            step(p.name)                        # advances the bar, names the pass
    for tensor in progress_iter(tensors, "saving weights"):
        ...
    progress.stop()                             # clears the line (also at the end of a command)

Commands print through ``graphtool.cli.output.echo``, which pauses the line around the text.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from typing import Callable, Iterable, Iterator, TypeVar

T = TypeVar("T")

# The helper: reads "S text" (stage), "B done total" (bar), "P" (pause: clear, ack with one byte),
# "R" (resume), "Q" (clear and quit) from stdin; redraws the line on stderr every 0.4 s.
_TICKER = r"""
import os, select, sys, time
out = 2
name = sys.argv[1]
t0 = float(sys.argv[2])
stage, bar, paused, last, buf = "starting", "", False, 0.0, b""
def width():
    try:
        return os.get_terminal_size(out).columns or 80
    except OSError:
        return 80
def draw():
    text = f"graphtool {name}: {stage}{bar} {time.time() - t0:.0f}s"
    w = width() - 1
    if len(text) > w:
        text = text[: max(0, w - 1)] + "…"
    os.write(out, ("\r\x1b[K" + text).encode("utf-8", "replace"))
draw(); last = time.time()
while True:
    ready, _, _ = select.select([0], [], [], 0.1)
    if ready:
        chunk = os.read(0, 65536)
        if not chunk:
            os.write(out, b"\r\x1b[K")
            break
        buf += chunk
        *lines, buf = buf.split(b"\n")
        quit_now = False
        for raw in lines:
            line = raw.decode("utf-8", "replace")
            kind, _, rest = line.partition(" ")
            if kind == "S":
                stage, bar, paused = rest, "", False
                draw(); last = time.time()  # every stage is shown, however short
            elif kind == "B":
                done, total = (int(x) for x in rest.split())
                full = 20 * done // total if total else 0
                bar = f" [{'#' * full}{'.' * (20 - full)}] {done}/{total}"
            elif kind == "P":
                paused = True
                os.write(out, b"\r\x1b[K")
                os.write(1, b".")
            elif kind == "R":
                paused = False
            elif kind == "Q":
                quit_now = True
        if quit_now:
            os.write(out, b"\r\x1b[K")
            break
        if not paused and time.time() - last > 0.1:
            draw(); last = time.time()
    elif not paused and time.time() - last >= 0.4:
        draw(); last = time.time()
"""


class _Ticker:
    """The helper process and the pipe to it (one per command)."""

    def __init__(self, name: str) -> None:  # noqa: D107
        self.proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", _TICKER, name, repr(time.time())],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None, bufsize=0,
                                     close_fds=True)
        self.paused = False

    def send(self, line: str) -> None:
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write((line.replace("\n", " ") + "\n").encode("utf-8", "replace"))
        except (BrokenPipeError, OSError, ValueError):
            pass

    def pause(self) -> None:
        if self.paused:
            return
        self.paused = True
        self.send("P")
        try:  # wait until the line is cleared, so what the command prints next starts clean
            assert self.proc.stdout is not None
            import select

            if select.select([self.proc.stdout], [], [], 1.0)[0]:
                self.proc.stdout.read(1)
        except (OSError, ValueError):
            pass

    def resume(self) -> None:
        if self.paused:
            self.paused = False
            self.send("R")

    def close(self) -> None:
        self.send("Q")
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            self.proc.wait(timeout=2)
        except (OSError, ValueError, subprocess.TimeoutExpired):
            self.proc.kill()


_ticker: _Ticker | None = None
_stage = ""


def wanted(enabled: bool = True) -> bool:
    """True when progress should be drawn: the caller allows it and stderr is a terminal."""
    if not enabled or os.environ.get("GRAPHTOOL_PROGRESS") == "0":
        return False
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced or closed stderr
        return False


def start(command: str, enabled: bool = True) -> None:
    """Begin the status line for ``command`` (nothing off a terminal, or when not ``enabled``).
    It ends with the process (or ``stop()``)."""
    global _ticker
    if _ticker is not None or not wanted(enabled):
        return
    try:  # the first line now, while the helper starts (a process start takes a while on a busy machine)
        os.write(2, f"\r\x1b[Kgraphtool {command}: starting".encode())
    except OSError:
        pass
    try:
        _ticker = _Ticker(command)
    except OSError:
        _ticker = None
        return
    import atexit

    atexit.register(stop)  # registered first, so it runs last: after the children are stopped


_GLOBAL_VALUE_OPTIONS = ("--memory-limit", "--time-limit")


def start_for_argv(argv: list[str]) -> None:
    """``start`` from a command line, before anything is parsed: the command is the first word
    that is not an option; ``--json`` / ``--format json`` / ``--help`` / ``--version`` draw nothing."""
    words = iter(argv)
    command = ""
    for word in words:
        if word in _GLOBAL_VALUE_OPTIONS:
            next(words, None)
        elif not word.startswith("-"):
            command = word
            break
    quiet = any(w in ("--json", "-h", "--help", "--version") for w in argv) or any(
        a == "--format" and b == "json" for a, b in zip(argv, argv[1:]))
    if command and command != "passes":
        start(command, enabled=not quiet)


def active() -> bool:
    """Whether a status line is being drawn."""
    return _ticker is not None


def stage(text: str) -> None:
    """Name the work now under way ("loading model", "verifying: running the original")."""
    global _stage
    _stage = text
    if _ticker is not None:
        _ticker.resume()
        _ticker.send(f"S {text}")


def count(done: int, total: int) -> None:
    """Show a bar: ``done`` of ``total`` units of the current stage."""
    if _ticker is not None and total > 0:
        _ticker.send(f"B {done} {total}")


def pause() -> None:
    """Clear the line and stop drawing until the next ``stage`` or ``resume`` (before printing)."""
    if _ticker is not None:
        _ticker.pause()


def resume() -> None:
    """Draw the line again after a ``pause``."""
    if _ticker is not None:
        _ticker.resume()


def stop() -> None:
    """Clear the line and end the helper (the end of a command; safe to call twice)."""
    global _ticker
    if _ticker is not None:
        ticker, _ticker = _ticker, None
        ticker.close()


@contextlib.contextmanager
def progress_steps(label: str, total: int | None = None, enabled: bool = True) -> Iterator[Callable[[str], None]]:
    """A callback ``step(name)`` that advances the bar by one and shows ``name`` next to ``label``
    (does nothing off a terminal)."""
    if not wanted(enabled) or _ticker is None:
        yield lambda _name: None
        return
    done = 0
    stage(label)

    def step(name: str) -> None:
        nonlocal done
        done += 1
        stage(f"{label}: {name}")
        if total:
            count(done, total)

    yield step


def progress_iter(
    items: Iterable[T], label: str, total: int | None = None, unit: str = "it", enabled: bool = True
) -> Iterator[T]:
    """``items`` unchanged, with a bar while they are consumed (plain iteration off a terminal)."""
    if not wanted(enabled) or _ticker is None:
        yield from items
        return
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    stage(label)
    last = 0.0
    for i, item in enumerate(items, 1):
        now = time.monotonic()
        if total and now - last > 0.1:
            count(i, total)
            last = now
        yield item
