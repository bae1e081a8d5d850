"""graphtool inspect MODEL"""

from __future__ import annotations

import click

from graphtool import io
from graphtool.check import check
from graphtool.cli import cli
from graphtool.cli.output import emit
from graphtool.inspect import format_inspect, inspect_model


@cli.command("inspect")
@click.argument("model_path", metavar="MODEL", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def inspect_command(model_path: str, as_json: bool) -> None:
    """Summarize MODEL: opsets, inputs/outputs, op histogram, parameters, subgraphs, functions,
    checker result, ops onnxruntime's CPU provider cannot run and the `graphtool check` summary.
    Reads no weight bytes."""
    model = io.load(model_path)
    report = inspect_model(model, model_path)
    report["check"] = check(model).summary()  # the one-line `graphtool check` verdict
    emit(report, as_json, format_inspect(report))
