"""``graphtool inspect``: what a model is, from metadata alone (no weight byte is read)."""

from __future__ import annotations

import ctypes
import os
from collections import Counter
from typing import Any

import onnx

from graphtool.ir.graph import Graph
from graphtool.ir.model import Model
from graphtool.ir.tensor import dtype_name
from graphtool.runtime import has_cpu_kernel, is_function_op


def _shape_str(graph: Graph, name: str) -> dict[str, Any]:
    dtype = graph.dtype(name)
    shape = graph.declared_shape(name)
    return {
        "name": name,
        "dtype": dtype_name(dtype) if dtype else "?",
        "shape": None if shape is None else ["?" if d is None else d for d in shape],
    }


def op_histogram(model: Model) -> dict[str, dict[str, int]]:
    """{domain: {op_type: count}} over the main graph and all its subgraphs."""
    counts: Counter[tuple[str, str]] = Counter()
    for graph in model.graph.walk():
        records = graph._node  # op id -> its record (ir.graph.OpData)
        for op_type, ids in graph._by_type.items():
            for domain, n in Counter(records[i].domain for i in ids).items():
                counts[("" if domain == "ai.onnx" else domain, op_type)] += n
    table: dict[str, dict[str, int]] = {}
    for (domain, op_type), n in sorted(counts.items(), key=lambda kv: (kv[0][0], -kv[1], kv[0][1])):
        table.setdefault(domain or "ai.onnx", {})[op_type] = n
    return table


# ops onnxruntime turns into something else while loading, so they need no kernel
RESOLVED_AT_LOAD = {("", "Constant")}


def missing_kernels(model: Model, histogram: dict[str, dict[str, int]]) -> list[dict[str, Any]]:
    """Ops that onnxruntime's CPU provider has no kernel for at the model's imported opset."""
    local = {(fn.domain, fn.name) for fn in model.functions}
    missing = []
    for domain, ops in histogram.items():
        key_domain = "" if domain == "ai.onnx" else domain
        opset = model.opset(key_domain)
        for op_type in ops:
            if (key_domain, op_type) in local or (key_domain, op_type) in RESOLVED_AT_LOAD:
                continue
            if opset is None:
                missing.append({"domain": domain, "op_type": op_type, "opset": None, "reason": "domain not imported"})
            elif not has_cpu_kernel(op_type, key_domain, opset):
                reason = (
                    "no CPU kernel; ORT expands its ONNX function"
                    if is_function_op(op_type, key_domain, opset)
                    else "no CPU kernel"
                )
                missing.append({"domain": domain, "op_type": op_type, "opset": opset, "reason": reason})
    return missing


def checker_result(path: str | None, model_proto: onnx.ModelProto | None = None) -> str:
    try:
        if path is not None:
            onnx.checker.check_model(path)
        elif model_proto is not None:
            onnx.checker.check_model(model_proto)
        return "ok"
    except Exception as err:  # the checker raises several types; its message is the finding
        first = str(err).strip().splitlines()
        return first[0][:300] if first else type(err).__name__


def _release_freed_memory() -> None:
    """Hand the C heap's free pages back to the OS (glibc ``malloc_trim``; elsewhere a no-op).

    onnx's checker parses the whole file in C++ (~350 MB for a million-node chain) and frees it
    on return; without this, glibc keeps most of those pages, and the IR built next stacks on
    top of them in the process's peak RSS."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def inspect_file(path: str) -> tuple[Model, dict[str, Any]]:
    """Load ``path`` and report on it, running onnx's checker *before* the IR is built (once
    ``io.load`` has refused what is unsafe to hand to onnx: FIFOs, bad opsets, deep nesting).

    The checker's own parse of the file and the IR are then never alive at once: on a
    million-node chain that is the difference between a 1.3 GB and a 0.9 GB peak (issue 19).
    Returns the model too, for the caller's further reports (``graphtool inspect`` adds the
    ``check`` summary)."""
    from graphtool import io

    verdict: list[str] = []

    def check_file() -> None:  # the file is known safe to hand to onnx by now (io.load's checks)
        verdict.append(checker_result(path))
        _release_freed_memory()

    model = io.load(path, validated=check_file)
    return model, inspect_model(model, path, checker=verdict[0] if verdict else None)


def _constant_size(attrs: Any) -> tuple[int | None, int]:
    """(elements, bytes) of a Constant node's value, from its attribute's dims and type only."""
    from onnx import AttributeProto, helper

    for attr in attrs.values():
        if not isinstance(attr, AttributeProto):
            continue
        if attr.type == AttributeProto.TENSOR:
            t = attr.t
            size = 1
            for d in t.dims:
                size *= d
            try:
                itemsize = helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
            except (KeyError, ValueError, TypeError):
                itemsize = 0
            return size, size * itemsize if t.data_type != 8 else len(t.raw_data) or sum(len(x) for x in t.string_data)
        if attr.type in (AttributeProto.FLOATS, AttributeProto.INTS):
            n = len(attr.floats) + len(attr.ints)
            return n, n * (4 if attr.type == AttributeProto.FLOATS else 8)
        if attr.type in (AttributeProto.FLOAT, AttributeProto.INT):
            return 1, 4 if attr.type == AttributeProto.FLOAT else 8
    return None, 0


def inspect_model(model: Model, path: str | None = None, checker: str | None = None) -> dict[str, Any]:
    """The report as a JSON-ready dict; parameter sizes come from tensor metadata only.
    ``checker``: onnx's checker verdict on ``path`` when the caller already has it
    (``inspect_file``); otherwise the checker runs here."""
    shell = model.proto_shell
    main = model.graph
    params = bytes_total = external_bytes = 0
    initializers = 0
    largest = ("", 0)
    for _, graph in model.graphs():
        for tensor in graph.initializers.values():
            initializers += 1
            params += tensor.size
            bytes_total += tensor.nbytes
            if tensor.external is not None:
                external_bytes += tensor.nbytes
            if tensor.nbytes > largest[1]:
                largest = (tensor.name, tensor.nbytes)
    # weights some exporters write as Constant nodes (tf2onnx, paddle): counted from the tensor's
    # dims and type in the node, as initializers are from theirs
    constants = 0
    for _, graph in model.graphs():
        for node in graph.nodes("Constant"):
            if node.domain not in ("", "ai.onnx"):
                continue
            size, nbytes = _constant_size(node.peek_attrs())
            if size is None:
                continue
            constants += 1
            params += size
            bytes_total += nbytes
            if nbytes > largest[1]:
                largest = (node.outputs[0] if node.outputs else node.name, nbytes)
    subgraphs = []
    for graph in main.walk():
        if graph is main:
            continue
        owner = graph.parent.node(graph.owner) if graph.parent is not None and graph.owner is not None else None
        subgraphs.append(
            {
                "owner": owner.name if owner else "",
                "owner_op": owner.op_type if owner else "",
                "name": graph.name,
                "nodes": len(graph),
                "captures": sorted(graph.free_values()),
            }
        )
    histogram = op_histogram(model)
    main_nodes = len(main)
    total = model.node_count()
    return {
        "path": path,
        "file_bytes": os.path.getsize(path) if path else None,
        "producer": {"name": shell.producer_name, "version": shell.producer_version},
        "ir_version": model.ir_version,
        "opset_imports": {d or "ai.onnx": v for d, v in model.opset_imports.items()},
        "graph_name": main.name,
        "doc_string": shell.doc_string[:200],
        "metadata": {p.key: p.value for p in shell.metadata_props},
        "inputs": [_shape_str(main, n) for n in main.inputs if n not in main.initializers],
        "outputs": [_shape_str(main, n) for n in main.outputs],
        "nodes": {"total": total, "main_graph": main_nodes, "in_subgraphs": total - main_nodes},
        "op_histogram": histogram,
        "parameters": {
            "initializers": initializers,
            "constant_nodes": constants,
            "elements": params,
            "bytes": bytes_total,
            "external_bytes": external_bytes,
            "largest": {"name": largest[0], "bytes": largest[1]},
        },
        "subgraphs": subgraphs,
        "functions": [
            {
                "domain": fn.domain,
                "name": fn.name,
                "nodes": sum(len(g) for g in fn.body.walk()),
                "inputs": list(fn.body.inputs),
                "outputs": list(fn.body.outputs),
            }
            for fn in model.functions
        ],
        "checker": checker_result(path) if checker is None else checker,
        "ort_missing_kernels": missing_kernels(model, histogram),
    }


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


def format_table(rows: list[list[Any]], headers: list[str]) -> str:
    cells = [[str(c) for c in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(cells[0], widths)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells[1:]]
    return "\n".join(lines)


def format_inspect(report: dict[str, Any]) -> str:
    out: list[str] = []
    producer = " ".join(v for v in report["producer"].values() if v) or "(unknown)"
    opsets = ", ".join(f"{d} {v}" for d, v in report["opset_imports"].items())
    p = report["parameters"]
    n = report["nodes"]
    summary = [
        ["model", report["path"] or "(in memory)"],
        ["producer", producer],
        ["IR version", report["ir_version"]],
        ["opsets", opsets],
        ["nodes", f"{n['total']} ({n['main_graph']} main, {n['in_subgraphs']} in subgraphs)"],
        ["parameters", f"{p['elements']:,} in {p['initializers']} initializers"
         + (f" and {p['constant_nodes']} Constant nodes" if p.get("constant_nodes") else "")
         + f", {human_bytes(p['bytes'])}"
         + (f" ({human_bytes(p['external_bytes'])} external)" if p["external_bytes"] else "")],
        ["checker", report["checker"]],
    ]
    if report["metadata"]:
        summary.append(["metadata", ", ".join(f"{k}={v}" for k, v in report["metadata"].items())])
    out.append(format_table(summary, ["", ""]).split("\n", 2)[2])
    io_rows = [["input", t["name"], t["dtype"], _fmt_shape(t["shape"])] for t in report["inputs"]]
    io_rows += [["output", t["name"], t["dtype"], _fmt_shape(t["shape"])] for t in report["outputs"]]
    out += ["", format_table(io_rows, ["", "name", "dtype", "shape"])]
    hist_rows = [[d, op, c] for d, ops in report["op_histogram"].items() for op, c in ops.items()]
    out += ["", format_table(hist_rows, ["domain", "op", "count"])]
    if report["subgraphs"]:
        rows = [[s["owner_op"], s["owner"], s["name"], s["nodes"], len(s["captures"])] for s in report["subgraphs"]]
        out += ["", format_table(rows, ["subgraph of", "node", "graph", "nodes", "outer refs"])]
    if report["functions"]:
        rows = [[f["domain"], f["name"], f["nodes"], ", ".join(f["inputs"])] for f in report["functions"]]
        out += ["", format_table(rows, ["function domain", "name", "nodes", "inputs"])]
    missing = report["ort_missing_kernels"]
    if missing:
        rows = [[m["domain"], m["op_type"], m["opset"], m["reason"]] for m in missing]
        out += ["", "ops onnxruntime (CPU) cannot run as-is:", format_table(rows, ["domain", "op", "opset", "why"])]
    else:
        out += ["", "onnxruntime CPU kernels: every op covered"]
    if "check" in report:
        out += [f"check: {report['check']}"]
    return "\n".join(out)


def _fmt_shape(shape: list[Any] | None) -> str:
    return "?" if shape is None else "[" + ", ".join(str(d) for d in shape) + "]"
