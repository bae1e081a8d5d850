"""graphtool viz MODEL"""

from __future__ import annotations

import os

import click

from graphtool import io
from graphtool.cli import cli
from graphtool.cli.output import echo
from graphtool.cli.diff_cmd import check_output_folder, write_output
from graphtool.errors import UsageError
from graphtool.render.dot import DEFAULT_MAX_NODES, infer_shapes, model_picture

def _op_count(model) -> int:
    return sum(len(graph) for graph in model.graph.walk())


_BY_EXTENSION = {".dot": "dot", ".gv": "dot", ".svg": "svg", ".html": "html", ".htm": "html", ".png": "png"}


@cli.command("viz")
@click.argument("model_path", metavar="MODEL", type=click.Path(dir_okay=False))
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              help="out.svg, out.dot, out.html or out.png (format from the extension). Default: DOT on stdout.")
@click.option("--format", "fmt", type=click.Choice(["dot", "svg", "html", "png"]), default=None,
              help="The format, for an -o name without a picture extension (it must agree with one).")
@click.option("--around", metavar="NODE", default=None,
              help="Draw only the neighbourhood of this node (a node name, or a value name: its producer).")
@click.option("--depth", type=click.IntRange(0, 10000), default=2, show_default=True,
              help="Hops around --around's node.")
@click.option("--max-nodes", type=click.IntRange(1, None), default=DEFAULT_MAX_NODES, show_default=True,
              help="Draw at most this many nodes: the first ones in topological order, then one "
                   "'… N more nodes' node.")
@click.option("--no-shapes", is_flag=True, help="Skip ONNX shape inference; edges show only the shapes the file records.")
@click.option("--all-attrs", is_flag=True,
              help="Show every attribute in the boxes, also those equal to their ONNX schema default (hidden by default).")
@click.option("--names", is_flag=True, help="Show each node's name in its box (by default: on hover, in the HTML panel and search).")
@click.option("--layers/--no-layers", "layers", default=None,
              help="HTML: the layered page (name scopes folded into layers that open on click, laid out in "
                   "the page; any size). Default: for models past --max-nodes ops.")
def viz_command(model_path: str, output: str | None, fmt: str | None, around: str | None, depth: int,
                max_nodes: int, no_shapes: bool, all_attrs: bool, names: bool, layers: bool | None) -> None:
    """Draw MODEL: one box per op with its op type, the attributes that differ from their
    schema default and the weights folded into it ("W 64x3x7x7"), tensor shapes on edges,
    If/Loop/Scan bodies as clusters. The HTML page is self-contained and opens readable at the
    graph's inputs: search (/), fit (f), zoom (+/-), an overview to navigate, and click a node
    for its attributes, inputs and outputs with shapes, and weight statistics."""
    if fmt is not None and output:
        implied = _BY_EXTENSION.get(os.path.splitext(output)[1].lower())
        if implied is not None and implied != fmt:
            raise UsageError(f"--format {fmt} but -o {output} names a {os.path.splitext(output)[1]} file; "
                             f"drop --format, or name the file for {fmt}")
    if fmt is None:
        if output:
            ext = os.path.splitext(output)[1].lower()
            if ext not in _BY_EXTENSION:
                raise UsageError(f"{output}: unknown picture format '{ext}' (use .svg, .dot, .html or .png)")
            fmt = _BY_EXTENSION[ext]
        else:
            fmt = "dot"
    if fmt == "png" and not output:
        raise UsageError("PNG goes to a file: add -o out.png")
    check_output_folder(output)
    from graphtool import progress

    progress.stage("loading model")
    model = io.load(model_path)
    if layers is None:
        layers = fmt == "html" and around is None and _op_count(model) > max_nodes
    if layers:
        if fmt != "html" or around is not None:
            raise UsageError("--layers makes an HTML page of the whole model: use -o out.html, without --around")
        from graphtool.render.html import layered_page
        from graphtool.render.layers import layered_data

        # shapes from the shape oracle, asked per value (no copy of the model re-read with
        # value_info: that was a second load, and whole-model inference held +1.6 GB at 1M ops)
        progress.stage("folding into layers")
        data = layered_data(model, os.path.basename(model_path), shapes=not no_shapes)
        progress.stage("writing the page")
        write_output(layered_page(data).encode("utf-8"), output)
        if output:
            click.echo(f"wrote {output}: {data['opCount']} ops in {len(data['layers']['kind']) - 1} layers")
        return
    if not no_shapes:
        progress.stage("inferring shapes")
        model = infer_shapes(model)
    progress.stage("laying out the picture")
    picture = model_picture(model, around=around, depth=depth, max_nodes=max_nodes, all_attrs=all_attrs,
                            names=names)
    if picture.shown < picture.total and around is None:
        echo(f"graphtool: note: drew {picture.shown} of {picture.total} nodes (--max-nodes {max_nodes}); "
                   "use --around NODE --depth K for a region, or raise --max-nodes", err=True)
    picture.title = f"{os.path.basename(model_path)}: {picture.title}"
    progress.stage(f"rendering {fmt}")
    write_output(picture.render(fmt), output)
    if output:
        echo(f"drew {picture.shown} of {picture.total} nodes; wrote {output}")
