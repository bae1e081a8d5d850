"""Diff two models: match their nodes (``hashes``, ``match``), describe each pair (``changes``,
``values``), name the rewrites behind the changes (``summary``) and write it for a terminal
(``text``); ``run`` drives it over main graph, subgraphs and functions."""

from __future__ import annotations

from graphtool.diff.hashes import NONE, Hashes, positional_tokens
from graphtool.diff.match import Matcher
from graphtool.diff.run import (
    ADDED,
    CHANGED,
    REMOVED,
    DiffResult,
    GraphDiff,
    change_text,
    describe,
    detail_text,
    diff,
)
from graphtool.diff.summary import (
    CONST_INIT,
    DEAD,
    FOLDED,
    FUSION,
    GRAPH,
    RENAMED,
    WEIGHTS,
    ChangeGroup,
    summarize,
)
from graphtool.diff.text import MAX_LINES, format_diff

__all__ = ["ADDED", "CHANGED", "CONST_INIT", "ChangeGroup", "DEAD", "DiffResult", "FOLDED", "FUSION", "GRAPH",
           "GraphDiff", "Hashes", "MAX_LINES", "Matcher", "NONE", "REMOVED", "RENAMED", "WEIGHTS",
           "change_text", "describe", "detail_text", "diff", "format_diff", "positional_tokens", "summarize"]
