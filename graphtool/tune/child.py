"""tune's search in a child process started with the environment it recommends.

An environment variable such as ``GLIBC_TUNABLES`` acts when a process starts, and the search
times sessions in its own process (graphtool.tune.ort): to choose the model where it will run,
the search must run in a process started with the variable. Measured on the 6-layer decoders of
bench/decoder_latency.py: with glibc's defaults two sessions of one file sat 15-60 % apart and
the races kept the original where level 2 was 1.5x faster; with huge pages they sat 0-7 % apart.

Protocol: the parent pickles the search function (by name), its ``SearchRequest`` and this
command's sandbox limits to a file, starts ``python -m graphtool.tune.child REQUEST REPLY`` with the environment, relays each
``PROGRESS``-prefixed stderr line to its progress callback, and unpickles ``("ok", (result,
verification))`` or ``("raise", exception)`` from REPLY: a search that raises in the child raises
the same error in the parent, so the command says what it would have said in-process.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import tempfile
from collections import deque
from typing import Any, Callable

from graphtool.errors import GraphtoolError

PROGRESS = "graphtool-progress\t"


def search_in(env: dict[str, str], search: Callable[..., Any], request: Any,
              progress: Callable[[str], None]) -> Any:
    """``search(request, progress)`` (a module-level function) in a child process started with ``env``."""
    from graphtool.runtime import sandbox

    config = sandbox.CONFIG

    with tempfile.TemporaryDirectory(prefix="graphtool-tune-child-") as work:
        request_path, reply_path = os.path.join(work, "request.pkl"), os.path.join(work, "reply.pkl")
        with open(request_path, "wb") as handle:
            pickle.dump((search, request, config.memory, config.time, sandbox.SESSIONS), handle,
                        protocol=pickle.HIGHEST_PROTOCOL)
        proc = subprocess.Popen([sys.executable, "-m", "graphtool.tune.child", request_path, reply_path],
                                stdin=subprocess.DEVNULL, stdout=sys.stderr.fileno() if _has_fd() else None,
                                stderr=subprocess.PIPE, text=True, env={**os.environ, **env})
        tail: deque[str] = deque(maxlen=5)
        try:
            assert proc.stderr is not None
            for line in proc.stderr:
                if line.startswith(PROGRESS):
                    progress(line[len(PROGRESS):].rstrip("\n"))
                elif line.strip():
                    tail.append(line.rstrip("\n"))
            code = proc.wait()
        except BaseException:  # Ctrl-C, a timeout: the child must not outlive the command
            proc.kill()
            proc.wait()
            raise
        if not os.path.exists(reply_path):
            said = tail[-1] if tail else f"exit code {code}"
            raise GraphtoolError(f"tune's search process (started with {_shell(env)}) ended without a result: {said}")
        with open(reply_path, "rb") as handle:
            status, payload = pickle.load(handle)
    if status == "raise":
        raise payload
    return payload


def _has_fd() -> bool:
    try:
        sys.stderr.fileno()
        return True
    except (AttributeError, ValueError, OSError):  # a test runner's captured stream
        return False


def _shell(env: dict[str, str]) -> str:
    return " ".join(f"{k}={v}" for k, v in env.items())


def main(argv: list[str]) -> int:
    request_path, reply_path = argv
    with open(request_path, "rb") as handle:
        search, request, memory, time_limit, sessions = pickle.load(handle)
    from graphtool.runtime import sandbox

    sandbox.configure(memory_limit=memory, time_limit=time_limit)
    sandbox.SESSIONS = sessions

    def progress(message: str) -> None:
        print(PROGRESS + message.replace("\n", " "), file=sys.stderr, flush=True)

    try:
        reply: tuple[str, Any] = ("ok", search(request, progress))
    except Exception as err:  # noqa: BLE001 - handed to the parent, which raises it as its own
        reply = ("raise", err)
    finally:
        sandbox.cancel_background()
    try:
        data = pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, TypeError, AttributeError):
        data = pickle.dumps(("raise", GraphtoolError(f"{type(reply[1]).__name__}: {reply[1]}")))
    with open(reply_path + ".part", "wb") as handle:
        handle.write(data)
    os.replace(reply_path + ".part", reply_path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
