"""Run one graphtool command on one corpus case, in-process, and record everything it did.

In-process (through ``graphtool.cli.main``, the real entry point) so that an audit hook sees
every file Python opens: a model must never make graphtool open a file outside the model's
folder. Standard output and error are captured at the file-descriptor level, so messages that
onnxruntime's C++ code prints count too: "exactly one line on stderr" is what a user would see.

Audit hooks cannot be removed, so one hook is installed once and checks a module-level state
that is switched on only while a case runs.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import sys
import sysconfig
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import onnxruntime  # noqa: F401 - its import writes a session-id file (.ses) into TMPDIR: before any run moves it

import graphtool
import graphtool.runtime.sandbox  # noqa: F401 - imported before any run moves TMPDIR (its child keeps this one)
from tests.bad_inputs.make_bad_inputs import COMMANDS, MODEL, Case, build

# How each command is called on a case: model path, output folder → argv. A command that
# appears in graphtool but not here is run as ``COMMAND MODEL`` (and the test says so).
TEMPLATES: dict[str, Callable[[str, Path], list[str]]] = {
    "inspect": lambda m, out: ["inspect", m],
    "check": lambda m, out: ["check", m],
    "optimize": lambda m, out: ["optimize", m, "-o", str(out / "out.onnx")],
    "diff": lambda m, out: ["diff", m, m],
    "viz": lambda m, out: ["viz", m, "-o", str(out / "out.svg")],
    "compare": lambda m, out: ["compare", m, "--levels", "1"],
    # the cases are opset 17: converting to 18 runs the converter and the ORT comparison
    "convert": lambda m, out: ["convert", m, "--opset", "18", "-o", str(out / "out.onnx")],
    "tune": lambda m, out: ["tune", m, "-o", str(out / "out.onnx"), "--budget", "2"],
}
NO_MODEL_COMMANDS = {"passes"}  # commands that take no model

# onnxruntime's child gets 2 GB here, not the default min(8 GB, 70% of RAM): the fold bomb hits
# the limit within seconds, and the suite does not take a shared machine's memory to prove it.
MEMORY_LIMIT = "2G"


def available_commands() -> list[str]:
    """The commands graphtool has right now (others are being written), in table order."""
    import click

    from graphtool.cli import cli

    names = [n for n in cli.list_commands(click.Context(cli)) if n not in NO_MODEL_COMMANDS]
    return [c for c in COMMANDS if c in names] + sorted(n for n in names if n not in COMMANDS)


def argv_for(command: str, model: str, out: Path) -> list[str]:
    template = TEMPLATES.get(command, lambda m, o: [command, m])
    return template(model, out)


# ------------------------------------------------------------------------------ audit hook


def _python_roots() -> list[str]:
    roots = {os.path.dirname(os.path.abspath(graphtool.__file__))}
    try:
        import graphtool.passes as builtin_passes

        roots.add(os.path.dirname(os.path.abspath(builtin_passes.__file__)))
    except ImportError:
        pass
    for scheme_paths in (sysconfig.get_paths(), sysconfig.get_paths(vars={"base": sys.base_prefix,
                                                                            "platbase": sys.base_exec_prefix})):
        for key in ("stdlib", "platstdlib", "purelib", "platlib"):
            roots.add(scheme_paths[key])
    roots.update(p for p in sys.path if p and os.path.isdir(p) and "site-packages" in p)
    roots.update(p for p in sys.path if p.endswith(".zip"))  # the stdlib zip the importer probes
    # an editable install's metadata (entry points: plugin passes are found through them)
    roots.add(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(graphtool.__file__))), "graphtool.egg-info"))
    return sorted({os.path.realpath(r) for r in roots})


TRACEBACK = re.compile(r"^Traceback \(most recent call last\):", re.M)  # at a line start: a name may quote it

# files any Python process may open that no model can choose
# the kernel's own settings graphtool reads (tune: whether malloc may ask for transparent huge pages)
SYSTEM_FILES = ("/dev/null", "/dev/urandom", "/proc/self", f"/proc/{os.getpid()}",
                "/sys/kernel/mm/transparent_hugepage")


@dataclass
class _Audit:
    active: bool = False
    allowed: tuple[str, ...] = ()
    opened: list[str] = field(default_factory=list)  # every path opened while active
    outside: list[str] = field(default_factory=list)  # the ones under no allowed root


AUDIT = _Audit()
_installed = False


def _inside(path: str, roots: tuple[str, ...]) -> bool:
    return any(path == r or path.startswith(r.rstrip(os.sep) + os.sep) for r in roots)


def _hook(event: str, args: tuple) -> None:
    if event != "open" or not AUDIT.active:
        return
    path = args[0]
    if isinstance(path, int) or path is None:
        return  # os.fdopen / FileIO(fd): the file was opened (and audited) before
    try:
        real = os.path.realpath(os.path.abspath(os.fsdecode(path)))
    except (TypeError, ValueError):
        real = repr(path)
    AUDIT.opened.append(real)
    if not _inside(real, AUDIT.allowed):
        AUDIT.outside.append(real)


def install_audit_hook() -> None:
    global _installed
    if not _installed:
        sys.addaudithook(_hook)
        _installed = True


@contextlib.contextmanager
def audited(roots: list[Path]) -> Iterator[_Audit]:
    """Record opens while the block runs; ``roots`` (and Python's own files) are allowed."""
    install_audit_hook()
    AUDIT.allowed = tuple(os.path.realpath(r) for r in roots) + tuple(_python_roots()) + SYSTEM_FILES
    AUDIT.opened, AUDIT.outside = [], []
    AUDIT.active = True
    try:
        yield AUDIT
    finally:
        AUDIT.active = False


# ------------------------------------------------------------------------------ running


@dataclass
class Run:
    case: str
    command: str
    argv: list[str]
    exit_code: int
    stdout: str
    stderr: str
    outside: list[str]  # files opened outside the allowed roots
    opened: list[str]  # every file Python opened during the run (real paths)
    left_in_output: list[str]  # files in the output folder after the run
    left_in_tmp: list[str]  # files the run left in its temp folder
    model_folder_changed: bool

    @property
    def stderr_lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.strip()]

    @property
    def message(self) -> str:
        lines = self.stderr_lines
        return lines[0] if lines else ""


@contextlib.contextmanager
def _captured_fds() -> Iterator[tuple[io.BytesIO, io.BytesIO]]:
    """Point fd 1 and 2 (and sys.stdout/sys.stderr) at temp files; yield buffers filled on exit."""
    out_buf, err_buf = io.BytesIO(), io.BytesIO()
    files = [tempfile.TemporaryFile(), tempfile.TemporaryFile()]
    saved_fds = [os.dup(1), os.dup(2)]
    saved_streams = sys.stdout, sys.stderr
    for stream in saved_streams:
        stream.flush()
    os.dup2(files[0].fileno(), 1)
    os.dup2(files[1].fileno(), 2)
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8", errors="replace",
                                  write_through=True)
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8", errors="replace",
                                  write_through=True)
    try:
        yield out_buf, err_buf
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        sys.stdout, sys.stderr = saved_streams
        os.dup2(saved_fds[0], 1)
        os.dup2(saved_fds[1], 2)
        for fd in saved_fds:
            os.close(fd)
        for f, buf in zip(files, (out_buf, err_buf)):
            f.seek(0)
            buf.write(f.read())
            f.close()


@contextlib.contextmanager
def _tempdir(folder: Path) -> Iterator[None]:
    """Temp files of the run go to ``folder`` (allowed, and checked to be empty afterwards)."""
    saved_tempdir, saved_env = tempfile.tempdir, os.environ.get("TMPDIR")
    tempfile.tempdir, os.environ["TMPDIR"] = str(folder), str(folder)
    try:
        yield
    finally:
        tempfile.tempdir = saved_tempdir
        if saved_env is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = saved_env


def _listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) if folder.exists() else []


def run_command(case: Case, command: str, root: Path, model: Path | None = None, flags: tuple[str, ...] = ()) -> Run:
    """Run ``command`` on ``case`` (built under ``root`` if needed) with a fresh output folder;
    ``flags`` are graphtool's global options (``--allow-links``), put before the command."""
    from graphtool.cli import main

    model = model or (root / case.name / MODEL)
    if not model.exists():
        model = build(case, root)
    folder = model.parent
    out = root / "_runs" / f"{case.name}.{command}" / "out"
    tmp = out.parent / "tmp"
    for d in (out, tmp):
        d.mkdir(parents=True, exist_ok=True)
        for leftover in d.iterdir():
            leftover.unlink()
    argv = [*flags, *argv_for(command, str(model), out)]
    before = _listing(folder)
    code = 0
    saved_limit = os.environ.get("GRAPHTOOL_MEMORY_LIMIT")
    os.environ["GRAPHTOOL_MEMORY_LIMIT"] = saved_limit or MEMORY_LIMIT
    with _captured_fds() as (out_buf, err_buf), _tempdir(tmp), audited([folder, out, tmp]) as audit:
        try:
            main(list(argv))
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 2)
    if saved_limit is None:
        os.environ.pop("GRAPHTOOL_MEMORY_LIMIT", None)
    outside = list(audit.outside)
    return Run(case.name, command, argv, code, out_buf.getvalue().decode("utf-8", "replace"),
               err_buf.getvalue().decode("utf-8", "replace"), outside, list(audit.opened), _listing(out), _listing(tmp),
               _listing(folder) != before)


def problems(case: Case, run: Run) -> list[str]:
    """Everything wrong with ``run`` given the case's expectations (empty list: all good)."""
    found = []
    want = case.expected(run.command)
    if run.exit_code != want:
        found.append(f"exit {run.exit_code}, expected {want}")
    if TRACEBACK.search(run.stderr) or TRACEBACK.search(run.stdout):
        found.append("traceback printed")
    if "internal error" in run.stderr:
        found.append("internal error (a bug, even on one line)")
    lines = run.stderr_lines
    if run.exit_code == 2:
        if len(lines) != 1:
            found.append(f"{len(lines)} stderr lines, expected exactly 1")
        elif not lines[0].startswith("graphtool: error:"):
            found.append("stderr line does not start with 'graphtool: error:'")
        elif case.message and case.message not in lines[0].lower():
            found.append(f"message lacks '{case.message}'")
    elif len(lines) > 1:
        found.append(f"{len(lines)} stderr lines")
    if run.exit_code != 0 and run.left_in_output:
        found.append(f"failed run left {run.left_in_output} in the output folder")
    if any(name.endswith(".tmp") for name in run.left_in_output):
        found.append(f"temp file left beside the output: {run.left_in_output}")
    if run.left_in_tmp:
        found.append(f"left {run.left_in_tmp} in its temp folder")
    if run.model_folder_changed:
        found.append("wrote into the model's folder")
    if run.outside:
        found.append(f"opened outside the allowed folders: {sorted(set(run.outside))[:3]}")
    return found


def unguarded_resolve(proto, base_dir):  # type: ignore[no-untyped-def]
    """resolve_external without its guard: what a path-traversal bug would look like."""
    from graphtool.ir.tensor import ExternalRef

    fields = {e.key: e.value for e in proto.external_data}
    return ExternalRef(os.path.join(base_dir, fields["location"]), int(fields.get("offset", 0)), int(fields["length"]))


def _main(argv: list[str]) -> int:
    """``python -m tests.bad_inputs.harness ROOT COMMAND CASE...``: run already-built cases in
    one process (the strace test traces it, to see opens from C++ code the audit hook misses)."""
    from tests.bad_inputs.make_bad_inputs import BY_NAME

    root, command, names = Path(argv[0]), argv[1], argv[2:]
    if os.environ.get("BAD_INPUTS_UNGUARDED"):  # the strace test's control: no path guard
        import graphtool.ir.from_onnx as from_onnx

        from_onnx.resolve_external = unguarded_resolve
    flags = tuple(os.environ.get("BAD_INPUTS_FLAGS", "").split())  # e.g. --allow-links (the control run)
    for name in names:
        run = run_command(BY_NAME[name], command, root, flags=flags)
        print(name, run.exit_code, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
