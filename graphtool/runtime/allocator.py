"""The malloc onnxruntime's optimizer runs with, in the sandbox child that builds ORT's graphs.

onnxruntime's graph transformers free and allocate a node's worth of small objects per edit. On
a big graph that glibc's malloc serves badly: a level-1 session on a 200k-node fan-out model
(``bench/fanout.py``: CSE drops 100k nodes) spends a fifth of its 9 s in ``malloc_consolidate``
and ``unlink_chunk``. With mimalloc preloaded it takes 6.6-6.9 s, the same graph. Sessions that
only run a graph gain nothing (a 200k-node session with ORT off: 9.3 s either way; segmented
verification sessions were 0.3-0.5 s slower with it), so only the child that builds ORT's
optimized graphs gets it (``sandbox.PRELOADED``, ``sandbox.ORT_CHILDREN``).

mimalloc comes from the ``cmeel-mimalloc`` wheel (Linux). Without it, or with
``GRAPHTOOL_ALLOCATOR=system``, children run with the system's malloc: slower, never different.
Two things differ under the child's memory limit (``RLIMIT_DATA``), and both are handled:

* mimalloc reserves address space in arenas of 1 GiB by default, counted against the limit: a
  child limited to 1 GB could not even load its libraries. Arenas of 64 MiB cost no time here.
* Where a C++ allocation fails, mimalloc aborts the process; the system's malloc throws, and ORT
  may skip the fold and go on. So the sandbox reruns a call that killed a mimalloc child once,
  in a child with the system's malloc (``sandbox._Worker``).
"""

from __future__ import annotations

import functools
import os
import sys


@functools.lru_cache(maxsize=1)
def mimalloc_path() -> str | None:
    """The installed ``libmimalloc.so``, or None (not Linux, not installed)."""
    if not sys.platform.startswith("linux"):
        return None
    from importlib import metadata

    try:
        dist = metadata.distribution("cmeel-mimalloc")
    except metadata.PackageNotFoundError:
        return None
    for file in dist.files or ():
        if file.name == "libmimalloc.so":
            path = str(dist.locate_file(file))
            return path if os.path.isfile(path) else None
    return None


def with_fast_malloc(env: dict[str, str]) -> dict[str, str]:
    """``env`` for a child process that preloads mimalloc before any other preloaded library."""
    path = None if env.get("GRAPHTOOL_ALLOCATOR") == "system" else mimalloc_path()
    if path is None:
        return env
    preload = env.get("LD_PRELOAD")
    return {"MIMALLOC_ARENA_RESERVE": "64MiB", **env, "LD_PRELOAD": f"{path} {preload}" if preload else path}
