"""onnxruntime sessions for IR models, and the seeded inputs verification feeds them.

Everything that executes a model (verification, constant evaluation, compare, tests) goes
through here, so the choices live in one place: which optimization level a session uses, how
many threads, how random inputs are drawn for each dtype.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

from graphtool.errors import BadModel
from graphtool.ir.model import Model
from graphtool.runtime import sandbox
from graphtool.runtime.plan import segment_plan
from graphtool.runtime.segmented import Plan, open_segmented

if TYPE_CHECKING:
    from onnx import ModelProto

# onnxruntime's own logger writes colored lines straight to stderr (the default logger at warning,
# e.g. a kernel's run-time error): fatal only, in every process that imports this. Its messages
# reach the user inside graphtool's one line, from the exceptions that carry them.
ort.set_default_logger_severity(4)

LEVELS = {
    "off": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}
LEVEL_BY_NUMBER = {0: "off", 1: "basic", 2: "extended", 3: "all"}
MAX_RANDOM_ELEMENTS = 1 << 28  # 1 GB of float32 per random input


def session_options(level: str = "off", threads: int = 1, optimized_path: str | None = None,
                    mem_pattern: bool = False) -> ort.SessionOptions:
    """Options for a session graphtool runs once or twice (verification, folding, compare).

    ``mem_pattern`` off: ORT's memory-pattern planner is quadratic in the tensors alive at once
    (on one value read by 20,000 nodes the first run took 3.8 s, 0.06 s without it) and only
    pays back over many runs; latency timing turns it on, as a user's session has it."""
    opts = ort.SessionOptions()
    opts.graph_optimization_level = LEVELS[level]
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 4  # fatal only: load errors reach the user as our one line, not as ORT log lines too
    opts.enable_mem_pattern = mem_pattern
    if optimized_path:
        opts.optimized_model_filepath = optimized_path
    return opts


@dataclass(frozen=True)
class Source:
    """A model as an onnxruntime session opens it, decided once by ``source_of``: a file path or
    serialized bytes, and where a segmented session cuts its big graph (``graphtool.runtime.plan``;
    None lets the opener decide). Made before a model is handed to a thread or a child, so callers
    hold one value instead of bytes, paths and cuts."""

    data: str | bytes
    plan: Plan | None = None
    folder: Any = None  # the TemporaryDirectory an external-data model was saved to, alive with this


def source_of(model: "Model | ModelProto | str | bytes | Source", path: str | None = None,
              segment: bool = True) -> Source:
    """How a session opens ``model``: a path as it is; a ModelProto or bytes serialized; an IR
    model from ``path``, the file it was read from, when given (cut as planned while the model is
    still the file's), else serialized in the order its plan describes, or saved with its external
    weights to a temporary folder.
    ``segment``: work out the cuts of a big graph (sessions with ORT's optimizations off)."""
    from graphtool import io

    if isinstance(model, Source):
        return model
    if isinstance(model, (str, os.PathLike)):
        return Source(os.fspath(model))
    if isinstance(model, bytes):
        return Source(model)
    if not isinstance(model, Model):  # a ModelProto (verification's instrumented copy)
        return Source(model.SerializeToString())
    if path is not None:  # the file ``model`` was read from: its cuts hold while the model is the file's
        return Source(os.fspath(path), segment_plan(model) if segment and model.pristine() else None)
    if io.wants_external(model):
        folder = tempfile.TemporaryDirectory(prefix="graphtool-session-")
        saved = os.path.join(folder.name, "model.onnx")
        io.save(model, saved, external=True)
        return Source(saved, folder=folder)
    return Source(io.to_bytes(model), segment_plan(model) if segment else None)  # bytes in the plan's order


def make_session(model: "Model | ModelProto | str | bytes | Source", level: str = "off", threads: int = 1,
                 optimized_path: str | None = None, local: bool = False) -> ort.InferenceSession:
    """A CPU session for an IR model, a ModelProto, a path, bytes or a ``Source``: the one place
    that decides where it runs. Load errors become BadModel.

    In the sandbox child when the CLI sandboxes sessions (under its memory and time limits), else
    here; a huge graph with ORT's optimizations off opens as segments (``graphtool.runtime.segmented``).
    ``local`` keeps the session in this process: latency timing must not include the pipe round
    trip or the child's memory-pattern setting."""
    segment = level == "off" and not optimized_path and not local
    source = source_of(model, segment=segment)
    plan = source.plan if segment else None
    if sandbox.sessions_enabled() and not local:
        return sandbox.RemoteSession(source.data, level, threads, optimized_path, plan=plan)  # type: ignore[return-value]
    opts = session_options(level, threads, optimized_path, mem_pattern=local)
    try:
        return _open(source.data, opts, segment=segment, plan=plan)
    except (ort.capi.onnxruntime_pybind11_state.Fail, ort.capi.onnxruntime_pybind11_state.InvalidGraph,
            ort.capi.onnxruntime_pybind11_state.InvalidArgument, ort.capi.onnxruntime_pybind11_state.NotImplemented,
            ort.capi.onnxruntime_pybind11_state.RuntimeException,
            ort.capi.onnxruntime_pybind11_state.InvalidProtobuf) as err:
        raise BadModel(f"onnxruntime cannot load the model: {_first_line(err)}") from None


def _open(source: str | bytes, opts: ort.SessionOptions, segment: bool, plan: dict | None = None) -> Any:
    """One session, or for a huge graph run with optimizations off, a ``SegmentedSession``
    (onnxruntime's session build is quadratic in the node count; see graphtool.runtime.segmented)."""
    if segment:
        folder_set: list[str] = []  # a segmented model's pieces all share its folder

        def open_piece(piece: bytes, folder: str | None) -> ort.InferenceSession:
            if folder and not folder_set:  # once: ORT warns at every later add of the key
                opts.add_session_config_entry("session.model_external_initializers_file_folder_path", folder)
                folder_set.append(folder)
            return ort.InferenceSession(piece, opts, providers=["CPUExecutionProvider"])

        segmented = open_segmented(os.fspath(source) if not isinstance(source, bytes) else source, open_piece, plan)
        if segmented is not None:
            return segmented
    return ort.InferenceSession(source, opts, providers=["CPUExecutionProvider"])


def _first_line(err: Exception) -> str:
    text = str(err).strip()
    return text.splitlines()[0][:300] if text else type(err).__name__


ORT_TYPES = {
    "tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(float16)": np.float16,
    "tensor(int8)": np.int8, "tensor(int16)": np.int16, "tensor(int32)": np.int32, "tensor(int64)": np.int64,
    "tensor(uint8)": np.uint8, "tensor(uint16)": np.uint16, "tensor(uint32)": np.uint32,
    "tensor(uint64)": np.uint64, "tensor(bool)": np.bool_, "tensor(string)": np.str_,
}


def random_inputs(sess: ort.InferenceSession, seed: int = 0, shapes: dict[str, list[int]] | None = None,
                  dim_default: int = 2) -> dict[str, np.ndarray]:
    """Seeded inputs of the declared dtypes. Symbolic dims take ``dim_default`` (or ``shapes``).

    Integers are drawn from [0, 4) so they stay valid as indices, ids and masks in most models;
    floats from a standard normal.
    """
    rng = np.random.default_rng(seed)
    shapes = shapes or {}
    feeds: dict[str, np.ndarray] = {}
    for arg in sess.get_inputs():
        dtype = ORT_TYPES.get(arg.type)
        if dtype is None:
            raise BadModel(f"input '{arg.name}' has type {arg.type}, which random inputs cannot fill")
        shape = shapes.get(arg.name) or [d if isinstance(d, int) and d >= 0 else dim_default for d in arg.shape]
        elements = int(np.prod(shape, dtype=object)) if shape else 1
        if elements > MAX_RANDOM_ELEMENTS:  # a declared dim of 2**40 must not allocate (or thrash) first
            raise BadModel(f"input '{arg.name}' of shape {shape} is too large to fill with random inputs "
                           f"({elements} elements; at most {MAX_RANDOM_ELEMENTS})")
        if dtype is np.str_:
            feeds[arg.name] = rng.integers(0, 4, size=shape).astype(str).astype(object)
        elif dtype is np.bool_:
            feeds[arg.name] = rng.integers(0, 2, size=shape).astype(np.bool_)
        elif np.issubdtype(dtype, np.integer):
            feeds[arg.name] = rng.integers(0, 4, size=shape).astype(dtype)
        else:
            feeds[arg.name] = rng.standard_normal(shape).astype(dtype)
    return feeds


def run(sess: ort.InferenceSession, feeds: dict[str, np.ndarray]) -> list[Any]:
    return sess.run(None, feeds)


def ort_dtype_to_onnx(type_str: str) -> int:
    return helper.np_dtype_to_tensor_dtype(np.dtype(ORT_TYPES.get(type_str, np.float32))) if type_str in ORT_TYPES else TensorProto.UNDEFINED


# ------------------------------------------------------------------------ tuned sessions (graphtool tune)

SESSION_SUFFIX = ".session.json"


def tuned_session(model: str | bytes, level: str = "all", disabled: tuple[str, ...] | list[str] = (),
                  threads: int = 0, optimized_path: str | None = None) -> ort.InferenceSession:
    """A CPU session with the settings ``graphtool tune`` chooses among, in this process.

    Unlike ``make_session`` it keeps onnxruntime's defaults for everything tune does not choose
    (threads 0 = one per core, inter-op threads, memory patterns), so what tune measured is what
    ``session_for`` reopens; and it passes ``disabled_optimizers``, which only the constructor takes."""
    opts = ort.SessionOptions()
    opts.graph_optimization_level = LEVELS[level]
    opts.intra_op_num_threads = threads
    opts.log_severity_level = 4  # as make_session's: errors come back as exceptions, said in one line
    if optimized_path:
        opts.optimized_model_filepath = optimized_path
    kwargs: dict[str, Any] = {"disabled_optimizers": list(disabled)} if disabled else {}
    try:
        return ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"], **kwargs)
    except Exception as err:  # noqa: BLE001 - any load failure is the model's, said in one line
        raise BadModel(f"onnxruntime cannot load the model: {_first_line(err)}") from None


def session_for(path: str | os.PathLike[str]) -> ort.InferenceSession:
    """Open a model ``graphtool tune`` wrote with the onnxruntime settings it saved beside it
    (``PATH.session.json``): the settings are part of what was measured, so they travel with it."""
    import json

    path = os.fspath(path)
    settings_path = path + SESSION_SUFFIX
    try:
        with open(settings_path, encoding="utf-8") as handle:
            settings = json.load(handle)
    except FileNotFoundError:
        raise BadModel(f"{settings_path}: no session settings (write them with `graphtool tune`)") from None
    except (OSError, ValueError) as err:
        raise BadModel(f"{settings_path}: unreadable session settings ({type(err).__name__})") from None
    level = settings.get("graph_optimization_level", "all")
    if level not in LEVELS:
        raise BadModel(f"{settings_path}: unknown graph_optimization_level '{level}'")
    missing = {k: v for k, v in (settings.get("environment") or {}).items() if v not in os.environ.get(k, "")}
    if missing:  # a variable acts when a process starts: this one can only be told
        import warnings

        warnings.warn(f"{os.path.basename(path)} was measured fastest in a process started with "
                      + " ".join(f"{k}={v}" for k, v in missing.items()) + "; this one was not (see "
                      f"{os.path.basename(settings_path)})", RuntimeWarning, stacklevel=2)
    return tuned_session(path, level, tuple(settings.get("disabled_optimizers", ())),
                         int(settings.get("intra_op_num_threads", 0)))
