"""Which free dims of a model's inputs are one size, and what each one means.

Verification with every free dim = 2 cannot see a rewrite that is only correct when two dims are
equal (decoder length = encoder length, past length = new tokens). Here every free input dim is
put in a *class*: dims the model ties share one, every other pair of dims gets distinct sizes.

Ties come from the graph, not from names alone:

1. one symbol name is one class (``batch_size`` in every input);
2. every free dim gets a symbol of its own (unnamed ones too), onnx shape inference propagates
   them, and ops that need equal dims tie them (graphtool.verify.ties: broadcasting, Concat,
   MatMul/Gemm; a dim broadcast against a constant > 1 is pinned to it);
3. a dim written as an expression of other symbols (``past_sequence_length + 1``, ``s1 + s2``)
   is computed from them;
4. roles read from the interface of generative models: a KV cache (inputs named like
   ``past_key_values.0.key`` / ``past.3``) has a past length P, the new tokens a length S, an
   attention mask spans P + S, position ids / cache positions count P .. P+S-1, an encoder's
   hidden states and mask share an encoder length E, which stays distinct from S.

``DimModel.shapes(mode)`` then builds the shapes of one input set: ``defaults`` (every class 2,
as before: a model that ran then runs now), ``distinct`` (2 for batch, 3, 5, 7, ... for the others,
powers of two for image sides), ``realistic`` (a size people run: 224 and up for image sides, 16
and up for tokens), ``prefill`` (P = 0) and ``decode`` (S = 1); ``step_sizes(new, past)`` one
generation step at batch 1 (what ``tune`` times a decoder on: a prefill of N tokens, a decode step
over P cached ones).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Any

import onnx

from graphtool.verify.ties import Union, graph_ties

_PRIMES = (3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73, 79, 83, 89, 97)
_IMAGE = (4, 8, 16, 32, 64)
_BATCH_NAMES = {"n", "b", "bs", "batch", "batch_size", "batchsize", "batch_dim", "dynamicdimension.0",
                "p2o.dynamicdimension.0", "unk__0"}
_PAST = re.compile(r"(past|cache|pkv|^kv[._]|layer_?past|_kv$)", re.I)
_PRESENT = re.compile(r"present", re.I)
_CROSS = re.compile(r"(encoder|cross)", re.I)
_IDS = re.compile(r"^(decoder_)?(input_ids|inputs_embeds|tokens?|ids)$", re.I)
_MASK = re.compile(r"attention_mask|attn_mask|^mask$", re.I)
_POSITIONS = re.compile(r"position_ids|^positions?$", re.I)
_CACHE_POSITION = re.compile(r"cache_position", re.I)
_ENCODER_STATES = re.compile(r"encoder_(hidden_states|outputs?|output_states|last_hidden_state)", re.I)


@dataclass
class InputSpec:
    """One graph input as onnxruntime declares it: dims are ints or symbol names (None = unnamed)."""

    name: str
    ort_type: str
    dims: list[Any]


@dataclass
class DimModel:
    """Free input dims grouped into classes, each with what it means."""

    cls: dict[tuple[str, int], str] = field(default_factory=dict)  # (input, axis) -> class
    exprs: dict[tuple[str, int], str] = field(default_factory=dict)  # (input, axis) -> expression over classes
    pinned: dict[str, int] = field(default_factory=dict)  # class -> the static size the graph needs
    kinds: dict[str, str] = field(default_factory=dict)  # class -> batch/sequence/past/encoder/image/other
    order: list[str] = field(default_factory=list)  # classes, the one sized smallest first
    past_inputs: list[str] = field(default_factory=list)
    masks: dict[str, str] = field(default_factory=dict)  # mask input -> "self" or "encoder"
    positions: list[str] = field(default_factory=list)  # position_ids / cache_position inputs
    ties_from_graph: int = 0  # distinct symbols the graph tied together (for the report)
    named: dict[str, str] = field(default_factory=dict)  # symbol name -> class (for expressions)

    @property
    def kv_cache(self) -> bool:
        return bool(self.past_inputs)

    @property
    def has_encoder(self) -> bool:
        return "encoder" in self.kinds.values()

    def _of(self, kind: str) -> str | None:
        return next((c for c in self.order if self.kinds.get(c) == kind), None)

    def sizes(self, mode: str, rung: int = 2) -> dict[str, int]:
        """Class -> size for one input set (see the module docstring for the modes). ``rung``: the
        size every free dim had in the set the model first ran on (2, or a ladder size)."""
        sizes: dict[str, int] = {}
        if mode == "defaults":
            for c in self.order:
                sizes[c] = 1 if self.kinds.get(c) == "batch" and rung != 2 else rung
        else:
            realistic = mode == "realistic"
            step = max(rung, 1)
            pools = {
                "image": (list(range(max(224, rung), 8192, 32)) if realistic else
                          list(_IMAGE) if rung <= 2 else [step << k for k in range(12)]),
                "other": (list(range(max(16, rung), 1 << 20, 8)) if realistic else
                          list(_PRIMES) if rung <= 2 else [step * k for k in range(1, 200)]),
            }
            used: set[int] = set(self.pinned.values()) | ({1 if realistic or rung > 2 else 2} if
                                                           "batch" in self.kinds.values() else set())
            for c in self.order:
                kind = self.kinds.get(c, "other")
                pool = pools.get(kind, pools["other"])
                if kind == "batch":  # one batch: the batch dims of two inputs are one batch in every export
                    sizes[c] = 1 if realistic or rung > 2 else 2
                    continue
                size = next((v for v in pool if v not in used), pool[-1])
                used.add(size)
                sizes[c] = size
        sizes.update({c: v for c, v in self.pinned.items() if c in sizes})
        past, new = self._of("past"), self._of("sequence")
        if mode == "prefill" and past:
            sizes[past] = 0
        if mode == "decode" and new:
            sizes[new] = 1
        return sizes

    def step_sizes(self, new: int, past: int) -> dict[str, int]:
        """Class -> size for one generation step at batch 1: ``new`` tokens over ``past`` cached ones
        (a prefill: past 0; a decode step: new 1); the other free dims at a size people run."""
        sizes = self.sizes("realistic", 1)
        p, s = self._of("past"), self._of("sequence")
        if p:
            sizes[p] = past
        if s:
            sizes[s] = new
        return sizes

    def values(self, sizes: dict[str, int]) -> tuple[int, int]:
        """(P, S) of a size assignment: past length and new tokens (0/1 when the model has none)."""
        past, new = self._of("past"), self._of("sequence")
        return (sizes.get(past, 0) if past else 0), (sizes.get(new, 1) if new else 1)

    def shape(self, spec: InputSpec, sizes: dict[str, int]) -> list[int]:
        env = {name: sizes.get(c, 2) for name, c in self.named.items()}
        env["PAST"], env["SEQ"] = self.values(sizes)
        shape = []
        for i, dim in enumerate(spec.dims):
            if isinstance(dim, int) and dim >= 0:
                shape.append(dim)
            elif (spec.name, i) in self.exprs:
                shape.append(max(0, int(_evaluate(self.exprs[(spec.name, i)], env))))
            else:
                shape.append(sizes.get(self.cls.get((spec.name, i), ""), 2))
        return shape

    def describe(self) -> str:
        """How the dims were grouped, for the report: ``S=sequence, P=past, ...; 2 ties from the graph``."""
        parts = []
        if self.kv_cache:
            parts.append(f"KV cache ({len(self.past_inputs)} past inputs)")
        if self.has_encoder:
            parts.append("encoder length distinct from decoder length")
        if self.ties_from_graph:
            parts.append(f"{self.ties_from_graph} dim tie{'s' if self.ties_from_graph != 1 else ''} read from the graph")
        return ", ".join(parts)


# --------------------------------------------------------------------------- expressions


def _expression(text: str) -> ast.AST | None:
    """A dim written as arithmetic over symbols (``past_sequence_length + 1``); None for a plain name."""
    if re.fullmatch(r"[A-Za-z_][\w.]*", text):
        return None
    try:
        tree = ast.parse(re.sub(r"(?<=[A-Za-z_])\.(?=\w)", "__dot__", text), mode="eval")
    except SyntaxError:
        return None
    allowed = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Name, ast.Constant, ast.Load, ast.Add, ast.Sub,
               ast.Mult, ast.FloorDiv, ast.Div, ast.USub, ast.Mod)
    if not all(isinstance(n, allowed) for n in ast.walk(tree)):
        return None
    if not any(isinstance(n, ast.Name) for n in ast.walk(tree)):
        return None
    return tree


def _names(tree: ast.AST) -> list[str]:
    return [n.id.replace("__dot__", ".") for n in ast.walk(tree) if isinstance(n, ast.Name)]


def _evaluate(expr: str, env: dict[str, int]) -> float:
    def ev(node: ast.AST) -> float:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant):
            return float(node.value)
        if isinstance(node, ast.Name):
            return float(env.get(node.id.replace("__dot__", "."), 2))
        if isinstance(node, ast.UnaryOp):
            return -ev(node.operand)
        assert isinstance(node, ast.BinOp)
        a, b = ev(node.left), ev(node.right)
        op = type(node.op)
        if op is ast.Add:
            return a + b
        if op is ast.Sub:
            return a - b
        if op is ast.Mult:
            return a * b
        if op is ast.Mod:
            return a % b if b else 0
        return a // b if b else 0

    tree = _expression(expr)
    return ev(tree) if tree is not None else 2


# --------------------------------------------------------------------------- roles and classes


def _batch_like(spec: InputSpec, index: int) -> bool:
    dim = spec.dims[index]
    if isinstance(dim, str) and dim.lower() in _BATCH_NAMES:
        return True
    return index == 0 and len(spec.dims) >= 2 and not isinstance(dim, int) and (
        len(spec.dims) >= 3 or bool(_IDS.match(spec.name) or _MASK.search(spec.name) or _POSITIONS.search(spec.name)))


def _is_float(t: str) -> bool:
    return t in ("tensor(float)", "tensor(float16)", "tensor(double)", "tensor(bfloat16)")


def _past_axis(spec: InputSpec) -> int | None:
    """The free dim of a past key/value that is its length: axis -2 of [b, h, P, d] (or the last free one)."""
    free = [i for i, d in enumerate(spec.dims) if not (isinstance(d, int) and d >= 0)]
    if len(spec.dims) >= 3 and (len(spec.dims) - 2) in free:
        return len(spec.dims) - 2
    return free[-1] if free else None


def analyse(model: onnx.ModelProto | None, specs: list[InputSpec], fixed: dict[str, list[int]] | None = None) -> DimModel:
    """Classes of the free dims of ``specs`` (inputs in ``fixed`` keep the user's shapes)."""
    fixed = fixed or {}
    dm = DimModel()
    tokens: dict[tuple[str, int], str] = {}
    exprs: dict[tuple[str, int], str] = {}
    for spec in specs:
        if spec.name in fixed:
            continue
        for i, dim in enumerate(spec.dims):
            if isinstance(dim, int) and dim >= 0:
                continue
            if isinstance(dim, str) and dim:
                tree = _expression(dim)
                if tree is not None:
                    exprs[(spec.name, i)] = dim
                    continue
                tokens[(spec.name, i)] = "n:" + dim
            else:
                tokens[(spec.name, i)] = f"u:{spec.name}:{i}"
    # symbols that appear only inside expressions are classes too
    for expr in exprs.values():
        for name in _names(_expression(expr)):  # type: ignore[arg-type]
            tokens.setdefault(("", len(tokens)), "n:" + name)
    real = {k: t for k, t in tokens.items() if k[0]}
    uf, dm.ties_from_graph = graph_ties(model, real) if model is not None and model.graph.node else (Union(), 0)

    def cls_of(key: tuple[str, int]) -> str:
        root = uf.find(tokens[key])
        return root if isinstance(root, str) else tokens[key]

    for key, tok in tokens.items():
        root = uf.find(tok)
        c = cls_of(key)
        dm.cls[key] = c
        if isinstance(root, int):
            dm.pinned[c] = root
    # roles
    free_specs = [s for s in specs if s.name not in fixed]
    past = [s for s in free_specs if _PAST.search(s.name) and not _PRESENT.search(s.name)
            and _is_float(s.ort_type) and len(s.dims) >= 3]
    dm.past_inputs = [s.name for s in past]
    seq_key = None
    for s in free_specs:
        if _IDS.match(s.name) and len(s.dims) >= 2 and (s.name, 1) in dm.cls:
            seq_key = (s.name, 1)
            break
    if seq_key is None:
        for s in free_specs:
            if (_POSITIONS.search(s.name) or _CACHE_POSITION.search(s.name)) and (s.name, len(s.dims) - 1) in dm.cls:
                seq_key = (s.name, len(s.dims) - 1)
    enc_key = None
    for s in free_specs:
        if _ENCODER_STATES.search(s.name) and len(s.dims) >= 2 and (s.name, 1) in dm.cls:
            enc_key = (s.name, 1)
    seq_cls = dm.cls[seq_key] if seq_key else None
    enc_cls = dm.cls[enc_key] if enc_key else None

    def merge(key: tuple[str, int], target: str | None) -> None:
        """Put one more dim in ``target``'s class (a role the graph could not show)."""
        if target is None or key not in dm.cls or dm.cls[key] == target:
            return
        old = dm.cls[key]
        for k, c in dm.cls.items():
            if c == old:
                dm.cls[k] = target
        if old in dm.pinned and target not in dm.pinned:
            dm.pinned[target] = dm.pinned.pop(old)

    past_cls = None
    for s in past:
        axis = _past_axis(s)
        if axis is None or (s.name, axis) not in dm.cls:
            continue
        if _CROSS.search(s.name):
            if enc_cls is None:
                enc_cls = dm.cls[(s.name, axis)]
            merge((s.name, axis), enc_cls)
        else:
            if past_cls is None:
                past_cls = dm.cls[(s.name, axis)]
            merge((s.name, axis), past_cls)
    for s in free_specs:
        last = (s.name, len(s.dims) - 1)
        if _MASK.search(s.name):
            cross = bool(_CROSS.search(s.name))
            dm.masks[s.name] = "encoder" if cross else "self"
            if cross:
                merge(last, enc_cls)
            elif last in dm.cls and seq_cls is not None and dm.cls[last] != seq_cls:
                if past_cls is not None and dm.cls[last] != past_cls:
                    del dm.cls[last]
                    exprs[last] = "PAST + SEQ"  # names shape() binds to P and S
                elif past_cls is None:
                    merge(last, seq_cls)
        elif _POSITIONS.search(s.name) or _CACHE_POSITION.search(s.name):
            dm.positions.append(s.name)
            merge(last, seq_cls)
    if seq_cls:
        dm.kinds[seq_cls] = "sequence"
    if past_cls:
        dm.kinds[past_cls] = "past"
    if enc_cls:
        dm.kinds[enc_cls] = "encoder"
    for s in free_specs:
        image = len(s.dims) == 4 and _is_float(s.ort_type) and isinstance(s.dims[1], int) and 1 <= s.dims[1] <= 4
        for i, _ in enumerate(s.dims):
            c = dm.cls.get((s.name, i))
            if c is None or c in dm.kinds:
                continue
            if _batch_like(s, i):
                dm.kinds[c] = "batch"
            elif image and i >= 2:
                dm.kinds[c] = "image"
    dm.exprs = exprs
    # order: batch, tokens, past, encoder, then by how many dims a class sizes (most first)
    count: dict[str, int] = {}
    for c in dm.cls.values():
        count[c] = count.get(c, 0) + 1
    rank = {"batch": 0, "sequence": 1, "past": 2, "encoder": 3}
    seen: list[str] = []
    for c in dm.cls.values():
        if c not in seen:
            seen.append(c)
    dm.order = sorted(seen, key=lambda c: (rank.get(dm.kinds.get(c, ""), 4), -count[c], seen.index(c)))
    dm.named = {tok[2:]: dm.cls[key] for key, tok in tokens.items() if tok.startswith("n:") and key in dm.cls}
    return dm
