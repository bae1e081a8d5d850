"""Run onnxruntime in a reused child process with memory and time limits.

onnxruntime is C++: when its optimizer folds a constant that does not fit in memory, the kernel's
OOM killer ends the whole process (SIGKILL, no message); a crash in a kernel takes Python with it.
So the calls that let ORT loose on a stranger's model (building its optimized graphs for
``compare``, running verification sessions, constant evaluation) run here instead: in one child
process, started on first use and reused for the rest of the command (starting onnxruntime costs
~0.3 s; a call costs a pipe round trip), under ``RLIMIT_AS``. A limit hit, a crash or a timeout
becomes one ``GraphtoolError`` line naming what was being done and the flag that helps, e.g.

    onnxruntime ran out of memory optimizing this model at level 1 (limit 8 GB); --memory-limit raises it

Protocol: length-prefixed pickles over the child's stdin/stdout; the child moves its own fd 1 to
stderr first, so nothing ORT prints can corrupt a reply. ``call(what, fn, *args)`` runs
``fn(*args)`` (a module-level function) in the child and returns its result or re-raises its
exception. ``GRAPHTOOL_SANDBOX=0`` runs everything in-process (the isolation-cost benchmark's peer).
"""

from __future__ import annotations

import contextlib
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from typing import Any, Callable, Iterator

from graphtool.errors import UsageError
from graphtool.runtime.allocator import with_fast_malloc
from graphtool.runtime.limits import (
    CONFIG,
    DEFAULT_TIME_LIMIT,
    LimitHit,
    default_memory_limit,
    format_size,
    parse_size,
)

# the jobs, here too for callers: sandbox.call("...", sandbox.run_model, ...)
from graphtool.runtime.jobs import (  # noqa: F401
    _MEMORY_PATTERN,
    _is_memory_error,
    ort_optimize,
    run_model,
    session_close,
    session_open,
    session_run,
)

_HEADER = struct.Struct("<Q")
# onnxruntime writes a session-id file (.ses) into $TMPDIR when it starts: every child gets the
# TMPDIR graphtool started with, not whatever a caller pointed it at later
_START_TMPDIR = os.environ.get("TMPDIR")


def enabled() -> bool:
    return os.environ.get("GRAPHTOOL_SANDBOX", "1") != "0"




def configure(memory_limit: str | int | None = None, time_limit: float | None = None) -> None:
    """Set the child's limits (CLI flags; ``GRAPHTOOL_MEMORY_LIMIT`` / ``GRAPHTOOL_TIME_LIMIT``
    when a flag is not given). A running child with another memory limit is replaced."""
    memory_source, time_source = "--memory-limit", "--time-limit"
    if memory_limit is None:
        env = os.environ.get("GRAPHTOOL_MEMORY_LIMIT")
        if env:
            memory_source = f"GRAPHTOOL_MEMORY_LIMIT={env}"
        memory_limit = env or default_memory_limit()
    memory = memory_limit if isinstance(memory_limit, int) else parse_size(
        memory_limit, memory_source.split("=")[0] if memory_source.startswith("GRAPHTOOL_") else memory_source)
    if time_limit is None:
        env = os.environ.get("GRAPHTOOL_TIME_LIMIT")
        if env:
            time_source = f"GRAPHTOOL_TIME_LIMIT={env}"
            try:
                time_limit = float(env)
            except ValueError:
                raise UsageError(f"GRAPHTOOL_TIME_LIMIT={env}: expected a number of seconds") from None
        else:
            time_limit = DEFAULT_TIME_LIMIT
    if time_limit <= 0:
        said = time_source if time_source.startswith("GRAPHTOOL_") else f"--time-limit {time_limit}"
        raise UsageError(f"{said}: must be positive")
    if memory != CONFIG.memory:
        for worker in _WORKERS.values():
            if worker.proc is not None:
                worker.stop()
    CONFIG.memory, CONFIG.time = memory, time_limit
    CONFIG.memory_source, CONFIG.time_source = memory_source, time_source


class _Died(Exception):
    pass


class _Stopped(Exception):
    """``stop`` ran while ``start`` was starting the child."""


def _end(proc: subprocess.Popen | None, log: Any) -> None:
    if proc is not None:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        for stream in (proc.stdin, proc.stdout):
            try:
                stream.close()
            except OSError:
                pass
    if log is not None:
        log.close()


class _Worker:
    """The child process and its pipes; ``call`` restarts it after a crash, a limit or a timeout."""

    def __init__(self, nice: int = 0, fast_malloc: bool = False) -> None:
        self.nice = nice  # added to the child's niceness (``NICENESS``)
        self.fast_malloc = fast_malloc  # preload mimalloc (``PRELOADED``)
        # one request at a time on the pipe: verification's reference may run in a background
        # thread (``verify.ReferenceJob``) while the passes fold constants in the main one
        self.lock = threading.RLock()
        # ``stop`` runs from any thread without ``lock`` (``cancel``, ``configure``): this one guards
        # only the swaps of ``proc``/``log``/``stops``, never a wait
        self._state = threading.Lock()
        self.proc: subprocess.Popen | None = None
        self.log = None
        self.generation = 0  # bumped at every start: sessions of an older child are gone
        self.stops = 0  # bumped at every stop: a start that saw another number was cancelled
        self.retired = False  # replaced in ``_WORKERS`` (``Background.cancel``): it starts no child again
        self.closing: list[int] = []  # session ids to drop in the child with the next request

    def start(self, ticket: int | None = None) -> subprocess.Popen:
        """Start a child and return it; ``_Stopped`` if ``stop`` ran since ``ticket`` (default: since now).

        The new child and its log stay this thread's until they are published, under ``_state``:
        a ``stop`` from another thread meanwhile never closes the log Popen is handing to the child
        as its stderr. (It did: the freed fd number went to Popen's exec-error pipe, the child got
        that pipe's write end as its fd 2 and kept it across exec, and Popen waited for its EOF
        forever, holding ``lock``: the next command's ``prewarm`` hung behind it.)"""
        with self._state:
            if ticket is None:
                ticket = self.stops
            if self.retired or ticket != self.stops:
                raise _Stopped()
        log = tempfile.TemporaryFile()
        # one thread for OpenMP and numpy's OpenBLAS: the child's BLAS threads only spun (1.5% of
        # a session build's CPU), and ORT's own pools are set per session
        env = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", **os.environ}
        env.pop("TMPDIR", None)
        if _START_TMPDIR is not None:
            env["TMPDIR"] = _START_TMPDIR
        if self.fast_malloc:
            env = with_fast_malloc(env)
        try:
            proc = subprocess.Popen([sys.executable, "-m", "graphtool.runtime.sandbox", str(CONFIG.memory)],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                                    env=env, close_fds=True)
        except BaseException:
            log.close()
            raise
        with self._state:
            stale = self.retired or ticket != self.stops
            if not stale:
                self.generation += 1
                self.closing = []
                self.proc, self.log = proc, log
        if stale:  # stopped while it started (``cancel``): this child is nobody's
            _end(proc, log)
            raise _Stopped()
        if self.nice:  # after the start: preexec_fn is unsafe while other threads run
            try:
                os.setpriority(os.PRIO_PROCESS, proc.pid, os.getpriority(os.PRIO_PROCESS, 0) + self.nice)
            except OSError:
                pass
        return proc

    def stop(self) -> None:
        """End the child; safe from any thread, with or without ``lock`` (``cancel`` stops a child
        another thread is calling or starting: that call or start fails at once)."""
        with self._state:
            self.stops += 1
            proc, self.proc = self.proc, None
            log, self.log = self.log, None
        _end(proc, log)

    def call(self, what: str, fn: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        with self.lock:
            return self._call(what, fn, args, kwargs)

    def _call(self, what: str, fn: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        # ``cancel`` may stop the child from another thread: this call keeps its own handle
        proc = self.proc
        if proc is None or proc.poll() is not None:
            self.stop()
            try:
                proc = self.start()
            except _Stopped:
                raise LimitHit(f"onnxruntime's child was stopped {what}") from None
        closing, self.closing = self.closing, []
        request = pickle.dumps((closing, fn.__module__, fn.__qualname__, args, kwargs), protocol=pickle.HIGHEST_PROTOCOL)
        try:
            proc.stdin.write(_HEADER.pack(len(request)))
            proc.stdin.write(request)
            proc.stdin.flush()
            status, payload = self._reply(proc, what)
        except (BrokenPipeError, ValueError, OSError, _Died):  # ValueError/OSError: a pipe closed under us
            if self.proc is not proc:
                raise LimitHit(f"onnxruntime's child was stopped {what}") from None
            death = self._death(proc, self.log, what)
            if self.fast_malloc and fn is not session_run:
                # mimalloc aborts where the system's malloc lets a C++ allocation fail: ORT then
                # may skip a fold and go on. The allocator must never change an outcome, so the
                # call runs again, once, as it would have without it (a session's run needs the
                # child it was opened in: that one stays as it is, an out-of-memory either way).
                self.fast_malloc = False
                try:
                    return self._call(what, fn, args, kwargs)
                finally:
                    self.fast_malloc = True  # for the next child started (this one keeps its malloc)
            raise death from None
        except BaseException:  # timeout, Ctrl-C: the child may be mid-call; never reuse it
            self.stop()
            raise
        if status == "ok":
            return payload
        if status == "memory":
            self.stop()  # a child that hit its limit may be left half-allocated: start afresh next time
            raise LimitHit(f"onnxruntime ran out of memory {what} (limit {format_size(CONFIG.memory)}); "
                           f"{CONFIG.raise_hint('memory')}")
        if status == "raise":
            raise payload
        raise RuntimeError(payload)  # an exception that would not pickle: its type and message

    def _reply(self, proc: subprocess.Popen, what: str) -> tuple[str, Any]:
        stream = proc.stdout
        deadline = time.monotonic() + CONFIG.time
        header = self._read(stream, _HEADER.size, deadline, what)
        (size,) = _HEADER.unpack(header)
        return pickle.loads(self._read(stream, size, deadline, what))

    def _read(self, stream: Any, size: int, deadline: float, what: str) -> bytes:
        fd, chunks, left = stream.fileno(), [], size
        while left:
            wait = deadline - time.monotonic()
            if wait <= 0 or not select.select([fd], [], [], wait)[0]:
                self.stop()
                raise LimitHit(f"onnxruntime took longer than {CONFIG.time:.0f} s {what}; {CONFIG.raise_hint('time')}")
            data = os.read(fd, min(left, 1 << 20))
            if not data:
                raise _Died()
            chunks.append(data)
            left -= len(data)
        return b"".join(chunks)

    def _death(self, proc: subprocess.Popen, log: Any, what: str) -> LimitHit:
        code = proc.wait()
        tail = ""
        try:
            if log is not None:
                log.seek(0)
                lines = [ln for ln in log.read().decode("utf-8", "replace").splitlines() if ln.strip()]
                tail = lines[-1][:200] if lines else ""
        except (OSError, ValueError):  # closed by a concurrent stop
            pass
        self.stop()
        if code == -signal.SIGKILL or _MEMORY_PATTERN.search(tail):
            return LimitHit(f"onnxruntime ran out of memory {what} (killed; limit "
                                  f"{format_size(CONFIG.memory)}); {CONFIG.raise_hint('memory')}")
        reason = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
        return LimitHit(f"onnxruntime crashed {what} ({reason}{': ' + tail if tail else ''})")


# Children beside the main one, by job: verification's reference (``verify.ReferenceJob``) and
# compare's ORT optimizer run in their own while the passes fold constants in the main one, so
# none waits for another's minutes-long session build on a huge graph. Each has the same limits.
_WORKERS: dict[str, _Worker] = {"main": _Worker()}
OWN_CHILD_NODES = 20_000  # a smaller model's jobs share the main child: a second one's start (~0.3 s) would not pay


# Niceness added to a big model's child: the reference's outputs are needed last (compare,
# verification), while graphtool's passes and ORT's optimizer are on the way to them. On 2 cores a
# 200k-node compare took 14.5 s instead of 15.4 with the reference at +5 (+10: 14.9).
NICENESS = {"reference": 5}
# The children that build ORT's optimized graphs of a big model (``compare``): its levels take turns
# between them, so the next level's session builds in one while the previous level's outputs run
# in the session that made its graph, in the other. In one child the outputs waited behind the next
# build, and graphtool with them: a 200k-node compare of levels 1-3 took 38-45 s, idle for 15.
ORT_CHILDREN = ("ort", "ort-b")
# Children whose ORT runs with mimalloc (``graphtool.runtime.allocator``): the optimizing ones. Level 1 on
# that 200k-node model: 9.2 s → 6.8 s.
PRELOADED = frozenset(ORT_CHILDREN)


def child_for(name: str, nodes: int) -> str:
    """``name`` for the job of a model this big, else "main"."""
    return name if nodes > OWN_CHILD_NODES else "main"


_LOCAL = threading.local()


def _current() -> _Worker:
    return getattr(_LOCAL, "worker", None) or _WORKERS["main"]


@contextlib.contextmanager
def child(name: str) -> Iterator[None]:
    """Calls from this thread, inside the block, go to the child named ``name`` (started on first use)."""
    worker = _WORKERS.get(name)
    if worker is None:
        worker = _WORKERS[name] = _Worker(NICENESS.get(name, 0), fast_malloc=name in PRELOADED)
    previous = getattr(_LOCAL, "worker", None)
    _LOCAL.worker = worker
    try:
        yield
    finally:
        _LOCAL.worker = previous


class Background:
    """``fn()`` in a thread whose onnxruntime calls go to the child ``child``, started now when
    sessions are sandboxed (the thread mostly waits on that child's pipe, so graphtool's own work
    goes on beside it); otherwise ``result()`` runs it (in-process ORT would hold this CPU)."""

    def __init__(self, fn: Callable[[], Any], child: str = "main") -> None:
        self._fn, self._child = fn, child
        self._done, self._value, self._error = False, None, None
        self._thread: threading.Thread | None = None
        if sessions_enabled():
            self._thread = threading.Thread(target=self._work, name=f"graphtool-{child}", daemon=True)
            _RUNNING.add(self)
            self._thread.start()

    def _work(self) -> None:
        try:
            with child(self._child):
                self._value = self._fn()
        except BaseException as err:  # noqa: BLE001 - re-raised by result(), in the caller's thread
            self._error = err
        self._done = True

    def result(self) -> Any:
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        elif not self._done:
            self._work()
        if self._error is not None:
            raise self._error
        value, self._value = self._value, None  # the caller owns it now (an open session, say)
        return value

    def cancel(self, wait: float = 10.0) -> None:
        """Stop work nobody will wait for (the command failed): its child is stopped, so the call
        in flight fails at once and the thread leaves its ``with`` blocks (temp folders) behind it."""
        thread = self._thread
        if thread is None or not thread.is_alive():
            return
        worker = _WORKERS.get(self._child)
        if worker is not None:
            worker.stop()
        thread.join(wait)
        if worker is not None and thread.is_alive() and _WORKERS.get(self._child) is worker:
            # stuck past its child's stop: the next command gets a fresh worker, never a lock
            # this thread may hold forever; the old one starts no child again
            _WORKERS[self._child] = _Worker(worker.nice, worker.fast_malloc)
            with worker._state:
                worker.retired = True
            worker.stop()


_RUNNING: "weakref.WeakSet[Background]" = weakref.WeakSet()


def cancel_background() -> None:
    """``cancel`` every Background still running (the CLI calls this when a command ends)."""
    for job in list(_RUNNING):
        job.cancel()


def call(what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` in the sandbox child (or in-process when disabled).

    ``what`` completes the sentence "onnxruntime ran out of memory ___", e.g.
    "optimizing this model at level 1". ``fn`` must be a module-level function; its arguments
    and result travel as pickles, so pass paths rather than huge models where possible.
    """
    if not enabled():
        return fn(*args, **kwargs)
    if not CONFIG.memory:
        configure()
    return _current().call(what, fn, args, kwargs)


def prewarm() -> None:
    """Start the child now, so that onnxruntime loads in it while graphtool reads the model."""
    if enabled():
        if not CONFIG.memory:
            configure()
        worker = _WORKERS["main"]
        # never waits: whoever holds the lock is calling the child, and starts it if it is not running
        if not worker.lock.acquire(blocking=False):
            return
        try:
            current = worker.proc
            if current is None or current.poll() is not None:
                worker.stop()
                with contextlib.suppress(_Stopped):  # stopped meanwhile from another thread: the next call starts it
                    worker.start()
        finally:
            worker.lock.release()


def shutdown() -> None:
    """Stop the children (tests, benchmarks that count their CPU; a child also exits on its own
    when graphtool's stdin pipe closes)."""
    for worker in list(_WORKERS.values()):
        with worker.lock:
            worker.stop()


# ----------------------------------------------- sessions in the child (its jobs: graphtool.runtime.jobs)


SPILL_BYTES = 1 << 20  # model bytes past this go to the child as a temp file, not through the pipe


@contextlib.contextmanager
def spilled(source: str | bytes) -> Iterator[str | bytes]:
    """``source`` as the child should get it: big model bytes written to a temp file (a 50 MB
    model costs ~20 ms on disk, ~0.4 s pickled through a pipe on a busy machine)."""
    if not isinstance(source, bytes) or len(source) < SPILL_BYTES:
        yield source
        return
    with tempfile.TemporaryDirectory(prefix="graphtool-ort-") as tmp:
        path = os.path.join(tmp, "model.onnx")
        with open(path, "wb") as f:
            f.write(source)
        yield path


class RemoteSession:
    """What ``runtime.make_session`` returns when sessions are sandboxed: the parts of
    ``InferenceSession`` graphtool uses (inputs, outputs, overridable initializers, run), with
    the session itself living in the child."""

    def __init__(self, source: str | bytes, level: str, threads: int, optimized_path: str | None,
                 what: str = "loading this model", plan: dict | None = None) -> None:
        self._sid = None
        self._worker = _current()  # the session lives in that child: every later call goes there
        self._generation = self._worker.generation
        with spilled(source) as arg:
            sid, self._inputs, self._outputs, self._overridable = call(
                what, session_open, arg, level, threads, optimized_path, plan)
        self._generation, self._sid = self._worker.generation, sid

    def get_inputs(self) -> list[Any]:
        return self._inputs

    def get_outputs(self) -> list[Any]:
        return self._outputs

    def get_overridable_initializers(self) -> list[Any]:
        return self._overridable

    def run(self, output_names: list[str] | None, input_feed: dict[str, Any], run_options: Any = None) -> list[Any]:
        if self._generation != self._worker.generation:
            raise LimitHit("the onnxruntime session was lost: its child process was restarted after a failure")
        if not CONFIG.memory:
            configure()
        return self._worker.call("running this model", session_run, (self._sid, output_names, input_feed), {})

    def __del__(self) -> None:
        if self._sid is not None and self._generation == self._worker.generation:
            self._worker.closing.append(self._sid)  # closed with the next request: no I/O inside a finalizer


SESSIONS = False  # sandbox every session make_session creates (the CLI turns it on)


def sessions_enabled() -> bool:
    return SESSIONS and enabled()


# ------------------------------------------------------------------------------------- child


def _serve(memory: int) -> None:
    import importlib
    import resource

    if memory:  # RLIMIT_DATA (heap and anonymous mappings), not RLIMIT_AS: address space that
        # allocators only reserve (glibc's 64 MB per-thread arenas, ORT's arena) would count there
        limit = getattr(resource, "RLIMIT_DATA", resource.RLIMIT_AS)
        resource.setrlimit(limit, (memory, memory))
    requests = os.fdopen(os.dup(0), "rb", buffering=0)
    replies = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)  # whatever C++ code prints goes to the log, never into a reply
    sys.stdout = sys.stderr
    import numpy  # noqa: F401
    import onnxruntime  # loads while the parent still reads the model

    onnxruntime.set_default_logger_severity(4)  # its logger's lines never reach the terminal
    while True:
        header = requests.read(_HEADER.size)
        if len(header) < _HEADER.size:
            return  # graphtool closed the pipe
        (size,) = _HEADER.unpack(header)
        data = bytearray()
        while len(data) < size:
            chunk = requests.read(size - len(data))
            if not chunk:
                return
            data += chunk
        try:
            closing, module, name, args, kwargs = pickle.loads(bytes(data))
            session_close(closing)
            fn = importlib.import_module(module)
            for part in name.split("."):
                fn = getattr(fn, part)
            reply = ("ok", fn(*args, **kwargs))
        except BaseException as err:  # noqa: BLE001 - every failure goes back to the parent
            if _is_memory_error(err):
                reply = ("memory", str(err)[:300])
            else:
                reply = ("raise", err)
        del data
        try:
            out = pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL)
        except MemoryError:
            out = pickle.dumps(("memory", "result too large"))
        except Exception:  # noqa: BLE001 - an exception or result that does not pickle
            err = reply[1]
            out = pickle.dumps(("text", f"{type(err).__name__}: {err}"))
        replies.write(_HEADER.pack(len(out)) + out)


if __name__ == "__main__":
    _serve(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
