"""Shared output helpers for commands: one JSON document, or human text."""

from __future__ import annotations

import json
from typing import Any

import click


def echo(message: Any = None, err: bool = False, nl: bool = True) -> None:
    """``click.echo`` with the progress line cleared first (and drawn again after)."""
    from graphtool import progress

    progress.pause()
    click.echo(message, err=err, nl=nl)
    progress.resume()


def emit(report: Any, as_json: bool, human: str | None = None) -> None:
    """Print ``report`` as one JSON document, or ``human`` (the progress line ends first)."""
    from graphtool import progress

    progress.pause()
    if as_json:
        click.echo(json.dumps(report, indent=2, default=str))
    elif human is not None:
        click.echo(human)
    progress.stage("finishing")
