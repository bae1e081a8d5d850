"""Shared output helpers for commands: one JSON document, or human text."""

from __future__ import annotations

import json
from typing import Any

import click


def emit(report: Any, as_json: bool, human: str | None = None) -> None:
    if as_json:
        click.echo(json.dumps(report, indent=2, default=str))
    elif human is not None:
        click.echo(human)
