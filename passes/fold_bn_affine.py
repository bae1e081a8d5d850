"""BatchNormalization followed by a per-channel Mul and/or Add → one BatchNormalization.

Caffe2-converted models (DenseNet, Inception-v2 in the onnx light/ set) write a "Scale" layer after
every inference BatchNormalization: ``BN(x) * s + b`` with s, b of shape [C, 1, 1]. Inference BN is
itself ``x * k + c`` per channel, so the pair folds into BN's own scale and bias::

    y = BN(x, scale, bias, mean, var)  →  y * s + b  =  BN(x, scale * s, bias * s + b, mean, var)

Standard ops only (level 2, any target). It refuses unless:

1. the BN is in inference mode (one output; ``training_mode`` absent or 0) with constant
   scale/bias/mean/var of one dtype;
2. s and b are constants that vary only along the channel axis (1) of the BN's input: after
   aligning them right against the input's rank, every other dim is 1 and the channel dim is 1 or C
   (so the result's shape is exactly the BN's);
3. the BN output (and the Mul output, when an Add follows) has no other reader and is no graph output.
"""

from __future__ import annotations

import numpy as np

from graphtool.ir.graph import Graph, Node
from graphtool.pass_manager import Pass, PassContext, PassResult, register
from graphtool.passes._fuse_common import drop_dead_constants, is_op, other_input, sole_user
from graphtool.passes._ort_common import Shapes


def _per_channel(array: np.ndarray, rank: int, channels: int) -> np.ndarray | None:
    """``array`` as a [C] vector when it broadcasts along axis 1 of a rank-``rank`` tensor only."""
    if array.ndim > rank:
        return None
    full = array.reshape((1,) * (rank - array.ndim) + array.shape)
    if any(d != 1 for i, d in enumerate(full.shape) if i != 1) or full.shape[1] not in (1, channels):
        return None
    return np.broadcast_to(full.reshape(-1), (channels,)).astype(full.dtype)


@register(level=2, priority=54)
class FoldBatchNormAffine(Pass):
    """Fold a per-channel Mul/Add that follows an inference BatchNormalization into its scale and bias."""

    def run(self, graph: Graph, ctx: PassContext) -> PassResult:
        folded = 0
        shapes: Shapes | None = None
        for bn in graph.nodes("BatchNormalization"):
            if not graph.has_node(bn) or not is_op(bn, "BatchNormalization") or len([o for o in bn.outputs if o]) != 1:
                continue
            if bn.attr("training_mode", 0):
                continue
            params = [graph.const(v) for v in bn.inputs[1:5]]
            if len(params) != 4 or any(p is None or p.ndim != 1 for p in params):
                continue
            shapes = shapes or Shapes(graph, ctx)
            rank = shapes.rank(bn.inputs[0])
            if rank is None or rank < 2:
                continue
            if self._fold(graph, bn, params, rank):
                folded += 1
        return PassResult(folded > 0, {"folded": folded})

    @staticmethod
    def _fold(graph: Graph, bn: Node, params: list[np.ndarray], rank: int) -> bool:
        scale, bias = params[0].astype(np.float64), params[1].astype(np.float64)
        channels = scale.shape[0]
        out = bn.outputs[0]
        chain: list[Node] = []
        consts: list[str] = []
        for op_type in ("Mul", "Add"):
            user = sole_user(graph, out)
            if not is_op(user, op_type):
                continue
            c = other_input(user, out)
            array = graph.const(c) if c else None
            vector = _per_channel(array, rank, channels) if array is not None and array.dtype == params[0].dtype else None
            if vector is None:
                break
            vector = vector.astype(np.float64)
            if op_type == "Mul":
                scale, bias = scale * vector, bias * vector
            else:
                bias = bias + vector
            chain.append(user)
            consts.append(c)
            out = user.outputs[0]
        if not chain:
            return False
        dtype = params[0].dtype
        new_scale = graph.add_initializer(scale.astype(dtype), f"{bn.name or 'bn'}_scale")
        new_bias = graph.add_initializer(bias.astype(dtype), f"{bn.name or 'bn'}_bias")
        old = bn.inputs[1:3]
        graph.set_input(bn, 1, new_scale)
        graph.set_input(bn, 2, new_bias)
        # the BN now writes the last folded value under its name (readers and graph outputs keep it)
        final = chain[-1].outputs[0]
        graph.remove_nodes(chain)
        graph.rename_value(bn.outputs[0], final)
        drop_dead_constants(graph, consts + old)
        return True
