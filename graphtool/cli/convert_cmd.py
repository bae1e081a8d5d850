"""graphtool convert MODEL --opset N -o OUT"""

from __future__ import annotations

import os

import click

from graphtool import io
from graphtool.cli import cli
from graphtool.cli.inputs import input_options, resolve_inputs
from graphtool.cli.output import emit, echo
from graphtool.convert import ConvertResult, convert
from graphtool.errors import UsageError


@cli.command("convert")
@click.argument("model_path", metavar="MODEL", type=click.Path(dir_okay=False))
@click.option("--opset", type=int, required=True, help="The ai.onnx opset to convert to.")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="Where to write the converted model.")
@click.option("--no-verify", is_flag=True, help="Skip the onnxruntime comparison (and the pinning of adapter-less ops it allows).")
@input_options
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def convert_command(model_path: str, opset: int, output: str, no_verify: bool, input_shapes: tuple[str, ...],
                    inputs_file: str | None, input_values: tuple[str, ...], as_json: bool) -> int:
    """Convert MODEL to ai.onnx opset N with onnx's version converter, keep its functions and
    metadata, check the result and compare its outputs with the original's through onnxruntime.

    Exit status: 0 converted and equal; 1 outputs differ (nothing written); 2 bad input or a
    conversion the converter cannot do (nothing written).
    """
    if not os.path.isdir(os.path.dirname(os.path.abspath(output))):
        raise UsageError(f"{output}: folder does not exist")
    from graphtool import progress

    progress.stage("loading model")
    model = io.load(model_path)
    from graphtool.optimize import require_one_data_field

    require_one_data_field(model)  # convert writes the model: the contradiction would go on unnoticed
    progress.stage(f"converting to opset {opset}" + ("" if no_verify else ", then verifying in onnxruntime"))
    model_inputs = [n for n in model.graph.inputs if n not in model.graph.initializers]
    shapes, feeds, values = resolve_inputs(model_inputs, input_shapes, inputs_file, input_values)
    result = convert(model, opset, verify_outputs=not no_verify, feeds=feeds, input_shapes=shapes,
                     input_values=values)
    report = {"input": model_path, "output": output if result.ok else None, **result.as_dict()}
    if not result.ok:
        emit(report, as_json, format_convert(result, model_path, None))
        assert result.verification is not None
        echo(f"graphtool: error: the converted model differs from the original: {result.verification.summary()}; "
                   "nothing written", err=True)
        return 1
    progress.stage("saving")
    io.save(result.model, output)
    emit(report, as_json, format_convert(result, model_path, output))
    return 0


def format_convert(result: ConvertResult, source: str, output: str | None) -> str:
    lines = [f"{source}: ai.onnx opset {result.source} → {result.target}, IR {result.ir_version[0]} → {result.ir_version[1]}, "
             f"{result.model.node_count()} nodes"]
    if result.pinned:
        lines.append(f"kept as they were (no converter adapter; this model uses nothing that changed): {', '.join(result.pinned)}")
    for name, how in result.functions.items():
        lines.append(f"function {name}: {how}")
    if result.source == result.target:
        lines.append("already at that opset: copied unchanged")
    elif result.verification is None:
        lines.append("not verified (--no-verify)")
    else:
        lines.append(f"verified with onnxruntime: {result.verification.summary()}")
    if output:
        lines.append(f"wrote {output}")
    return "\n".join(lines)
