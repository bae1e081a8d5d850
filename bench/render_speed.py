"""How long the pictures take: the diff of light_resnet50 vs its level-1 result as SVG, and the
whole of light_densenet121 (1,746 nodes) as SVG — each as a real CLI run in a fresh process.

    python bench/render_speed.py [--out bench/out]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))


def timed(*args: str) -> tuple[float, int]:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "graphtool", *args], capture_output=True, text=True)
    return time.perf_counter() - start, proc.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(HERE, "out"))
    out = parser.parse_args().out
    os.makedirs(out, exist_ok=True)
    from graphtool import io
    from graphtool.optimize import optimize
    from tests.conftest import light_model

    resnet, densenet = light_model("resnet50"), light_model("densenet121")
    level1 = os.path.join(out, "resnet50_l1.onnx")
    io.save(optimize(io.load(resnet), level=1)[0], level1)
    rows = [
        ("diff resnet50 vs level 1 → SVG", *timed("diff", resnet, level1, "-o", os.path.join(out, "resnet50_diff.svg"))),
        ("viz densenet121 → SVG", *timed("viz", densenet, "-o", os.path.join(out, "densenet121.svg"))),
        ("viz densenet121 → HTML", *timed("viz", densenet, "-o", os.path.join(out, "densenet121.html"))),
        ("viz densenet121 --max-nodes 500 → SVG", *timed("viz", densenet, "--max-nodes", "500", "-o", os.path.join(out, "densenet121_500.svg"))),
    ]
    print("| what | seconds (incl. process start) | exit |\n|---|---:|---:|")
    for name, seconds, code in rows:
        print(f"| {name} | {seconds:.2f} | {code} |")


if __name__ == "__main__":
    main()
