"""``python -m graphtool`` and the ``graphtool`` command: the status line starts before the CLI's
imports (seconds on a loaded machine), then the click group runs."""

from __future__ import annotations

import sys


def run() -> None:
    """The console entry point: progress first (on a terminal), then ``graphtool.cli.main``."""
    from graphtool import progress

    progress.start_for_argv(sys.argv[1:])
    from graphtool.cli import main

    main()


if __name__ == "__main__":
    run()
