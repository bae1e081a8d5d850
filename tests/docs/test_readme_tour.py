"""README's first screen works as written: a wheel built from a clean clone installs into a fresh
venv, and the five-command tour runs there, printing the output the README shows (timings and
float noise aside; lines marked `…` are trimmed in the README)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

from tests.docs.freshvenv import make_venv

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_VARYING = [(re.compile(r"\d+(\.\d+)? ?(ms|s)\b"), "<time>"), (re.compile(r"\d\.\d+e[-+]\d+"), "<float>")]


def readme_tour() -> list[tuple[str, list[str]]]:
    """(command, the output lines README shows for it) from the console block of "Five commands"."""
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    section = text.split("## Five commands", 1)[1]
    block = section.split("```console", 1)[1].split("```", 1)[0]
    tour: list[tuple[str, list[str]]] = []
    for line in block.strip("\n").splitlines():
        if line.startswith("$ "):
            tour.append((line[2:], []))
        elif tour:
            tour[-1][1].append(line)
    return tour


def _normal(line: str) -> str:
    for pattern, token in _VARYING:
        line = pattern.sub(token, line)
    return " ".join(line.split())  # a table's column widths follow its widest cell (a time that varies)


def _clean_clone(dest: str) -> None:
    if os.path.isdir(os.path.join(ROOT, ".git")):
        subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", ROOT, dest], check=True)
        return
    # a tree without .git (an exported snapshot): copy what git would have
    shutil.copytree(ROOT, dest, ignore=shutil.ignore_patterns(".venv", "build", "*.egg-info", "__pycache__",
                                                              ".pytest_cache", "dist"))


def test_the_readme_starts_with_the_two_commands_that_work_on_a_fresh_machine():
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    first_block = text.split("```bash", 1)[1].split("```", 1)[0].strip().splitlines()
    assert [line.split()[0:2] for line in first_block] == [["make", "demo"], ["make", "test"]]
    assert "make test" in open(os.path.join(ROOT, ".ci", "run")).read()
    assert "pip install graphtool " in text and "graphtool[peers]" in text
    assert len(text.splitlines()) < 120  # a first screen; the reference lives in docs/


def test_a_wheel_from_a_clean_clone_runs_the_tour(tmp_path):
    tour = readme_tour()
    assert len([c for c, _ in tour if c.startswith("graphtool ")]) == 5
    clone = str(tmp_path / "clone")
    _clean_clone(clone)
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                    "-w", str(wheels), clone], check=True, capture_output=True)
    (wheel,) = wheels.glob("graphtool-*.whl")
    venv = make_venv(str(tmp_path / "venv"))
    venv.pip_install(str(wheel))
    where = venv.run(venv.python, "-c", "import graphtool, graphtool.passes.eliminate; print(graphtool.__file__)",
                     cwd=str(tmp_path), check=True).stdout.strip()
    assert where.startswith(venv.root), where  # the wheel's graphtool, not the checkout's
    assert os.path.exists(os.path.join(venv.bin, "graphtool"))
    for command, shown in tour:
        proc = venv.run("bash", "-c", command, cwd=clone)
        assert proc.returncode in (0, 1), f"{command}\n{proc.stdout}\n{proc.stderr}"
        assert "error" not in proc.stderr, f"{command}: {proc.stderr}"
        actual = {_normal(line) for line in proc.stdout.splitlines()}
        missing = [line for line in shown if line.strip() != "…" and _normal(line) not in actual]
        assert not missing, f"{command}: README shows lines the command did not print: {missing}\n{proc.stdout}"
