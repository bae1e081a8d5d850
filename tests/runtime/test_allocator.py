"""The child that builds ORT's optimized graphs runs with mimalloc; the others with the system's malloc."""

from __future__ import annotations

import os

import pytest

from graphtool import io
from graphtool.compare import ort_optimized
from graphtool.runtime import allocator, sandbox
from tests.conftest import light_model

pytestmark = pytest.mark.skipif(allocator.mimalloc_path() is None, reason="cmeel-mimalloc is not installed")


def _mapped_libraries(pid: int) -> str:
    with open(f"/proc/{pid}/maps") as maps:
        return maps.read()


def test_with_fast_malloc_puts_mimalloc_first_and_keeps_the_users_preload():
    path = allocator.mimalloc_path()
    assert os.path.isfile(path) and os.path.basename(path) == "libmimalloc.so"
    assert allocator.with_fast_malloc({})["LD_PRELOAD"] == path
    assert allocator.with_fast_malloc({})["MIMALLOC_ARENA_RESERVE"] == "64MiB"  # not 1 GiB of the memory limit
    assert allocator.with_fast_malloc({"LD_PRELOAD": "/x/libother.so"})["LD_PRELOAD"] == f"{path} /x/libother.so"
    assert "LD_PRELOAD" not in allocator.with_fast_malloc({"GRAPHTOOL_ALLOCATOR": "system"})


def test_only_the_ort_child_maps_mimalloc(monkeypatch):
    monkeypatch.setattr(sandbox, "SESSIONS", True)  # as the CLI runs: ORT's sessions in the children
    model = io.load(light_model("resnet50"))
    try:
        with sandbox.child("ort"):
            optimized = ort_optimized(model, 1)
            ort_pid = sandbox.call("a call in the ORT child", os.getpid)
        main_pid = sandbox.call("a call in the main child", os.getpid)
        assert optimized.node_count() > 0
        assert "libmimalloc" in _mapped_libraries(ort_pid)
        assert "libmimalloc" not in _mapped_libraries(main_pid)
    finally:
        sandbox.shutdown()
