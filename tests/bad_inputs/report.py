"""Print the bad-input table (markdown): case × command → exit code and the stderr message.

    .venv/bin/python -m tests.bad_inputs.report [--slow] [--only CASE,...] [--commands inspect,...]

Each cell is ``exit`` plus the first 80 characters of the first stderr line; a cell is marked
**FAIL** with the reason when the run breaks an expectation of ``make_bad_inputs.CASES``
(exit code, one stderr line, no traceback, no file left, no open outside the model's folder).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from tests.bad_inputs.harness import available_commands, problems, run_command
from tests.bad_inputs.make_bad_inputs import CASES, MODEL


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;").replace("\n", " ")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slow", action="store_true", help="include slow cases (the million-node model)")
    parser.add_argument("--only", help="comma-separated case names")
    parser.add_argument("--commands", help="comma-separated commands")
    parser.add_argument("--compact", action="store_true",
                        help="one column per command with the exit code, then each distinct message once")
    args = parser.parse_args(argv)
    commands = available_commands()
    if args.commands:
        commands = [c for c in commands if c in args.commands.split(",")]
    cases = [c for c in CASES if (args.slow or not c.slow) and (not args.only or c.name in args.only.split(","))]
    root = Path(tempfile.mkdtemp(prefix="graphtool-bad-inputs-"))
    failures, opened_outside, runs = 0, 0, 0
    extra = ["stderr (first 80 chars; per command when they differ)"] if args.compact else []
    print("| case | " + " | ".join(commands + extra) + " |")
    print("|---|" + "---|" * (len(commands) + len(extra)))
    start = time.perf_counter()
    for case in cases:
        cells, messages = [], {}
        for command in commands:
            if not case.runs(command):
                cells.append("(skipped)")
                continue
            run = run_command(case, command, root)
            runs += 1
            opened_outside += len(run.outside)
            bad = problems(case, run)
            failures += bool(bad)
            message = run.message.replace(str(root / case.name / MODEL), MODEL).removeprefix("graphtool: ")
            text = f"{run.exit_code} {message[:80]}".strip()
            fail = f" **FAIL: {'; '.join(bad)}**" if bad else ""
            if args.compact:
                cells.append(f"{run.exit_code}{fail}")
                if message:
                    messages.setdefault(message[:80], []).append(command)
            else:
                cells.append(_cell(text) + fail)
        if args.compact:
            parts = [m if len(messages) == 1 else f"{'/'.join(cmds)}: {m}" for m, cmds in messages.items()]
            cells.append(_cell(" · ".join(parts)))
        print(f"| {case.name} | " + " | ".join(cells) + " |", flush=True)
    print()
    print(f"{len(cases)} cases × {len(commands)} commands: {runs} runs in {time.perf_counter() - start:.0f} s, "
          f"{failures} failing, {opened_outside} files opened outside the model's folder")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
