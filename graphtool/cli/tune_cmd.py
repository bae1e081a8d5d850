"""graphtool tune MODEL -o OUT"""

from __future__ import annotations

import os

import click

from graphtool import io
from graphtool.cli import cli
from graphtool.cli.inputs import input_options, resolve_inputs
from graphtool.cli.output import echo, emit
from graphtool.errors import UsageError
from graphtool.inspect import format_table
from graphtool.runtime import SESSION_SUFFIX
from graphtool.tune import PAST_TOKENS, PREFILL_TOKENS, Candidate, TuneResult
from graphtool.verify import ATOL, RTOL


def snippet(candidate: Candidate, output: str) -> str:
    """A Python snippet that opens OUT as it was measured."""
    s = candidate.ort
    level = {"off": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC", "extended": "ORT_ENABLE_EXTENDED",
             "all": "ORT_ENABLE_ALL"}[s.level]
    lines = ["import onnxruntime as ort", "", "opts = ort.SessionOptions()",
             f"opts.graph_optimization_level = ort.GraphOptimizationLevel.{level}"]
    if s.threads:
        lines.append(f"opts.intra_op_num_threads = {s.threads}")
    extra = f", disabled_optimizers={s.optimizer_names()!r}" if s.disabled else ""
    lines.append(f"sess = ort.InferenceSession({output!r}, opts, providers=['CPUExecutionProvider']{extra})")
    lines.append(f"# or: graphtool.runtime.session_for({output!r})  (reads {os.path.basename(output)}{SESSION_SUFFIX})")
    return "\n".join(lines)


def format_result(result: TuneResult) -> str:
    # a decoder's rows carry each generation step's median too (the ranked one is "median ms")
    steps = list(dict.fromkeys(k for r in result.rows for k in r.steps))
    rows = [[r.stage, r.candidate.label(), f"{r.median * 1000:.2f}",
             *[f"{r.steps[k] * 1000:.2f}" if k in r.steps else "-" for k in steps], f"±{r.spread:.0%}",
             f"{r.speedup:.2f}x", "-" if r.candidate == result.baseline else f"{r.confidence:.0%}", r.rounds,
             r.status + (f", {r.left.split(' after')[0]}" if r.left else "")]
            for r in result.rows]
    lines = [format_table(rows, ["stage", "candidate", "median ms", *[f"{k} ms" for k in steps], "noise",
                                 "vs original", "conf. faster", "rounds", "status"])]
    if result.kernels:
        krows = [[k.op, k.shapes, f"{k.fused * 1e6:.0f}", f"{k.unfused * 1e6:.0f}", f"{k.fused / k.unfused:.2f}x",
                  k.verdict] for k in result.kernels]
        lines += ["", "kernels (fused op vs the subgraph it replaces, ORT all with its own fusion of that op off):",
                  format_table(krows, ["op", "inputs", "fused µs", "unfused µs", "time ratio", "verdict"])]
    for finding in result.findings:
        lines.append(f"finding: {finding}")
    for name, why in result.failed.items():
        lines.append(f"verification failed: {name}: {why}")
    for skipped in result.skipped:
        lines.append(f"skipped: {skipped}")
    runner = "" if result.runner_up_confidence is None else \
        f", {result.runner_up_confidence:.0%} confident it beats the runner-up"
    verdict = "faster than" if result.confidence >= 0.95 else "within noise of"
    lines.append(f"best: {result.winner.label()}: {result.speedup:.2f}x vs the original under onnxruntime's defaults "
                 f"({result.confidence:.0%} confident it is faster: {verdict} it{runner}); {result.seconds:.0f} s")
    return "\n".join(lines)


@cli.command("tune")
@click.argument("model_path", metavar="MODEL", type=click.Path(dir_okay=False))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False),
              help="Where to write the fastest verified model (settings go to OUT.session.json).")
@click.option("--target", type=click.Choice(["ort", "onnx"]), default="ort", show_default=True,
              help="ort: rewrite sets may use com.microsoft contrib ops; onnx: standard ops only.")
@click.option("--threads", type=click.IntRange(1, 1024), default=None,
              help="Pin onnxruntime's intra-op threads (default: try 1 and one per core).")
@click.option("--budget", type=click.FloatRange(1, 86400), default=300.0, show_default=True,
              help="Seconds the search may take (stages beyond it are skipped and reported).")
@click.option("--prefill", type=click.IntRange(1, 1 << 20), default=PREFILL_TOKENS, show_default=True,
              help="A model with a KV cache: tokens of the prefill step timed (over an empty cache).")
@click.option("--past", type=click.IntRange(1, 1 << 20), default=PAST_TOKENS, show_default=True,
              help="A model with a KV cache: cached tokens the decode step (1 new token) is timed over.")
@click.option("--pick", type=click.Choice(["decode", "prefill"]), default="decode", show_default=True,
              help="A model with a KV cache: the step the candidates are ranked by (both are reported).")
@input_options
@click.option("--rtol", type=float, default=RTOL, show_default=True)
@click.option("--atol", type=float, default=ATOL, show_default=True)
@click.option("--environment/--no-environment", default=True, show_default=True,
              help="Also time the winner in fresh processes with malloc asking for transparent huge pages "
                   "(GLIBC_TUNABLES=glibc.malloc.hugetlb=1) and recommend it where every such process was faster.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def tune_command(model_path: str, output: str, target: str, threads: int | None, budget: float, prefill: int,
                 past: int, pick: str, input_shapes: tuple[str, ...], inputs_file: str | None,
                 input_values: tuple[str, ...], rtol: float, atol: float, environment: bool, as_json: bool) -> None:
    """Measure graphtool's rewrite sets x onnxruntime's settings on this machine; keep the fastest.

    Kernel micro-benchmarks (each fused op against the subgraph it replaces, at the model's
    shapes) prune the search; whole-model runs, interleaved with the original under onnxruntime's
    defaults, decide. Every rewritten model is verified before it can win. Writes OUT and
    OUT.session.json (the onnxruntime settings; graphtool.runtime.session_for opens it).

    A model with a KV cache (past_key_values.* inputs) is timed on a prefill (--prefill tokens,
    empty cache) and a decode step (1 token over --past cached ones) in every run; both latencies
    are reported for every candidate, and the decode step ranks them unless --pick prefill."""
    from graphtool.progress import progress_steps
    from graphtool.tune import as_shell, tune_file

    if os.path.abspath(output) == os.path.abspath(model_path):
        raise UsageError("-o must differ from MODEL (tune compares against the original)")
    from graphtool import progress

    progress.stage("loading model")
    original = io.load(model_path)
    model_inputs = [n for n in original.graph.inputs if n not in original.graph.initializers]
    shapes, feeds, values = resolve_inputs(model_inputs, input_shapes, inputs_file, input_values)
    with progress_steps("tuning", enabled=not as_json) as step:
        run = tune_file(model_path, output, original=original, target=target, threads=threads, budget=budget,
                        feeds=feeds, input_shapes=shapes, input_values=values, rtol=rtol, atol=atol, progress=step,
                        prefill=prefill, past=past, pick=pick, environment=environment)
    result = run.result
    report = run.as_dict()
    if as_json:
        emit(report, True)
        return
    if run.decoder:
        for step, step_shapes in run.decoder["steps"].items():
            described = ", ".join(f"{k}={'x'.join(map(str, v))}" for k, v in step_shapes.items())
            echo(f"timing inputs, {step}: {described}")
        echo(f"({run.timing_how})")
    else:
        described = ", ".join(f"{k}={'x'.join(map(str, v))}" for k, v in run.timing_shapes.items())
        echo(f"timing inputs: {described} ({run.timing_how})")
    echo(format_result(result))
    echo(f"verification: {run.verification}")
    echo(f"wrote {output} and {output}{SESSION_SUFFIX}")
    echo("")
    echo(snippet(result.winner, output))
    if run.settings.get("environment"):
        echo(f"# and start the process that runs it with {as_shell(run.settings['environment'])} "
             "(measured faster here: see the findings)")
