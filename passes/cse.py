"""Common-subexpression elimination: compute each distinct expression once.

Two ops with the same op_type, domain, attributes (compared as serialized AttributeProtos) and
the same inputs produce the same outputs; the later one is removed and its readers read the
first one's outputs. Ops are visited in topological order with one dict keyed by
``(domain, op_type, inputs, attribute bytes)``, so a merge upstream exposes the next one
downstream in the same run: O(nodes) dict lookups.

Constants are merged by value: initializers and Constant ops with the same dtype, dims and bytes
(a 256-bit BLAKE2 digest, computed only for tensors that share dtype and dims with another one)
become one; a Constant equal to an initializer is replaced by the initializer.

Never merged:
- nondeterministic ops (RandomNormal/Uniform[Like], Multinomial, Bernoulli) and Dropout;
- ops outside the standard domains (a custom op may have effects or state) and ops with
  subgraph attributes (If/Loop/Scan);
- initializers that are graph inputs (a caller may override them), external tensors larger than
  ``ctx.max_fold_bytes`` (hashing them would read the whole file), string tensors;
- a duplicate whose output is a graph output when the kept value cannot take that name (it is an
  output itself, an initializer or an input): both names are interface.
"""

from __future__ import annotations

import hashlib
from typing import Any, Mapping

import numpy as np
from onnx import AttributeProto, TensorProto

from graphtool.ir.graph import Graph, Node
from graphtool.ir.tensor import Tensor
from graphtool.pass_manager import Pass, PassContext, PassResult, register
from graphtool.passes.eliminate import forward

NONDETERMINISTIC = frozenset(
    {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli", "Dropout"}
)
CSE_DOMAINS = ("", "ai.onnx", "ai.onnx.ml")


def attr_key(attrs: Mapping[str, Any]) -> bytes | None:
    """An op's attributes (``OpData.attrs``: the protos, no value converted to Python) as bytes,
    sorted by name; None when one is a subgraph."""
    parts = []
    for name in sorted(attrs):
        proto = attrs[name]
        if not isinstance(proto, AttributeProto):
            return None  # a subgraph
        parts.append(proto.SerializeToString())
    return b"\x00".join(parts)


def _digest(chunks: Any) -> bytes:
    h = hashlib.blake2b(digest_size=32)
    for chunk in chunks:
        h.update(chunk)
    return h.digest()


class ConstantTable:
    """Constants of one graph grouped by (dtype, dims); bytes are hashed only on a collision.

    ``renamed`` follows a kept value that took a graph output's name, so later lookups return
    the name it has now.
    """

    def __init__(self, max_external_bytes: int):
        self.max_external_bytes = max_external_bytes
        self.first: dict[tuple[int, tuple[int, ...]], tuple[str, Tensor | None]] = {}
        self.hashed: dict[tuple[int, tuple[int, ...], bytes], str] = {}
        self.renamed: dict[str, str] = {}

    def _usable(self, tensor: Tensor) -> bool:
        if tensor.data_type in (TensorProto.STRING, TensorProto.UNDEFINED):
            return False
        return tensor.external is None or tensor.nbytes <= self.max_external_bytes

    def _key(self, tensor: Tensor) -> tuple[int, tuple[int, ...], bytes]:
        return (tensor.data_type, tensor.dims, _digest(tensor.iter_chunks()))

    def find_or_add(self, value: str, tensor: Tensor) -> str | None:
        """The earlier value equal to ``tensor``, or None (and ``value`` is remembered)."""
        if not self._usable(tensor):
            return None
        shape_key = (tensor.data_type, tensor.dims)
        earlier = self.first.get(shape_key)
        if earlier is None:
            self.first[shape_key] = (value, tensor)
            return None
        if earlier[1] is not None:  # second of its dtype/dims: hash the first one now
            self.hashed.setdefault(self._key(earlier[1]), earlier[0])
            self.first[shape_key] = (earlier[0], None)
        found = self.hashed.setdefault(self._key(tensor), value)
        if found == value:
            return None
        while found in self.renamed:
            found = self.renamed[found]
        return found


def constant_tensor(node: Node) -> Tensor | None:
    """A Constant op's value as a Tensor (dense forms only)."""
    proto = node.attr_proto("value")
    if proto is not None and not proto.ref_attr_name:
        return Tensor(proto.t) if proto.t.data_location != TensorProto.EXTERNAL else None
    for key in ("value_float", "value_floats", "value_int", "value_ints"):
        p = node.attr_proto(key)
        if p is not None and not p.ref_attr_name:
            value = node.attr(key)
            dtype = np.float32 if "float" in key else np.int64
            return Tensor.from_numpy(np.array(value, dtype=dtype), "")
    return None


def _merge(graph: Graph, dup: Node, keep_outputs: list[str]) -> bool:
    pairs = []
    for kept, dropped in zip(keep_outputs, dup.outputs):
        if dropped:
            if not kept:
                return False  # the kept op leaves out an output the duplicate makes
            pairs.append((kept, dropped))
    return forward(graph, dup, pairs)


@register(level=1, priority=70)
class CommonSubexpressionElimination(Pass):
    """Merge ops that compute the same thing from the same inputs, and constants with equal values."""

    idempotent = True  # one sweep: see the module docstring

    def run(self, graph: Graph, ctx: PassContext) -> PassResult:
        constants = ConstantTable(ctx.max_fold_bytes)
        merged_inits = self._merge_initializers(graph, constants)
        merged_ops = merged_consts = 0
        table: dict[tuple[Any, ...], Node] = {}
        for node in graph.topological_order():
            data = node._data  # the op's record, read once: this loop runs for every op
            if data.domain not in CSE_DOMAINS or data.op_type in NONDETERMINISTIC:
                continue
            outputs = data.outputs
            if not outputs:
                continue
            if data.op_type == "Constant" and len(outputs) == 1 and not data.n_in:
                tensor = constant_tensor(node)
                if tensor is not None:
                    earlier = constants.find_or_add(outputs[0], tensor)
                    if earlier is not None and forward(graph, node, [(earlier, outputs[0])]):
                        merged_consts += 1
                        if graph.is_output(outputs[0]):
                            constants.renamed[earlier] = outputs[0]
                    continue
            attrs = attr_key(data.attrs) if data.attrs else b""  # most ops have none
            if attrs is None:
                continue
            key = (data.domain or "", data.op_type, data.inputs, len(outputs), attrs)
            first = table.get(key)
            if first is None or not graph.has_node(first):
                table[key] = node
                continue
            if _merge(graph, node, first.outputs):
                merged_ops += 1
        stats = {"ops": merged_ops, "constants": merged_consts, "initializers": merged_inits}
        return PassResult(changed=bool(merged_ops or merged_consts or merged_inits), stats=stats)

    @staticmethod
    def _merge_initializers(graph: Graph, constants: ConstantTable) -> int:
        merged = 0
        for name, tensor in list(graph.initializers.items()):
            overridable = graph.is_input(name) and graph.overridable_initializers
            if overridable:
                continue  # a caller may feed another value: not a constant
            earlier = constants.find_or_add(name, tensor)
            if earlier is None or graph.is_output(name):
                continue  # an output initializer may be the kept copy, never the dropped one
            graph.replace_all_uses(name, earlier)
            if graph.is_input(name):  # IR < 4 lists every initializer as an input too
                graph.remove_input(name)
            graph.remove_initializer(name)
            merged += 1
        return merged
