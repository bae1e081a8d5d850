"""Level 2 at 100k / 200k nodes: linear, and no slower than another checkout, in the same run.

A rewrite engine change (issue 15: fusions as rules) must not make ``optimize --level 2`` cost
more than the code it replaced. This times ``optimize(level=2, target=T)`` on the generated graphs
of ``bench/scale.py`` (``bench/gen_models.py big_graph``) for this checkout and for ``--against``
(e.g. a ``git worktree add /tmp/old <commit>``), each call in a fresh process that imports that
checkout's passes (``bench/scale.py``'s worker), interleaved old/new and repeated (best CPU seconds kept), so the shared
machine's load falls on both alike.

    git worktree add /tmp/old d41ba8f
    python bench/scale_level2.py --against /tmp/old [--sizes 100000,200000] [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from scale import LIMIT, model_path, run_worker  # noqa: E402  (the same worker and generated files)


def cpu(checkout: str | None, model: str, target: str) -> float:
    """optimize --level 2 CPU seconds, in a fresh process running ``checkout``'s code (None: this one)."""
    step = run_worker("optimize", model, argparse.Namespace(level=2, target=target, repo=checkout))
    return step["optimize --level 2"]["cpu"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", required=False, help="another checkout to compare with (a git worktree)")
    ap.add_argument("--sizes", default="100000,200000")
    ap.add_argument("--targets", default="ort,onnx")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    checkouts = {"this": None, **({"against": os.path.abspath(args.against)} if args.against else {})}
    best: dict[tuple, float] = {}
    for _ in range(args.rounds):
        for size in sizes:
            model = model_path(size)
            for target in args.targets.split(","):
                for label, path in checkouts.items():
                    key = (label, target, size)
                    best[key] = min(best.get(key, float("inf")), cpu(path, model, target))
    print(f"| checkout | target | {' | '.join(f'{s:,} nodes (CPU s)' for s in sizes)} | ratio | linear (<= {LIMIT}) |")
    print("|---|---|" + "---|" * (len(sizes) + 2))
    for label in checkouts:
        for target in args.targets.split(","):
            cells = [best[(label, target, s)] for s in sizes]
            ratio = cells[-1] / cells[0]
            print(f"| {label} | {target} | {' | '.join(f'{c:.1f}' for c in cells)} | {ratio:.2f} | "
                  f"{'ok' if ratio <= LIMIT else 'NO'} |")
    if args.against:
        for target in args.targets.split(","):
            print(f"this / against, {target}: " + ", ".join(
                f"{s:,}: {best[('this', target, s)] / best[('against', target, s)]:.2f}" for s in sizes))


if __name__ == "__main__":
    main()
