"""How fast the HTML page is, end to end: writing it (``graphtool viz MODEL -o x.html`` as a fresh
process) and opening it in headless chromium until it is interactive (its script has laid out the
view, the overview and the search index, and a frame was drawn), for light_densenet121 (1,746
nodes) and for the diff of light_resnet50 against its level-2 (ORT target) optimization.

    python bench/page_speed.py [--runs 5] [--out bench/out]

Needs Debian's ``chromium`` and the ``playwright`` package (the ``test`` extra); no browser is
downloaded. Medians of ``--runs`` runs; the machine's other load shows in the spread (min–max).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))


def timed_cli(*args: str) -> tuple[float, float]:
    """(wall, CPU) seconds of one CLI run; CPU counts the process and its ``dot`` child, so it
    stays comparable when other work shares the machine's cores."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "graphtool", *args], capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"graphtool {' '.join(args)} failed: {proc.stderr.strip()}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return elapsed, cpu


def open_times(browser, path: str, runs: int, query: str | None) -> dict[str, list[float]]:
    """Per run: wall time from navigation to ready, the page's own ready stamp, and one search."""
    out: dict[str, list[float]] = {"wall": [], "ready": [], "search": []}
    for _ in range(runs):
        context = browser.new_context(viewport={"width": 1400, "height": 900})
        page = context.new_page()
        start = time.perf_counter()
        page.goto("file://" + path, wait_until="commit")
        page.wait_for_selector("body[data-ready]", timeout=60_000)
        out["wall"].append(time.perf_counter() - start)
        out["ready"].append(float(page.get_attribute("body", "data-ready")) / 1000)
        if query:
            start = time.perf_counter()
            page.keyboard.press("/")
            page.keyboard.type(query)
            page.keyboard.press("Enter")
            page.wait_for_selector("g.node.lit")
            out["search"].append(time.perf_counter() - start)
        context.close()
    return out


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}–{max(values):.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--out", default=os.path.join(HERE, "out"))
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    from playwright.sync_api import sync_playwright

    from graphtool import io
    from graphtool.optimize import optimize
    from tests.conftest import light_model

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("needs chromium (apt-get install -y chromium)")
    densenet, resnet = light_model("densenet121"), light_model("resnet50")
    level2 = os.path.join(args.out, "resnet50_l2_ort.onnx")
    io.save(optimize(io.load(resnet), level=2, target="ort")[0], level2)
    pages = {
        "viz light_densenet121 (1,746 nodes)": (("viz", densenet), "densenet121.html", "r901"),
        "diff light_resnet50 vs level 2 ORT": (("diff", resnet, level2), "resnet50_l2_diff.html", None),
    }
    rows = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
        for name, (cmd, filename, query) in pages.items():
            path = os.path.join(args.out, filename)
            write = [timed_cli(*cmd, "-o", path) for _ in range(args.runs)]
            opened = open_times(browser, path, args.runs, query)
            rows.append((name, os.path.getsize(path), write, opened))
        browser.close()
    load = os.getloadavg()[0]
    print(f"median (min–max) of {args.runs} runs, seconds; load average {load:.1f} on {os.cpu_count()} cores\n")
    print("| page | size | write, wall (fresh process) | write, CPU | open → interactive (wall) "
          "| page's own ready stamp | search → node lit |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, size, write, opened in rows:
        search = spread(opened["search"]) if opened["search"] else "—"
        print(f"| {name} | {size / 1e6:.1f} MB | {spread([w for w, _ in write])} | {spread([c for _, c in write])} | "
              f"{spread(opened['wall'])} | {spread(opened['ready'])} | {search} |")


if __name__ == "__main__":
    main()
