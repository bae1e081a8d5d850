"""Progress on stderr for long work — a tqdm bar only when stderr is a terminal.

Scripts, CI and ``--json`` runs stay quiet: the bar appears only for a person watching.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Callable, Iterator


def wanted(enabled: bool = True) -> bool:
    return enabled and sys.stderr.isatty()


@contextlib.contextmanager
def progress_steps(label: str, total: int | None = None, enabled: bool = True) -> Iterator[Callable[[str], None]]:
    """A callback ``step(name)`` that advances a bar (or does nothing when not on a TTY)."""
    if not wanted(enabled):
        yield lambda _name: None
        return
    from tqdm import tqdm

    bar = tqdm(total=total, desc=label, unit="step", file=sys.stderr, leave=False)
    try:
        def step(name: str) -> None:
            bar.set_postfix_str(name, refresh=False)
            bar.update(1)

        yield step
    finally:
        bar.close()
