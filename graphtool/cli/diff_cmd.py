"""graphtool diff A B"""

from __future__ import annotations

import json
import os

import click

from graphtool import io
from graphtool.cli import cli
from graphtool.cli.output import echo
from graphtool.diff import diff, format_diff, summarize
from graphtool.errors import UsageError
from graphtool.ir.from_onnx import gc_paused_if_big
from graphtool.render.dot import DEFAULT_MAX_NODES

FORMATS = ("text", "json", "dot", "svg", "html")
_BY_EXTENSION = {".txt": "text", ".json": "json", ".dot": "dot", ".gv": "dot", ".svg": "svg", ".html": "html", ".htm": "html"}


def output_format(fmt: str | None, as_json: bool, output: str | None) -> str:
    """--format (which must agree with -o's extension when that names a format), --json is
    --format json, else -o's extension, else text."""
    if as_json:
        if fmt not in (None, "json"):
            raise UsageError(f"--json and --format {fmt} contradict each other")
        return "json"
    if fmt is not None:
        implied = _BY_EXTENSION.get(os.path.splitext(output)[1].lower()) if output else None
        if implied is not None and implied != fmt:
            raise UsageError(f"--format {fmt} but -o {output} names a {os.path.splitext(output)[1]} file; "
                             f"drop --format, or name the file for {fmt}")
        return fmt
    if output:
        return _BY_EXTENSION.get(os.path.splitext(output)[1].lower(), "text")
    return "text"


def check_output_folder(output: str | None) -> None:
    if output and not os.path.isdir(os.path.dirname(os.path.abspath(output))):
        raise UsageError(f"{output}: folder does not exist")


def write_output(data: bytes, output: str | None) -> None:
    """To ``output`` atomically (a failed run leaves no file), else to stdout."""
    from graphtool import progress

    if output:
        with io.atomic_file(output) as handle:
            handle.write(data)
    else:
        progress.pause()
        stream = click.get_binary_stream("stdout")
        stream.write(data if data.endswith(b"\n") else data + b"\n")
        stream.flush()
        progress.stage("finishing")


@cli.command("diff")
@click.argument("a_path", metavar="A", type=click.Path(dir_okay=False))
@click.argument("b_path", metavar="B", type=click.Path(dir_okay=False))
@click.option("--format", "fmt", type=click.Choice(FORMATS), default=None,
              help="text (default), json, or a picture: dot, svg, html. Default: from -o's extension.")
@click.option("--json", "as_json", is_flag=True, help="Same as --format json.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None, help="Write here instead of stdout.")
@click.option("--context", type=click.IntRange(0, 1000), default=1, show_default=True,
              help="Hops of unchanged nodes drawn around each change in a picture.")
@click.option("--all", "show_all", is_flag=True,
              help="Text: print every change (grouped) instead of a screenful of examples.")
@click.option("--all-attrs", is_flag=True,
              help="Picture: show every attribute in the boxes, also those equal to their schema default.")
@click.option("--names", is_flag=True, help="Picture: show each node's name in its box.")
@click.option("--max-nodes", type=click.IntRange(1, None), default=DEFAULT_MAX_NODES, show_default=True,
              help="Picture: draw at most this many boxes (the first changes in graph order, with their "
                   "context); graphviz takes minutes past a few thousand.")
@click.pass_context
def diff_command(ctx: click.Context, a_path: str, b_path: str, fmt: str | None, as_json: bool,
                 output: str | None, context: int, show_all: bool, all_attrs: bool,
                 names: bool, max_nodes: int) -> None:
    """Compare two models node by node: what was added, removed or changed (attributes, inputs,
    op type, initializer values), plus graph-level changes (inputs, outputs, opsets, IR version,
    metadata). Nodes are matched by structure first, so renamed or reordered copies compare equal.

    The text report first names what happened, grouped and largest first (rewrites such as
    Conv+BatchNormalization → Conv ×53, folded subgraphs, constants turned into initializers,
    dead code, weights), then a few examples of each group: it fits on a screen (40 lines).
    --all prints every change; --json keeps every change and adds the groups.
    Exit code 0 when the models are equal, 1 when they differ, 2 on bad input."""
    fmt = output_format(fmt, as_json, output)
    check_output_folder(output)
    from graphtool import progress

    progress.stage(f"loading {os.path.basename(a_path)}")
    a = io.load(a_path)
    progress.stage(f"loading {os.path.basename(b_path)}")
    b = io.load(b_path)
    if fmt in ("dot", "svg", "html"):
        from graphtool.render.dot import infer_shapes

        progress.stage("inferring shapes for the picture")
        a, b = infer_shapes(a), infer_shapes(b)  # shapes on the picture's edges
    # both graphs live until the report is out: full collections would walk them to free nothing
    with gc_paused_if_big(len(a.graph) + len(b.graph)):
        progress.stage("matching nodes")
        result = diff(a, b)
        progress.stage("writing the report" if fmt in ("text", "json") else f"drawing the {fmt} picture")
        if fmt == "text":  # to a file: every change (a file has no screen to fit)
            data = format_diff(result, a_path, b_path, show_all=show_all or bool(output)).encode("utf-8")
        elif fmt == "json":
            groups = [g.as_dict() for g in summarize(result)]
            report = dict(result.as_dict(), a=a_path, b=b_path, groups=groups)
            data = json.dumps(report, indent=2, ensure_ascii=False, default=str).encode("utf-8")
        else:
            from graphtool.render.dot import diff_picture

            picture = diff_picture(result, context, all_attrs=all_attrs, names=names, max_nodes=max_nodes)
            picture.title = f"{os.path.basename(a_path)} → {os.path.basename(b_path)}: {picture.title}"
            data = picture.render(fmt)
    write_output(data, output)
    if output:
        c = result.counts
        echo(f"{'equal' if result.equal else 'different'}: {c['removed']} removed, {c['added']} added, "
                   f"{c['changed']} changed, {c['graph_changes']} graph-level; wrote {output}")
    ctx.exit(0 if result.equal else 1)
