"""onnxruntime, run the way graphtool needs it: every session is asked for here (``make_session``),
which decides once, from the model, whether it opens in this process, in the sandbox child, or in
segments; the child and its jobs, the allocator, kernel coverage and constant evaluation (``constants``) live here too.

The names load on first use: the sandbox child imports ``graphtool.runtime.sandbox`` and with it
this package, and must start without onnx, networkx or the IR (1.0 s instead of 0.02 s).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_HOMES = {  # public name -> the module of this package that defines it
    "ORT_TYPES": "session", "SESSION_SUFFIX": "session", "Source": "session", "make_session": "session",
    "random_inputs": "session", "session_for": "session", "session_options": "session",
    "source_of": "session", "tuned_session": "session",
    "can_fold": "constants", "constant_tensor_proto": "constants", "evaluate": "constants",
    "foldable_region": "constants", "frontier": "constants", "holds_initializers": "constants",
    "is_constant": "constants", "is_plain_constant_node": "constants", "local_function_ops": "constants",
    "numpy_kernel": "constants", "place_constant": "constants",
    "has_cpu_kernel": "kernels", "is_function_op": "kernels", "ort_registers": "kernels",
    "schema_version": "kernels",
}
__all__ = sorted([*_HOMES, "sandbox"])


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
    globals()[name] = value  # once: later lookups are plain attribute reads
    return value


if TYPE_CHECKING:
    from graphtool.runtime import sandbox
    from graphtool.runtime.constants import (
        can_fold,
        constant_tensor_proto,
        evaluate,
        foldable_region,
        frontier,
        holds_initializers,
        is_constant,
        is_plain_constant_node,
        local_function_ops,
        numpy_kernel,
        place_constant,
    )
    from graphtool.runtime.kernels import has_cpu_kernel, is_function_op, ort_registers, schema_version
    from graphtool.runtime.session import (
        ORT_TYPES,
        SESSION_SUFFIX,
        Source,
        make_session,
        random_inputs,
        session_for,
        session_options,
        source_of,
        tuned_session,
    )
