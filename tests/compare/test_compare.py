"""graphtool.compare: ORT's optimized graphs beside graphtool's, fusions named from a structural diff."""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from graphtool import io
from graphtool.compare import (
    JSON_SCHEMA,
    LEVEL_SCHEMA,
    compare,
    compare_level,
    diff_sections,
    format_compare,
    measure_latency,
    ort_optimized,
    to_html,
    trace_fusions,
)
from tests.conftest import FIXTURES

# --------------------------------------------------------------------------- a small JSON Schema checker


def schema_errors(doc: Any, schema: dict[str, Any], path: str = "$") -> list[str]:
    """The subset of JSON Schema that JSON_SCHEMA uses: type, enum, minimum, properties,
    required, additionalProperties, items. Returns every violation (empty list: valid)."""
    errors: list[str] = []
    types = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}
    if "type" in schema:
        wanted = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]

        def is_type(t: str) -> bool:
            if t == "integer":
                return isinstance(doc, int) and not isinstance(doc, bool)
            if t == "number":
                return isinstance(doc, (int, float)) and not isinstance(doc, bool)
            return isinstance(doc, types[t])

        if not any(is_type(t) for t in wanted):
            return [f"{path}: expected {wanted}, got {type(doc).__name__}"]
    if "enum" in schema and doc not in schema["enum"]:
        errors.append(f"{path}: {doc!r} not in {schema['enum']}")
    if "minimum" in schema and isinstance(doc, (int, float)) and doc < schema["minimum"]:
        errors.append(f"{path}: {doc} < {schema['minimum']}")
    if isinstance(doc, dict):
        for key in schema.get("required", []):
            if key not in doc:
                errors.append(f"{path}: missing '{key}'")
        props = schema.get("properties", {})
        for key, value in doc.items():
            if key in props:
                errors += schema_errors(value, props[key], f"{path}.{key}")
            elif isinstance(schema.get("additionalProperties"), dict):
                errors += schema_errors(value, schema["additionalProperties"], f"{path}.{key}")
    if isinstance(doc, list) and "items" in schema:
        for i, item in enumerate(doc):
            errors += schema_errors(item, schema["items"], f"{path}[{i}]")
    return errors


# --------------------------------------------------------------------------- small models


def conv_relu_model(blocks: int = 2, conv_name: str = "conv") -> onnx.ModelProto:
    """``blocks`` × (Conv → Relu): ORT L2 fuses each pair into com.microsoft FusedConv; standard
    ONNX has no fused conv+activation op, so graphtool --target onnx never does."""
    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "x"
    for i in range(blocks):
        w = numpy_helper.from_array(rng.standard_normal((4, 4, 3, 3)).astype(np.float32), f"w{i}")
        b = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), f"b{i}")
        inits += [w, b]
        nodes.append(helper.make_node("Conv", [x, f"w{i}", f"b{i}"], [f"c{i}"], name=f"{conv_name}{i}", pads=[1, 1, 1, 1]))
        nodes.append(helper.make_node("Relu", [f"c{i}"], [f"r{i}"], name=f"relu{i}"))
        x = f"r{i}"
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, 4, 8, 8])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def tiny(nodes: list, inputs: list[str], outputs: list[str], inits: list | None = None) -> onnx.ModelProto:
    vi = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3]) for n in inputs]
    vo = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3]) for n in outputs]
    return helper.make_model(helper.make_graph(nodes, "g", vi, vo, inits or []),
                             opset_imports=[helper.make_opsetid("", 17)])


# --------------------------------------------------------------------------- fusion naming


def test_names_conv_relu_to_fusedconv_that_graphtool_onnx_does_not_do():
    model = io.load_proto(conv_relu_model(blocks=2))
    report = compare(model, levels=[2], target="onnx")
    level = report["levels"][0]
    assert level["ort"]["op_histogram"]["com.microsoft"] == {"FusedConv": 2}
    assert "com.microsoft" not in level["graphtool"]["op_histogram"]
    ort_only = {g["pattern"]: g for g in level["fusions"]["ort_only"]}
    assert set(ort_only) == {"Conv+Relu → FusedConv"}
    group = ort_only["Conv+Relu → FusedConv"]
    assert group["count"] == 2 and group["from"] == ["Conv", "Relu"] and group["kind"] == "fused"
    assert group["to"] == [{"domain": "com.microsoft", "op_type": "FusedConv"}]
    assert level["op_diff"] == [{"domain": "ai.onnx", "op_type": "Conv", "ort": 0, "graphtool": 2, "only": "graphtool"},
                                {"domain": "ai.onnx", "op_type": "Relu", "ort": 0, "graphtool": 2, "only": "graphtool"},
                                {"domain": "com.microsoft", "op_type": "FusedConv", "ort": 2, "graphtool": 0, "only": "ort"}]
    assert level["outputs"]["ort_vs_graphtool"]["ok"] and level["outputs"]["ort_vs_graphtool"]["max_abs"] < 1e-4
    assert any("com.microsoft contrib ops" in n for n in level["notes"])
    text = format_compare(report)
    assert "Conv+Relu → FusedConv ×2" in text
    assert "ops only in ORT: FusedConv×2" in text


def test_no_ort_only_fusion_when_graphtool_has_the_same_graph():
    """Negative: handing ORT's own graph in as graphtool's result leaves nothing ORT-only."""
    model = io.load_proto(conv_relu_model(blocks=2))
    ort_graph = ort_optimized(model, 2)
    level = compare_level(model, ort_graph, 2, "ort", ort_model=ort_graph)
    assert schema_errors(json.loads(json.dumps(level)), LEVEL_SCHEMA) == []  # what optimize --compare-ort embeds
    assert level["fusions"]["ort_only"] == [] and level["fusions"]["graphtool_only"] == []
    assert [g["pattern"] for g in level["fusions"]["ort"]] == ["Conv+Relu → FusedConv"]
    assert level["fusions"]["ort"] == level["fusions"]["graphtool"]
    assert level["op_diff"] == []
    assert level["outputs"]["ort_vs_graphtool"]["max_abs"] == 0.0


def test_partial_fusion_says_what_graphtool_did_instead():
    """ORT fuses Conv+BN+Relu into FusedConv; a graph that only folded BN into Conv is named as such."""
    model = io.load(f"{FIXTURES}/conv_bn.onnx")
    level1 = ort_optimized(model, 1)  # ORT basic: Conv+BatchNormalization → Conv, Relu kept
    level = compare_level(model, level1, 2, "onnx")
    ort_only = {g["pattern"]: g for g in level["fusions"]["ort_only"]}
    assert ort_only["Conv+BatchNormalization+Relu → FusedConv"]["count"] == 2
    assert ort_only["Conv+BatchNormalization+Relu → FusedConv"]["graphtool_did"] == ["Conv+BatchNormalization → Conv"]


def test_trace_sees_through_merged_duplicates():
    """CSE: the rewrite reads y1 twice where the original read the duplicate y2 — not a lost boundary."""
    original = io.load_proto(tiny([helper.make_node("Relu", ["x"], ["y1"]), helper.make_node("Relu", ["x"], ["y2"]),
                                   helper.make_node("Add", ["y1", "y2"], ["out"])], ["x"], ["out"]))
    rewritten = io.load_proto(tiny([helper.make_node("Relu", ["x"], ["y1"]), helper.make_node("Add", ["y1", "y1"], ["out"])],
                                   ["x"], ["out"]))
    trace = trace_fusions(original, rewritten)
    assert [f.kind for f in trace.fusions] == ["unchanged", "unchanged"]
    assert trace.inserted == [] and dict(trace.removed) == {"Relu": 1}


def test_renamed_values_between_unchanged_ops_are_not_a_fusion():
    original = io.load_proto(tiny([helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Neg", ["a"], ["y"])], ["x"], ["y"]))
    rewritten = io.load_proto(tiny([helper.make_node("Relu", ["x"], ["a_gt0"]), helper.make_node("Neg", ["a_gt0"], ["y"])], ["x"], ["y"]))
    trace = trace_fusions(original, rewritten)
    assert [f.kind for f in trace.fusions] == ["unchanged"] and not trace.removed


def test_lost_boundary_is_untraced_not_guessed():
    """A node whose original region escapes to a graph input it does not read cannot be named."""
    original = io.load_proto(tiny([helper.make_node("Relu", ["x1"], ["a"]), helper.make_node("Mul", ["a", "x2"], ["y"])],
                                  ["x1", "x2"], ["y"]))
    rewritten = io.load_proto(tiny([helper.make_node("Sigmoid", ["x2"], ["y"])], ["x1", "x2"], ["y"]))
    trace = trace_fusions(original, rewritten)
    assert [f.kind for f in trace.fusions] == ["untraced"]
    assert trace.inserted == [("", "Sigmoid", "")]


def test_constant_side_inputs_are_folded_not_fused():
    """Div by a Constant node, rewritten with an initializer: the Constant is folded, the Div unchanged."""
    c = helper.make_node("Constant", [], ["two"], value=numpy_helper.from_array(np.full((2, 3), 2, np.float32)))
    original = io.load_proto(tiny([c, helper.make_node("Div", ["x", "two"], ["y"])], ["x"], ["y"]))
    init = numpy_helper.from_array(np.full((2, 3), 2, np.float32), "two_folded")
    rewritten = io.load_proto(tiny([helper.make_node("Div", ["x", "two_folded"], ["y"])], ["x"], ["y"], [init]))
    trace = trace_fusions(original, rewritten)
    assert [f.kind for f in trace.fusions] == ["unchanged"]
    assert len(trace.fusions[0].folded) == 1


# --------------------------------------------------------------------------- JSON, HTML, latency


def test_json_report_matches_documented_schema():
    model = io.load(f"{FIXTURES}/conv_bn.onnx")
    report = compare(model, levels=[1, 2, 3], target="onnx", latency=True, runs=2, warmup=0, path="conv_bn.onnx")
    doc = json.loads(json.dumps(report))  # what --json prints must survive strict JSON
    assert schema_errors(doc, JSON_SCHEMA) == []
    assert [lv["level"] for lv in doc["levels"]] == [1, 2, 3]
    assert [lv["ort_level"] for lv in doc["levels"]] == ["basic", "extended", "all"]
    assert doc["original"]["nodes"] == 6
    rows = doc["latency"]["rows"]
    assert {(r["model"], r["ort_level"]) for r in rows} >= {("original", "off"), ("original", "all")}
    assert rows[0]["speedup"] == 1.0


def test_schema_checker_rejects_a_broken_report():
    """The checker above is not vacuous: a wrong type, a missing key and a bad enum are each caught."""
    model = io.load_proto(conv_relu_model(blocks=1))
    doc = json.loads(json.dumps(compare(model, levels=[1])))
    doc["levels"][0]["ort"]["nodes"] = "three"
    del doc["levels"][0]["fusions"]["ort_only"]
    doc["target"] = "tensorrt"
    errors = schema_errors(doc, JSON_SCHEMA)
    assert any("ort.nodes" in e for e in errors)
    assert any("ort_only" in e for e in errors)
    assert any("tensorrt" in e for e in errors)


def test_html_escapes_names_from_the_model():
    hostile = '<script>alert("x")</script>'
    model = io.load_proto(conv_relu_model(blocks=1, conv_name=hostile))
    pairs: dict = {}
    report = compare(model, levels=[2], path="a<b>.onnx", models=pairs)
    assert any(hostile in e for g in report["levels"][0]["fusions"]["ort_only"] for e in g["examples"])
    page = to_html(report, diff_sections(pairs))  # the graph diff (SVG or text) carries the name too
    assert "Content-Security-Policy" in page
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert "a&lt;b&gt;.onnx" in page
    assert page.startswith("<!DOCTYPE html>") and "Conv+Relu → FusedConv" in page
    assert not re.search(r"""(src|href)\s*=\s*["']?https?:""", page) and "<link" not in page  # self-contained


def test_latency_rows_and_baseline():
    model = io.load_proto(conv_relu_model(blocks=1))
    lat = measure_latency([("original", model), ("other", model)], ["off", "all"], runs=3, warmup=1)
    assert [(r["model"], r["ort_level"]) for r in lat["rows"]] == [
        ("original", "off"), ("original", "all"), ("other", "off"), ("other", "all")]
    assert lat["rows"][0]["speedup"] == 1.0
    assert all(r["p90_ms"] >= r["median_ms"] > 0 for r in lat["rows"])


def test_ort_file_with_leftover_inputs_still_runs():
    """IR 3 model: initializers are also inputs; ORT's file keeps the inputs after folding them away."""
    from tests.conftest import light_model

    model = io.load(light_model("squeezenet"))
    report = compare(model, levels=[1])
    assert report["levels"][0]["outputs"]["ort_vs_original"]["ok"]


def test_layout_note_matches_nchwc_ops():
    """ORT L3 picks NCHWc only on CPUs where it pays off: the note follows what the graph holds."""
    model = io.load(f"{FIXTURES}/conv_bn.onnx")
    entry = compare(model, levels=[3])["levels"][0]
    has_nchwc = "com.microsoft.nchwc" in entry["ort"]["op_histogram"]
    assert has_nchwc == any("NCHWc" in n for n in entry["notes"])
    assert entry["ort"]["untraced"] == []  # NCHWc chains join through their blocked tensors
    if has_nchwc:  # each NCHWc Conv carries the fused Relu as its activation attribute
        details = {k: v for g in entry["fusions"]["ort"] for k, v in g.get("details", {}).items()}
        assert details == {"Conv+Relu → nchwc.Conv": 2}


def test_shared_helper_does_not_merge_two_rewrites():
    """One new value read by two self-standing rewrites (an attention mask shared by every
    Attention node) stays a helper: the two rewrites are counted apart, the helper is listed."""
    original = io.load_proto(tiny([
        helper.make_node("Neg", ["m"], ["n"]),
        helper.make_node("Mul", ["x", "n"], ["p1"]), helper.make_node("Sigmoid", ["p1"], ["o1"]),
        helper.make_node("Mul", ["x", "n"], ["p2"]), helper.make_node("Tanh", ["p2"], ["o2"]),
    ], ["x", "m"], ["o1", "o2"]))
    rewritten = io.load_proto(tiny([
        helper.make_node("Neg", ["m"], ["n_new"], name="helper"),
        helper.make_node("Mul", ["x", "n_new"], ["q1"]), helper.make_node("Sigmoid", ["q1"], ["o1"], name="a"),
        helper.make_node("Mul", ["x", "n_new"], ["q2"]), helper.make_node("Tanh", ["q2"], ["o2"], name="b"),
    ], ["x", "m"], ["o1", "o2"]))
    trace = trace_fusions(original, rewritten)
    assert trace.inserted == [("", "Neg", "helper")]
    assert sorted(f.pattern for f in trace.fusions) == ["Neg+Mul+Sigmoid → Mul+Sigmoid", "Neg+Mul+Tanh → Mul+Tanh"]


def test_external_data_model_and_matmul_add_to_gemm():
    """ORT's file of an external-data model points at the weights; they are read back in time."""
    model = io.load(f"{FIXTURES}/external_data.onnx")
    entry = compare(model, levels=[2])["levels"][0]
    assert "MatMul+Add → Gemm" in [g["pattern"] for g in entry["fusions"]["ort"]]
    assert entry["outputs"]["ort_vs_original"]["ok"] and entry["outputs"]["graphtool_vs_original"]["ok"]


def test_inlined_function_is_an_expansion_not_a_fusion():
    model = io.load(f"{FIXTURES}/local_function.onnx")
    entry = compare(model, levels=[1])["levels"][0]
    groups = {g["pattern"]: g for g in entry["fusions"]["ort"]}
    group = groups["Standardize → ReduceMean+Sub+Mul+ReduceMean+Sqrt+Div"]
    assert group["kind"] == "expanded" and group["count"] == 2
    text = format_compare(entry)
    fusions, others = text.split("fusions ORT applied that graphtool did not:")[1].split("other rewrites only ORT did")
    assert "Standardize →" not in fusions and "Standardize → ReduceMean+Sub+Mul+ReduceMean+Sqrt+Div ×2" in others


def test_oversized_region_is_untraced():
    """The walk is bounded: a chain longer than the limit is reported untraced, not walked."""
    nodes = [helper.make_node("Relu", ["x" if i == 0 else f"v{i}"], [f"v{i + 1}"]) for i in range(40)]
    original = io.load_proto(tiny(nodes, ["x"], ["v40"]))
    rewritten = io.load_proto(tiny([helper.make_node("Relu", ["x"], ["v40"])], ["x"], ["v40"]))
    assert [f.kind for f in trace_fusions(original, rewritten, max_region=100).fusions] == ["fused"]
    assert [f.kind for f in trace_fusions(original, rewritten, max_region=10).fusions] == ["untraced"]


def test_big_model_levels_take_turns_between_two_ort_children(monkeypatch):
    """On a big model each level's ORT job runs in a child of its own kind, turn by turn (the next
    level builds while this one's outputs run): the report is the one a single child gives, and
    both ORT children served it."""
    from graphtool.runtime import sandbox

    model = io.load(f"{FIXTURES}/conv_bn.onnx")
    monkeypatch.setattr(sandbox, "SESSIONS", True)
    try:
        alone = compare(model, levels=[1, 2, 3], target="onnx")
        used: list[str] = []
        child_for = sandbox.child_for
        monkeypatch.setattr(sandbox, "child_for", lambda name, nodes: used.append(name) or child_for(name, 10**9))
        turns = compare(model, levels=[1, 2, 3], target="onnx")
        assert all(sandbox._WORKERS[name].proc is not None for name in sandbox.ORT_CHILDREN)
    finally:
        sandbox.shutdown()
    assert [u for u in used if u in sandbox.ORT_CHILDREN] == ["ort", "ort-b", "ort"]
    # level 3's NCHWc value names carry a counter ORT bumps per session: its histogram must agree
    assert turns["levels"][2]["ort"]["op_histogram"] == alone["levels"][2]["ort"]["op_histogram"]
    for report in (turns, alone):
        del report["levels"][2]
    assert json.dumps(turns, sort_keys=True) == json.dumps(alone, sort_keys=True)


def test_names_graphtool_s_refusal_of_the_channels_last_layout_at_2_and_writes_it_at_3(tmp_path):
    """A quantized 1×1-convolution body: ORT "all" runs it channels-last; graphtool's L2 keeps NCHW, as ORT
    extended does, and compare says why (the layout pass's note); graphtool's L3 writes it as ORT "all" does."""
    from graphtool import io
    from tests.passes import qdq_models

    path = qdq_models.quantized_cnn(str(tmp_path), per_channel=False, pointwise=True)
    report = compare(io.load(path), levels=[2, 3], target="ort")
    level2, level3 = report["levels"]
    assert any(n.startswith("graphtool: ort-qdq-nhwc: channels-last layout refused") for n in level2["notes"])
    assert "graphtool: ort-qdq-nhwc" in format_compare(report)
    assert not any("refused" in n for n in level3["notes"]), level3["notes"]
    ours, ort_all = (level3[side]["op_histogram"]["com.microsoft"] for side in ("graphtool", "ort"))
    assert ours["QLinearConv"] == ort_all["QLinearConv"] == 4
    assert level3["graphtool"]["nodes"] <= level3["ort"]["nodes"]  # 11 vs 12: one Transpose fewer
    assert not level3["graphtool"]["untraced"]  # the channels-last region traces as one rewrite, as ORT's


def test_names_why_graphtool_leaves_ort_s_copy_of_a_shared_dequantize_linear():
    """A DequantizeLinear of a constant read by two QDQ units: ORT's level 1 gives each unit its own copy
    (EnsureUniqueDQForNodeUnit); compare lists the copy as ORT-only and says why graphtool has none."""
    import onnx
    from onnx import TensorProto, helper

    from graphtool.compare.text import format_compare
    from graphtool.ir.from_onnx import from_onnx

    n = helper.make_node
    nodes = [n("QuantizeLinear", ["x", "s", "z"], ["xq"]), n("DequantizeLinear", ["xq", "s", "z"], ["a"]),
             n("DequantizeLinear", ["cq", "s", "z"], ["c"]),
             n("Add", ["a", "c"], ["p"]), n("QuantizeLinear", ["p", "s", "z"], ["pq"]),
             n("DequantizeLinear", ["pq", "s", "z"], ["y1"]),
             n("Mul", ["a", "c"], ["m"]), n("QuantizeLinear", ["m", "s", "z"], ["mq"]),
             n("DequantizeLinear", ["mq", "s", "z"], ["y2"])]
    graph = helper.make_graph(
        nodes, "shared_dq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info(y, TensorProto.FLOAT, [2, 8]) for y in ("y1", "y2")],
        [helper.make_tensor("s", TensorProto.FLOAT, [], [0.05]), helper.make_tensor("z", TensorProto.UINT8, [], [128]),
         helper.make_tensor("cq", TensorProto.UINT8, [8], list(range(120, 136, 2)))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    report = compare(from_onnx(onnx.load_from_string(model.SerializeToString())), levels=[1], target="ort")
    groups = report["levels"][0]["fusions"]["ort_only"]
    copies = [g for g in groups if g.get("why")]
    assert copies and all("EnsureUniqueDQForNodeUnit" in g["why"][0] for g in copies), groups
    assert "graphtool: onnxruntime copies a DequantizeLinear" in format_compare(report)
