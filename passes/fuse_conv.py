"""Fold per-output-channel affine ops into the Conv (or ConvTranspose) that feeds them.

``BatchNormalization`` at inference, ``Add``/``Sub`` of a bias and ``Mul``/``Div`` by a scale are
all ``y[n, c, ...] = a[c] * conv[n, c, ...] + b[c]``; a convolution is linear in its weights, so
the affine map folds into W (scaled along the output-channel axis) and B. One op and one full
pass over the activation disappear, and nothing is approximated beyond float rounding: new
weights are computed in float64 and cast back to the weights' dtype.

The three passes are rules on one conv pattern (``_conv_fold_parts``). Each refuses when:

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

As rules (``graphtool.rewrite``)::

    conv-batch-norm   BatchNormalization(Conv|ConvTranspose(x, W, B?), scale, beta, mean, var)
    conv-mul-div      Conv(...) * k  |  k * Conv(...)  |  Conv(...) / k
    conv-add-sub      Conv(...) + k  |  k + Conv(...)  |  Conv(...) - k

The engine refuses case 2 (a Shape reading the conv's output too); the checks cases 1, 3-5. The
fused conv keeps the conv's name and writes the affine op's output name, so a graph output
survives the fold.
"""

from __future__ import annotations

from graphtool.ir.graph import Graph
from graphtool.pass_manager import PassContext, register
from graphtool.passes import _conv_fold_parts as parts
from graphtool.passes._fuse_common import graph_opset
from graphtool.passes._rule_common import explaining
from graphtool.rewrite import Rule, RulePass

CONV_BATCH_NORM = Rule("conv-batch-norm", parts.BATCH_NORM, parts.emit, parts.check(parts.fold_batch_norm))
CONV_MUL_DIV = Rule("conv-mul-div", parts.SCALE, parts.emit, parts.check(parts.fold_elementwise))
CONV_ADD_SUB = Rule("conv-add-sub", parts.SHIFT, parts.emit, parts.check(parts.fold_elementwise))


@register(level=1, priority=50)
class FuseConvBatchNorm(RulePass):
    """Fold an inference BatchNormalization into the Conv/ConvTranspose before it (new W and B)."""

    rules = (CONV_BATCH_NORM,)
    stat_keys = {"conv-batch-norm": "fused"}

    def applies(self, graph: Graph, ctx: PassContext) -> bool:  # BN-1/6: only --explain looks (and is told why)
        return graph_opset(graph, ctx) >= 7 or explaining(ctx)


@register(level=1, priority=51)
class FuseConvMul(RulePass):
    """Fold Mul/Div of a Conv's output by a per-output-channel constant into the Conv's W and B."""

    rules = (CONV_MUL_DIV,)
    stat_keys = {"conv-mul-div": "fused"}


@register(level=1, priority=52)
class FuseConvAdd(RulePass):
    """Fold Add/Sub of a per-output-channel constant to a Conv's output into the Conv's bias."""

    rules = (CONV_ADD_SUB,)
    stat_keys = {"conv-add-sub": "fused"}
