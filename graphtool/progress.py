"""Progress on stderr for long work — a tqdm bar only when stderr is a terminal.

Scripts, CI, pipes and ``--json`` runs stay quiet: the bar appears only for a person watching,
and never on stdout, so a command's output is the same with or without it. Commands pass
``enabled=not as_json``; everything else is decided here.

    with progress_steps("optimizing", total=len(passes), enabled=not as_json) as step:
        for p in passes:
            ...
            step(p.name)

    for tensor in progress_iter(tensors, "saving weights", unit="tensor"):
        ...
"""

from __future__ import annotations

import contextlib
import sys
from typing import Callable, Iterable, Iterator, TypeVar

T = TypeVar("T")


def wanted(enabled: bool = True) -> bool:
    """True when a bar should be drawn: the caller allows it and stderr is a terminal."""
    if not enabled:
        return False
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced or closed stderr
        return False


@contextlib.contextmanager
def progress_steps(label: str, total: int | None = None, enabled: bool = True) -> Iterator[Callable[[str], None]]:
    """A callback ``step(name)`` that advances a bar by one and shows ``name`` (or does nothing
    when not on a TTY). The bar is removed when the block ends."""
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


def progress_iter(
    items: Iterable[T], label: str, total: int | None = None, unit: str = "it", enabled: bool = True
) -> Iterator[T]:
    """``items`` unchanged, with a bar while they are consumed (plain iteration off a TTY)."""
    if not wanted(enabled):
        yield from items
        return
    from tqdm import tqdm

    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    with tqdm(items, total=total, desc=label, unit=unit, file=sys.stderr, leave=False) as bar:
        yield from bar
