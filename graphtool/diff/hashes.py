"""Structural hashes of one graph's ops, and the id-indexed view of its values they are built on.

Split from ``diff_match`` (issue 19). On a million-op graph the diff's cost per op grew with
the graph wherever it looked a value up by *name*: a dict of a million strings does not fit the
CPU cache, so each lookup is a cache miss that the same lookup on 100k ops is not (even reading
a name's hash is one: the strings lie all over the heap). A diff did about ten such lookups per
op (the forward hash, the backward hash's ``uses``, the producer lookups of the pair checks, on
both sides). ``Hashes`` now resolves each op's inputs once, in its forward pass, into dense value
ids (``feeds``), mostly from a small window of the last outputs that stays in the cache; the
backward hash and the pair checks (``Matcher.token_*_at``, ``diff_changes.node_changes``) read
arrays and lists indexed by op or value id, and no names."""

from __future__ import annotations

from array import array
from typing import Any, Iterable

from graphtool.diff.values import canonical, constant_key, tensor_key
from graphtool.ir.graph import Graph

NONE = -1  # the value id of an omitted optional input
_UNSEEN = -2  # (while building ``feeds``) a name not among the last outputs
_WINDOW = 4096  # outputs the forward pass keeps at hand by name, twice (``Hashes._forward``)


class Hashes:
    """Forward and backward structural hashes of every node of one graph.

    ``input_tokens`` gives the graph inputs their identity (paired inputs share a token);
    values read from an enclosing scope take the enclosing graph's hash.

    The value view: every value an op of this graph produces or reads has a dense id. Ops in
    ``order`` give their outputs consecutive ids (``first_out[op] + slot``, omitted outputs
    included); a source (initializer, input, enclosing-scope value) gets the next id when an op
    first reads it. ``feeds[op]`` is the value id of each input slot (``NONE`` when omitted);
    ``names``, ``producers`` (-1 for a source) and ``value_hashes`` are indexed by value id.
    """

    def __init__(self, graph: Graph, input_tokens: dict[str, int], outer: "Hashes | None" = None):
        self.graph = graph
        self.outer = outer
        self.input_tokens = input_tokens
        self.order = graph.topological_order()
        # Per-op tables are indexed by op id (loaders number ops from 0; a pass's new ops take the
        # next ids), not dicts: sequential reads, which on a million-op graph is what keeps the
        # cost per op from growing with the graph (issue 19). Tables of ints are arrays of
        # machine ints, not lists of int objects: 8 bytes an entry instead of 40.
        size = max((n.id for n in self.order), default=-1) + 1
        self.index = _ints(size)  # op id -> place in ``order``
        for i, n in enumerate(self.order):
            self.index[n.id] = i
        # the attributes' canonical forms (``canonical``) as a sorted tuple: both hashes use it,
        # and ``canon`` gives it back as a dict
        self.canon_key: list[tuple] = [()] * size
        self.forward = _ints(size)
        self.backward = _ints(size)
        self.feeds: list[tuple[int, ...]] = [()] * size
        self.first_out = _ints(size, -1)  # (-1 until the forward pass reaches the op)
        # what the later passes ask of each op, read once here: at a million ops each look-up of
        # an op's record (an int key among the graph's two million nodes) costs 18x what it
        # costs at 100k, and the backward pass and the pair checks made sixteen per op
        self.kinds: list[tuple[str, str]] = [("", "")] * size  # (op type, domain)
        self.n_out = _ints(size)
        self.sources: dict[str, int] = {}  # name -> value id, of the values no op produces
        self.names: list[str] = []
        self.producers = _ints(0)
        self.value_hashes = _ints(0)
        self.constants: dict[int, tuple] = {}  # Constant node id -> content key
        self.captured: set[str] = set()  # values that ops of this graph read inside a subgraph
        self.owners: set[int] = set()  # ids of the ops with subgraph attributes
        self.sources_read: list[str] = []  # the sources ops of this graph read (as inputs)
        self.init_keys: dict[int, tuple] = {}  # source value id -> content key, for initializers
        self._unread_keys: dict[str, tuple] = {}  # content keys of initializers no op reads
        self.omitted: set[int] = set()  # ids of omitted (unnamed) optional outputs
        self._forward()
        self._backward()

    def init_key(self, name: str) -> tuple:
        """The content key of initializer ``name`` (kept by value id for those ops read)."""
        vid = self.sources.get(name)
        key = self.init_keys.get(vid) if vid is not None else None
        if key is None:
            key = self._unread_keys.get(name)
            if key is None:
                key = self._unread_keys[name] = tensor_key(self.graph.initializers[name])
        return key

    def source(self, value: str) -> tuple[int, tuple | None]:
        """The hash of a value no node of this graph produces, and its content key if it is an
        initializer."""
        g = self.graph
        tensor = g.initializers.get(value)
        if tensor is not None:
            key = tensor_key(tensor)
            return hash(("init", key)), key
        if value in self.input_tokens:
            return self.input_tokens[value], None
        if value in g.sparse_initializers:
            return hash(("sparse", value)), None
        if self.outer is not None and g.is_free(value):
            return self.outer.hash_of(value), None
        return hash(("unbound", value)), None

    def value_id(self, value: str) -> int:
        """The id of ``value`` ('' is ``NONE``); a source not read before gets its id (and hash)
        here. Asks the graph for the producer: the forward pass's window is for its own reads."""
        if not value:
            return NONE
        vid = self.sources.get(value)
        return self._resolve(value) if vid is None else vid

    def produced_id(self, value: str) -> int | None:
        """The id of ``value`` if an op the forward pass has reached produces it (asks the graph)."""
        producer = self.graph.producer(value) if value else None
        first = self.first_out[producer.id] if producer is not None else -1
        return first + producer.outputs.index(value) if first >= 0 else None

    def _produced_ids(self, names: Iterable[str]) -> dict[int, str]:
        """value id -> name for those of ``names`` an op of this graph produces, in their order."""
        found: dict[int, str] = {}
        for name in names:
            vid = self.produced_id(name)
            if vid is not None:
                found[vid] = name
        return found

    def _resolve(self, value: str) -> int:
        """The id of a non-empty value not among the sources yet: produced, or a new source."""
        vid = self.produced_id(value)
        return self._new_source(value) if vid is None else vid

    def _new_source(self, value: str) -> int:
        vid = self.sources[value] = len(self.names)
        self.names.append(value)
        self.producers.append(-1)
        h, key = self.source(value)
        self.value_hashes.append(h)
        if key is not None:
            self.init_keys[vid] = key
        return vid

    def hash_of(self, value: str) -> int:
        """A value's hash (0 for an omitted one)."""
        return self.value_hashes[self.value_id(value)] if value else 0

    def canon(self, node_id: int) -> dict[str, Any]:
        """The canonical form of each attribute of op ``node_id`` (subgraphs left out)."""
        return dict(self.canon_key[node_id])

    def _forward(self) -> None:
        """The forward hashes, in order, and with them the value ids (``feeds``).

        An input is looked up by name among the last ``_WINDOW`` to ``2 * _WINDOW`` outputs
        first (two small dicts, the newer one replacing the older when full), which stay in the
        CPU cache and where nearly every input is found: ops read what was computed just before.
        Only the rest asks the sources seen so far, then the graph for the producer. A dict of
        every value, written once per output and read once per input, missed the cache on each
        access at a million ops: 19x the cost of 100k ops (issue 19)."""
        canon_key = self.canon_key
        names, producers, value_hashes = self.names, self.producers, self.value_hashes
        hash_at = value_hashes.__getitem__
        recent: dict[str, int] = {}  # name -> value id, for the outputs of the last ops
        older: dict[str, int] = {}  # the ``recent`` before, when it filled up
        recent_get = recent.get
        kinds, n_out, kind_of = self.kinds, self.n_out, {}
        for node in self.order:
            i = node.id
            # the op's record, read once (each ``Node`` property looks it up again); its attrs are
            # the protos, ``node.attrs`` their values, made only for the ops that have any
            data = node._data
            if not data.attrs:  # most ops: the shared empty tuple, not new ones per op (issue 19)
                key = sub_hashes = ()
            else:
                attrs = node.attrs
                subs: list[tuple[str, int, Graph]] = []
                canon: list[tuple[str, Any]] = []
                for name, value in attrs.items():
                    if isinstance(value, Graph):
                        subs.append((name, 0, value))
                    elif isinstance(value, list) and value and isinstance(value[0], Graph):
                        subs.extend((name, k, sub) for k, sub in enumerate(value))
                    else:
                        canon.append((name, canonical(value)))
                key = tuple(sorted(canon))
                sub_hashes = tuple(sorted((name, k, self.subgraph_hash(sub)) for name, k, sub in subs))
                for _, _, sub in subs:  # the IR's capture edges are these (``Graph.refresh_captures``)
                    self.captured.update(sub.free_values())
                if subs:
                    self.owners.add(i)
            canon_key[i] = key
            inputs = data.inputs
            feed = tuple([recent_get(v, _UNSEEN) for v in inputs])  # '' is never in ``recent``
            if _UNSEEN in feed:  # a source, a value computed long before, or an omitted input
                feed = tuple([vid if vid != _UNSEEN else self._input_id(v, older) for v, vid in zip(inputs, feed)])
            self.feeds[i] = feed
            if NONE in feed:
                in_hashes = tuple([value_hashes[v] if v >= 0 else 0 for v in feed])
            else:
                in_hashes = tuple(map(hash_at, feed))
            op_type, domain = data.op_type, data.domain
            kinds[i] = kind_of.setdefault((op_type, domain), (op_type, domain))  # a few shared tuples
            h = hash((op_type, domain, key, in_hashes, sub_hashes))
            self.forward[i] = h
            constant = constant_key(node) if op_type == "Constant" else None
            if constant is not None:
                self.constants[i] = constant
            self.first_out[i] = first = len(names)
            outputs = data.outputs
            n_out[i] = len(outputs)
            for slot, value in enumerate(outputs):
                if value:
                    recent[value] = first + slot if slot else first  # one int object per op, mostly
                else:
                    self.omitted.add(first + slot)
                names.append(value)
                producers.append(i)
                # a Constant's value hashes like an initializer of the same content
                value_hashes.append(hash(("init", constant)) if constant else hash((h, slot)))
            if len(recent) >= _WINDOW:
                older, recent = recent, {}
                recent_get = recent.get

    def _input_id(self, value: str, older: dict[str, int]) -> int:
        """(forward pass) The id of an input not among the last outputs: an older output, a
        source seen before, or resolved now (a source read for the first time is noted)."""
        if not value:
            return NONE
        vid = older.get(value)
        if vid is None:
            vid = self.sources.get(value)
        if vid is None:
            vid = self._resolve(value)
            if self.producers[vid] < 0:
                self.sources_read.append(value)
        return vid

    def subgraph_hash(self, sub: Graph) -> int:
        inner = Hashes(sub, positional_tokens(sub), self)
        return hash((tuple(inner.hash_of(o) for o in sub.outputs), len(sub.inputs)))

    def _backward(self) -> None:
        """In reverse order, each op hands its backward hash to the values it reads (``feeds``),
        so a value's uses are complete when its producer comes: no lookup of consumers by name.
        A value some subgraph reads has uses ``feeds`` does not list (capture edges): those ask
        the graph. Values are known by id here, not by name: at a million ops even reading a
        name's hash is a cache miss (the strings lie all over the heap)."""
        g, backward, feeds, producers, omitted = self.graph, self.backward, self.feeds, self.producers, self.omitted
        kinds, n_out, first_out, canon_key = self.kinds, self.n_out, self.first_out, self.canon_key
        captured = self._produced_ids(self.captured)  # value id -> name
        place = {name: k for k, name in enumerate(g.outputs)}  # (a few names: read once)
        out_pos = {vid: place[name] for vid, name in self._produced_ids(g.outputs).items()}
        uses_of: list[list[tuple[int, int]] | None] = [None] * len(self.names)
        for node in reversed(self.order):
            i = node.id
            outs = []
            first = first_out[i]
            for vid in range(first, first + n_out[i]):
                uses = uses_of[vid]
                uses_of[vid] = None
                if omitted and vid in omitted:
                    outs.append(0)
                    continue
                if captured and vid in captured:
                    uses = [(backward[c.id], slot) for c, slot in g.uses(captured[vid])]
                uses = sorted(uses) if uses else []
                outs.append(hash((tuple(uses), out_pos.get(vid, -1))))
            op_type, domain = kinds[i]
            feed = feeds[i]
            h = backward[i] = hash((op_type, domain, canon_key[i], tuple(outs), len(feed)))
            for slot, v in enumerate(feed):
                if v >= 0 and producers[v] >= 0:  # only produced values' uses are read
                    used = uses_of[v]
                    if used is None:
                        uses_of[v] = [(h, slot)]
                    else:
                        used.append((h, slot))


def _ints(size: int, fill: int = 0) -> array:
    """``size`` machine ints (a hash fits: Python's are 64-bit)."""
    return array("q", [fill]) * size


def positional_tokens(graph: Graph) -> dict[str, int]:
    """Subgraph and function inputs are positional (Loop/Scan bodies, function signatures)."""
    return {name: hash(("input", k)) for k, name in enumerate(graph.inputs) if name not in graph.initializers}
