"""Node counts on today's decoder exports: graphtool ``--level 2 --target ort`` against every peer.

    python bench/decoder_nodes.py [/work/cache/today] [model ...] [--json OUT]

Issue 33's must-show 2 asks for node counts at or below every peer on every row of the decoder
corpus (bench/today_corpus.py: Llama/Qwen2/Qwen3/Phi-3/Mistral/GPT-2 with a KV cache, the BART/
T5/Whisper decoders, fp16 and int8 variants, both torch exporters and transformers' own). Each
tool runs in its own process (bench/peers.py): graphtool level 2 target ort, onnxruntime at
extended (its saved optimized graph), onnxsim, onnxslim, onnxscript's ``optimize_for_ort``, and
onnxruntime's transformers optimizer with every ``model_type`` it has that may fit the family
(its own type where it has one — qwen3, phi, gpt2, bart, t5 — and gpt2, the generic decoder;
the fewest nodes among its runs whose outputs hold is its count). Every output is checked in
onnxruntime against the original on the corpus recipe's inputs (prefill, past 8 / new 4, a
decode step; bench/decoder_attention.build_inputs): a peer whose output differs or fails is
listed with its count but never counted as below graphtool. Counts include subgraph nodes.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from decoder_attention import SETS, build_inputs  # noqa: E402
from peers import measure  # noqa: E402

PEERS = ["ort-extended", "onnxsim", "onnxslim", "onnxscript-ort"]
OWN_TYPE = {"qwen3": "qwen3", "phi3": "phi", "gpt2": "gpt2", "bart": "bart", "t5": "t5", "whisper": "bart",
            # --set unseen2: the optimizer's own type where it has one for the family
            "phi35": "phi", "phi4mini_longrope": "phi", "mbart": "bart", "marian": "bart", "pegasus": "bart", "mt5": "t5"}
TOLERANCE = 1e-3


def check(src: str, out: str, recipe: dict) -> str:
    """'ok' when ``out`` gives the original's outputs on every recipe set the original runs, else why not."""
    import onnx

    from graphtool.runtime import make_session

    proto = onnx.load(src, load_external_data=False)
    try:
        a, b = make_session(src), make_session(out)
    except Exception as err:  # noqa: BLE001 - reported in the table
        return f"does not load: {str(err).splitlines()[0][:60]}"
    worst = 0.0
    for label, sizes in SETS:
        if label == "dec5/enc12" and recipe["kind"] != "seq2seq_decoder":
            continue
        feeds = build_inputs(proto, recipe, **sizes)
        try:
            want = a.run(None, feeds)
        except Exception:  # noqa: BLE001 - the export itself cannot run this set
            continue
        try:
            names = {i.name for i in b.get_inputs()}
            got = b.run(None, {k: v for k, v in feeds.items() if k in names})
        except Exception as err:  # noqa: BLE001
            return f"{label}: fails ({str(err).splitlines()[0][:50]})"
        for x, y in zip(want, got):
            x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
            if x.shape != y.shape:
                return f"{label}: shape {y.shape} vs {x.shape}"
            worst = max(worst, float(np.max(np.abs(x - y))) / max(1.0, float(np.max(np.abs(x)))) if x.size else 0.0)
    return "ok" if worst <= TOLERANCE else f"differs {worst:.1e}"


def run_model(name: str, path: str, entry: dict, work: str) -> dict:
    import onnx

    row: dict = {"model": name, "original": len(onnx.load(path, load_external_data=False).graph.node), "tools": {}}
    tools = ["graphtool"] + PEERS + [f"ort-transformers:{t}" for t in
                                     dict.fromkeys([OWN_TYPE.get(entry["family"], "gpt2"), "gpt2"])]
    for tool in tools:
        out = os.path.join(work, f"{name}.{tool.replace(':', '_')}.onnx")
        got = measure(tool, path, out, level=2, target="ort", timeout=900)
        if "error" in got:
            row["tools"][tool] = {"nodes": None, "check": f"error: {got['error'][:70]}"}
        else:
            row["tools"][tool] = {"nodes": got["nodes"], "check": check(path, out, entry["recipe"]),
                                  "seconds": round(got["seconds"], 1)}
        print(f"  {name} {tool}: {row['tools'][tool]}", file=sys.stderr, flush=True)
    # onnxruntime's transformers optimizer: its best model_type among the runs whose outputs hold
    ort_t = {t: r for t, r in row["tools"].items() if t.startswith("ort-transformers")}
    good = {t: r for t, r in ort_t.items() if r["nodes"] is not None and r["check"] == "ok"}
    pick = min(good, key=lambda t: good[t]["nodes"]) if good else next(iter(ort_t))
    row["tools"]["ort-transformers"] = {**ort_t[pick], "type": pick.split(":", 1)[1]}
    return row


def verdict(row: dict) -> tuple[str, list[str]]:
    """('at or below every peer' | 'above …', the peers below graphtool with outputs that hold)."""
    ours = row["tools"]["graphtool"]
    if ours["nodes"] is None or ours["check"] != "ok":
        return f"graphtool {ours['check']}", []
    below = [f"{t} {r['nodes']}" for t, r in row["tools"].items()
             if t in PEERS + ["ort-transformers"] and r["nodes"] is not None and r["check"] == "ok"
             and r["nodes"] < ours["nodes"]]
    return ("at or below every peer" if not below else "above " + ", ".join(below)), below


def table(rows: list[dict]) -> str:
    cols = ["graphtool"] + PEERS + ["ort-transformers"]
    head = "| model | original | " + " | ".join(c if c != "graphtool" else "graphtool L2 ort" for c in cols) + " | verdict |"
    lines = [head, "|" + "---|" * (len(cols) + 3)]
    for row in rows:
        cells = []
        for c in cols:
            r = row["tools"][c]
            text = "-" if r["nodes"] is None else str(r["nodes"])
            if c == "ort-transformers" and r.get("type"):
                text += f" ({r['type']})"
            if r["check"] != "ok":
                text += f" ✗ {r['check']}"
            cells.append(text)
        lines.append(f"| {row['model']} | {row['original']} | " + " | ".join(cells) + f" | {verdict(row)[0]} |")
    held = sum(1 for r in rows if verdict(r)[0] == "at or below every peer")
    lines.append("")
    lines.append(f"graphtool at or below every peer (peers whose outputs hold): {held}/{len(rows)} rows. "
                 "✗: the output differs from the original's or fails (that count never beats graphtool).")
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    out_json = None
    if "--json" in argv:
        i = argv.index("--json")
        out_json = argv[i + 1]
        argv = argv[:i] + argv[i + 2:]
    folder = argv[0] if argv and os.path.isdir(argv[0]) else "/work/cache/today"
    wanted = [a for a in argv if not os.path.isdir(a)]
    manifest = json.load(open(os.path.join(folder, "manifest.json")))["models"]
    rows = []
    with tempfile.TemporaryDirectory(prefix="decoder-nodes-") as work:
        for name, entry in manifest.items():
            if wanted and name not in wanted or not entry.get("ok"):
                continue
            rows.append(run_model(name, os.path.join(folder, entry["file"]), entry, work))
            if out_json:
                with open(out_json, "w") as handle:
                    json.dump(rows, handle, indent=1)
    print(table(rows))


if __name__ == "__main__":
    main(sys.argv[1:])
