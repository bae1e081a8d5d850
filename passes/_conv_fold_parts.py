"""Patterns, checks and the replacement of the conv-fold rules (``passes/fuse_conv.py``).

A check returns None to accept or the reason it refuses (what ``--explain`` prints); the case
numbers are the module docstring's of ``fuse_conv``. It computes the folded W and B (float64, cast
back to W's dtype) and leaves them in ``m.extra["fold"]`` for the replacement.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from graphtool.ir.graph import Node
from graphtool.passes._fuse_common import attr_protos, graph_opset
from graphtool.rewrite import Const, Match, Rewrite, Var, either, op

_FLOAT_KINDS = (np.float16, np.float32, np.float64)
Folded = tuple["np.ndarray | None", np.ndarray]  # (new W or None to keep it, new B), float64

# ---------------------------------------------------------------------- patterns


def _inference(matcher, bn: Node) -> str | None:
    """Case 1 for BatchNormalization (attributes read with their defaults at any opset)."""
    if graph_opset(matcher.graph, matcher.ctx) < 7:
        return "opset < 7: BatchNormalization-1/6 had the consumed_inputs / is_test forms"
    if any(bn.outputs[1:]):
        return "it has training outputs (running mean / var)"
    if bn.attr("training_mode", 0) != 0 or bn.attr("spatial", 1) != 1:
        return "training_mode=1 or spatial=0"
    return None


CONV = op.Conv(Var("x"), Const("w"), Var("b", const=True, omittable=True), _types=("Conv", "ConvTranspose"),
               _name="conv")
BATCH_NORM = op.BatchNormalization(CONV, Const("scale"), Const("beta"), Const("mean"), Const("var"),
                                   _where=_inference)
SCALE = either(op.Mul(CONV, Const("k")), op.Div(CONV, Const("k")))  # Mul either order; the conv divided
SHIFT = either(op.Add(CONV, Const("k")), op.Sub(CONV, Const("k")))  # Add either order; the conv minus k

# ---------------------------------------------------------------------- the conv (cases 3)


@dataclass
class Conv:
    node: Node
    w: np.ndarray
    b: np.ndarray | None  # None when the conv has no bias input
    channels: int  # output channels C
    transpose: bool
    group: int

    @property
    def out_rank(self) -> int:
        return self.w.ndim  # [N, C, spatial...] has as many axes as W

    def bias(self) -> np.ndarray:
        return self.b.astype(np.float64) if self.b is not None else np.zeros(self.channels, np.float64)

    def scaled(self, scale: np.ndarray) -> np.ndarray:
        """W * scale[c] along the output-channel axis, in float64 (axis 0 for Conv; for
        ConvTranspose the output channels are axis 1 within each group)."""
        w = self.w.astype(np.float64)
        if not self.transpose:
            return w * scale.reshape(-1, *([1] * (w.ndim - 1)))
        g, cin, cout_g, kernel = self.group, w.shape[0], w.shape[1], w.shape[2:]
        grouped = w.reshape(g, cin // g, cout_g, *kernel)
        return (grouped * scale.reshape(g, 1, cout_g, *([1] * len(kernel)))).reshape(w.shape)


def _conv(m: Match) -> Conv | str:
    node, w, b = m.node("conv"), m.const("w"), m.const("b")
    if w.dtype.type not in _FLOAT_KINDS or w.ndim < 3:
        return f"W is {w.dtype} of rank {w.ndim}, not floating point of rank >= 3"
    group = node.attr("group", 1)
    if not isinstance(group, int) or group < 1:
        return f"group={group!r}"
    transpose = node.op_type == "ConvTranspose"
    if transpose and w.shape[0] % group:
        return f"W's {w.shape[0]} input channels do not split into {group} groups"
    channels = w.shape[1] * group if transpose else w.shape[0]
    if b is not None and (b.shape != (channels,) or b.dtype != w.dtype):
        return f"B is {b.dtype} {list(b.shape)}, not {w.dtype} [{channels}]"
    return Conv(node, w, b, channels, transpose, group)


# ---------------------------------------------------------------------- folds and the check


def fold_batch_norm(m: Match, conv: Conv) -> Folded | str:
    params = [m.const(name) for name in ("scale", "beta", "mean", "var")]
    if any(p.shape != (conv.channels,) or p.dtype.type not in _FLOAT_KINDS for p in params):
        return f"the BatchNormalization parameters are not floating point [{conv.channels}]"  # case 3
    scale, beta, mean, var = (p.astype(np.float64) for p in params)
    denom = var + float(m.root.attr("epsilon", 1e-5))
    if not np.all(denom > 0):
        return "var + epsilon <= 0"  # case 5
    factor = scale / np.sqrt(denom)
    return conv.scaled(factor), (conv.bias() - mean) * factor + beta


def _per_channel(array: np.ndarray, conv: Conv) -> np.ndarray | None:
    """``array`` as a float64 vector of C when it broadcasts against [N, C, ...] as a per-channel
    constant (case 4), else None."""
    if array.ndim > conv.out_rank or array.size == 0:
        return None
    aligned = (1,) * (conv.out_rank - array.ndim) + tuple(array.shape)
    if aligned[0] != 1 or aligned[1] not in (1, conv.channels) or any(d != 1 for d in aligned[2:]):
        return None
    return np.broadcast_to(array.astype(np.float64).reshape(-1), (conv.channels,))


def fold_elementwise(m: Match, conv: Conv) -> Folded | str:
    k, op_type = m.const("k"), m.root.op_type
    if k.dtype != conv.w.dtype:
        return f"k is {k.dtype}, W {conv.w.dtype}"  # case 3
    vector = _per_channel(k, conv)
    if vector is None:
        return f"k {list(k.shape)} is not per output channel of a rank-{conv.out_rank} output"  # case 4
    if op_type == "Div":
        if not np.all(vector != 0):
            return "k has a zero (division by zero)"  # case 5
        vector = 1.0 / vector
    if op_type in ("Mul", "Div"):
        return conv.scaled(vector), conv.bias() * vector
    return None, conv.bias() + (vector if op_type == "Add" else -vector)


def check(fold: Callable[[Match, Conv], Folded | str]) -> Callable[[Match], str | None]:
    def checked(m: Match) -> str | None:
        conv = _conv(m)
        if isinstance(conv, str):
            return conv
        with np.errstate(all="ignore"):
            folded = fold(m, conv)
            if isinstance(folded, str):
                return folded
            w, b = (None if a is None else a.astype(conv.w.dtype) for a in folded)
        if not np.all(np.isfinite(b)) or (w is not None and not np.all(np.isfinite(w))):
            return "the folded weights are not finite"  # case 5
        m.extra["fold"] = w, b
        return None

    return checked


# ---------------------------------------------------------------------- the replacement


def emit(m: Match, rw: Rewrite) -> str:
    """One conv of the folded W and B; it keeps the conv's name (and W's and B's names as hints)."""
    conv, (w, b) = m.node("conv"), m.extra["fold"]
    rw.name = conv.name
    w_name = m["w"] if w is None else m.graph.add_initializer(w, m["w"])
    b_name = m.graph.add_initializer(b, m.get("b") or f"{m['w']}_bias")
    return rw.add(conv.op_type, [m["x"], w_name, b_name], attrs=attr_protos(conv)).outputs[0]
