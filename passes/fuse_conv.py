"""Fold per-output-channel affine ops into the Conv (or ConvTranspose) that feeds them.

``BatchNormalization`` at inference, ``Add``/``Sub`` of a bias and ``Mul``/``Div`` by a scale are
all ``y[n, c, ...] = a[c] * conv[n, c, ...] + b[c]``; a convolution is linear in its weights, so
the affine map folds into W (scaled along the output-channel axis) and B. One op and one full
pass over the activation disappear, and nothing is approximated beyond float rounding: new
weights are computed in float64 and cast back to the weights' dtype.

The three passes share one matcher. Each refuses when:

1. the op is not a standard-domain op, or (BatchNormalization) runs in training mode, has extra
   outputs, or uses the pre-opset-7 / ``spatial=0`` forms;
2. its input is not the output of a Conv/ConvTranspose, or that output has another reader or is
   a graph output (the unfused value would still be needed);
3. W, B (when present) or the affine parameters are not provably constant, not floating point,
   or not of the shapes the fold assumes (BN params [C]; W rank >= 3);
4. (Add/Sub/Mul/Div) the constant is not per output channel: right-aligned against the conv
   output [N, C, d1, ...] it must be 1 on every axis but C — [C,1,1] and [1,C,1,1] fold, [C] does
   not (it broadcasts along the last spatial axis), and a constant of higher rank than the output
   would change the result's shape;
5. the folded weights would not be finite (a zero divisor, var + eps <= 0, overflow).

The fused conv keeps the conv's name and writes the affine op's output name, so a graph output
survives the fold.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from graphtool.ir.graph import Graph, Node
from graphtool.pass_manager import Pass, PassContext, PassResult, register
from graphtool.passes._fuse_common import attr_protos, drop_dead_constants, graph_opset, is_op, only_feeds, replace_chain

_FLOAT_KINDS = (np.float16, np.float32, np.float64)


@dataclass
class _Conv:
    node: Node
    w: np.ndarray
    b: np.ndarray | None  # None when the conv has no bias input
    channels: int  # output channels C
    transpose: bool
    group: int

    @property
    def out_rank(self) -> int:
        return self.w.ndim  # [N, C, spatial...] has as many axes as W


def _conv_feeding(graph: Graph, value: str, reader: Node) -> _Conv | None:
    """The Conv/ConvTranspose producing ``value`` with constant float weights, if ``reader`` is its
    only reader (case 2 and 3 of the module docstring)."""
    conv = graph.producer(value)
    if not is_op(conv, "Conv", "ConvTranspose") or conv.outputs[0] != value:
        return None
    if not only_feeds(graph, value, reader) or graph.uses(value)[0][1] < 0:
        return None
    inputs = conv.inputs
    if len(inputs) < 2 or not inputs[1]:
        return None
    w = graph.const(inputs[1])
    if w is None or w.dtype.type not in _FLOAT_KINDS or w.ndim < 3:
        return None
    group = conv.attr("group", 1)
    if not isinstance(group, int) or group < 1:
        return None
    transpose = conv.op_type == "ConvTranspose"
    if transpose:
        if w.shape[0] % group:
            return None
        channels = w.shape[1] * group
    else:
        channels = w.shape[0]
    b = None
    if len(inputs) > 2 and inputs[2]:
        b = graph.const(inputs[2])
        if b is None or b.shape != (channels,) or b.dtype != w.dtype:
            return None
    return _Conv(conv, w, b, channels, transpose, group)


def _scale_output_channels(conv: _Conv, scale: np.ndarray) -> np.ndarray:
    """W * scale[c] along the output-channel axis, in float64 (axis 0 for Conv; for ConvTranspose
    the output channels are axis 1 within each group)."""
    w = conv.w.astype(np.float64)
    if not conv.transpose:
        return w * scale.reshape(-1, *([1] * (w.ndim - 1)))
    g = conv.group
    cin, cout_g, kernel = w.shape[0], w.shape[1], w.shape[2:]
    grouped = w.reshape(g, cin // g, cout_g, *kernel)
    return (grouped * scale.reshape(g, 1, cout_g, *([1] * len(kernel)))).reshape(w.shape)


def _per_channel(array: np.ndarray, conv: _Conv) -> np.ndarray | None:
    """``array`` as a float64 vector of C when it broadcasts against [N, C, ...] as a per-channel
    constant (case 4), else None."""
    if array.ndim > conv.out_rank or array.size == 0:
        return None
    aligned = (1,) * (conv.out_rank - array.ndim) + tuple(array.shape)
    if aligned[0] != 1 or aligned[1] not in (1, conv.channels) or any(d != 1 for d in aligned[2:]):
        return None
    return np.broadcast_to(array.astype(np.float64).reshape(-1), (conv.channels,))


def _commit(graph: Graph, ctx: PassContext, conv: _Conv, op: Node, w: np.ndarray | None, b: np.ndarray) -> bool:
    """Replace conv + ``op`` by one conv with bias ``b`` and weights ``w`` (float64; None keeps
    the old W) that writes ``op``'s output under its name."""
    dtype = conv.w.dtype
    with np.errstate(all="ignore"):
        w_cast = None if w is None else w.astype(dtype)
        b_cast = b.astype(dtype)
    if not np.all(np.isfinite(b_cast)) or (w_cast is not None and not np.all(np.isfinite(w_cast))):
        return False  # case 5
    node = conv.node
    old_inputs = node.inputs
    leftovers = [*old_inputs[1:], *op.inputs]
    absorbed = [node.name or node.op_type, op.name or op.op_type]
    w_name = old_inputs[1] if w_cast is None else graph.add_initializer(w_cast, old_inputs[1] or "W")
    b_hint = old_inputs[2] if len(old_inputs) > 2 and old_inputs[2] else f"{old_inputs[1] or 'W'}_bias"
    b_name = graph.add_initializer(b_cast, b_hint)
    fused = replace_chain(graph, [node, op], node.op_type, [old_inputs[0], w_name, b_name], op.outputs[0],
                          attr_protos(node), name=node.name)
    ctx.absorbed(fused, absorbed)
    drop_dead_constants(graph, leftovers)
    return True


def _bias(conv: _Conv) -> np.ndarray:
    return conv.b.astype(np.float64) if conv.b is not None else np.zeros(conv.channels, np.float64)


@register(level=1, priority=50)
class FuseConvBatchNorm(Pass):
    """Fold an inference BatchNormalization into the Conv/ConvTranspose before it (new W and B)."""

    def run(self, graph: Graph, ctx: PassContext) -> PassResult:
        if graph_opset(graph, ctx) < 7:
            return PassResult(False, {"fused": 0})  # BN-1/6 had consumed_inputs/is_test forms
        fused = 0
        for bn in graph.nodes("BatchNormalization"):
            if graph.has_node(bn) and self._fuse(graph, ctx, bn):
                fused += 1
        return PassResult(fused > 0, {"fused": fused})

    @staticmethod
    def _fuse(graph: Graph, ctx: PassContext, bn: Node) -> bool:
        if bn.domain not in ("", "ai.onnx") or any(bn.outputs[1:]) or len(bn.inputs) != 5:
            return False
        if bn.attr("training_mode", 0) != 0 or bn.attr("spatial", 1) != 1:
            return False
        conv = _conv_feeding(graph, bn.inputs[0], bn)
        if conv is None:
            return False
        params = [graph.const(v) for v in bn.inputs[1:5]]
        if any(p is None or p.shape != (conv.channels,) or p.dtype.type not in _FLOAT_KINDS for p in params):
            return False
        scale, beta, mean, var = (p.astype(np.float64) for p in params)
        eps = float(bn.attr("epsilon", 1e-5))
        denom = var + eps
        if not np.all(denom > 0):
            return False
        factor = scale / np.sqrt(denom)
        w = _scale_output_channels(conv, factor)
        b = (_bias(conv) - mean) * factor + beta
        return _commit(graph, ctx, conv, bn, w, b)


class _ConvElementwise(Pass):
    """Shared matcher for Conv → {Add, Sub, Mul, Div} by a per-channel constant."""

    op_types: tuple[str, ...] = ()

    def run(self, graph: Graph, ctx: PassContext) -> PassResult:
        fused = 0
        for op_type in self.op_types:
            for op in graph.nodes(op_type):
                if graph.has_node(op) and self._fuse(graph, ctx, op):
                    fused += 1
        return PassResult(fused > 0, {"fused": fused})

    def _fuse(self, graph: Graph, ctx: PassContext, op: Node) -> bool:
        if op.domain not in ("", "ai.onnx") or len(op.inputs) != 2:
            return False
        commutative = op.op_type in ("Add", "Mul")
        for slot in ((0, 1) if commutative else (0,)):
            conv = _conv_feeding(graph, op.inputs[slot], op)
            if conv is None:
                continue
            array = graph.const(op.inputs[1 - slot])
            if array is None or array.dtype != conv.w.dtype:
                return False
            vector = _per_channel(array, conv)
            if vector is None:
                return False
            with np.errstate(all="ignore"):
                folded = self.fold(conv, op.op_type, vector)
            if folded is None:
                return False
            return _commit(graph, ctx, conv, op, *folded)
        return False

    def fold(self, conv: _Conv, op_type: str, vector: np.ndarray) -> tuple[np.ndarray | None, np.ndarray] | None:
        """(new W or None to keep it, new B), both float64; None refuses."""
        raise NotImplementedError


@register(level=1, priority=51)
class FuseConvMul(_ConvElementwise):
    """Fold Mul/Div of a Conv's output by a per-output-channel constant into the Conv's W and B."""

    op_types = ("Mul", "Div")

    def fold(self, conv: _Conv, op_type: str, vector: np.ndarray) -> tuple[np.ndarray | None, np.ndarray] | None:
        if op_type == "Div":
            if not np.all(vector != 0):
                return None
            vector = 1.0 / vector
        return _scale_output_channels(conv, vector), _bias(conv) * vector


@register(level=1, priority=52)
class FuseConvAdd(_ConvElementwise):
    """Fold Add/Sub of a per-output-channel constant to a Conv's output into the Conv's bias."""

    op_types = ("Add", "Sub")

    def fold(self, conv: _Conv, op_type: str, vector: np.ndarray) -> tuple[np.ndarray | None, np.ndarray] | None:
        return None, _bias(conv) + (vector if op_type == "Add" else -vector)
