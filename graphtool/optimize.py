"""``optimize``: run a level's passes over a copy of a model and return it with the report."""

from __future__ import annotations

from typing import Callable, Iterable

from graphtool.ir.from_onnx import from_onnx, gc_paused
from graphtool.ir.model import Model
from graphtool.ir.to_onnx import to_onnx
from graphtool.pass_manager import PassContext, PassManager, PassReport, select_passes


def clone(model: Model) -> Model:
    """An independent copy (external weights are shared on disk, not read).

    A model as loaded is copied structurally (``Model.copy``: same ids, same order, no protobuf
    round trip, ~4x cheaper); an edited one goes through its serialization, which renumbers its
    ops in topological order as a fresh load would (what passes then see, unchanged from before)."""
    if model.pristine():
        with gc_paused():
            return model.copy()
    return from_onnx(to_onnx(model), model.base_dir)


def require_schema_valid(model: Model) -> None:
    """Refuse standard ops with the wrong number of inputs/outputs or ill-typed attributes.

    Passes read ``a, b = matmul.inputs`` and ``node.attr("perm")`` as the schema promises; on a
    node that breaks its schema they would fail in arbitrary ways (found by fuzzing), and no
    runtime could run the result anyway. ``graphtool check`` lists every such finding.
    """
    from graphtool.check import check
    from graphtool.errors import BadModel

    require_one_data_field(model)
    for finding in check(model, "none", passes=["check-schemas"]).findings:
        if finding.severity == "error" and finding.kind in ("arity", "attribute"):
            where = f"node '{finding.node}'" if finding.node else finding.scope
            raise BadModel(f"{where}: {finding.message}; optimize needs ops that follow their ONNX schema "
                           "(graphtool check lists every problem)")


def require_one_data_field(model: Model) -> None:
    """Refuse a tensor that holds its values in two fields (raw_data and float_data, say).

    The ONNX checker rejects it; onnxruntime (and onnx's numpy_helper) read raw_data and ignore
    the other field without a word, another runtime may read the other one. Which values the
    author meant cannot be known, and a model graphtool "verified" and wrote would carry the
    contradiction on: refused with one line instead (``graphtool check`` still reads and lists it).
    Initializers and Constant nodes, from their metadata (no weight is decoded)."""
    import onnx

    from graphtool.check import data_fields
    from graphtool.errors import BadModel

    def refuse(proto: onnx.TensorProto, where: str) -> None:
        fields = data_fields(proto)
        if len(fields) > 1:
            read = "raw_data" if "raw_data" in fields else fields[0]
            others = " and ".join(f for f in fields if f != read)
            raise BadModel(f"tensor '{proto.name}'{where} holds its values in {' and '.join(fields)} (the ONNX checker "
                           f"rejects it; onnxruntime reads {read} and ignores {others}, another runtime may not): "
                           "keep one (graphtool check lists every such tensor)")

    for _, graph in model.graphs():
        for tensor in graph.initializers.values():
            refuse(tensor.proto, "")
        for node in graph.nodes("Constant"):
            for value in node.peek_attrs().values():
                if isinstance(value, onnx.AttributeProto) and value.HasField("t"):
                    refuse(value.t, f" (Constant node '{node.name}')" if node.name else " (a Constant node)")


def optimize(
    model: Model,
    level: int = 1,
    target: str = "onnx",
    passes: Iterable[str] | None = None,
    skip: Iterable[str] = (),
    max_fold_bytes: int = 16 << 20,
    input_shapes: dict[str, list[int]] | None = None,
    max_iterations: int = 8,
    on_step: Callable[[str], None] | None = None,
    in_place: bool = False,
    explain: Iterable[str] = (),
    plugins: Iterable[str] | str = (),
) -> tuple[Model, PassReport, PassContext]:
    """Optimize ``model`` (a copy unless ``in_place``); returns (model, report, context).

    The context carries the provenance map (new node → original nodes it absorbed) and, for the
    rules or passes named in ``explain``, why each candidate root fused or did not
    (``ctx.explanations``; ``graphtool.rewrite.explain`` formats it). Installed plugin passes
    run only when ``passes`` names them or ``plugins`` does (``"all"``: every one at the level).
    """
    require_schema_valid(model)
    result = model if in_place else clone(model)
    chosen = select_passes(level, target, passes, skip, plugins=plugins)
    ctx = PassContext(result, level=level, target=target, max_fold_bytes=max_fold_bytes,
                      input_shapes=dict(input_shapes or {}), explain=set(explain))
    report = PassManager(chosen, max_iterations, on_step).run(result, ctx)
    return result, report, ctx
