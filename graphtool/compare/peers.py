"""graphtool beside the other optimizers on the user's own model: ``graphtool compare MODEL --peers``.

Each peer (onnxsim, onnxslim, onnxoptimizer, onnxscript's optimizer, onnxscript's
``optimize_for_ort``) runs in its own process, so one peer's crash or memory blow-up cannot take
graphtool down and none shares another's imports. Each result is then set beside graphtool's at
the same level: node counts, the op histogram difference, the rewrites only one of them did (the
same boundary tracing ``compare`` uses for onnxruntime's graphs) and whether its outputs match the
original's on the inputs verification discovers. A peer that is not installed is skipped with a
note (``pip install 'graphtool[peers]'`` brings them).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

PEERS: dict[str, tuple[str, str]] = {  # name -> (module that must import, level it compares with)
    "onnxsim": ("onnxsim", "standard ops"),
    "onnxslim": ("onnxslim", "standard ops"),
    "onnxoptimizer": ("onnxoptimizer", "standard ops"),
    "onnxscript": ("onnxscript", "standard ops"),
    "onnxscript-ort": ("onnxscript", "onnxruntime contrib ops"),
}


def missing(tool: str) -> str | None:
    """Why ``tool`` cannot run here, or None."""
    if tool not in PEERS:
        return f"unknown peer (known: {', '.join(PEERS)})"
    if importlib.util.find_spec(PEERS[tool][0]) is None:
        return f"{PEERS[tool][0]} is not installed (pip install 'graphtool[peers]')"
    return None


def run_peer(tool: str, src: str, out: str, timeout: float = 900) -> dict[str, Any]:
    """Run one peer in a child process; {"seconds"} or {"error"}."""
    try:
        proc = subprocess.run([sys.executable, "-m", "graphtool.compare.peers", tool, src, out], capture_output=True,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines or not os.path.exists(out):
        tail = (proc.stderr.strip().splitlines() or ["failed"])[-1]
        return {"error": tail[:160]}
    return json.loads(lines[-1])


def _child(tool: str, src: str, out: str) -> None:
    """In the child: import, then time the peer's load → optimize → save."""
    import onnx

    start = time.perf_counter()
    if tool == "onnxsim":
        from onnxsim import simplify

        model, _ = simplify(onnx.load(src))
        onnx.save(model, out)
    elif tool == "onnxslim":
        import onnxslim

        onnxslim.slim(src, out)
    elif tool == "onnxoptimizer":
        import onnxoptimizer

        onnx.save(onnxoptimizer.optimize(onnx.load(src)), out)
    else:
        from onnxscript import optimizer

        optimized = optimizer.optimize(onnx.load(src))
        if tool == "onnxscript-ort":
            import onnx_ir as ir
            from onnxscript.rewriter.ort_fusions import optimize_for_ort

            fused, _ = optimize_for_ort(ir.from_proto(optimized))
            optimized = ir.to_proto(fused)
        onnx.save(optimized, out)
    print(json.dumps({"seconds": time.perf_counter() - start}))


def compare_peers(model: Any, path: str, peers: list[str], level: int = 1, target: str = "onnx",
                  peer_results: dict[str, str] | None = None, input_sets: list[Any] | None = None) -> dict[str, Any]:
    """The ``compare --peers`` report. ``peer_results`` maps a peer to an already written result
    (tests use a stub result; nothing runs for it)."""
    from graphtool import io
    from graphtool.compare.report import compare_fusions, histogram_diff
    from graphtool.fusion_trace import index_original, trace_fusions
    from graphtool.inspect import op_histogram
    from graphtool.optimize import optimize
    from graphtool.verify import find_inputs, verify

    start = time.perf_counter()
    ours, _, _ = optimize(model, level=level, target=target)
    seconds = time.perf_counter() - start
    if input_sets is None:
        input_sets = find_inputs(model, path).sets
    ours_check = verify(model, ours, input_sets=input_sets)
    index = index_original(model)  # one index of the original for every peer's trace
    ours_trace = trace_fusions(model, ours, index=index)
    report: dict[str, Any] = {
        "schema": "graphtool.compare-peers/1", "model": path, "level": level, "target": target,
        "nodes_before": model.node_count(),
        "graphtool": {"nodes": ours.node_count(), "seconds": round(seconds, 3), "ok": ours_check.ok},
        "peers": [],
    }
    given = peer_results or {}
    with tempfile.TemporaryDirectory() as tmp:
        for tool in peers:
            entry: dict[str, Any] = {"tool": tool}
            out = given.get(tool)
            if out is None:
                reason = missing(tool)
                if reason:
                    entry["skipped"] = reason
                    report["peers"].append(entry)
                    continue
                out = os.path.join(tmp, f"{tool}.onnx")
                ran = run_peer(tool, path, out)
                if "error" in ran:
                    entry["skipped"] = f"{tool} failed: {ran['error']}"
                    report["peers"].append(entry)
                    continue
                entry["seconds"] = round(ran["seconds"], 3)
            try:
                result = io.load(out)
            except Exception as err:  # noqa: BLE001 - the peer wrote something graphtool cannot read
                entry["skipped"] = f"{tool}'s result does not load: {err}"
                report["peers"].append(entry)
                continue
            fusions = compare_fusions(trace_fusions(model, result, index=index), ours_trace)
            try:
                check = verify(model, result, input_sets=input_sets)
                entry["outputs"] = {"ok": check.ok, "summary": check.summary()}
            except Exception as err:  # noqa: BLE001 - a result ORT cannot run is wrong, not our crash
                entry["outputs"] = {"ok": False, "summary": f"does not run: {str(err).splitlines()[0][:120]}"}
            entry.update({"nodes": result.node_count(),
                          "histogram": histogram_diff(op_histogram(result), op_histogram(ours)),
                          "only_peer": fusions["ort_only"], "only_graphtool": fusions["graphtool_only"]})
            report["peers"].append(entry)
    return report


def format_peers(report: dict[str, Any]) -> str:
    """Text: one table of node counts and output checks, then per peer what only it did."""
    ours = report["graphtool"]
    lines = [f"{report['model']}: {report['nodes_before']} nodes; graphtool level {report['level']} "
             f"--target {report['target']}: {ours['nodes']} nodes ({'outputs equal' if ours['ok'] else 'OUTPUTS DIFFER'})",
             ""]
    for peer in report["peers"]:
        if "skipped" in peer:
            lines.append(f"{peer['tool']}: skipped ({peer['skipped']})")
            continue
        verdict = "outputs equal" if peer["outputs"]["ok"] else f"WRONG: {peer['outputs']['summary']}"
        lines.append(f"{peer['tool']}: {peer['nodes']} nodes ({verdict})")
        only = peer["only_peer"]
        if only:
            lines.append(f"  rewrites only {peer['tool']} did:")
            lines += [f"    {g['pattern']} ×{g['count']}" for g in only[:6]]
        else:
            lines.append(f"  rewrites only {peer['tool']} did: none")
        mine = peer["only_graphtool"]
        if mine:
            lines.append(f"  rewrites only graphtool did: " + ", ".join(f"{g['pattern']} ×{g['count']}" for g in mine[:4]))
        ops = [f"{r['op_type']} {r['ort']}/{r['graphtool']}" for r in peer["histogram"][:6]]
        if ops:
            lines.append(f"  ops ({peer['tool']}/graphtool): " + ", ".join(ops))
    return "\n".join(lines)


if __name__ == "__main__":  # the child process of run_peer
    _child(*sys.argv[1:4])
