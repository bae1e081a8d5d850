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
"""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import TensorProto

ULPS = 10
NOISE_FACTOR = 2.0
_EPS = {"float16": 2.0 ** -10, "bfloat16": 2.0 ** -7}
_LOW = {TensorProto.FLOAT16: "float16", TensorProto.BFLOAT16: "bfloat16"}


def low_precision_inside(model: Any) -> str | None:
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
