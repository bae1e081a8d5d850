"""Every model the onnx wheel ships round-trips through the IR byte for byte."""

from __future__ import annotations

import functools

import onnx
import pytest

from graphtool import io
from tests.conftest import backend_models


@functools.lru_cache(maxsize=1)
def node_testcases():
    from onnx.backend.test.case.node import collect_testcases

    return collect_testcases()


def test_node_test_corpus_is_complete():
    assert len(node_testcases()) >= 1884


@pytest.mark.slow
@pytest.mark.parametrize("shard", range(4))
def test_node_tests_round_trip_byte_identical(shard):
    cases = node_testcases()[shard::4]
    failures = []
    for case in cases:
        expected = case.model.SerializeToString()
        if io.to_bytes(io.load_proto(case.model)) != expected:
            failures.append(case.name)
    assert failures == [], f"{len(failures)} of {len(cases)} differ: {failures[:20]}"


@pytest.mark.slow
def test_backend_models_round_trip_byte_identical(tmp_path):
    paths = backend_models()
    assert len(paths) >= 140
    failures = []
    for i, path in enumerate(paths):
        out = tmp_path / f"{i}.onnx"
        io.save(io.load(path), out)
        if out.read_bytes() != onnx.load(path).SerializeToString():
            failures.append(path)
    assert failures == [], f"{len(failures)} of {len(paths)} differ: {failures}"
