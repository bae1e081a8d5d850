"""The sandbox child's limits: how much memory and time onnxruntime gets, where each limit came
from (a flag or an environment variable, so the error can say which to raise), and the error a
hit limit becomes. Apart from the child itself so that a size can be parsed and a limit named
without the machinery that starts processes."""

from __future__ import annotations

import os
import re

from graphtool.errors import GraphtoolError, UsageError

DEFAULT_TIME_LIMIT = 600.0


def physical_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 16 << 30


def default_memory_limit() -> int:
    """min(8 GB, 70% of RAM): enough for every real model we measured, and low enough that the
    child hits its own limit long before the machine's OOM killer picks a victim."""
    return min(8 << 30, int(physical_memory() * 0.7))


def parse_size(text: str, source: str = "--memory-limit") -> int:
    """'8G', '512M', '1.5GB', '1000000' → bytes. ``source`` names where the text came from (the
    flag, or ``GRAPHTOOL_MEMORY_LIMIT=``) in the error."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKmMgGtT]?)[iI]?[bB]?\s*", text or "")
    said = f"{source}={text}" if source.startswith("GRAPHTOOL_") else f"{source} {text!r}"
    if not match:
        raise UsageError(f"{said}: expected a size such as 8G or 512M")
    number, unit = float(match.group(1)), match.group(2).upper()
    size = int(number * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}[unit])
    if size < 256 << 20:
        raise UsageError(f"{said}: onnxruntime needs at least 256M to start")
    return size


def format_size(size: int) -> str:
    for unit, scale in (("TB", 1 << 40), ("GB", 1 << 30), ("MB", 1 << 20)):
        if size >= scale:
            value = size / scale
            return f"{value:.0f} {unit}" if value == int(value) or value >= 10 else f"{value:.1f} {unit}"
    return f"{size} bytes"


class _Config:
    memory: int = 0
    time: float = DEFAULT_TIME_LIMIT
    # where each limit came from: the flag (or the default), or the environment variable
    memory_source: str = "--memory-limit"
    time_source: str = "--time-limit"

    def raise_hint(self, which: str) -> str:
        """How to raise a limit, naming what set it: '--memory-limit raises it', or
        'GRAPHTOOL_MEMORY_LIMIT=4G set it: raise it (or pass --memory-limit)'."""
        flag = "--memory-limit" if which == "memory" else "--time-limit"
        source = self.memory_source if which == "memory" else self.time_source
        if source.startswith("GRAPHTOOL_"):
            return f"{source} set it: raise it (or pass {flag})"
        return f"{flag} raises it"


CONFIG = _Config()


class LimitHit(GraphtoolError):
    """onnxruntime hit the memory or time limit (or crashed) in the child; the message says which."""
