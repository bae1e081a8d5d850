"""The README's picture: the HTML page of a real diff, as headless chromium shows it.

light_resnet50 (from the onnx wheel's backend data) against its level-2 optimization for
onnxruntime, written by ``graphtool diff A B -o diff.html`` — the tool itself — then opened in
Debian's chromium (driven by Playwright, no browser download), the largest summary group
that changed nodes clicked, then its first changed node, so the picture shows the lit group and
the panel's before/after of that node. ``make readme-picture`` runs this.

    python bench/readme_picture.py [docs/diff.png]
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

MAX_BYTES = 300_000  # the README stays light


def main() -> None:
    out = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "docs", "diff.png"))
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("needs chromium (apt-get install -y chromium)")
    from playwright.sync_api import sync_playwright

    from tests.conftest import light_model

    with tempfile.TemporaryDirectory() as tmp:
        resnet = light_model("resnet50")
        level2, page_path = os.path.join(tmp, "resnet50_level2.onnx"), os.path.join(tmp, "diff.html")
        gt = [sys.executable, "-m", "graphtool"]
        subprocess.run([*gt, "optimize", resnet, "-o", level2, "--level", "2", "--target", "ort"],
                       check=True, capture_output=True)
        done = subprocess.run([*gt, "diff", resnet, level2, "-o", page_path], capture_output=True, text=True)
        if done.returncode not in (0, 1):
            raise SystemExit(done.stderr)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page(viewport={"width": 1280, "height": 720})
            page.goto("file://" + page_path)
            page.wait_for_selector("body[data-ready]")
            # the largest group that changed nodes (not only removed ones): its first changed node
            # shows the before/after panel
            data = page.evaluate("JSON.parse(document.getElementById('gt-data').textContent)")
            changed = {k for k, v in data["info"].items() if v.get("change") == "changed"}
            group = next(k for k, g in enumerate(data["groups"]) if changed & set(g["ids"]))
            page.click(f'#groups li[data-group="{group}"]')
            first = page.evaluate(
                "ids => Array.from(document.querySelectorAll('#details tr[data-node]'))"
                ".map(tr => tr.getAttribute('data-node')).find(id => ids.includes(id))", sorted(changed))
            page.evaluate("id => graphtool.focus(id)", first)
            os.makedirs(os.path.dirname(out), exist_ok=True)
            page.screenshot(path=out)
            browser.close()
    size = os.path.getsize(out)
    print(f"wrote {os.path.relpath(out, ROOT)} ({size / 1000:.0f} KB)")
    if size > MAX_BYTES:
        raise SystemExit(f"{out}: {size} bytes, over {MAX_BYTES}: make the viewport smaller")


if __name__ == "__main__":
    main()
