"""Default-flag ``graphtool optimize`` on the real-model corpus: does verification work?

Each model is optimized twice (level 1, and level 2 --target ort) with no flags at all, each in its
own process; the JSON report says how inputs were found, how many sets ran, which If branches they
reached, which rewrites stayed unverified, and how long discovery took. A model that fails must
end in the one-line message (never "internal error"); ``RESCUE`` lists the flags that make such a
model verify, and they are tried too.

    python bench/verify_corpus.py [--only a,b] [--markdown]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
import corpus  # noqa: E402

GRAPHTOOL = os.path.join(os.path.dirname(sys.executable), "graphtool")
RESCUE: dict[str, list[str]] = {}  # model -> flags that make a failing model verify


def run(path: str, flags: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out.onnx")
        start = time.perf_counter()
        proc = subprocess.run([GRAPHTOOL, "optimize", path, "-o", out, "--json", *flags],
                              capture_output=True, text=True, timeout=1200)
        seconds = time.perf_counter() - start
    row: dict = {"rc": proc.returncode, "seconds": seconds, "stderr": proc.stderr.strip().splitlines()[-1:] or [""]}
    try:
        row["report"] = json.loads(proc.stdout) if proc.stdout.strip() else None
    except json.JSONDecodeError:
        row["report"] = None
    return row


def describe(row: dict) -> dict:
    rep = row.get("report") or {}
    ver = rep.get("verification") or {}
    found = ver.get("inputs_found") or {}
    cov = ver.get("coverage") or {}
    sites = [s for s in cov.get("sites", []) if s.get("instrumented")]
    both = sum(1 for s in sites if s["then"] and s["else"])
    none = sum(1 for s in sites if not (s["then"] or s["else"]))
    return {
        "ok": row["rc"] == 0 and bool(ver.get("ok")),
        "how": found.get("how", ""),
        "attempts": found.get("attempts", 0),
        "discovery_s": found.get("extra_seconds", 0.0),
        "sets": len(ver.get("input_sets") or []),
        "ifs": f"{len(sites)}: {both} both / {len(sites) - both - none} one / {none} none" if sites else "-",
        "unverified": len(ver.get("unverified") or []),
        "error": "" if row["rc"] == 0 else row["stderr"][0][:160],
        "internal": "internal error" in row["stderr"][0],
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    models = corpus.models(args.only.split(",") if args.only else None)
    results = []
    for m in models:
        entry = {"name": m["name"], "producer": m["producer"]}
        for key, flags in (("l1", []), ("l2", ["--level", "2", "--target", "ort"])):
            d = describe(run(m["path"], flags))
            if not d["ok"] and m["name"] in RESCUE:
                d["rescued"] = describe(run(m["path"], flags + RESCUE[m["name"]]))["ok"]
            entry[key] = d
        results.append(entry)
        print(json.dumps(entry), flush=True)
    n = len(results)
    for key in ("l1", "l2"):
        ok = sum(r[key]["ok"] for r in results)
        times = [r[key]["discovery_s"] for r in results]
        print(f"{key}: verified {ok}/{n} ({100 * ok / n:.0f}%); internal errors "
              f"{sum(r[key]['internal'] for r in results)}; discovery s median {statistics.median(times):.3f} "
              f"worst {max(times):.3f} (extra, failed attempts); first attempt succeeded on {sum(r[key]['attempts'] == 1 for r in results)}")
    if args.markdown:
        print("\n| model | producer | inputs found by | attempts | sets | If coverage (then+else / one / none) | "
              "unverified | L1 | L2 ort | discovery s |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for r in results:
            a, b = r["l1"], r["l2"]
            how = a["how"].replace("|", "/")
            print(f"| {r['name']} | {r['producer']} | {how} | {a['attempts']} | {a['sets']} | {a['ifs']} | "
                  f"{a['unverified']} / {b['unverified']} | {'✔' if a['ok'] else a['error']} | "
                  f"{'✔' if b['ok'] else b['error']} | {a['discovery_s']:.2f} |")


if __name__ == "__main__":
    main()
