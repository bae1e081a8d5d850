"""graphtool compare MODEL: graphtool's result beside onnxruntime's own L1/L2/L3 graphs."""

from __future__ import annotations

import os

import click

from graphtool import io
from graphtool.cli import cli
from graphtool.cli.inputs import input_options, resolve_inputs
from graphtool.cli.output import echo, emit
from graphtool.compare import EarlyORT, compare, diff_sections, format_compare, to_html
from graphtool.errors import UsageError
from graphtool.ir.from_onnx import gc_paused_if_big


def parse_levels(text: str) -> list[int]:
    try:
        levels = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise UsageError(f"--levels takes numbers from 1 to 3 separated by commas, not '{text}'") from None
    if not levels or any(lv not in (1, 2, 3) for lv in levels):
        raise UsageError(f"--levels takes numbers from 1 to 3 separated by commas, not '{text}'")
    return levels


@cli.command("compare")
@click.argument("model_path", metavar="MODEL", type=click.Path(dir_okay=False))
@click.option("--levels", default="1,2,3", show_default=True, help="ORT levels to compare (1 basic, 2 extended, 3 all).")
@click.option("--target", type=click.Choice(["onnx", "ort"]), default="onnx", show_default=True,
              help="graphtool's target: portable ONNX, or ORT contrib ops at level 2.")
@click.option("--latency", is_flag=True, help="Also time every variant (1 thread, interleaved runs).")
@click.option("--runs", type=click.IntRange(1, 100000), default=20, show_default=True, help="Timed runs per variant.")
@click.option("--warmup", type=click.IntRange(0, 1000), default=3, show_default=True, help="Untimed runs first.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the random inputs.")
@click.option("--peers", default=None, metavar="a,b",
              help="Instead of ORT's levels: run these optimizers (onnxsim, onnxslim, onnxoptimizer, onnxscript, "
                   "onnxscript-ort), each in its own process, beside graphtool at --level.")
@click.option("--level", "peer_level", type=click.IntRange(1, 2), default=1, show_default=True,
              help="graphtool's level for --peers.")
@input_options
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document (schema graphtool.compare/1).")
@click.option("--html", "html_out", type=click.Path(dir_okay=False), default=None,
              help="Also write a self-contained HTML page with the tables.")
def compare_command(model_path: str, levels: str, target: str, latency: bool, runs: int, warmup: int,
                    seed: int, peers: str | None, peer_level: int, input_shapes: tuple[str, ...], inputs_file: str | None, input_values: tuple[str, ...],
                    as_json: bool, html_out: str | None) -> None:
    """Optimize MODEL with onnxruntime at each level and with graphtool at the same level, then
    show both side by side: node counts, op histograms, ops only one has, the fusions ORT applied
    that graphtool did not (named, e.g. "Conv+Relu → FusedConv ×16"), and the largest output
    difference on the same random inputs. ORT's L2/L3 graphs use com.microsoft ops, and L3 uses
    NCHWc layouts specific to this machine's CPU."""
    wanted = parse_levels(levels)
    if html_out and not os.path.isdir(os.path.dirname(os.path.abspath(html_out))):
        raise UsageError(f"{html_out}: folder does not exist")
    from graphtool import progress as status

    status.stage("loading model")
    early = None if peers else EarlyORT(wanted[0])  # ORT starts on the file's bytes while the IR builds
    model = io.load(model_path, parsed=early.start if early else None)
    started = early.job_for(model) if early else None
    model_inputs = [n for n in model.graph.inputs if n not in model.graph.initializers]
    shapes, feeds, values = resolve_inputs(model_inputs, input_shapes, inputs_file, input_values)
    if peers:
        from graphtool.compare import compare_peers, format_peers
        from graphtool.optimize import require_schema_valid
        from graphtool.verify import InputSet

        status.stage("checking ops, finding inputs")
        require_schema_valid(model)  # a broken op is named as such, before onnxruntime's load error
        from graphtool.verify import find_inputs

        sets = [InputSet(feeds, "given set 1")] if feeds is not None else find_inputs(
            model, model_path, shapes, values, seed).sets  # inputs the original runs on, as optimize finds them
        names = [p.strip() for p in peers.split(",") if p.strip()]
        status.stage(f"running {', '.join(names)} beside graphtool")
        report_peers = compare_peers(model, model_path, names, level=peer_level, target=target, input_sets=sets)
        emit(report_peers, as_json, format_peers(report_peers))
        return
    from graphtool.verify import ReferenceJob

    progress = status.stage if status.active() else None
    pairs: dict = {}
    # Three graphs of a big model (the original, graphtool's, ORT's) live until the report is
    # out: full collections would walk them all to free nothing (1.3 s of a 200k-node compare)
    with gc_paused_if_big(model.node_count()):
        # graphtool's optimize checks the schema first, so a broken op is named as such before any
        # onnxruntime load error from these jobs surfaces. Input discovery and the original's
        # outputs start now, in the sandbox child, beside the optimizers
        reference = ReferenceJob(model, model_path, seed=seed, input_shapes=shapes, feeds=feeds, input_values=values)
        report = compare(model, wanted, target, latency=latency, runs=runs, warmup=warmup, seed=seed,
                         path=model_path, on_step=progress, models=pairs if html_out else None,
                         reference=reference, started=started)
    if html_out:
        status.stage("writing the HTML page")
        page = to_html(report, diff_sections(pairs))
        with io.atomic_file(html_out) as handle:
            handle.write(page.encode("utf-8"))
    emit(report, as_json, format_compare(report))
