"""The jobs the sandbox child runs (``graphtool.runtime.sandbox`` sends them): onnxruntime sessions opened,
run and closed by id, ORT's optimized graphs written, constant evaluation. Written against
onnxruntime alone: importing graphtool's IR (and with it networkx and onnx) would make the child
start in 0.8 s instead of 0.3 s."""

from __future__ import annotations

import re
from typing import Any

from graphtool.errors import GraphtoolError

_MEMORY_PATTERN = re.compile(r"bad_alloc|bad allocation|Failed to allocate|out of memory|MemoryError", re.I)


def _is_memory_error(err: BaseException) -> bool:
    return isinstance(err, MemoryError) or bool(_MEMORY_PATTERN.search(str(err)[:2000]))


def _ort_session(source: str | bytes, level: str = "off", threads: int = 1, optimized_path: str | None = None,
                 plan: dict | None = None) -> Any:
    """(child) ``runtime.make_session`` for a path or bytes, with the same options and the same
    one-line load errors, written against onnxruntime alone: importing graphtool.runtime.session (and
    with it the IR, networkx and onnx) would make the child start in 0.8 s instead of 0.3 s."""
    import onnxruntime as ort

    from graphtool.errors import BadModel

    ort.set_default_logger_severity(4)  # the child's stderr is the user's terminal too
    levels = {"off": ort.GraphOptimizationLevel.ORT_DISABLE_ALL, "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
              "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED, "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL}
    opts = ort.SessionOptions()
    opts.graph_optimization_level = levels[level]
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 4
    # ORT's memory-pattern planner is quadratic in the tensors alive at once: on one value read by
    # 20,000 nodes its first run took 3.8 s, 0.06 s without it. Verification and folding run a
    # session once or twice, where the pattern saves nothing.
    opts.enable_mem_pattern = False
    if optimized_path:
        opts.optimized_model_filepath = optimized_path
    state = ort.capi.onnxruntime_pybind11_state

    folder_set: list[str] = []  # a segmented model's pieces all share its folder

    def open_piece(piece: bytes, folder: str | None) -> Any:
        if folder and not folder_set:  # where the model's weights were; once: ORT warns at a second add
            opts.add_session_config_entry("session.model_external_initializers_file_folder_path", folder)
            folder_set.append(folder)
        return ort.InferenceSession(piece, opts, providers=["CPUExecutionProvider"])

    try:
        if level == "off" and not optimized_path:  # a huge graph opens in linear time as segments
            from graphtool.runtime.segmented import open_segmented

            segmented = open_segmented(source, open_piece, plan)
            if segmented is not None:
                return segmented
        return ort.InferenceSession(source, opts, providers=["CPUExecutionProvider"])
    except (state.Fail, state.InvalidGraph, state.InvalidArgument, state.NotImplemented, state.RuntimeException,
            state.InvalidProtobuf, state.NoSuchFile) as err:
        if _is_memory_error(err):
            raise
        text = str(err).strip()
        raise BadModel(f"onnxruntime cannot load the model: {text.splitlines()[0][:300] if text else type(err).__name__}") from None


def ort_optimize(source: str | bytes, level: str, out_path: str) -> None:
    """Build an ORT session at ``level`` for ``source`` (a path or model bytes) and have ORT
    write the graph its optimizer produced to ``out_path`` (compare's optimized graphs)."""
    _ort_session(source, level, optimized_path=out_path)


def run_model(model: bytes, wanted: list[str], feeds: dict[str, Any]) -> dict[str, Any]:
    """(child) One session with optimizations off, run once: constant evaluation's job."""
    import numpy as np

    sess = _ort_session(model)
    return {w: np.asarray(v) for w, v in zip(wanted, sess.run(wanted, feeds))}


_SESSIONS: dict[int, Any] = {}  # in the child: open sessions by id


def _arg(node_arg: Any) -> Any:
    from types import SimpleNamespace

    return SimpleNamespace(name=node_arg.name, type=node_arg.type, shape=list(node_arg.shape))


def session_open(source: str | bytes, level: str, threads: int, optimized_path: str | None,
                 plan: dict | None = None) -> tuple:
    """(child) Create a session; return its id and the signature the parent's proxy answers with.
    ``plan``: where to cut a big graph, from the parent (graphtool.runtime.plan)."""
    sess = _ort_session(source, level, threads, optimized_path, plan)
    sid = id(sess)
    _SESSIONS[sid] = sess
    return (sid, [_arg(a) for a in sess.get_inputs()], [_arg(a) for a in sess.get_outputs()],
            [_arg(a) for a in sess.get_overridable_initializers()])


def session_run(sid: int, names: list[str] | None, feeds: dict[str, Any]) -> list[Any]:
    """(child) Run an open session."""
    sess = _SESSIONS.get(sid)
    if sess is None:
        raise GraphtoolError("the onnxruntime session was lost (its child process was restarted)")
    return sess.run(names, feeds)


def session_close(sids: list[int]) -> None:
    for sid in sids:
        _SESSIONS.pop(sid, None)
