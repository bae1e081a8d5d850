"""Text for pictures: escaping for DOT's HTML-like labels and for SVG, and short value forms.

Text from a model (names, string attributes, symbolic dims) can hold anything: quotes, ``<``,
newlines, backslashes, control characters. Labels are therefore always HTML-like labels built by
``html_text`` (escaped entities; backslashes doubled, because dot expands ``\\N``, ``\\G``... even
inside HTML labels; control characters shown as ``\\xNN``, since they would make the label
ill-formed XML).
"""

from __future__ import annotations

import html
import math
import re
from typing import Any

import numpy as np
from onnx import TensorProto, numpy_helper

from graphtool.ir.tensor import dtype_name

LABEL_WIDTH = 48  # characters of one label line before it is cut with an ellipsis
_SHAPE_ATTRS = {"kernel_shape", "strides", "dilations", "output_shape", "output_padding"}


_UNSAFE = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff]")


def clean_text(text: str) -> str:
    """Text safe for XML 1.0: control characters become visible ``\\xNN``, newlines stay."""
    if _UNSAFE.search(text) is None:
        return text  # the common case, without a character-by-character walk
    out = []
    for ch in text:
        code = ord(ch)
        if ch == "\n":
            out.append(ch)
        elif ch == "\t":
            out.append(" ")
        elif code < 0x20 or 0x7F <= code < 0xA0:
            out.append(f"\\x{code:02x}")
        elif 0xD800 <= code <= 0xDFFF or code in (0xFFFE, 0xFFFF):
            out.append("\ufffd")
        else:
            out.append(ch)
    return "".join(out)


def cut(line: str, limit: int | None) -> str:
    """``line`` shortened to ``limit`` characters with an ellipsis (None: unlimited)."""
    return line if limit is None or len(line) <= limit else line[: limit - 1] + "…"


def html_text(text: str, limit: int | None = LABEL_WIDTH) -> str:
    """The body of an HTML-like DOT label showing ``text`` exactly (lines cut at ``limit``)."""
    lines = [cut(line, limit) for line in clean_text(text).split("\n")]
    return "<BR/>".join(html.escape(line, quote=True).replace("\\", "\\\\") for line in lines)


def html_label(*parts: str) -> str:
    """An HTML-like label from already-escaped parts, one per line (dot rejects an empty one)."""
    return "<" + ("<BR/>".join(p for p in parts if p) or " ") + ">"


SMALL_POINTS = 9  # the smallest font in a node box; the HTML page opens at a zoom where it reads


def small(text_html: str, color: str = "#555555") -> str:
    """Small coloured text; nothing for no text (dot rejects empty elements like <FONT></FONT>)."""
    return f'<FONT POINT-SIZE="{SMALL_POINTS}" COLOR="{color}">{text_html}</FONT>' if text_html else ""


def xml_text(text: str) -> str:
    return html.escape(clean_text(text), quote=False)


# Symbolic dims as people say them (``batch×3×H×W``); the full names stay in hover text and panels.
_SHORT_DIMS = {
    "batch_size": "batch", "batch": "batch", "n": "N", "sequence_length": "seq", "seq_len": "seq",
    "sequence": "seq", "height": "H", "width": "W", "channels": "C", "num_channels": "C",
    "past_sequence_length": "past", "past_seq_len": "past", "total_sequence_length": "total",
    "total_seq_len": "total", "encoder_sequence_length": "enc_seq", "decoder_sequence_length": "dec_seq",
    "num_heads": "heads", "max_length": "max_len",
}
SHORT_DIM = 10  # characters a symbolic dim keeps before it is cut


def short_dim(name: str) -> str:
    """``height`` -> ``H``, ``p2o.DynamicDimension.3`` -> ``d3``, ``unk__1023`` -> ``?1023``; other
    long names keep their last dotted part, cut to ``SHORT_DIM`` characters."""
    short = _SHORT_DIMS.get(name) or _SHORT_DIMS.get(name.lower())
    if short:
        return short
    m = re.fullmatch(r"(?:p2o\.)?DynamicDimension\.(\d+)", name) or re.fullmatch(r"unk__(\d+)", name)
    if m:
        return ("?" if name.startswith("unk") else "d") + m.group(1)
    if len(name) <= SHORT_DIM:
        return name
    last = re.split(r"[./:]", name)[-1] or name
    return cut(last, SHORT_DIM)


def shape_text(shape: list[Any] | tuple[Any, ...] | None, full: bool = False) -> str | None:
    """``64×3×7×7``, ``batch×3×H×W``, ``[64]`` or ``scalar``; None when the rank is unknown.
    Symbolic dims are shortened (``short_dim``) unless ``full``."""
    if shape is None:
        return None
    dims = ["?" if d is None else (d if full or not isinstance(d, str) else short_dim(d)) for d in shape]
    if len(dims) == 0:
        return "scalar"
    if len(dims) == 1:
        return f"[{dims[0]}]"
    return "×".join(str(d) for d in dims)


def attr_text(key: str, value: Any) -> str:
    """An attribute value as a box shows it: ``to=float``, ``kernel_shape=3x3``, ``[0,1]``."""
    if key == "to" and isinstance(value, int):
        return dtype_name(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, list):
        if key in _SHAPE_ATTRS and value and all(isinstance(v, int) for v in value):
            return "×".join(map(str, value))
        return "[" + ",".join(attr_text(key, v) for v in value) + "]"
    if isinstance(value, TensorProto):
        if math.prod(value.dims) <= 4 and value.data_type != TensorProto.STRING:
            array = numpy_helper.to_array(value)
            flat = ",".join(f"{v:.4g}" if isinstance(v, float) else str(v) for v in array.ravel().tolist())
            return flat if array.ndim == 0 else f"[{flat}]"
        return f"tensor {shape_text(list(value.dims))}"
    return str(value)


def small_value(array: np.ndarray) -> str | None:
    """Values worth showing: integer constants of up to 8 elements (shapes, axes, indices) and
    scalars; a float vector's values are noise in a picture."""
    if array.size > 8 or array.dtype.kind not in "biuf" or (array.dtype.kind == "f" and array.size > 1):
        return None
    flat = array.ravel().tolist()
    text = ",".join(f"{v:.4g}" if isinstance(v, float) else str(v) for v in flat)
    return text if array.ndim == 0 else f"[{text}]"
