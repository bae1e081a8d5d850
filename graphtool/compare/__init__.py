"""graphtool beside onnxruntime's own optimizer: what ORT does at L1/L2/L3 that graphtool does not.

For each level, ORT optimizes the original model and writes the result to a file
(``SessionOptions.optimized_model_filepath``); graphtool optimizes the same model at the same
level. The report puts the two graphs side by side: node counts, op histograms by domain, ops
found in only one of them, the fusions each applied — *named*, e.g. ``Conv+Relu → FusedConv ×16``
— and how far apart their outputs are on the same random inputs.

Naming a fusion needs no knowledge of ORT's optimizer: both optimizers keep the value names at
the boundary of what they rewrite, so every node of a rewritten graph is traced back to the
original ops it replaced (``graphtool.fusion_trace.trace_fusions``, which ``graphtool diff``'s
summary uses too).

L2/L3 graphs hold com.microsoft contrib ops, and ORT's L3 graph holds NCHWc layout ops chosen for
this machine's CPU: the report says so, because neither is portable ONNX.

The package, by job: ``schema`` (the JSON contract), ``run`` (everything that runs onnxruntime),
``report`` (the side-by-side report), ``text`` and ``html`` (its two renderings), ``peers`` (the
other optimizers beside graphtool, each in its own process).
"""

from __future__ import annotations

from graphtool.compare.html import diff_sections, to_html
from graphtool.compare.peers import compare_peers, format_peers, missing
from graphtool.compare.report import compare, compare_fusions, compare_level, graphtool_level_for, histogram_diff
from graphtool.compare.run import EarlyORT, feeds_for, layout_notes, measure_latency, ort_optimized, output_diffs
from graphtool.compare.schema import JSON_SCHEMA, LATENCY_ORT_LEVELS, LEVEL_SCHEMA, ORT_LEVELS, SCHEMA
from graphtool.compare.text import format_compare, format_latency, format_level
from graphtool.fusion_trace import trace_fusions

__all__ = ["EarlyORT", "compare_peers", "format_peers", "missing", "JSON_SCHEMA", "LATENCY_ORT_LEVELS", "LEVEL_SCHEMA", "ORT_LEVELS", "SCHEMA", "compare", "compare_fusions",
           "compare_level", "diff_sections", "feeds_for", "format_compare", "format_latency", "format_level",
           "graphtool_level_for", "histogram_diff", "layout_notes", "measure_latency", "ort_optimized", "output_diffs",
           "to_html", "trace_fusions"]
