"""Proof that a rewrite kept the model's outputs: input discovery (``discover``, with the dims the
graph ties in ``dims``/``ties`` and the values it names in ``evidence``), branch coverage
(``coverage``), the verification itself (``verification``; its tolerances from the dtype, the
quantization grid and the original's own noise in ``tolerance``) and, when it fails, the bisection
that names the pass (``bisect``)."""

from __future__ import annotations

from graphtool.verify.bisect import find_culprit
from graphtool.verify.discover import (
    InputSet,
    InputSpec,
    StepSets,
    compared_values,
    id_bounds,
    metadata_sizes,
    shape_plan,
)
from graphtool.verify.tolerance import QuantStep, low_precision_inside, quantized_outputs
from graphtool.verify.verification import (
    ATOL,
    RTOL,
    OutputDiff,
    ReferenceJob,
    Verification,
    compare_arrays,
    find_inputs,
    find_step_inputs,
    judge_output,
    verify,
)

__all__ = [
    "ATOL",
    "RTOL",
    "InputSet",
    "InputSpec",
    "OutputDiff",
    "QuantStep",
    "ReferenceJob",
    "StepSets",
    "Verification",
    "compare_arrays",
    "compared_values",
    "find_culprit",
    "find_inputs",
    "find_step_inputs",
    "id_bounds",
    "judge_output",
    "low_precision_inside",
    "metadata_sizes",
    "quantized_outputs",
    "shape_plan",
    "verify",
]
