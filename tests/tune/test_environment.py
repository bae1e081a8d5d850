"""tune's process-environment stage: huge pages for malloc, measured in fresh child processes.

Which environment is faster depends on the machine (bench/decoder_latency.py measures it); these
tests hold the rule, the probe and the plumbing into session.json."""

from __future__ import annotations

import json
import os

import pytest

from graphtool import io
from graphtool.tune import environment
from graphtool.verify import find_step_inputs
from tests.conftest import FIXTURES

DECODER = os.path.join(FIXTURES, "decoder", "llama_kv.onnx")


def _times(plain: list[float], huge: list[float]) -> dict:
    return {"as is": [{"decode": t} for t in plain], "huge pages": [{"decode": t} for t in huge]}


def test_huge_pages_are_recommended_only_when_every_process_with_them_was_faster() -> None:
    yes, gain = environment.decide(_times([20e-3, 22e-3, 35e-3], [8e-3, 8.3e-3, 8.6e-3]), "decode")
    assert yes and gain == pytest.approx(22 / 8.3)
    no, _ = environment.decide(_times([20e-3, 8.1e-3, 35e-3], [8e-3, 8.3e-3, 8.6e-3]), "decode")  # one overlaps
    assert not no
    small, gain = environment.decide(_times([10.2e-3, 10.3e-3, 10.4e-3], [10e-3, 10.1e-3, 10.15e-3]), "decode")
    assert not small and gain < environment.MIN_GAIN  # all faster, but by 2%: not worth a variable


def test_not_tried_where_it_cannot_change_anything(monkeypatch) -> None:
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.hugetlb=1")
    assert environment.huge_pages_applicable() == "GLIBC_TUNABLES already sets glibc.malloc.hugetlb"
    env, finding = environment.recommend(DECODER, {}, "decode")
    assert env == {} and finding.startswith("environment: huge pages for malloc not tried")


def test_the_probe_times_every_step_of_the_tuned_model_in_each_environment(tmp_path) -> None:
    """Both environments run the model with its session.json in fresh processes, in turns."""
    model = str(tmp_path / "m.onnx")
    io.save(io.load(DECODER), model)
    (tmp_path / "m.onnx.session.json").write_text(json.dumps({"graph_optimization_level": "all",
                                                              "intra_op_num_threads": 1}))
    steps = find_step_inputs(io.load(DECODER), DECODER, prefill=8, past=8)
    feeds = {name: s.feeds for name, s in steps.steps.items()}
    times = environment.measure(model, feeds, {"as is": {}, "huge pages": environment.HUGE_PAGES},
                                processes=2, runs=3)
    assert set(times) == {"as is", "huge pages"} and all(len(v) == 2 for v in times.values())
    assert all(set(t) == {"prefill", "decode"} and all(x > 0 for x in t.values()) for v in times.values() for t in v)


def test_tune_records_the_environment_it_recommends(run_cli, tmp_path) -> None:
    out = str(tmp_path / "tuned.onnx")
    result = run_cli("tune", DECODER, "-o", out, "--budget", "8", "--threads", "1", "--prefill", "8",
                     "--past", "8", "--json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    finding = next(f for f in report["findings"] if f.startswith("environment:"))
    settings = json.load(open(out + ".session.json"))
    assert ("environment" in settings) == finding.startswith("environment: run it with")
    assert report["settings"].get("environment") == settings.get("environment")
    skipped = run_cli("tune", DECODER, "-o", str(tmp_path / "t2.onnx"), "--budget", "8", "--threads", "1",
                      "--prefill", "8", "--past", "8", "--no-environment", "--json")
    assert not any(f.startswith("environment:") for f in json.loads(skipped.stdout)["findings"])


def test_session_for_says_when_this_process_lacks_the_recommended_environment(tmp_path, monkeypatch) -> None:
    from graphtool.runtime import session_for

    model = str(tmp_path / "m.onnx")
    io.save(io.load(DECODER), model)
    settings = {"graph_optimization_level": "all", "environment": dict(environment.HUGE_PAGES)}
    (tmp_path / "m.onnx.session.json").write_text(json.dumps(settings))
    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    with pytest.warns(RuntimeWarning, match="GLIBC_TUNABLES=glibc.malloc.hugetlb=1"):
        session_for(model)
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.hugetlb=1")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        session_for(model)


def _search_saying_where(request, progress):
    """tune's search, run by graphtool.tune.child (which imports this by name): says where it ran."""
    from graphtool.tune import ort as tune_ort

    result, verification = tune_ort.search_and_write(request, progress)  # the child's own: not patched there
    result.findings.append(f"searched in process {os.getpid()} with "
                           f"GRAPHTOOL_TEST_VARIABLE={os.environ.get('GRAPHTOOL_TEST_VARIABLE')}")
    return result, verification


def test_the_search_runs_in_a_child_started_with_the_environment_it_recommends(tmp_path, monkeypatch) -> None:
    """Decided first, on the original; the search then runs where the model will (graphtool.tune.child)."""
    from graphtool.tune import ort as tune_ort

    monkeypatch.setattr(tune_ort, "recommend", lambda *_a, **_k: (
        {"GRAPHTOOL_TEST_VARIABLE": "1"}, "environment: run it with GRAPHTOOL_TEST_VARIABLE=1"))

    monkeypatch.setattr(tune_ort, "search_and_write", _search_saying_where)
    out, said = str(tmp_path / "tuned.onnx"), []
    run = tune_ort.tune_file(DECODER, out, budget=8, threads=1, prefill=8, past=8, progress=said.append)
    assert run.settings["environment"] == {"GRAPHTOOL_TEST_VARIABLE": "1"}
    assert json.load(open(out + ".session.json"))["environment"] == {"GRAPHTOOL_TEST_VARIABLE": "1"}
    assert io.load(out).graph.outputs  # the child wrote the winner
    assert any(s.startswith("rewrite sets") for s in said)  # the child's progress reached the caller
    assert any(f.endswith("(the search ran in it)") for f in run.result.findings)
    where = next(f for f in run.result.findings if f.startswith("searched in process"))
    assert where == f"searched in process {where.split()[3]} with GRAPHTOOL_TEST_VARIABLE=1"
    assert int(where.split()[3]) != os.getpid()
    assert run.decoder and run.decoder["winner_ms"]["decode"] > 0  # both steps timed in the child


def test_an_error_in_the_search_child_is_raised_as_itself(tmp_path) -> None:
    from graphtool.errors import BadModel
    from graphtool.tune.child import search_in
    from graphtool.tune.ort import SearchRequest, TimingPlan, search_and_write

    request = SearchRequest(str(tmp_path / "absent.onnx"), str(tmp_path / "out.onnx"), "ort", 1, 5.0,
                            TimingPlan({}, "given"), None, {}, {}, 1e-3, 1e-4)
    with pytest.raises(BadModel):
        search_in({"GRAPHTOOL_TEST_VARIABLE": "1"}, search_and_write, request, lambda _s: None)
    assert not os.path.exists(tmp_path / "out.onnx")
