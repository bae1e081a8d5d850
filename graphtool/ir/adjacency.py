"""The NetworkX adjacency of the IR, sized for a million ops (issue 19).

NetworkX keeps, per node, ``succ[n]`` and ``pred[n]``: dicts neighbor -> key dict. In an ONNX
graph nearly every one of them has exactly one neighbor (an op's one output, a value's one
producer and, mostly, one consumer), and a one-entry dict costs 184-224 bytes in CPython 3.11
(its key table never shrinks below 8 slots). Those four dicts were ~880 of the ~1,430 bytes an
op with its output value took. Here an inner adjacency is one of three things:

* ``NO_NEIGHBORS``: one shared, read-only empty dict (a graph input's producers, an output's
  readers);
* ``One``: a read-only mapping of exactly one neighbor (48 bytes): ``__slots__`` and the
  reading half of the dict protocol, which is all NetworkX's views and algorithms call;
* a plain ``dict`` from two neighbors on.

NetworkX documents the inner dicts as replaceable (``adjlist_inner_dict_factory``: "dict-like"),
so ``G.succ``, ``in_edges``, ``has_edge`` and the algorithms see an ordinary MultiDiGraph. The
IR never edits a ``One`` in place: ``put`` and ``drop`` replace ``outer[n]`` with the next shape,
which is also why ``Graph.copy`` can share them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Iterator

import networkx as nx

from graphtool.ir.records import NO_DATA, _Shared

NO_NEIGHBORS = _Shared()  # the empty inner adjacency, shared


class One:
    """A read-only mapping of one neighbor to its key dict."""

    __slots__ = ("key", "keys_")

    def __init__(self, key: Any, keys: Any) -> None:
        self.key = key
        self.keys_ = keys

    def __getitem__(self, key: Any) -> Any:
        if key == self.key:
            return self.keys_
        raise KeyError(key)

    def get(self, key: Any, default: Any = None) -> Any:
        return self.keys_ if key == self.key else default

    def __contains__(self, key: object) -> bool:
        return key == self.key

    def __iter__(self) -> Iterator[Any]:
        return iter((self.key,))

    def __len__(self) -> int:
        return 1

    def __bool__(self) -> bool:
        return True

    def keys(self) -> tuple[Any]:
        return (self.key,)

    def values(self) -> tuple[Any]:
        return (self.keys_,)

    def items(self) -> tuple[tuple[Any, Any]]:
        return ((self.key, self.keys_),)

    def copy(self) -> dict:
        """A plain dict, as ``dict.copy`` gives (NetworkX's ``copy`` and views call it)."""
        return {self.key: self.keys_}

    def __eq__(self, other: object) -> bool:
        if isinstance(other, One):
            return other.key == self.key and other.keys_ == self.keys_
        return isinstance(other, Mapping) and len(other) == 1 and self.key in other and other[self.key] == self.keys_

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"{{{self.key!r}: {self.keys_!r}}}"

    def __reduce__(self) -> tuple:
        return (One, (self.key, self.keys_))


Mapping.register(One)


def put(outer: dict, n: Any, neighbor: Any, keys: Any) -> None:
    """``outer[n][neighbor] = keys``, moving ``outer[n]`` to the shape its new size needs."""
    inner = outer[n]
    if type(inner) is dict:
        inner[neighbor] = keys
    elif not inner or inner.key == neighbor:  # type: ignore[union-attr]
        outer[n] = One(neighbor, keys)
    else:
        outer[n] = {inner.key: inner.keys_, neighbor: keys}  # type: ignore[union-attr]


def drop(outer: dict, n: Any, neighbor: Any) -> None:
    """``del outer[n][neighbor]`` (KeyError when absent), shrinking ``outer[n]`` as it empties."""
    inner = outer[n]
    if type(inner) is dict:
        del inner[neighbor]
        if len(inner) == 1:
            for key, keys in inner.items():
                outer[n] = One(key, keys)
    elif inner and inner.key == neighbor:  # type: ignore[union-attr]
        outer[n] = NO_NEIGHBORS
    else:
        raise KeyError(neighbor)


def own_copy(inner: Any) -> Any:
    """``inner`` for a copy of the graph: read-only shapes are shared, dicts copied."""
    return inner.copy() if type(inner) is dict else inner


class Adjacency(nx.MultiDiGraph):
    """The NetworkX graph of one ``Graph``: a MultiDiGraph whose edges carry no data."""

    def edge_attr_dict_factory(self) -> dict:  # type: ignore[override]
        return NO_DATA
