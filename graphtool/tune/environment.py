"""The process environment a tuned model runs fastest in: transparent huge pages for malloc.

onnxruntime keeps a model's weights (and MLAS's prepacked copies of them) in memory it gets from
malloc. Where the kernel hands out transparent huge pages only on request (``madvise``, the
default of most distributions) glibc's malloc never asks, so every weight sits on 4 KiB pages and
a decode step, which streams all of them, pays a TLB miss every 4 KiB. Measured on the 6-layer
Llama of bench/decoder_latency.py (81 MB of weights, one thread, a shared 2-core host): a decode
step took 20-35 ms CPU with glibc's defaults and 8.0-8.6 ms with ``GLIBC_TUNABLES=
glibc.malloc.hugetlb=1`` (malloc asks for huge pages), and six sessions of one file sat 22-62 %
apart without it, 5-7 % with it.

An environment variable acts when a process starts, so it cannot be tried on a session: each
environment is measured in fresh child processes (``python -m graphtool.tune.environment``, which
opens a model with its ``session.json``, if any, and times its steps in CPU time), in turns
(as is, huge pages, as is, ...). Huge pages are recommended only when every process with them was
faster than every process without (3 against 3: one chance in 20 were they alike) by at least
``MIN_GAIN``. tune decides it first, on the original, and then searches in the environment it
chose (graphtool.tune.child); ``session.json`` carries the variable under ``environment`` and the
report says what it bought. It is a recommendation for the user's serving process: graphtool
cannot set it for a process that has started.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HUGE_PAGES = {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}
PROCESSES = 3  # per environment, in turns
RUNS = 20  # timed runs of every step per process (after 3 untimed)
# tune's probe of the original, before its search: a 6-layer decoder's 2.5x shows in any run, and
# the search's budget is what is left (BERT-base, 0.3 s a run: ~35 s for the six processes)
FIRST_PROBE_RUNS = 8
MIN_GAIN = 1.05
THP = "/sys/kernel/mm/transparent_hugepage/enabled"


def huge_pages_applicable() -> str | None:
    """None when asking for huge pages can change anything here, else why not (said in the report)."""
    if not sys.platform.startswith("linux"):
        return "not Linux"
    import platform

    if platform.libc_ver()[0] != "glibc":
        return "not glibc"
    if "hugetlb" in os.environ.get("GLIBC_TUNABLES", ""):
        return "GLIBC_TUNABLES already sets glibc.malloc.hugetlb"
    try:
        with open(THP, encoding="ascii") as handle:
            mode = handle.read()
    except OSError:
        return "no transparent huge pages in this kernel"
    if "[madvise]" not in mode:
        return "transparent huge pages are " + ("always on" if "[always]" in mode else "off") + " here"
    return None


def measure(model_path: str, steps: dict[str, dict[str, np.ndarray]], envs: dict[str, dict[str, str]],
            processes: int = PROCESSES, runs: int = RUNS, timeout: float = 300.0,
            threads: int | None = None, seconds: float = float("inf")) -> dict[str, list[dict[str, float]]]:
    """Environment label → one {step: median CPU seconds} per child process, the environments in turns.
    ``threads`` None: the model opens with its session.json; else at onnxruntime's defaults with
    that many intra-op threads (0: one per core), as tune's baseline runs the original. Raises
    ``TooSlow`` after a turn when all of them would not fit in ``seconds``."""
    with tempfile.TemporaryDirectory(prefix="graphtool-env-") as work:
        feeds_path = os.path.join(work, "steps.npz")
        np.savez(feeds_path, **{f"{step}/{name}": value for step, feeds in steps.items()
                                for name, value in feeds.items()})
        out: dict[str, list[dict[str, float]]] = {label: [] for label in envs}
        start = time.perf_counter()
        for turn in range(processes):
            if turn:
                need = (time.perf_counter() - start) / turn * processes
                if need > seconds:
                    raise TooSlow(need)
            for label, extra in envs.items():
                cmd = [sys.executable, "-m", "graphtool.tune.environment", model_path, feeds_path, str(runs)]
                cmd += [] if threads is None else [str(threads)]
                # TMPDIR: onnxruntime leaves a session-id file there; this folder is removed after
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                                      env={**without_huge_pages(os.environ), **extra, "TMPDIR": work})
                if proc.returncode != 0:
                    raise RuntimeError(proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "probe failed")
                out[label].append(json.loads(proc.stdout.strip().splitlines()[-1]))
        return out


class TooSlow(Exception):
    """The probe's processes would take longer than they may (``args[0]``: the seconds, estimated)."""


def without_huge_pages(env: os._Environ | dict[str, str]) -> dict[str, str]:
    """``env`` less a ``glibc.malloc.hugetlb`` tunable (tune's own search may run with it: "as is"
    must still mean as is)."""
    out = dict(env)
    kept = [t for t in out.get("GLIBC_TUNABLES", "").split(":") if t and not t.startswith("glibc.malloc.hugetlb")]
    if kept:
        out["GLIBC_TUNABLES"] = ":".join(kept)
    else:
        out.pop("GLIBC_TUNABLES", None)
    return out


def decide(times: dict[str, list[dict[str, float]]], step: str) -> tuple[bool, float]:
    """(huge pages recommended, the gain: median of the as-is processes over huge pages') on ``step``."""
    plain = [t[step] for t in times["as is"]]
    huge = [t[step] for t in times["huge pages"]]
    gain = statistics.median(plain) / statistics.median(huge)
    return max(huge) < min(plain) and gain >= MIN_GAIN, gain


def recommend(model_path: str, steps: dict[str, dict[str, np.ndarray]], pick: str,
              seconds_left: float = float("inf"), run_seconds: float = 0.0,
              runs: int = RUNS, threads: int | None = None) -> tuple[dict[str, str], str]:
    """(the environment to run ``model_path`` in — {} for as is —, the report's finding). Tried only
    when its processes (a second to start each, ``run_seconds`` per timed run) fit in ``seconds_left``."""
    why_not = huge_pages_applicable()
    if why_not:
        return {}, f"environment: huge pages for malloc not tried ({why_not})"
    cost = 2 * PROCESSES * (1.0 + (runs + 3) * run_seconds)
    if cost > seconds_left:
        return {}, (f"environment: huge pages for malloc not tried (~{cost:.0f} s of child processes, "
                    f"{max(0.0, seconds_left):.0f} s of the budget left; a larger --budget leaves time for it)")
    start = time.perf_counter()
    try:
        times = measure(model_path, steps, {"as is": {}, "huge pages": HUGE_PAGES}, runs=runs, threads=threads,
                        seconds=seconds_left)
    except TooSlow as slow:
        return {}, (f"environment: huge pages for malloc not tried (its processes would take ~{slow.args[0]:.0f} s, "
                    f"{seconds_left:.0f} s are its share of the budget; a larger --budget leaves time for it)")
    except (RuntimeError, subprocess.TimeoutExpired, OSError) as err:
        return {}, f"environment: huge pages for malloc not measured ({str(err)[:160]})"
    took = time.perf_counter() - start
    yes, gain = decide(times, pick)
    each = "; ".join(f"{label} " + ", ".join(f"{statistics.median(t[s] for t in runs) * 1000:.2f} ms {s}"
                                             for s in steps) for label, runs in times.items())
    said = f"{PROCESSES} fresh processes each, in turns, {took:.0f} s: {each}"
    if yes:
        return dict(HUGE_PAGES), (f"environment: run it with {as_shell(HUGE_PAGES)} (malloc asks the kernel for "
                                  f"transparent huge pages): {gain:.2f}x on the {pick} step, every process faster "
                                  f"({said}); session.json records it under \"environment\"")
    return {}, f"environment: huge pages for malloc measured {gain:.2f}x on the {pick} step, not a clear win ({said})"


def as_shell(env: dict[str, str]) -> str:
    """``{"A": "1"}`` → ``A=1``: how a shell sets the variables for the process it starts."""
    return " ".join(f"{k}={v}" for k, v in env.items())


def _probe(model_path: str, feeds_path: str, runs: int, threads: int | None) -> dict[str, float]:
    """In the child: open the model (with its session.json, or at ORT's defaults with ``threads``),
    time each step (CPU time)."""
    from graphtool.runtime import session_for, tuned_session

    data = np.load(feeds_path)
    steps: dict[str, dict[str, np.ndarray]] = {}
    for key in data.files:
        step, name = key.split("/", 1)
        steps.setdefault(step, {})[name] = data[key]
    session = session_for(model_path) if threads is None else tuned_session(model_path, "all", (), threads)
    wanted = {i.name for i in session.get_inputs()}
    steps = {s: {k: v for k, v in f.items() if k in wanted} for s, f in steps.items()}
    for _ in range(3):
        for feeds in steps.values():
            session.run(None, feeds)
    took: dict[str, list[float]] = {s: [] for s in steps}
    for _ in range(runs):
        for step, feeds in steps.items():
            begin = time.process_time()
            session.run(None, feeds)
            took[step].append(time.process_time() - begin)
    return {s: statistics.median(t) for s, t in took.items()}


def main(argv: list[str]) -> int:
    model_path, feeds_path, runs = argv[0], argv[1], int(argv[2])
    threads = int(argv[3]) if len(argv) > 3 else None
    print(json.dumps(_probe(model_path, feeds_path, runs, threads)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
