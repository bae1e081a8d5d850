"""The onnxruntime child: one reused process; out-of-memory, crash and timeout become one
GraphtoolError line each (and the next call gets a fresh child); other exceptions pass through."""

from __future__ import annotations

import os
import re
import time

import pytest

from graphtool.errors import BadModel
from graphtool.runtime import limits as sandbox_limits
from graphtool.runtime import sandbox
from tests.bad_inputs.make_bad_inputs import fold_bomb


def _pid() -> int:
    return os.getpid()


def _abort() -> None:
    os.abort()


def _sleep(seconds: float) -> str:
    time.sleep(seconds)
    return "woke"


@pytest.fixture(autouse=True)
def limits(monkeypatch):
    monkeypatch.setenv("GRAPHTOOL_SANDBOX", "1")
    sandbox.configure(memory_limit="1G", time_limit=60)
    yield
    sandbox.configure()


def test_child_is_reused_and_is_not_us():
    first = sandbox.call("testing", _pid)
    assert first != os.getpid()
    assert sandbox.call("testing", _pid) == first


@pytest.mark.parametrize("child", ["main", "ort"])  # "ort": the child with mimalloc (graphtool.runtime.allocator)
def test_ort_fold_bomb_is_one_line_not_a_kill(tmp_path, child):
    """ORT's level-1 optimizer folds 24 Expands of ~1 GB: the child hits its 2 GB limit. (Under
    1 GB the first fold already fails and ORT skips folding by itself.)"""
    sandbox.configure(memory_limit="2G", time_limit=60)
    with pytest.raises(sandbox.LimitHit) as err, sandbox.child(child):
        sandbox.call("optimizing this model at level 1", sandbox.ort_optimize, fold_bomb().SerializeToString(),
                     "basic", str(tmp_path / "out.onnx"))
    # "(limit 2 GB)", or "(killed; limit 2 GB)" if the machine's OOM killer came first
    assert re.fullmatch(r"onnxruntime ran out of memory optimizing this model at level 1 \((killed; )?limit 2 GB\); "
                        r"--memory-limit raises it", str(err.value)), str(err.value)
    assert sandbox.call("testing", _pid) != os.getpid()  # a fresh child answers the next call


def test_under_mimalloc_ort_still_skips_a_fold_it_cannot_allocate(tmp_path):
    """At 1 GB the first ~1 GB fold fails and ORT, under the system's malloc, skips folding and
    goes on. mimalloc aborts there instead: the ORT child reruns the call without it."""
    with sandbox.child("ort"):
        sandbox.call("optimizing this model at level 1", sandbox.ort_optimize, fold_bomb().SerializeToString(),
                     "basic", str(tmp_path / "out.onnx"))
    assert (tmp_path / "out.onnx").stat().st_size > 0


def test_crash_names_the_signal_and_the_next_call_works():
    before = sandbox.call("testing", _pid)
    with pytest.raises(sandbox.LimitHit, match=r"onnxruntime crashed testing \(signal SIGABRT"):
        sandbox.call("testing", _abort)
    assert sandbox.call("testing", _pid) != before


def test_time_limit():
    sandbox.configure(memory_limit="1G", time_limit=1)
    with pytest.raises(sandbox.LimitHit, match=r"took longer than 1 s testing; --time-limit raises it"):
        sandbox.call("testing", _sleep, 30)
    sandbox.configure(memory_limit="1G", time_limit=60)
    assert sandbox.call("testing", _sleep, 0) == "woke"


def test_errors_of_the_model_pass_through_as_themselves():
    from tests.bad_inputs.make_bad_inputs import _recursive

    with pytest.raises(BadModel, match="onnxruntime cannot load the model"):
        sandbox.RemoteSession(_recursive(False)().SerializeToString(), "off", 1, None)


def test_remote_session_runs_like_a_local_one(monkeypatch):
    import numpy as np

    from graphtool.runtime import make_session
    from tests.conftest import light_model

    local = make_session(light_model("squeezenet"))
    monkeypatch.setattr(sandbox, "SESSIONS", True)
    remote = make_session(light_model("squeezenet"))  # sandboxed: make_session decides where
    assert isinstance(remote, sandbox.RemoteSession)
    assert [i.name for i in remote.get_inputs()] == [i.name for i in local.get_inputs()]
    assert [o.shape for o in remote.get_outputs()] == [o.shape for o in local.get_outputs()]
    x = np.random.default_rng(0).standard_normal(local.get_inputs()[0].shape).astype(np.float32)
    feeds = {local.get_inputs()[0].name: x}
    np.testing.assert_array_equal(remote.run(None, feeds)[0], local.run(None, feeds)[0])


def test_sizes():
    assert sandbox_limits.parse_size("8G") == 8 << 30 and sandbox_limits.parse_size("512m") == 512 << 20
    assert sandbox_limits.format_size(8 << 30) == "8 GB"
    with pytest.raises(Exception, match="expected a size"):
        sandbox_limits.parse_size("lots")
    assert sandbox_limits.default_memory_limit() <= 8 << 30


def test_named_children_are_separate_processes_and_sessions_stay_in_theirs(monkeypatch):
    """verify's reference and compare's ORT optimizer run in children of their own, so a long
    session build in one never holds up a fold in the main one; a session opened in a child
    keeps running there whichever thread calls it."""
    import threading

    import numpy as np

    from tests.conftest import light_model

    monkeypatch.setattr(sandbox, "SESSIONS", True)
    main = sandbox.call("testing", _pid)
    with sandbox.child("reference"):
        side = sandbox.call("testing", _pid)
        session = sandbox.RemoteSession(light_model("squeezenet"), "off", 1, None)
    assert side not in (main, os.getpid())
    assert sandbox.call("testing", _pid) == main  # back to the main child after the block
    # a slow call in one child does not block another's
    slow = sandbox.Background(lambda: sandbox.call("testing", _sleep, 2.0), child="reference")
    start = time.monotonic()
    assert sandbox.call("testing", _pid) == main
    assert time.monotonic() - start < 1.5
    assert slow.result() == "woke"
    x = np.zeros(session.get_inputs()[0].shape, np.float32)
    out = []
    worker = threading.Thread(target=lambda: out.append(session.run(None, {session.get_inputs()[0].name: x})))
    worker.start()
    worker.join()
    assert out and out[0][0].shape == tuple(session.get_outputs()[0].shape)
    sandbox.shutdown()  # stops every child
    assert all(w.proc is None for w in sandbox._WORKERS.values())


def test_a_stop_while_the_child_starts_fails_that_start_and_never_hangs_it(monkeypatch):
    """``Background.cancel`` stops a worker from the main thread while the job's thread may be
    inside ``Popen`` starting its child. That stop once closed the child's log after Popen had
    taken its fd as the child's stderr: the fd number went to Popen's exec-error pipe, the child
    kept that pipe's write end as its fd 2 across exec, and Popen waited for its EOF forever
    holding the worker's lock (tests/bad_inputs hung 30 min, the next command's prewarm behind
    it). Here the stop lands at that moment, with a lower fd freed beside it as a busy process
    frees them: the start fails at once, no child is left, and the worker starts afresh."""
    import subprocess
    import threading

    worker = sandbox._Worker()
    inside, resume = threading.Event(), threading.Event()
    real = subprocess.Popen._execute_child

    def paused(self, *args, **kwargs):  # after Popen took its fds, before its exec-error pipe
        if threading.current_thread().name == "starting":
            inside.set()
            resume.wait(10)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(subprocess.Popen, "_execute_child", paused)
    spare = os.open(os.devnull, os.O_RDONLY)  # the child's log opens just above it
    outcome: list = []

    def starting():
        try:
            outcome.append(worker.call("testing", _pid, (), {}))
        except Exception as err:  # noqa: BLE001 - the test looks at it
            outcome.append(err)

    thread = threading.Thread(target=starting, name="starting", daemon=True)
    thread.start()
    assert inside.wait(10)
    os.close(spare)
    worker.stop()  # what cancel does, from another thread, without the lock
    resume.set()
    thread.join(20)
    assert not thread.is_alive(), "the start hung in Popen after a concurrent stop"
    assert len(outcome) == 1 and isinstance(outcome[0], sandbox.LimitHit), outcome
    assert str(outcome[0]) == "onnxruntime's child was stopped testing"
    assert worker.proc is None and worker.log is None  # the child it started is gone, not published
    monkeypatch.undo()
    assert worker.call("testing", _pid, (), {}) != os.getpid()  # the next call starts a fresh child
    worker.stop()


def test_a_background_stuck_past_its_cancel_never_blocks_the_next_command(monkeypatch):
    """Whatever keeps a job's thread from stopping, the next command must not wait on a lock that
    thread holds: ``cancel`` gives up on it after its wait, the name gets a fresh worker (so
    ``prewarm`` and calls go on), and the old worker starts no child again."""
    import threading

    monkeypatch.setattr(sandbox, "SESSIONS", True)
    holding, release = threading.Event(), threading.Event()

    def stuck():
        with sandbox._current().lock:  # a call that never returns, as the hung Popen was
            holding.set()
            release.wait(60)
            return sandbox.call("testing", _pid)

    job = sandbox.Background(stuck)
    assert holding.wait(10)
    done: list = []
    try:
        job.cancel(wait=0.5)
        nxt = threading.Thread(target=lambda: (sandbox.prewarm(), done.append(sandbox.call("testing", _pid))),
                               daemon=True)
        nxt.start()
        nxt.join(30)
    finally:
        release.set()
    assert done and done[0] != os.getpid(), "the next command waited on the stuck job's lock"
    with pytest.raises(sandbox.LimitHit, match="onnxruntime's child was stopped testing"):
        job.result()
