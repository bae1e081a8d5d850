"""graphtool check MODEL"""

from __future__ import annotations

import click

from graphtool import io
from graphtool.check import RUNTIMES, check, format_findings
from graphtool.cli import cli
from graphtool.cli.output import emit


@cli.command("check")
@click.argument("model_path", metavar="MODEL", type=click.Path(dir_okay=False))
@click.option("--runtime", type=click.Choice(RUNTIMES), default="ort", show_default=True,
              help="Also check that this runtime can run every op ('none': the ONNX standard only).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def check_command(model_path: str, runtime: str, as_json: bool) -> int:
    """Check MODEL against the ONNX standard at the opsets it imports (IR version, opset imports,
    domains, op schemas, attributes, arity, deprecated ops), in every subgraph and function body,
    and that onnxruntime's CPU provider can run each op.

    Exit status: 0 clean (info findings do not count), 1 errors or warnings found, 2 bad input.
    """
    model = io.load(model_path)
    report = check(model, runtime)
    emit({"path": model_path, **report.as_dict()}, as_json, format_findings(report))
    return 1 if report.failed else 0
