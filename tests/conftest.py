"""Shared test helpers: where the corpora are, and how to run the CLI in-process."""

from __future__ import annotations

import glob
import os
import sys
from dataclasses import dataclass

import onnx
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "fixtures")
BACKEND_DATA = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")


def backend_models() -> list[str]:
    """Every model of the onnx wheel's light/, pytorch-converted/, pytorch-operator/, simple/."""
    paths = sorted(glob.glob(os.path.join(BACKEND_DATA, "light", "*.onnx")))
    for kind in ("pytorch-converted", "pytorch-operator", "simple"):
        paths += sorted(glob.glob(os.path.join(BACKEND_DATA, kind, "*", "model.onnx")))
    return paths


def light_model(name: str) -> str:
    return os.path.join(BACKEND_DATA, "light", f"light_{name}.onnx")


@dataclass
class CliResult:
    exit_code: int
    stdout: str
    stderr: str


@pytest.fixture
def run_cli(capsys):
    """Run ``graphtool ARGS`` in-process through the real entry point (``main``)."""
    from graphtool.cli import main

    def run(*args: str) -> CliResult:
        code = 0
        try:
            main(list(args))
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 2)
        out, err = capsys.readouterr()
        return CliResult(code, out, err)

    return run


def count_calls(fn) -> int:
    """Python calls + generator resumptions + C calls made while ``fn()`` runs."""
    calls = 0

    def profiler(frame, event, arg):
        nonlocal calls
        if event in ("call", "c_call"):
            calls += 1

    sys.setprofile(profiler)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return calls


def pytest_configure(config):
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 20000))
