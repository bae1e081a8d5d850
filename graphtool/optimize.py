"""``optimize``: run a level's passes over a copy of a model and return it with the report."""

from __future__ import annotations

from typing import Callable, Iterable

from graphtool.ir.from_onnx import from_onnx
from graphtool.ir.model import Model
from graphtool.ir.to_onnx import to_onnx
from graphtool.pass_manager import PassContext, PassManager, PassReport, select_passes


def clone(model: Model) -> Model:
    """An independent copy (external weights are shared on disk, not read)."""
    return from_onnx(to_onnx(model), model.base_dir)


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
) -> tuple[Model, PassReport, PassContext]:
    """Optimize ``model`` (a copy unless ``in_place``); returns (model, report, context).

    The context carries the provenance map (new node → original nodes it absorbed).
    """
    result = model if in_place else clone(model)
    chosen = select_passes(level, target, passes, skip)
    ctx = PassContext(result, level=level, target=target, max_fold_bytes=max_fold_bytes,
                      input_shapes=dict(input_shapes or {}))
    report = PassManager(chosen, max_iterations, on_step).run(result, ctx)
    return result, report, ctx
