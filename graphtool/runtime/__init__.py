"""onnxruntime, run the way graphtool needs it: every session is asked for here (``make_session``),
which decides once, from the model, whether it opens in this process, in the sandbox child, or in
segments; the child and its jobs, the allocator, kernel coverage and constant evaluation live here too."""

from __future__ import annotations

from graphtool.runtime.evaluate import (
    can_fold, constant_tensor_proto, evaluate, foldable_region, frontier, holds_initializers,
    is_constant, is_plain_constant_node, local_function_ops, numpy_kernel, place_constant,
)
from graphtool.runtime.kernels import has_cpu_kernel, is_function_op, ort_registers, schema_version
from graphtool.runtime.plan import plan_for, session_bytes
from graphtool.runtime.session import (
    ORT_TYPES, SESSION_SUFFIX, make_session, random_inputs, session_for, session_options, tuned_session,
)
from graphtool.runtime import sandbox

__all__ = ["ORT_TYPES", "SESSION_SUFFIX", "can_fold", "constant_tensor_proto", "evaluate", "foldable_region",
           "frontier", "has_cpu_kernel", "holds_initializers", "is_constant", "is_function_op",
           "is_plain_constant_node", "local_function_ops", "make_session", "numpy_kernel", "ort_registers",
           "place_constant", "plan_for", "random_inputs", "sandbox", "schema_version", "session_bytes",
           "session_for", "session_options", "tuned_session"]
