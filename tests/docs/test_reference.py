"""docs/reference.md says what the program does: every option a command's heading lists is one the
command accepts, and every name the API paragraph promises is exported by ``graphtool``."""

from __future__ import annotations

import os
import re

import pytest
from click.testing import CliRunner

import graphtool
from graphtool.cli import cli

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
with open(os.path.join(ROOT, "docs", "reference.md"), encoding="utf-8") as _file:
    TEXT = _file.read()
HEADINGS = re.findall(r"^### graphtool (\w+) (.*)$", TEXT, flags=re.MULTILINE)


@pytest.mark.parametrize(("command", "line"), HEADINGS, ids=[f"{c}-{i}" for i, (c, _) in enumerate(HEADINGS)])
def test_every_option_in_a_heading_is_accepted(command, line):
    help_text = CliRunner().invoke(cli, [command, "--help"], terminal_width=200).output
    options = set(re.findall(r"(?<![\w-])(--[a-z][\w-]*|-o)\b", line))
    assert options, line
    missing = sorted(o for o in options if not re.search(rf"(?<![\w-]){re.escape(o)}\b", help_text))
    assert missing == [], f"{command}: documented but not accepted: {missing}"


def test_the_api_paragraph_names_exported_things():
    names = re.findall(r"`gt\.(\w+)", TEXT)
    assert len(set(names)) >= 10
    assert [n for n in sorted(set(names)) if not hasattr(graphtool, n)] == []


def test_level_three_and_in_place_output_are_said_as_the_program_does(capsys):
    from graphtool.cli import main
    from tests.conftest import FIXTURES

    model = os.path.join(FIXTURES, "conv_bn.onnx")
    for argv, said in ((["optimize", model, "-o", "x.onnx", "--level", "3"], "--level 3"),
                       (["optimize", model, "-o", model], "--force")):
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        assert exit_.value.code == 2 and said in capsys.readouterr().err
    assert "Level **3** (ORT's layout level, \"all\") takes `--target ort` (refused\nwithout it)" in TEXT
    assert "`-o` may not be IN itself unless `--force`" in TEXT
