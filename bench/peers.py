"""Run one optimizer on one model in a fresh process and report nodes, seconds and peak RSS.

Each measurement is a separate process so that peak RSS belongs to that tool alone and no tool
benefits from another's warm caches. Seconds cover load → optimize → save (imports excluded).

    python bench/peers.py TOOL MODEL OUT [LEVEL] [TARGET]   → one JSON line
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time

TOOLS = ("graphtool", "ort-basic", "ort-extended", "onnxsim", "onnxslim", "onnxoptimizer", "onnxscript",
         "onnxscript-ort")


def _count(path: str) -> int:
    import onnx

    def walk(graph) -> int:
        n = 0
        for node in graph.node:
            n += 1
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    n += walk(attr.g)
                elif attr.type == onnx.AttributeProto.GRAPHS:
                    n += sum(walk(g) for g in attr.graphs)
        return n

    return walk(onnx.load(path, load_external_data=False).graph)


def _has_external_data(path: str) -> bool:
    import onnx

    return any(t.data_location == onnx.TensorProto.EXTERNAL
               for t in onnx.load(path, load_external_data=False).graph.initializer)


def _peak_rss_mb() -> float:
    """This process's peak RSS since it exec'd (VmHWM). ``ru_maxrss`` would not do: it survives
    exec, so a child forked from a big parent (peers_real after it ran the original in onnxruntime)
    starts with the parent's footprint and the first tool measured looks hundreds of MB heavier."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def transformer_type(path: str) -> str | None:
    """onnxruntime.transformers' model_type for a transformer export (by its file name), else None:
    its optimizer applies only to the architectures it has fusions for."""
    name = os.path.basename(path).lower()
    for key, kind in (("gpt2", "gpt2"), ("vit", "vit"), ("whisper", "bert"), ("bert", "bert")):
        if key in name:
            return kind
    return None


def _run(tool: str, src: str, out: str, level: int, target: str) -> None:
    """Run inside the child process: import first, then time only the work.

    A source with external data gets each tool's own large-model path (onnxsim's ``output_path``,
    ORT's external-initializers file, onnx's ``save_as_external_data``): the plain calls cannot
    write a result over protobuf's 2 GB limit, and no user would call them that way.
    """
    external = _has_external_data(src)
    import onnxruntime  # noqa: F401  (every tool may import it lazily; imports stay outside the timing)

    if tool == "graphtool":
        import graphtool.check  # noqa: F401  (imported lazily by optimize's schema check)
        from graphtool import io
        from graphtool.optimize import optimize
        from graphtool.pass_manager import load_builtin_and_plugins

        load_builtin_and_plugins()  # imports every pass module; optimize() would do it on first call

        start, cpu_start = time.perf_counter(), time.process_time()
        model, _, _ = optimize(io.load(src), level=level, target=target, in_place=True)
        io.save(model, out)
    elif tool.startswith("ort-") and not tool.startswith("ort-transformers"):
        import onnxruntime as ort

        from graphtool.runtime import make_session, session_options

        start, cpu_start = time.perf_counter(), time.process_time()
        if external:
            opts = session_options(tool.split("-", 1)[1], optimized_path=out)
            opts.add_session_config_entry("session.optimized_model_external_initializers_file_name",
                                          os.path.basename(out) + ".data")
            opts.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes", "1024")
            ort.InferenceSession(src, opts, providers=["CPUExecutionProvider"])
        else:
            make_session(src, tool.split("-", 1)[1], optimized_path=out)
    elif tool == "onnxsim":
        import onnx
        from onnxsim import simplify

        start, cpu_start = time.perf_counter(), time.process_time()
        if external:
            simplify(src, output_path=out)
        else:
            model, ok = simplify(onnx.load(src))
            onnx.save(model, out)
    elif tool == "onnxslim":
        import onnxslim

        start, cpu_start = time.perf_counter(), time.process_time()
        onnxslim.slim(src, out)
    elif tool == "onnxoptimizer":
        import onnx
        import onnxoptimizer

        start, cpu_start = time.perf_counter(), time.process_time()
        onnx.save(onnxoptimizer.optimize(onnx.load(src)), out, save_as_external_data=external,
                  location=os.path.basename(out) + ".data")
    elif tool in ("onnxscript", "onnxscript-ort"):
        import onnx
        import onnx_ir as ir
        from onnxscript import optimizer

        start, cpu_start = time.perf_counter(), time.process_time()
        if tool == "onnxscript":
            onnx.save(optimizer.optimize(onnx.load(src)), out)
        else:
            from onnxscript.rewriter.ort_fusions import optimize_for_ort

            fused, _ = optimize_for_ort(ir.from_proto(optimizer.optimize(onnx.load(src))))
            onnx.save(ir.to_proto(fused), out)
    elif tool.startswith("ort-transformers"):  # "ort-transformers:qwen3" names its model_type
        import logging

        from onnxruntime.transformers.optimizer import optimize_model

        from graphtool.runtime import make_session

        logging.disable(logging.WARNING)  # its per-fusion log lines are not results
        start, cpu_start = time.perf_counter(), time.process_time()
        # = optimize_model(opt_level=1): ORT's basic level, then the transformer fusions. Done in two
        # steps because its own ORT step imports torch (for a CUDA version check) and torch is absent.
        basic = out + ".basic.onnx"
        make_session(src, "basic", optimized_path=basic)
        kind = tool.split(":", 1)[1] if ":" in tool else transformer_type(src)
        optimize_model(basic, model_type=kind, opt_level=0).save_model_to_file(
            out, use_external_data_format=external)
    else:
        raise SystemExit(f"unknown tool {tool}")
    seconds = time.perf_counter() - start
    cpu_seconds = time.process_time() - cpu_start  # all threads; less sensitive than wall time to a busy machine
    rss_mb = _peak_rss_mb()
    print(json.dumps({"tool": tool, "seconds": seconds, "cpu_seconds": cpu_seconds, "rss_mb": rss_mb,
                      "nodes": _count(out)}))


_OOM_SIGNS = ("MemoryError", "bad_alloc", "Cannot allocate memory", "Failed to allocate", "out of memory")


def measure(tool: str, src: str, out: str, level: int = 1, target: str = "onnx", timeout: float = 1800,
            mem_limit_mb: int | None = None) -> dict:
    """Run ``tool`` on ``src`` in a child process; {"nodes", "seconds", "rss_mb"} or {"error"}.

    ``mem_limit_mb`` caps the child's address space (RLIMIT_AS) so one peer cannot take the
    machine down; running out of it is reported as an error starting with "OOM".
    """
    def cap() -> None:
        if mem_limit_mb:
            limit = mem_limit_mb << 20
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    try:
        proc = subprocess.run([sys.executable, __file__, tool, src, out, str(level), target],
                              capture_output=True, text=True, timeout=timeout, preexec_fn=cap)
    except subprocess.TimeoutExpired:
        return {"tool": tool, "error": f"timeout {timeout:.0f}s"}
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["failed"])[-1]
        if any(sign in proc.stderr for sign in _OOM_SIGNS) or proc.returncode == -9:
            return {"tool": tool, "error": f"OOM ({mem_limit_mb} MB cap): {tail[:80]}"}
        return {"tool": tool, "error": tail[:120]}
    return json.loads(lines[-1])


def outputs_equal(src: str, out: str, inputs: str | None = None) -> float | None:
    """Max abs difference between the outputs of src and out (ORT, optimizations off)."""
    import numpy as np

    from graphtool.runtime import make_session, random_inputs
    from graphtool.verify import compare_arrays

    try:
        a, b = make_session(src), make_session(out)
        feeds = dict(np.load(inputs)) if inputs else random_inputs(a, 0)
        ra, rb = a.run(None, feeds), b.run(None, {k: v for k, v in feeds.items() if k in {i.name for i in b.get_inputs()}})
        return max(compare_arrays("o", x, y).max_abs for x, y in zip(ra, rb))
    except Exception:
        return None


if __name__ == "__main__":
    tool, src, out = sys.argv[1:4]
    level = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    target = sys.argv[5] if len(sys.argv) > 5 else "onnx"
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    _run(tool, src, out, level, target)
