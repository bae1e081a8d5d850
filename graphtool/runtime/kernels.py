"""Which ops onnxruntime's CPU provider can run, from its own kernel registry."""

from __future__ import annotations

import functools

import onnx

OPEN_ENDED = 2**31 - 1


@functools.lru_cache(maxsize=1)
def _cpu_kernels() -> dict[tuple[str, str], list[tuple[int, int]]]:
    from onnxruntime.capi import onnxruntime_pybind11_state as C

    table: dict[tuple[str, str], list[tuple[int, int]]] = {}
    for kernel in C.get_all_opkernel_def():
        if kernel.provider == "CPUExecutionProvider":
            domain = "" if kernel.domain in ("", "ai.onnx") else kernel.domain
            table.setdefault((domain, kernel.op_name), []).append(tuple(kernel.version_range))
    return table


def schema_version(op_type: str, domain: str, opset: int) -> int | None:
    """The since-version of the schema an op resolves to at ``opset``, or None if none exists."""
    try:
        return onnx.defs.get_schema(op_type, opset, domain).since_version
    except onnx.defs.SchemaError:
        return None


def has_cpu_kernel(op_type: str, domain: str, opset: int) -> bool:
    """True when ORT's CPU provider registers a kernel covering the op's schema version at opset.

    ORT also runs ops that ONNX defines as functions by expanding them; callers that care ask
    ``is_function_op``.
    """
    domain = "" if domain == "ai.onnx" else domain
    ranges = _cpu_kernels().get((domain, op_type))
    if not ranges:
        return False
    version = schema_version(op_type, domain, opset) if domain in ("", "ai.onnx.ml") else opset
    if version is None:
        return False
    # ORT matches a kernel registered "since lo" (open-ended) only at exactly lo; a closed range
    # [lo, hi] covers every schema version inside it.
    return any(lo == version or (hi != OPEN_ENDED and lo <= version <= hi) for lo, hi in ranges)


def is_function_op(op_type: str, domain: str, opset: int) -> bool:
    try:
        schema = onnx.defs.get_schema(op_type, opset, domain)
    except onnx.defs.SchemaError:
        return False
    return bool(schema.has_function or schema.has_context_dependent_function)


def ort_registers(op_type: str, domain: str, version: int) -> bool:
    """True when ORT's CPU provider has a kernel for ``version`` of the op *by ORT's own schema*.

    ORT defines some ops before ONNX did (LayerNormalization from version 1 in the default domain,
    where ONNX has it from 17); ``has_cpu_kernel`` asks ONNX's schemas and says no there."""
    domain = "" if domain == "ai.onnx" else domain
    return any(lo <= version and (hi == OPEN_ENDED or version <= hi)
               for lo, hi in _cpu_kernels().get((domain, op_type), []))
