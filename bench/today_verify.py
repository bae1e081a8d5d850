"""Default-flag ``graphtool optimize`` on today's KV-cache decoders, then a check by hand.

Why
---
Issue 32 asks that verification cannot be fooled: a model graphtool writes must run and match
the original on inputs a user builds, not only on the input sets graphtool found itself. This
script is the measuring instrument. For every model of the corpus ``bench/today_corpus.py`` built
(it reads ``manifest.json``; the models are never committed), it

1. runs ``graphtool optimize M -o OUT --json`` at ``--level 1`` and at ``--level 2 --target ort``
   with no other flag, each in its own process, and records the exit code, whether verification
   passed, how inputs were found and the shapes of the input set, the seconds, and the stderr
   (how many ``internal error`` lines, how many lines from onnxruntime's own logger);
2. loads every written model in onnxruntime and compares it with the original on inputs built by
   hand from the manifest's recipe, at sizes verification is unlikely to pick:
   ``prefill``  past 0 / new 5 (encoder 12),
   ``past8+4``  past 8 / new 4 (mask of 12, positions 8..11, encoder 12),
   ``decode``   past 8 / new 1 (mask of 9, position 8, encoder 12).
   fp32 and int8 models: rtol 1e-3, atol 1e-4; fp16 models: rtol 1e-2, atol 1e-2 (said in the row).
   A case the *original* cannot run is reported as such ("orig fails"), not blamed on graphtool.
   The row also gives the node count before -> after and the fused (contrib) ops written.

Besides the default-flag runs (``--levels 1,2``, the bar of issue 32) three more kinds can be asked
for, each labelled in the table and counted apart: ``1nv``/``2nv`` (``--no-verify``: what the rewrites
do when verification does not stop them, which is what the fusion work of issue 33 needs to see)
and ``2in`` (level 2 verified on the user's own inputs, the past8+4 case as an ``.npz``).

Runs in the project venv (no torch). Prints a markdown table and writes JSON next to it.

    .venv/bin/python bench/today_verify.py --corpus /work/cache/today [--only llama_torchscript]
        [--markdown bench/results/stop30-today-corpus.md] [--levels 1,2,1nv,2nv,2in]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from today_inputs import hand_inputs

GRAPHTOOL = os.path.join(os.path.dirname(sys.executable), "graphtool")
LEVELS = {"1": ["--level", "1"], "2": ["--level", "2", "--target", "ort"],
          # not default flags: what the rewrites do when verification does not stop them (--no-verify)
          "1nv": ["--level", "1", "--no-verify"], "2nv": ["--level", "2", "--target", "ort", "--no-verify"],
          # not default flags: verification on the user's own inputs (the past8+4 case as an .npz)
          "2in": ["--level", "2", "--target", "ort", "--inputs", "{inputs}"]}
DEFAULT_LEVELS = ("L1", "L2")
CASES = {"prefill": (0, 5), "past8+4": (8, 4), "decode": (8, 1)}  # name: (past, new); encoder 12
TOLERANCE = {"float16": (1e-2, 1e-2)}  # dtype: (rtol, atol); everything else (1e-3, 1e-4)
ORT_LOGGER = re.compile(r"\[[EWIVF]:onnxruntime|\x1b\[")


# --- sessions (the inputs: bench/today_inputs.py) -------------------------------------------------

def _session(path: str):
    opts = ort.SessionOptions()
    opts.log_severity_level = 4  # our own sessions: failures come back as exceptions
    return ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])


def _first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:200]


def hand_check(original: str, written: str, recipe: dict, dtype: str) -> dict:
    """Each case: 'ok', 'orig fails: ...', 'FAILS: ...' (the written model does not run) or
    'DIFFERS: ...' (it runs, outputs differ beyond tolerance)."""
    rtol, atol = TOLERANCE.get(dtype, (1e-3, 1e-4))
    result: dict = {"tolerance": f"rtol {rtol:g} atol {atol:g}"}
    try:
        ref_sess = _session(original)
    except Exception as exc:  # noqa: BLE001 -- reported, the row goes on
        return {**result, "all": f"orig fails to load: {_first_line(exc)}"}
    try:
        got_sess = _session(written)
    except Exception as exc:  # noqa: BLE001
        return {**result, "all": f"FAILS to load: {_first_line(exc)}"}
    names = [o.name for o in ref_sess.get_outputs()]
    for case, (past, new) in CASES.items():
        feeds = hand_inputs(original, recipe, past, new)
        try:
            ref = ref_sess.run(names, feeds)
        except Exception as exc:  # noqa: BLE001
            result[case] = f"orig fails: {_first_line(exc)}"
            continue
        try:
            got = got_sess.run(names, feeds)
        except Exception as exc:  # noqa: BLE001
            result[case] = f"FAILS: {_first_line(exc)}"
            continue
        worst = ""
        for name, a, b in zip(names, ref, got):
            a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
            if a.shape != b.shape:
                worst = f"{name} shape {list(a.shape)} became {list(b.shape)}"
                break
            bad = ~np.isclose(b, a, rtol=rtol, atol=atol, equal_nan=True)
            if bad.any():
                worst = f"{name} max abs {float(np.nanmax(np.abs(a - b))):.3g}"
                break
        result[case] = f"DIFFERS: {worst}" if worst else "ok"
    return result


def op_summary(original: str, written: str) -> str:
    """Node count original -> written, and the fused (non-default-domain) ops the written model has."""
    before = onnx.load(original, load_external_data=False).graph.node
    after = onnx.load(written, load_external_data=False).graph.node
    fused: dict[str, int] = {}
    for n in after:
        if n.domain not in ("", "ai.onnx"):
            fused[n.op_type] = fused.get(n.op_type, 0) + 1
    ops = ", ".join(f"{k} {v}" for k, v in sorted(fused.items()))
    return f"{len(before)} -> {len(after)}" + (f"; {ops}" if ops else "")


# --- one graphtool run ----------------------------------------------------------------------------

def optimize(model: str, level: str, out: str, stderr_path: Path, inputs: str) -> dict:
    """One ``graphtool optimize`` in its own process; its stderr kept on disk."""
    start = time.perf_counter()
    flags = [inputs if f == "{inputs}" else f for f in LEVELS[level]]
    try:
        proc = subprocess.run([GRAPHTOOL, "optimize", model, "-o", out, "--json", *flags],
                              capture_output=True, text=True, timeout=1800, check=False)
        rc, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:
        rc, stdout, stderr = "timeout", "", (exc.stderr or b"").decode(errors="replace") if isinstance(
            exc.stderr, bytes) else (exc.stderr or "")
    seconds = time.perf_counter() - start
    stderr_path.write_text(stderr)
    try:
        report = json.loads(stdout) if stdout.strip() else None
    except json.JSONDecodeError:
        report = None
    lines = stderr.splitlines()
    return {"rc": rc, "seconds": round(seconds, 1), "report": report,
            "stderr_last": next((ln for ln in reversed(lines) if ln.strip()), ""),
            "internal_errors": sum("internal error" in ln for ln in lines),
            "ort_logger_lines": sum(bool(ORT_LOGGER.search(ln)) for ln in lines),
            "written": os.path.exists(out)}


def describe_inputs(report: dict | None) -> tuple[str, str, str]:
    """(verified, how inputs were found, input-set shapes) from the JSON report."""
    ver = (report or {}).get("verification") or {}
    found = ver.get("inputs_found") or {}
    verified = "yes" if ver.get("ok") else ("no" if ver else "-")
    if ver.get("unverified"):
        verified += f" ({len(ver['unverified'])} unverified)"
    how = f"{found.get('how', '-')} ({found.get('attempts', 0)} tries)" if found else "-"
    shapes = found.get("shapes") or {}
    short = {}
    for name, shape in shapes.items():  # one past K/V stands for all of them
        key = re.sub(r"\.\d+\.", ".i.", name)
        short.setdefault(key, "x".join(map(str, shape)))
    sets = found.get("sets") or ver.get("input_sets") or []
    text = ", ".join(f"{k}={v}" for k, v in short.items())
    return verified, how, (f"{len(sets)} sets; first: {text}" if text else f"{len(sets)} sets")


# --- the table ---

def short_reason(line: str) -> str:
    """One stderr line, without the input-shape list that makes every model's line different."""
    line = line.removeprefix("graphtool: error: ")
    line = re.sub(r"first: (?:[\w.]+=[\dx]+, )*[\w.]+=[\dx]+: ", "first: ", line)
    line = re.sub(r"; give real inputs with .*$", "", line)
    return line[:220].replace("|", "/")


def failure_index(results: dict) -> dict[str, list[str]]:
    """Distinct failure lines (shapes elided) -> the runs they ended, most common first; the table
    cites them as F1, F2, ... so each exact line is printed once."""
    seen: dict[str, list[str]] = {}
    for name, by in results.items():
        for level, run in by.items():
            if run["rc"] != 0:
                seen.setdefault(f"exit {run['rc']}: {short_reason(run['stderr_last'])}", []).append(f"{name} {level}")
            for case, text in (run.get("hand") or {}).items():
                if str(text).startswith(("FAILS", "DIFFERS")) or case == "all":
                    seen.setdefault(f"hand-built inputs: {text}", []).append(f"{name} {level} {case}")
    return dict(sorted(seen.items(), key=lambda kv: -len(kv[1])))


def failures(index: dict[str, list[str]]) -> str:
    lines = ["| ref | count | line (input shapes elided) | where |", "|---|---|---|---|"]
    for i, (text, where) in enumerate(index.items(), 1):
        lines.append(f"| F{i} | {len(where)} | `{text.replace('|', '/')}` | {', '.join(where)} |")
    return "\n".join(lines)


def original_on_hand_inputs(corpus: Path, manifest: dict, names: list[str]) -> str:
    """Does the original itself run on each hand case? (It tells which recipes each export takes.)"""
    lines = ["| model | " + " | ".join(CASES) + " |", "|---|" + "---|" * len(CASES)]
    for name in names:
        entry = manifest["models"][name]
        path = str(corpus / entry["file"])
        cells = []
        for past, new in CASES.values():
            try:
                _session(path).run(None, hand_inputs(path, entry["recipe"], past, new))
                cells.append("runs")
            except Exception as exc:  # noqa: BLE001 -- that is the finding
                cells.append(f"fails: {_first_line(exc)[:120]}".replace("|", "/"))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------

def row_cells(name: str, entry: dict, level: str, run: dict, refs: dict[str, str]) -> list[str]:
    verified, how, shapes = describe_inputs(run.get("report"))
    hand = run.get("hand") or {}

    def cite(text: str) -> str:
        return refs.get(text, text)

    if "all" in hand:
        hand_text = cite(f"hand-built inputs: {hand['all']}")
    elif hand:
        hand_text = ", ".join(f"{c} {'ok' if hand[c] == 'ok' else cite(f'hand-built inputs: {hand[c]}')}"
                              for c in CASES if c in hand)
        if all(hand.get(c) == "ok" for c in CASES):
            hand_text = "ok (all 3)"
        if entry.get("dtype") == "float16":
            hand_text += f" [{hand['tolerance']}]"
    else:
        hand_text = "no model written"
    exit_text = str(run["rc"])
    if run["rc"] != 0:
        exit_text += " " + cite(f"exit {run['rc']}: {short_reason(run['stderr_last'])}")
    if how == "-" and (m := re.search(r"\((\d+) attempts", run["stderr_last"])):
        how = f"none ran ({m.group(1)} tries)"
    return [name, entry["exporter"], entry["dtype"], level.replace("nv", " --no-verify").replace("in", " --inputs"), exit_text, how, shapes,
            verified, hand_text.replace("|", "/"), run.get("ops", "-"), f"{run['seconds']:.0f}",
            f"{run['internal_errors']}/{run['ort_logger_lines']}"]


HEADER = ["model", "exporter", "dtype", "level", "exit", "inputs found", "input-set shapes", "verified",
          "hand-input check (prefill P0+5 / past8+4 / decode P8+1)", "nodes; fused ops", "s",
          "internal err / ORT log lines"]


def markdown(manifest: dict, results: dict, index: dict[str, list[str]]) -> str:
    refs = {text: f"F{i}" for i, text in enumerate(index, 1)}
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    for name, entry in manifest["models"].items():
        if not entry.get("ok"):
            lines.append(f"| {name} | {entry['exporter']} | {entry['dtype']} | - | export failed: "
                         f"{entry.get('failure', '')[:160].replace('|', '/')} | | | | | | | |")
            continue
        for level, run in sorted(results.get(name, {}).items()):
            lines.append("| " + " | ".join(row_cells(name, entry, level, run, refs)) + " |")
    return "\n".join(lines)


def summary(manifest: dict, results: dict) -> str:
    """The bar of issue 32 counted over the default-flag runs; --no-verify runs get one line of their own."""
    unchecked = [r for by in results.values() for lv, r in by.items() if lv.endswith("nv")]
    user_inputs = [r for by in results.values() for lv, r in by.items() if lv.endswith("in")]
    runs = [r for by in results.values() for lv, r in by.items() if lv in DEFAULT_LEVELS]

    def all_ok(r):
        return bool(r.get("hand")) and all(r["hand"].get(c) == "ok" for c in CASES)

    def any_bad(r):
        return any(str(v).startswith(("FAILS", "DIFFERS")) for k, v in (r.get("hand") or {}).items() if k != "tolerance")

    verified = sum(1 for r in runs if r["rc"] == 0 and ((r.get("report") or {}).get("verification") or {}).get("ok"))
    exported = sum(1 for e in manifest["models"].values() if e.get("ok"))
    seconds = [r["seconds"] for r in runs] or [0.0]
    lines = [
        (f"- models in the manifest: {len(manifest['models'])} ({exported} exported, "
         f"{len(manifest['models']) - exported} export failures)"),
        f"- default-flag optimize runs: {len(runs)}; exit 0 and verified: {verified}/{len(runs)}",
        (f"- models written: {sum(r['written'] for r in runs)}; all 3 hand cases ok: {sum(map(all_ok, runs))}; "
         f"a hand case FAILS/DIFFERS: {sum(map(any_bad, runs))}"),
        (f"- `internal error` lines over all stderr: {sum(r['internal_errors'] for r in runs + unchecked + user_inputs)}; "
         f"onnxruntime logger lines: {sum(r['ort_logger_lines'] for r in runs + unchecked + user_inputs)}"),
        f"- seconds per default-flag run: median {np.median(seconds):.1f}, max {max(seconds):.1f}",
    ]
    if unchecked:
        lines.append(f"- --no-verify runs (rewrites not checked by graphtool): {len(unchecked)}; model written: "
                     f"{sum(r['written'] for r in unchecked)}; all 3 hand cases ok: {sum(map(all_ok, unchecked))}; "
                     f"a hand case FAILS/DIFFERS: {sum(map(any_bad, unchecked))}")
    if user_inputs:
        lines.append(f"- L2 runs verified on the user's inputs (--inputs, past 8 / new 4): {len(user_inputs)}; exit 0: "
                     f"{sum(r['rc'] == 0 for r in user_inputs)}; all 3 hand cases ok: {sum(map(all_ok, user_inputs))}; "
                     f"a hand case FAILS/DIFFERS: {sum(map(any_bad, user_inputs))}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", default="/work/cache/today")
    ap.add_argument("--only", help="comma-separated model names from the manifest")
    ap.add_argument("--levels", default="1,2", help="of 1, 2 (default flags), 1nv, 2nv (--no-verify), 2in (--inputs)")
    ap.add_argument("--markdown", help="also write the table to this file")
    ap.add_argument("--json", help="raw results (default: CORPUS/verify_results.json)")
    args = ap.parse_args()
    corpus = Path(args.corpus)
    manifest = json.loads((corpus / "manifest.json").read_text())
    names = [n for n, e in manifest["models"].items() if e.get("ok")]
    if args.only:
        names = [n for n in names if n in args.only.split(",")]
        manifest["models"] = {n: e for n, e in manifest["models"].items() if n in args.only.split(",")}
    runs_dir = corpus / "runs"
    runs_dir.mkdir(exist_ok=True)
    results: dict = {}
    for name in names:
        entry = manifest["models"][name]
        model = str(corpus / entry["file"])
        for level in args.levels.split(","):
            with tempfile.TemporaryDirectory() as tmp:
                out, inputs = os.path.join(tmp, "out.onnx"), os.path.join(tmp, "inputs.npz")
                np.savez(inputs, **hand_inputs(model, entry["recipe"], *CASES["past8+4"]))
                run = optimize(model, level, out, runs_dir / f"{name}.L{level}.stderr", inputs)
                if run["written"]:
                    run["hand"] = hand_check(model, out, entry["recipe"], entry["dtype"])
                    run["ops"] = op_summary(model, out)
            results.setdefault(name, {})[f"L{level}"] = run
            verified, how, _ = describe_inputs(run["report"])
            print(f"{name:22s} L{level} rc={run['rc']} verified={verified} {how} {run['seconds']}s "
                  f"hand={run.get('hand')} {run['stderr_last'][:160] if run['rc'] else ''}", file=sys.stderr, flush=True)
    index = failure_index(results)
    text = "\n\n".join([summary(manifest, results), markdown(manifest, results, index),
                         "Failure lines (Fn in the table), most common first:", failures(index),
                         "The originals on the hand-built inputs:", original_on_hand_inputs(corpus, manifest, names)])
    text += "\n"
    print(text)
    Path(args.json or corpus / "verify_results.json").write_text(json.dumps(
        {n: {lv: {k: v for k, v in r.items() if k != "report"} | {"verification": (r.get("report") or {}).get("verification")}
             for lv, r in by.items()} for n, by in results.items()}, indent=1, default=str))
    if args.markdown:
        Path(args.markdown).write_text(text)


if __name__ == "__main__":
    main()
