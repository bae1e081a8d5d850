"""Weight statistics for the HTML page's side panel: dtype, shape, min / max / mean / std.

Pictures only *refer* to weights (``WeightRef``: dims, dtype and a loader); the numbers are
computed when an HTML page is written, never for DOT/SVG/PNG output. The work is bounded so a
picture of a 10 GB model stays quick: a tensor over ``MAX_ELEMENTS`` is skipped (the panel says
why), and once ``BUDGET`` elements have been read in all, the rest are skipped too. Values are
reduced in slices of ``CHUNK`` elements with float64 accumulators; an external-data weight of a
plain dtype is streamed from its file (``Tensor.iter_chunks``, through the file guard) and never
held whole, nor cached in its ``Tensor``.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

from onnx import TensorProto

import numpy as np

from graphtool.ir.tensor import dtype_name
from graphtool.render.text import shape_text

MAX_ELEMENTS = 1 << 24  # 16M elements (64 MB of float32) per tensor
BUDGET = 1 << 26  # 64M elements read per page, all tensors together
CHUNK = 1 << 20

# dtypes whose raw little-endian bytes are the numpy array (packed 4-bit and bfloat16 are not)
_PLAIN = {TensorProto.FLOAT: np.float32, TensorProto.DOUBLE: np.float64, TensorProto.FLOAT16: np.float16,
          TensorProto.INT8: np.int8, TensorProto.INT16: np.int16, TensorProto.INT32: np.int32,
          TensorProto.INT64: np.int64, TensorProto.UINT8: np.uint8, TensorProto.UINT16: np.uint16,
          TensorProto.UINT32: np.uint32, TensorProto.UINT64: np.uint64, TensorProto.BOOL: np.bool_}


@dataclass
class WeightRef:
    """A constant a picture shows folded into its consumer, and how to read its values."""

    dims: tuple[int, ...]
    data_type: int
    load: Callable[[], "np.ndarray | None"]
    chunks: Callable[[int], Iterable[bytes]] | None = None  # raw bytes in pieces (external data)

    @property
    def size(self) -> int:
        return int(np.prod(self.dims, dtype=np.int64)) if self.dims else 1


def _num(x: float) -> str:
    return f"{x:.5g}" if math.isfinite(x) else str(x)


def _slices(array: np.ndarray) -> Iterator[np.ndarray]:
    flat = array.reshape(-1)
    for start in range(0, flat.size, CHUNK):
        yield flat[start:start + CHUNK]


def _streamed(ref: WeightRef) -> Iterator[np.ndarray]:
    dtype = np.dtype(_PLAIN[ref.data_type])
    assert ref.chunks is not None
    for data in ref.chunks(CHUNK * dtype.itemsize):  # whole elements per piece: the size is a multiple
        yield np.frombuffer(data, dtype)


def array_stats(array: np.ndarray) -> dict[str, str]:
    """min/max/mean/std of a numeric array (NaNs counted apart), read in ``CHUNK``-sized slices."""
    return parts_stats(_slices(array))


def parts_stats(parts: Iterable[np.ndarray]) -> dict[str, str]:
    """min/max/mean/std over the values of all ``parts`` (float64 sums; NaNs counted apart)."""
    lo, hi, total, squares, count, nans = math.inf, -math.inf, 0.0, 0.0, 0, 0
    for part in parts:
        part = np.asarray(part)
        if part.dtype == np.bool_:
            part = part.view(np.uint8)
        if part.dtype.kind == "f":
            bad = np.isnan(part)
            n_bad = int(bad.sum())
            if n_bad:
                nans += n_bad
                part = part[~bad]
        if not part.size:
            continue
        as64 = part.astype(np.float64)
        lo, hi = min(lo, float(as64.min())), max(hi, float(as64.max()))
        total += float(as64.sum())
        squares += float(np.square(as64).sum())
        count += part.size
    out: dict[str, str] = {}
    if count:
        mean = total / count
        out = {"min": _num(lo), "max": _num(hi), "mean": _num(mean),
               "std": _num(math.sqrt(max(squares / count - mean * mean, 0.0)))}
    if nans:
        out["nan"] = str(nans)
    return out


def weight_stats(refs: dict[str, WeightRef], max_elements: int = MAX_ELEMENTS,
                 budget: int = BUDGET) -> dict[str, dict[str, str]]:
    """Weight id -> {"dtype", "shape", "min", "max", "mean", "std"} or a "stats" note saying why
    the numbers were not computed. Tensors are visited in the picture's order."""
    out: dict[str, dict[str, str]] = {}
    left = budget
    for key, ref in refs.items():
        entry = {"dtype": dtype_name(ref.data_type), "shape": shape_text(list(ref.dims)) or "?",
                 "elements": f"{ref.size:,}"}
        out[key] = entry
        if ref.size > max_elements:
            entry["stats"] = f"not computed: over {max_elements:,} elements"
            continue
        if ref.size > left:
            entry["stats"] = f"not computed: this page's budget of {budget:,} elements is used up"
            continue
        try:
            if ref.chunks is not None and ref.data_type in _PLAIN and sys.byteorder == "little":
                left -= ref.size
                entry.update(parts_stats(_streamed(ref)))
                continue
            array = ref.load()
        except Exception as err:  # noqa: BLE001 — a weight that cannot be read still has a shape
            entry["stats"] = f"not computed: {type(err).__name__}"
            continue
        if array is None or array.dtype.kind not in "biuf":
            entry["stats"] = "not numeric" if array is not None else "values not available"
            continue
        left -= array.size
        entry.update(array_stats(array))
    return out
