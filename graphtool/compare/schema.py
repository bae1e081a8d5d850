"""The JSON schema of ``graphtool compare --json`` (graphtool.compare/1)."""

from __future__ import annotations

SCHEMA = "graphtool.compare/1"
ORT_LEVELS = {1: "basic", 2: "extended", 3: "all"}
LATENCY_ORT_LEVELS = ("off", "basic", "extended", "all")

# The ``--json`` document, in JSON Schema vocabulary (type/properties/required/items/enum).
# tests/compare/test_compare.py validates real output against it, so it cannot drift from the code.

_INT = {"type": "integer", "minimum": 0}
_NUM_OR_NULL = {"type": ["number", "null"]}  # null: not comparable (shape/dtype differ, output missing)
_HISTOGRAM = {"type": "object", "additionalProperties": {"type": "object", "additionalProperties": _INT}}
_OP = {"type": "object", "required": ["domain", "op_type"],
       "properties": {"domain": {"type": "string"}, "op_type": {"type": "string"}}}
_FUSION_GROUP = {
    "type": "object",
    "required": ["pattern", "kind", "from", "to", "count", "examples"],
    "properties": {
        "pattern": {"type": "string"},  # "Conv+Relu → FusedConv"
        # fused: many ops → fewer; replaced: as many, other ops; expanded: fewer → more (inlined, decomposed)
        "kind": {"enum": ["fused", "replaced", "expanded"]},
        "from": {"type": "array", "items": {"type": "string"}},  # original op types on the fused data path
        "to": {"type": "array", "items": _OP},  # the op(s) that replaced them
        "count": {"type": "integer", "minimum": 1},
        "examples": {"type": "array", "items": {"type": "string"}},  # names of rewritten nodes
        "graphtool_did": {"type": "array", "items": {"type": "string"}},  # in ort_only: what graphtool did instead
        "why": {"type": "array", "items": {"type": "string"}},  # in ort_only: why graphtool leaves it on purpose
        "ort_did": {"type": "array", "items": {"type": "string"}},  # in graphtool_only: what ORT did instead
        # layout clusters: per-node fusions read from attributes, e.g. {"Conv+Sum+Relu → nchwc.Conv": 16}
        "details": {"type": "object", "additionalProperties": {"type": "integer", "minimum": 1}},
    },
}
_SIDE = {
    "type": "object",
    "required": ["nodes", "op_histogram", "removed", "untraced"],
    "properties": {
        "nodes": _INT,
        "op_histogram": _HISTOGRAM,
        "removed": {"type": "object", "additionalProperties": _INT},
        "untraced": {"type": "array", "items": {"type": "object", "required": ["domain", "op_type", "name"]}},
    },
}
_PAIR = {
    "type": "object",
    "required": ["max_abs", "max_rel", "ok", "outputs"],
    "properties": {
        "max_abs": _NUM_OR_NULL, "max_rel": _NUM_OR_NULL, "ok": {"type": "boolean"},
        "outputs": {"type": "array", "items": {
            "type": "object", "required": ["name", "max_abs", "max_rel", "ok", "reason"],
            "properties": {"name": {"type": "string"}, "max_abs": _NUM_OR_NULL, "max_rel": _NUM_OR_NULL,
                           "ok": {"type": "boolean"}, "reason": {"type": "string"}}}},
    },
}
LEVEL_SCHEMA = {
    "type": "object",
    "required": ["level", "ort_level", "graphtool_level", "target", "original_nodes", "ort", "graphtool",
                 "op_diff", "fusions", "outputs", "notes"],
    "properties": {
        "level": {"enum": [1, 2, 3]},
        "ort_level": {"enum": ["basic", "extended", "all"]},
        "graphtool_level": {"enum": [1, 2, 3]},
        "target": {"enum": ["onnx", "ort"]},
        "original_nodes": _INT,
        "ort": _SIDE,
        "graphtool": _SIDE,
        "op_diff": {"type": "array", "items": {
            "type": "object", "required": ["domain", "op_type", "ort", "graphtool", "only"],
            "properties": {"domain": {"type": "string"}, "op_type": {"type": "string"}, "ort": _INT,
                           "graphtool": _INT, "only": {"enum": ["ort", "graphtool", None]}}}},
        "fusions": {"type": "object", "required": ["ort", "graphtool", "ort_only", "graphtool_only"],
                    "additionalProperties": {"type": "array", "items": _FUSION_GROUP}},
        "outputs": {"type": "object", "required": ["ort_vs_graphtool", "ort_vs_original", "graphtool_vs_original"],
                    "additionalProperties": _PAIR},
        "notes": {"type": "array", "items": {"type": "string"}},
    },
}
JSON_SCHEMA = {
    "type": "object",
    "required": ["schema", "model", "target", "original", "levels", "latency"],
    "properties": {
        "schema": {"enum": ["graphtool.compare/1"]},
        "model": {"type": ["string", "null"]},
        "target": {"enum": ["onnx", "ort"]},
        "original": {"type": "object", "required": ["nodes", "op_histogram"],
                     "properties": {"nodes": _INT, "op_histogram": _HISTOGRAM}},
        "levels": {"type": "array", "items": LEVEL_SCHEMA},
        "latency": {"type": ["object", "null"], "required": ["runs", "warmup", "threads", "baseline", "rows"],
                    "properties": {
                        "runs": {"type": "integer", "minimum": 1}, "warmup": _INT, "threads": {"type": "integer", "minimum": 1},
                        "baseline": {"type": "object", "required": ["model", "ort_level"]},
                        "rows": {"type": "array", "items": {
                            "type": "object", "required": ["model", "ort_level", "median_ms", "p90_ms", "speedup"],
                            "properties": {"model": {"type": "string"},
                                           "ort_level": {"enum": ["off", "basic", "extended", "all"]},
                                           "median_ms": {"type": "number", "minimum": 0},
                                           "p90_ms": {"type": "number", "minimum": 0},
                                           "speedup": {"type": "number", "minimum": 0}}}}}},
    },
}
