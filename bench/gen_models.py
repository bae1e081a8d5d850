"""Model generators for the scale benchmarks. Nothing here is committed output: every model is
written at bench time under /tmp (or bench/out/, which git ignores).

Two families:

* ``big_graph(n_nodes)`` — a deep residual stack of small MLP / layout blocks (MatMul, Add, Relu,
  Reshape, Transpose pairs that cancel, Identity, Constant shapes) with small per-block weights and
  a few dead nodes per block, so cleanup passes have real work at 100k–200k nodes.
* ``external_transformer(path, layers, d_model, d_ff)`` — a transformer-like stack (hand-written
  LayerNorm, single-head attention, erf GELU MLP) whose weights live in one external-data file,
  written tensor by tensor so generating a 5 GB model needs no more memory than one chunk.

Usage::

    python bench/gen_models.py graph 100000 /tmp/g100k.onnx
    python bench/gen_models.py external /tmp/big/model.onnx --layers 3   # ~2.3 GB
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
HIDDEN = 16
NODES_PER_BLOCK = 13


# --------------------------------------------------------------------------- 100k-node graphs


def big_graph(n_nodes: int, seed: int = 0) -> onnx.ModelProto:
    """A valid, runnable model with exactly ``n_nodes`` nodes.

    Each block (13 nodes) is ``0.5 h + Reshape(Transpose(Transpose(Reshape(Relu(h @ W + b)))))`` (the
    0.5 keeps values finite through 15k blocks) with an Identity on the way and two dead nodes (Mul → Relu nobody reads); every 4th block takes its
    reshape target from a Constant node instead of a shared initializer.
    """
    rng = np.random.default_rng(seed)
    nodes: list[onnx.NodeProto] = []
    inits: list[TensorProto] = [
        numpy_helper.from_array(np.array([1, 4, 4], np.int64), "shape_3d"),
        numpy_helper.from_array(np.array([1, HIDDEN], np.int64), "shape_2d"),
        numpy_helper.from_array(np.array(0.5, np.float32), "half"),
    ]
    h = "x"
    blocks = n_nodes // NODES_PER_BLOCK
    for i in range(blocks):
        p = f"b{i}"
        w = (rng.standard_normal((HIDDEN, HIDDEN)) * 0.05).astype(np.float32)
        b = (rng.standard_normal(HIDDEN) * 0.05).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"{p}.W"))
        inits.append(numpy_helper.from_array(b, f"{p}.b"))
        if i % 4 == 0:
            shape = f"{p}.shape"
            nodes.append(helper.make_node("Constant", [], [shape], name=f"{p}/shape",
                                          value=numpy_helper.from_array(np.array([1, 4, 4], np.int64))))
        else:
            shape = "shape_3d"
            nodes.append(helper.make_node("Identity", [h], [f"{p}/in"], name=f"{p}/in_id"))
        src = f"{p}/in" if i % 4 else h
        nodes += [
            helper.make_node("MatMul", [src, f"{p}.W"], [f"{p}/mm"], name=f"{p}/MatMul"),
            helper.make_node("Add", [f"{p}/mm", f"{p}.b"], [f"{p}/add"], name=f"{p}/Add"),
            helper.make_node("Relu", [f"{p}/add"], [f"{p}/relu"], name=f"{p}/Relu"),
            helper.make_node("Reshape", [f"{p}/relu", shape], [f"{p}/r3"], name=f"{p}/Reshape"),
            helper.make_node("Transpose", [f"{p}/r3"], [f"{p}/t1"], name=f"{p}/T1", perm=[0, 2, 1]),
            helper.make_node("Transpose", [f"{p}/t1"], [f"{p}/t2"], name=f"{p}/T2", perm=[0, 2, 1]),
            helper.make_node("Reshape", [f"{p}/t2", "shape_2d"], [f"{p}/r2"], name=f"{p}/Reshape2"),
            helper.make_node("Identity", [f"{p}/r2"], [f"{p}/id"], name=f"{p}/Identity"),
            helper.make_node("Mul", [h, "half"], [f"{p}/skip"], name=f"{p}/SkipScale"),
            helper.make_node("Add", [f"{p}/skip", f"{p}/id"], [f"{p}/out"], name=f"{p}/Residual"),
            helper.make_node("Mul", [f"{p}/relu", "half"], [f"{p}/dead"], name=f"{p}/DeadMul"),
            helper.make_node("Relu", [f"{p}/dead"], [f"{p}/dead2"], name=f"{p}/DeadRelu"),
        ]
        h = f"{p}/out"
    for k in range(n_nodes - len(nodes)):  # pad to the exact count with Identity
        nodes.append(helper.make_node("Identity", [h], [f"pad{k}"], name=f"pad{k}"))
        h = f"pad{k}"
    graph = helper.make_graph(
        nodes, f"scale_{n_nodes}",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, HIDDEN])],
        [helper.make_tensor_value_info(h, TensorProto.FLOAT, [1, HIDDEN])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="graphtool-bench")
    model.ir_version = 8
    return model


def write_big_graph(n_nodes: int, path: str) -> str:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    if not os.path.exists(path):
        onnx.save(big_graph(n_nodes), path)
    return path


# --------------------------------------------------------------------------- multi-GB external data

PAGE = 4096


class _DataWriter:
    """Appends tensors to one external-data file and returns their TensorProto stubs."""

    def __init__(self, handle, location: str, seed: int):
        self.handle, self.location, self.offset = handle, location, 0
        self.rng = np.random.default_rng(seed)

    def tensor(self, name: str, dims: list[int], scale: float = 0.02, fill: float | None = None) -> TensorProto:
        pad = (-self.offset) % PAGE
        if pad:
            self.handle.write(b"\0" * pad)
            self.offset += pad
        start, count = self.offset, int(np.prod(dims))
        step = 16 << 20  # 64 MB of float32 per write
        for first in range(0, count, step):
            n = min(step, count - first)
            if fill is not None:
                block = np.full(n, fill, np.float32)
            else:
                block = self.rng.standard_normal(n, dtype=np.float32)
                block *= scale
            self.handle.write(block.tobytes())
            self.offset += n * 4
        proto = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=dims)
        proto.data_location = TensorProto.EXTERNAL
        for key, value in (("location", self.location), ("offset", str(start)), ("length", str(self.offset - start))):
            entry = proto.external_data.add()
            entry.key, entry.value = key, value
        return proto


def external_transformer(path: str, layers: int = 3, d_model: int = 4096, d_ff: int = 16384,
                         seq: int = 8, seed: int = 0) -> str:
    """Write ``path`` + ``path.data``: ``layers`` pre-norm blocks, weights external.

    Per layer: 4 × [d, d] attention weights and [d, d_ff] + [d_ff, d] MLP weights
    (d=4096, d_ff=16384: 768 MB per layer, largest tensor 256 MB). Hand-written LayerNorm and
    erf-GELU give fusion passes their patterns; Identity nodes give cleanup passes work.
    """
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    location = os.path.basename(path) + ".data"
    nodes: list[onnx.NodeProto] = []
    inits: list[TensorProto] = []

    def small(name: str, value: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(value, name))
        return name

    def node(op: str, inputs: list[str], name: str, **attrs) -> str:
        out = f"{name}_out"
        nodes.append(helper.make_node(op, inputs, [out], name=name, **attrs))
        return out

    eps = small("eps", np.array(1e-5, np.float32))
    two = small("two", np.array(2.0, np.float32))
    one = small("one", np.array(1.0, np.float32))
    halfc = small("halfc", np.array(0.5, np.float32))
    sqrt2 = small("sqrt2", np.array(np.sqrt(2.0), np.float32))
    scale = small("attn_scale", np.array(np.sqrt(d_model), np.float32))

    with open(os.path.join(folder, location), "wb") as handle:
        data = _DataWriter(handle, location, seed)

        def weight(name: str, dims: list[int], **kw) -> str:
            inits.append(data.tensor(name, dims, **kw))
            return name

        def layernorm(x: str, p: str) -> str:
            gamma = weight(f"{p}.gamma", [d_model], fill=1.0)
            beta = weight(f"{p}.beta", [d_model], fill=0.0)
            mean = node("ReduceMean", [x], f"{p}/ReduceMean", axes=[-1])
            diff = node("Sub", [x, mean], f"{p}/Sub")
            sq = node("Pow", [diff, two], f"{p}/Pow")
            var = node("ReduceMean", [sq], f"{p}/ReduceMean_1", axes=[-1])
            std = node("Sqrt", [node("Add", [var, eps], f"{p}/Add")], f"{p}/Sqrt")
            norm = node("Div", [diff, std], f"{p}/Div")
            return node("Add", [node("Mul", [norm, gamma], f"{p}/Mul"), beta], f"{p}/Add_1")

        def linear(x: str, p: str, d_in: int, d_out: int) -> str:
            w = weight(f"{p}.weight", [d_in, d_out], scale=1.0 / np.sqrt(d_in))
            b = weight(f"{p}.bias", [d_out])
            return node("Add", [node("MatMul", [x, w], f"{p}/MatMul"), b], f"{p}/Add")

        h = "x"
        for i in range(layers):
            p = f"layer{i}"
            ln = layernorm(h, f"{p}/ln1")
            q = linear(ln, f"{p}/attn/q", d_model, d_model)
            k = linear(ln, f"{p}/attn/k", d_model, d_model)
            v = linear(ln, f"{p}/attn/v", d_model, d_model)
            kt = node("Transpose", [k], f"{p}/attn/Transpose", perm=[0, 2, 1])
            scores = node("Div", [node("MatMul", [q, kt], f"{p}/attn/MatMul_qk"), scale], f"{p}/attn/Div")
            probs = node("Softmax", [scores], f"{p}/attn/Softmax", axis=-1)
            ctx = node("MatMul", [probs, v], f"{p}/attn/MatMul_v")
            ctx = node("Identity", [ctx], f"{p}/attn/Identity")
            o = linear(ctx, f"{p}/attn/o", d_model, d_model)
            h = node("Add", [h, o], f"{p}/attn/Residual")
            ln2 = layernorm(h, f"{p}/ln2")
            up = linear(ln2, f"{p}/mlp/up", d_model, d_ff)
            erf = node("Erf", [node("Div", [up, sqrt2], f"{p}/mlp/gelu/Div")], f"{p}/mlp/gelu/Erf")
            gelu = node("Mul", [node("Mul", [up, node("Add", [erf, one], f"{p}/mlp/gelu/Add")],
                                     f"{p}/mlp/gelu/Mul"), halfc], f"{p}/mlp/gelu/Mul_1")
            down = linear(gelu, f"{p}/mlp/down", d_ff, d_model)
            h = node("Add", [h, node("Identity", [down], f"{p}/mlp/Identity")], f"{p}/mlp/Residual")
        h = layernorm(h, "final_ln")
        handle.flush()
        os.fsync(handle.fileno())

    graph = helper.make_graph(
        nodes, "external_transformer",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, seq, d_model])],
        [helper.make_tensor_value_info(h, TensorProto.FLOAT, [1, seq, d_model])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="graphtool-bench")
    model.ir_version = 8
    with open(path, "wb") as f:
        f.write(model.SerializeToString())
    return path


def external_bytes(path: str) -> int:
    return os.path.getsize(path + ".data")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="kind", required=True)
    g = sub.add_parser("graph")
    g.add_argument("nodes", type=int)
    g.add_argument("out")
    e = sub.add_parser("external")
    e.add_argument("out")
    e.add_argument("--layers", type=int, default=3)
    e.add_argument("--d-model", type=int, default=4096)
    e.add_argument("--d-ff", type=int, default=16384)
    args = ap.parse_args(argv)
    if args.kind == "graph":
        onnx.save(big_graph(args.nodes), args.out)
    else:
        external_transformer(args.out, args.layers, args.d_model, args.d_ff)
        print(f"{args.out}: {external_bytes(args.out) / 1e9:.2f} GB external", file=sys.stderr)


if __name__ == "__main__":
    main()
