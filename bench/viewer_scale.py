"""The layered viewer at scale, in a real browser: ``graphtool viz MODEL -o page.html`` (a fresh
process) on a 50k-node chain, a 1M-node chain (``bench/gen_models.py``'s residual stack) and an
LLM-size decoder: a real ``torch.onnx.export`` (dynamo) of a 32-layer Llama with a KV cache and
random weights, made by ``bench/viewer_decoder.py`` in the torch venv (this script only reads
it), then the page in headless chromium (Debian's ``chromium`` through Playwright, as the
tests): file size, first paint, interactive (the page's ``data-ready`` stamp: its first screen
laid out and drawn), and a search for the model's last op (by name) that must open the layers
around it and put it on screen. Models, pages and screenshots go to ``--out`` (never committed).

    /work/cache/torchvenv/bin/python bench/viewer_decoder.py --layers 32 --out /work/cache/viewer
    python bench/viewer_scale.py [--sizes 50000,1000000] [--decoders /work/cache/viewer/llama32_dynamo.onnx]
        [--out /work/cache/viewer]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import time

import onnx

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def write_page(model: str, page: str) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "graphtool", "viz", model, "-o", page], capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"viz {model} failed: {done.stderr.strip()}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


IN_VIEW = """name => {
  var k = graphtool.find(name), e = document.getElementById('n' + k), v = document.getElementById('view');
  if (!e) { return false; }
  var r = e.getBoundingClientRect(), w = v.getBoundingClientRect();
  return r.width > 0 && r.left >= w.left && r.right <= w.right && r.top >= w.top && r.bottom <= w.bottom;
}"""


def open_page(browser, page_path: str, last: str, shots: str) -> dict[str, float | bool | str]:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda err: errors.append(str(err)))
    start = time.perf_counter()
    page.goto("file://" + page_path, wait_until="commit", timeout=600_000)
    page.wait_for_selector("body[data-ready]", timeout=600_000)
    wall = time.perf_counter() - start
    paint = page.evaluate("(performance.getEntriesByType('paint').filter(e => e.name === 'first-contentful-paint')[0] "
                          "|| {startTime: NaN}).startTime")
    ready = float(page.get_attribute("body", "data-ready"))
    page.screenshot(path=shots + "_open.png")
    before = page.evaluate(IN_VIEW, last)
    start = time.perf_counter()
    page.keyboard.press("/")
    page.keyboard.type(last)
    page.keyboard.press("Enter")
    page.wait_for_selector("g.node.lit", timeout=600_000)
    found = time.perf_counter() - start
    shown = page.evaluate(IN_VIEW, last)
    panel = page.text_content("#details") or ""
    page.screenshot(path=shots + "_search.png")
    out = {"wall": wall, "paint": paint / 1000, "ready": ready / 1000, "search": found, "before": before,
           "shown": shown and last in panel, "hits": page.text_content("#hits"), "errors": "; ".join(errors)}
    context.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="50000,1000000")
    parser.add_argument("--decoders", default="/work/cache/viewer/llama32_dynamo.onnx",
                        help="comma-separated exports made by bench/viewer_decoder.py")
    parser.add_argument("--out", default="/work/cache/viewer")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    from playwright.sync_api import sync_playwright

    import gen_models

    models = []
    for n in (int(s) for s in args.sizes.split(",") if s):
        path = os.path.join(args.out, f"chain_{n}.onnx")
        if not os.path.exists(path):
            onnx.save(gen_models.big_graph(n), path)
        proto = onnx.load(path, load_external_data=False)
        models.append((f"chain {n:,} nodes", path, proto.graph.node[-1].name))
    for path in (p for p in args.decoders.split(",") if p):
        if not os.path.exists(path):
            raise SystemExit(f"{path}: make it first with the torch venv: bench/viewer_decoder.py")
        proto = onnx.load(path, load_external_data=False)
        layers = sum(1 for t in proto.graph.input if t.name.startswith("past_key_values.") and t.name.endswith(".key"))
        models.append((f"{os.path.basename(path)[:-5]}: {layers} layers, KV cache ({len(proto.graph.node):,} nodes)",
                       path, proto.graph.node[-1].name))
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("needs chromium (apt-get install -y chromium)")
    rows = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
        for label, model, last in models:
            page = os.path.splitext(model)[0] + ".html"
            write = write_page(model, page)
            opened = open_page(browser, page, last, os.path.splitext(page)[0])
            rows.append((label, last, os.path.getsize(page), write, opened))
            print(label, opened, flush=True)
        browser.close()
    print(f"\nload average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; seconds\n")
    print("| model | page size | write (wall / CPU) | first paint | interactive (stamp / wall) | search last op | "
          "last op on screen + panel |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for label, last, size, (wall, cpu), o in rows:
        print(f"| {label} | {size / 1e6:.1f} MB | {wall:.1f} / {cpu:.1f} | {o['paint']:.2f} | {o['ready']:.2f} / "
              f"{o['wall']:.2f} | {o['search']:.2f} ({o['hits']}) | {'yes' if o['shown'] else 'NO'} `{last}`"
              f"{' errors: ' + str(o['errors']) if o['errors'] else ''} |")


if __name__ == "__main__":
    main()
