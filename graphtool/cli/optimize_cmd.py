"""graphtool optimize IN -o OUT"""

from __future__ import annotations

import os
import sys
from typing import Any

import click

from graphtool import io
from graphtool.cli import cli
from graphtool.cli.inputs import input_options, resolve_inputs
from graphtool.cli.output import emit, echo
from graphtool.inspect import format_table, human_bytes
from graphtool.ir.from_onnx import gc_paused_if_big
from graphtool.ir.model import Model
from graphtool.optimize import optimize
from graphtool.pass_manager import PassContext, PassReport
from graphtool.runtime import sandbox
from graphtool.verify import ATOL, RTOL, ReferenceJob, find_culprit, verify


def _split(names: str | None) -> list[str]:
    return [n.strip() for n in names.split(",") if n.strip()] if names else []


def node_names(model: Model) -> list[str]:
    """The model's node names in order (empty ones left out): all ``name_map`` needs of the
    original, so an in-place optimization can drop the original itself."""
    return [node.name for node in model.all_nodes() if node.name]


def name_map(original: Model | list[str], optimized: Model, ctx: PassContext) -> dict[str, str | None]:
    """Original node name → the node it is now part of (itself, a fused node), or None (gone).
    ``original``: the model, or its ``node_names``."""
    kept = {n.name for n in optimized.all_nodes() if n.name}
    absorbed_by = {old: new for new, olds in ctx.provenance.items() for old in olds}
    mapping: dict[str, str | None] = {}
    for name in original if isinstance(original, list) else node_names(original):
        if name in kept:
            mapping[name] = name
        else:
            target = absorbed_by.get(name)
            mapping[name] = target if target in kept else None
    return mapping


def format_report(report: PassReport, sizes: tuple[int, int] | None, verification: str | None,
                  show_all: bool = False) -> str:
    """The text report: one row per pass that did something (``show_all``: every pass that ran),
    totals, sizes, the plugins that ran and the verification summary."""
    shown = [r for r in report.passes.values() if show_all or not r.idle]
    rows = [
        [r.name + (" *" if r.plugin else ""), r.runs, r.changed_runs, r.nodes_removed, f"{r.seconds * 1000:.1f} ms",
         ", ".join(f"{k}={v}" for k, v in r.stats.items() if v)]
        for r in shown
    ]
    lines = [format_table(rows, ["pass", "runs", "changed", "nodes removed", "time", "stats"]) if rows
             else "no pass changed anything"]
    idle = len(report.passes) - len(shown)
    if idle:
        lines.append(f"({idle} more pass{'es' if idle != 1 else ''} ran and changed nothing; --all lists them)")
    lines.append("")
    lines.append(f"nodes: {report.nodes_before} -> {report.nodes_after} "
                 f"({report.nodes_before - report.nodes_after} removed) in {report.iterations} iterations, "
                 f"{report.seconds:.2f} s")
    if sizes:
        lines.append(f"size: {human_bytes(sizes[0])} -> {human_bytes(sizes[1])}")
    if report.plugins:
        lines.append(f"plugins run (*): {', '.join(report.plugins)}")
    if verification:
        lines.append(f"verification: {verification}")
    return "\n".join(lines)


def input_shapes_line(sets: list[Any], limit: int = 4) -> str:
    """``verified on: input [1, 3, 224, 224] float32 | input [1, 3, 256, 256] float32`` (one entry
    per input set; at most ``limit`` inputs per set)."""
    parts = []
    for s in sets:
        items = [f"{name} {list(getattr(v, 'shape', ()))} {getattr(v, 'dtype', type(v).__name__)}"
                 for name, v in list(s.feeds.items())[:limit]]
        more = len(s.feeds) - limit
        parts.append(", ".join(items) + (f", +{more} more" if more > 0 else ""))
    return "verified on: " + " | ".join(parts)


def same_file(a: str, b: str) -> bool:
    """Whether paths ``a`` and ``b`` name one file (``b`` may not exist yet)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def _file_size(path: str) -> int:
    total = os.path.getsize(path)
    data = path + ".data"
    return total + (os.path.getsize(data) if os.path.exists(data) else 0)


@cli.command("optimize")
@click.argument("model_path", metavar="IN", type=click.Path(dir_okay=False))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="Where to write the result.")
@click.option("--level", type=int, default=1, show_default=True,
              help="1 cleanups+folds (ORT basic), 2 fusions (ORT extended), 3 layout (ORT all: channels-last "
                   "quantized kernels; --target ort).")
@click.option("--target", type=click.Choice(["onnx", "ort"]), default="onnx", show_default=True,
              help="onnx: standard ops only; ort: also com.microsoft contrib ops.")
@click.option("--passes", "only", help="Run only these passes (comma-separated; plugin passes too).")
@click.option("--plugins", "plugins", metavar="NAMES",
              help="Add these installed plugin passes to the level's passes (comma-separated, or 'all'). "
                   "Plugins never run unless named here or in --passes.")
@click.option("--force", is_flag=True, help="Allow -o to be IN itself (the original is replaced).")
@click.option("--all", "show_all", is_flag=True, help="List every pass in the report, also those that changed nothing.")
@click.option("--skip", help="Skip these passes (comma-separated).")
@click.option("--no-verify", is_flag=True, help="Do not run both models in onnxruntime to compare outputs.")
@input_options
@click.option("--strict", is_flag=True,
              help="Exit 1 when a rewrite sits in an If branch no verification input reached (unverified).")
@click.option("--max-fold-bytes", type=int, default=16 << 20, show_default=True,
              help="Skip a constant fold whose output outgrows its inputs by more than this.")
@click.option("--rtol", type=float, default=RTOL, show_default=True)
@click.option("--atol", type=float, default=ATOL, show_default=True)
@click.option("--upgrade-opset", type=int, metavar="N",
              help="First raise the default-domain opset to N (onnx's converter), unlocking newer fused ops.")
@click.option("--compare-ort", is_flag=True, help="Also compare with onnxruntime's own optimizer at this level.")
@click.option("--explain", "explain", metavar="RULE",
              help="For each candidate of these rules or rule passes (comma-separated), say whether it fused "
                   "and, if not, the first constraint that failed.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document (includes the old→new node-name map).")
def optimize_command(model_path: str, output: str, level: int, target: str, only: str | None,
                     plugins: str | None, force: bool, show_all: bool, skip: str | None,
                     no_verify: bool, input_shapes: tuple[str, ...], inputs_file: str | None,
                     input_values: tuple[str, ...], strict: bool, max_fold_bytes: int, rtol: float, atol: float,
                     upgrade_opset: int | None, compare_ort: bool, explain: str | None, as_json: bool) -> None:
    """Optimize IN and write OUT; by default prove the result gives the same outputs.

    Verification finds inputs the original runs on (declared shapes, then sizes the model names,
    then a ladder of sizes; values the graph compares integer inputs with), runs at least two
    input sets, and reports which If branches they reached. A model that runs on nothing tried
    exits 2 with onnxruntime's reason and the flags that supply real inputs."""
    from graphtool.errors import UsageError
    from graphtool.rewrite import explain as explaining

    if level == 3 and target != "ort":
        raise UsageError("--level 3 is onnxruntime's layout level (channels-last com.microsoft kernels): add "
                         "--target ort, or use --level 2 for standard ops")
    if level not in (1, 2, 3):
        raise UsageError(f"--level {level}: optimize has levels 1, 2 and 3")
    if not force and same_file(model_path, output):
        # the original is the reference verification compares with and bisection replays from,
        # and its external weights are read lazily: writing over it must be asked for
        raise UsageError(f"-o {output} is the input model itself; write elsewhere, or add --force to replace it")
    explained = explaining.validate(_split(explain))
    from graphtool import progress

    progress.stage("loading model")
    original = io.load(model_path)
    # a big model's graphs live until the command ends: full collections would walk them to free
    # nothing (0.9 s of a 200k-node optimize); paused until then
    click.get_current_context().with_resource(gc_paused_if_big(original.node_count()))
    model_inputs = [n for n in original.graph.inputs if n not in original.graph.initializers]
    shapes, feeds, values = resolve_inputs(model_inputs, input_shapes, inputs_file, input_values)
    from graphtool.progress import progress_steps

    # the original's onnxruntime session and input discovery start now, beside the passes
    reference = None if no_verify else ReferenceJob(original, model_path, input_shapes=shapes, feeds=feeds,
                                                      input_values=values)
    from graphtool.opset_upgrade import upgrade_opset as upgrade

    start = original if upgrade_opset is None else upgrade(original, upgrade_opset)
    # Nothing but the node names needs the original once verification's reference took its snapshot
    # (``ReferenceJob``: the session opens the file), unless --compare-ort traces it: optimize it in
    # place instead of a copy (a million-node graph: ~450 MB less at the peak, 3 s less). A failed
    # verification reloads it for bisection.
    in_place = not compare_ort and (reference is None or reference.snapshot.detached)
    names = node_names(original) if in_place else original
    opset = start.opset("")
    with progress_steps("optimizing", enabled=not as_json) as step:
        optimized, report, ctx = optimize(start, level=level, target=target, passes=_split(only) or None,
                                          skip=_split(skip), max_fold_bytes=max_fold_bytes, input_shapes=shapes,
                                          on_step=step, explain=explained, in_place=in_place,
                                          plugins=_split(plugins))
    result: dict[str, Any] = {"input": model_path, "output": output, "level": level, "target": target,
                              "opset": opset, "report": report.as_dict()}
    if explained:
        result["explain"] = explaining.entries(ctx.explanations)
        if not as_json:
            echo(explaining.format_explanations(ctx.explanations))
    summary = None
    verification = None
    node_map = None
    if not no_verify:
        # the rewritten model's session builds in the sandbox child while the name map is made here
        progress.stage("verifying: both models in onnxruntime on the same inputs")
        checking = sandbox.Background(lambda: verify(original, optimized, input_shapes=shapes, feeds=feeds,
                                                     input_values=values, rtol=rtol, atol=atol,
                                                     original_path=model_path, reference=reference))
        node_map = name_map(names, optimized, ctx)
        verification = checking.result()
        result["verification"] = verification.as_dict()
        summary = verification.summary()
        if not verification.ok:
            if in_place:  # the passes edited the loaded original: bisection replays from the file
                original = io.load(model_path)
                start = original if upgrade_opset is None else upgrade(original, upgrade_opset)
            progress.stage("verification failed: replaying the passes to find the first bad rewrite")
            culprit = find_culprit(original, report, ctx, start=start, input_sets=verification.input_sets,
                                   rtol=rtol, atol=atol)
            result["culprit"] = culprit.as_dict() if culprit else None
            blame = f"; first bad rewrite: {culprit.describe()}" if culprit else ""
            if as_json:
                emit(result, True)
            echo(f"graphtool: verification failed: {summary}{blame}; no output written", err=True)
            sys.exit(1)
        if strict and verification.unverified:
            if as_json:
                emit(result, True)
            echo(f"graphtool: unverified: rewrites in If branches no input reached: "
                       f"{', '.join(verification.unverified[:6])}; give inputs that reach them "
                       "(--inputs, --input-value) or drop --strict; no output written", err=True)
            sys.exit(1)
    progress.stage(f"saving {os.path.basename(output)}")
    io.save(optimized, output)
    result["size_before"], result["size_after"] = _file_size(model_path), _file_size(output)
    result["node_map"] = node_map if node_map is not None else name_map(names, optimized, ctx)
    comparison = None
    if compare_ort:
        from graphtool.compare import compare_level, format_compare

        comparison = compare_level(original, optimized, level, target)
        result["compare_ort"] = comparison
    if as_json:
        emit(result, True)
        return
    echo(format_report(report, (result["size_before"], result["size_after"]), summary, show_all))
    found = verification.discovery if verification is not None else None
    if found is not None:
        echo(f"inputs: {found.how} ({found.attempts} attempt{'s' if found.attempts != 1 else ''}, "
                   f"{found.extra_seconds:.2f} s searching)")
    if verification is not None:
        for i, label in enumerate(verification.sets, 1):
            echo(f"  set {i}: {label}")
    echo(f"wrote {output}")
    if comparison is not None:
        echo("")
        echo(format_compare(comparison))
