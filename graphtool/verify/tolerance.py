"""How far a rewritten model's outputs may move: tolerances from the dtype, and the original's own noise.

fp32 outputs keep the user's ``rtol``/``atol`` (1e-3 / 1e-4 by default). An fp16 or bf16 value
carries 11 or 8 significant bits: a rewrite that only reorders a sum moves it by a few units in
the last place, which fp32 tolerances call a mismatch. So an output of those dtypes, or a float
output computed through them (an fp16 model that casts its result to fp32), is compared with
``rtol = atol = ULPS × eps(dtype)`` (9.8e-3 for fp16, 7.8e-2 for bf16), never less than the
user's.

Past that, a rewrite is blamed only when it moves an output further than the original moves
itself between onnxruntime's optimization levels: ``noise`` runs the original with every ORT
optimization on (``all``) beside the reference (``off``) on the same inputs, and a difference up
to ``NOISE_FACTOR`` times the original's own is accepted (the report says so). That run happens
only when a comparison failed, so a model that verifies pays nothing for it.

A quantized model's outputs live on a grid: an output made by a DequantizeLinear takes values
``(q - zero_point) × scale``, and a rewrite that fuses DQ → op → Q into one integer kernel
(QLinearConv, QGemm, ...) requantizes in fixed point where the original rounds a float result,
so a value may land one grid step away, and a step's difference upstream can add one more.
``quantized_outputs`` reads each output's grid from the original model (walking back through ops
that only move values: Reshape, Flatten, Transpose, MaxPool, ...) and such an output is compared
with ``atol = QUANT_STEPS × scale`` (per channel where the DequantizeLinear is per channel and
nothing moved the values since); an integer output made by a QuantizeLinear or a QLinear*/QGemm op
may differ by ``INT_STEPS`` (1) unit. Measured, not assumed: onnxruntime's own extended level
moves torchvision ResNet-18's QDQ logits by exactly 2 steps of their scale (0.00956 = 2 × 0.00478)
and every other QDQ model of the corpus by at most one (bench/results/stop31-qdq.md). onnxruntime's
QDQ transformer tests compare float outputs with 0.01 + 0.01·|ref| whatever the scale; a bound from
the model's own scale is tighter on fine grids (a logit scale of 2e-6 gets 4e-6, not 0.01) and still
catches a rewrite that moves a value by more than two steps (tests/verify/test_quantized.py).
Every other output keeps the float tolerance.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from onnx import TensorProto

from graphtool.ir.graph import Graph
from graphtool.ir.model import Model

ULPS = 10
QUANT_STEPS = 2  # a dequantized output may move this many steps of its scale
INT_STEPS = 1  # an integer (quantized) output this many units
NOISE_FACTOR = 2.0
_EPS = {"float16": 2.0 ** -10, "bfloat16": 2.0 ** -7}
_LOW = {TensorProto.FLOAT16: "float16", TensorProto.BFLOAT16: "bfloat16"}


def low_precision_inside(model: Model) -> str | None:
    """"float16"/"bfloat16" when the model computes in it (a tensor of that type, or a Cast to it), else None."""
    found: str | None = None
    for graph in model.graph.walk():
        for tensor in graph.initializers.values():
            dtype = _LOW.get(tensor.data_type)
            if dtype:
                found = _coarser(found, dtype)
        for node in graph.nodes():
            if node.op_type == "Cast":
                dtype = _LOW.get(node.attr("to", 0))
                if dtype:
                    found = _coarser(found, dtype)
        if found == "bfloat16":
            break
    return found


def _coarser(a: str | None, b: str) -> str:
    return b if a is None or _EPS[b] > _EPS[a] else a


def for_output(value: Any, rtol: float, atol: float, inside: str | None) -> tuple[float, float, str | None]:
    """(rtol, atol, dtype name when the dtype set them) for one output's values."""
    arr = value[0] if isinstance(value, list) and value else value
    name = str(getattr(arr, "dtype", ""))
    if name not in _EPS:
        if inside is None or not name.startswith("float"):
            return rtol, atol, None
        name = inside
    t = ULPS * _EPS[name]
    return max(rtol, t), max(atol, t), name


def noise(ref: Any, other: Any) -> float:
    """The original's own max abs difference between two of its runs (0 where it cannot be measured)."""
    if isinstance(ref, list) or isinstance(other, list):
        if not (isinstance(ref, list) and isinstance(other, list)) or len(ref) != len(other):
            return 0.0
        return max((noise(a, b) for a, b in zip(ref, other)), default=0.0)
    a, b = np.asarray(ref), np.asarray(other)
    if a.shape != b.shape or a.dtype != b.dtype or a.dtype.kind not in "fc" or not a.size:
        return 0.0
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    finite = np.isfinite(a64) & np.isfinite(b64)
    return float(np.abs(a64[finite] - b64[finite]).max()) if finite.any() else 0.0


# ops whose output holds values of their first input (so the same quantization grid), and the
# quantized ops: where their output's scale is (input slot)
_MOVES = frozenset({"Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "MaxPool", "Slice",
                    "Expand", "Tile", "SpaceToDepth", "DepthToSpace", "NhwcMaxPool"})
_SCALE_SLOT = {"QuantizeLinear": 1, "DequantizeLinear": 1, "QLinearConv": 6, "QLinearMatMul": 6, "QGemm": 7,
               "QLinearAdd": 6, "QLinearMul": 6, "QLinearSigmoid": 3, "QLinearLeakyRelu": 3, "QLinearSoftmax": 3,
               "QLinearGlobalAveragePool": 3, "QLinearAveragePool": 3, "QLinearConcat": 0}


@dataclass(frozen=True)
class QuantStep:
    """One output's quantization grid, read from the original model: the scale of the
    DequantizeLinear (float output) or quantized op (integer output) that made it."""

    scale: np.ndarray  # float64; a scalar, or one per channel along ``axis``
    axis: int | None  # the output's channel axis of a per-channel scale; None: per tensor (or the max of one)
    integer: bool  # True: an integer output (a unit is one step); False: a dequantized float output
    op: str  # the op that set the grid

    @property
    def steps(self) -> int:
        return INT_STEPS if self.integer else QUANT_STEPS

    def atol(self, shape: tuple[int, ...]) -> float | np.ndarray:
        """The absolute tolerance for an output of ``shape``: ``steps`` units of its grid."""
        if self.integer:
            return float(self.steps)
        # 1e-6 relative slack: the float32 products on both sides round the same difference differently
        step = self.steps * self.scale * (1 + 1e-6)
        if self.axis is None or step.ndim == 0:
            return float(np.max(step))
        axis = self.axis if self.axis >= 0 else self.axis + len(shape)
        if not 0 <= axis < len(shape) or shape[axis] != step.size:
            return float(np.max(step))
        view = [1] * len(shape)
        view[axis] = step.size
        return step.reshape(view)

    def describe(self) -> str:
        """``quantized output: 2 steps of scale 0.00478 (DequantizeLinear)``, as reports print it."""
        if self.integer:
            return f"quantized integer output: {self.steps} unit (the {self.op}'s grid)"
        if self.scale.size == 1:
            scale = f"scale {float(self.scale.reshape(-1)[0]):.3g}"
        else:
            scale = f"per-channel scales up to {float(self.scale.max()):.3g}"
        return f"quantized output: {self.steps} steps of {scale} ({self.op})"


def quantized_outputs(model: Model) -> dict[str, QuantStep]:
    """Output name -> its quantization grid, for the main graph's outputs a DequantizeLinear, a
    QuantizeLinear or a QLinear*/QGemm op made (through ops that only move values); outputs
    computed in float after the last DequantizeLinear (a LayerNorm, a Softmax) are not here."""
    graph = model.graph
    found: dict[str, QuantStep] = {}
    for name in graph.outputs:
        value, moved = name, False
        for _ in range(64):  # a chain of moves is short; a bound keeps a pathological graph linear
            node = graph.producer(value)
            if node is None or not node.inputs:
                break
            if node.op_type in _MOVES:
                value, moved = node.inputs[0], True
                continue
            step = _step_of(graph, node, moved)
            if step is not None:
                found[name] = step
            break
    return found


def _step_of(graph: Graph, node: Any, moved: bool) -> QuantStep | None:
    slot = _SCALE_SLOT.get(node.op_type)
    if slot is None or len(node.inputs) <= slot or not node.inputs[slot]:
        return None  # a QGemm without y_scale gives float: not on a grid
    scale = graph.const(node.inputs[slot])
    if scale is None or scale.size == 0 or not np.all(np.isfinite(scale)) or np.any(scale <= 0):
        return None
    integer = node.op_type != "DequantizeLinear"
    axis = None
    if node.op_type in ("QuantizeLinear", "DequantizeLinear") and scale.size > 1 and not moved:
        axis = int(node.attr("axis", 1))
    return QuantStep(np.asarray(scale, np.float64).reshape(-1) if scale.size > 1 else np.asarray(scale, np.float64).reshape(()),
                     axis, integer, node.op_type)
