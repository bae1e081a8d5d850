"""bench/tune_table.py's verdict arithmetic: session groups, spread, old rows (no timing, no models)."""

from __future__ import annotations

import importlib.util
import os

import pytest

_PATH = os.path.join(os.path.dirname(__file__), "..", "bench", "tune_table.py")


@pytest.fixture(scope="module")
def table():
    spec = importlib.util.spec_from_file_location("tune_table", _PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cells_of_several_sessions_are_means_and_the_spread_is_within_a_configuration(table) -> None:
    samples = {"tuned": [1.00, 1.02, 1.01], "tuned #2": [1.03, 1.03, 1.03], "orig all": [1.10, 1.10, 1.10],
               "orig all #2": [1.00, 1.00, 1.00], "orig basic": [2.0, 2.0, 2.0]}
    groups = {"tuned": ["tuned", "tuned #2"], "orig all": ["orig all", "orig all #2"], "orig basic": ["orig basic"]}
    assert table.cell_medians(samples, groups) == pytest.approx({"tuned": 1020.0, "orig all": 1050.0,
                                                                 "orig basic": 2000.0})
    assert table.pooled(samples, groups)["tuned"] == pytest.approx([1.015, 1.025, 1.02])
    session_ms = {k: v[1] * 1000 for k, v in samples.items()}
    assert table.session_spread(session_ms, [groups["tuned"], groups["orig all"]]) == pytest.approx(0.10)
    assert table.session_spread(session_ms, [groups["tuned"]]) == pytest.approx(0.01 / 1.02)


def test_the_tuned_original_at_ort_defaults_is_the_orig_all_configuration(table) -> None:
    kept = {"rewrite": {"level": 0}, "graph_optimization_level": "all", "disabled_optimizers": [],
            "intra_op_num_threads": 1}
    assert table.same_configuration(kept, 1)
    assert not table.same_configuration({**kept, "disabled_optimizers": ["ConvActivationFusion"]}, 1)
    assert not table.same_configuration({**kept, "rewrite": {"level": 1}}, 1)


def test_old_rows_still_print_with_their_a_a_gap(table) -> None:
    row = {"model": "resnet50", "batch": 1, "threads": 1, "metric": "cpu", "median_ms": {"tuned": 76.5, "orig all": 75.8},
           "fastest_other": "orig all", "verdict": "MISS", "not_slower_than_orig_all": False,
           "tuned_vs_fastest_other": 0.991, "confidence_tuned_beats_fastest_other": 0.0, "speedup_vs_orig_all": 0.991,
           "confidence_tuned_beats_orig_all": 0.0, "aa_gap": 0.005,
           "tune": {"rewrite": {"name": "level 1"}, "graph_optimization_level": "all", "disabled_optimizers": []}}
    assert "| 0.5% (one A/A pair) | MISS, SLOWER than orig all |" in table.markdown(row)
    assert "| 0.7% | MISS" in table.markdown({**row, "session_spread": 0.007})
