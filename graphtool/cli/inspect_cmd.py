"""graphtool inspect MODEL"""

from __future__ import annotations

import click

from graphtool.check import check
from graphtool.cli import cli
from graphtool.cli.output import emit
from graphtool.inspect import format_inspect, inspect_file


@cli.command("inspect")
@click.argument("model_path", metavar="MODEL", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def inspect_command(model_path: str, as_json: bool) -> None:
    """Summarize MODEL: opsets, inputs/outputs, op histogram, parameters, subgraphs, functions,
    checker result, ops onnxruntime's CPU provider cannot run and the `graphtool check` summary.
    Reads no weight bytes."""
    from graphtool import progress

    progress.stage("reading and checking the file")
    model, report = inspect_file(model_path)  # onnx's checker first: its parse and the IR never coexist
    progress.stage("checking opsets, schemas and onnxruntime kernels")
    report["check"] = check(model).summary()  # the one-line `graphtool check` verdict
    emit(report, as_json, format_inspect(report))
