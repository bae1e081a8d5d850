"""Coverage-guided fuzzing of the way in: bytes → ``parse_model`` → IR → ``save`` → ``load`` → inspect.

Why: graphtool opens models from strangers. Whatever the bytes, the only acceptable outcomes are a
``GraphtoolError`` (the CLI prints it as one line, exit 2) or success; any other exception, a hang,
or a native crash is a bug. A model that loaded once must also load again after ``save``.

Run it (``atheris`` is in the ``test`` extra)::

    make fuzz SECONDS=600            # corpus in /tmp/graphtool-fuzz/corpus (FUZZ_DIR=...), crashes in .../crashes
    .venv/bin/python fuzz/fuzz_load.py -max_total_time=60 -timeout=20 CORPUS_DIR

An empty corpus folder is seeded with fixtures/*.onnx and fixtures/broken/*.onnx.

``FUZZ_DEEP=1`` also runs ``check`` and ``optimize(level=1)`` (no verification) on every model
that loads: slower (onnxruntime folds constants), and it reaches the passes.

Plain libFuzzer flags apply (``-max_total_time``, ``-timeout``, ``-rss_limit_mb``, ``-jobs``).
A crash writes ``crash-<sha1>`` (in ``-artifact_prefix``); reproduce it with
``.venv/bin/python fuzz/fuzz_load.py crash-<sha1>``, then add it as a case to
``tests/bad_inputs/make_bad_inputs.py`` (built from protobuf, not committed as bytes) and fix it.

Byte flips alone rarely get past protobuf parsing, so a structure-aware mutator parses the input
as a ``ModelProto`` and breaks it the way a careless exporter or an attacker would (dangling names,
cycles, negative dims, external-data paths, wrong raw_data sizes, deep nesting) before libFuzzer's
own byte mutations; inputs that do not parse fall back to byte mutation.
"""

from __future__ import annotations

import os
import random
import shutil
import sys
import tempfile

import atheris

DEEP = os.environ.get("FUZZ_DEEP") == "1"  # also run check and optimize --level 1 (slower, onnxruntime inside)

with atheris.instrument_imports(include=["graphtool"]):
    from graphtool import io
    from graphtool.errors import GraphtoolError
    from graphtool.inspect import inspect_model
    from graphtool.ir.from_onnx import from_onnx

    if DEEP:
        from graphtool.check import check
        from graphtool.optimize import optimize

from onnx import AttributeProto, ModelProto, TensorProto, helper

WORK = tempfile.mkdtemp(prefix="graphtool-fuzz-")
MODEL_DIR = os.path.join(WORK, "model")  # the fuzzed model's folder (holds one external data file)
OUT_DIR = os.path.join(WORK, "out")
os.makedirs(MODEL_DIR)
os.makedirs(OUT_DIR)
with open(os.path.join(MODEL_DIR, "external_data.onnx.data"), "wb") as _f:
    _f.write(bytes(range(256)) * 128)  # 32 KiB, enough for fixtures/external_data.onnx's ranges
OUT = os.path.join(OUT_DIR, "out.onnx")


def check_one(data: bytes) -> None:
    """The property under test; raises only for bugs."""
    try:
        proto = io.parse_model(data, "fuzz input")
        model = from_onnx(proto, MODEL_DIR)
    except GraphtoolError:
        return
    inspect_model(model, None)
    if DEEP:
        check(model, "ort")
        try:
            optimize(model, level=1)
        except GraphtoolError:
            pass
    try:
        io.save(model, OUT)
    except GraphtoolError:
        return  # e.g. > 2 GB; refusing to write is fine
    again = io.load(OUT)  # what save wrote must load: a GraphtoolError here is a bug
    if again.node_count() != model.node_count():
        raise AssertionError(f"round trip changed the node count {model.node_count()} -> {again.node_count()}")
    inspect_model(again, OUT)


def TestOneInput(data: bytes) -> None:
    try:
        check_one(data)
    except RecursionError:
        pass  # graphtool.cli.main reports it as one line, exit 2 ("nests too deeply")
    finally:
        for name in os.listdir(OUT_DIR):
            os.unlink(os.path.join(OUT_DIR, name))


# ---------------------------------------------------------------- structure-aware mutations

NASTY_NAMES = ["", "x", "../x", "a\nb", '"]; evil [label="', "<script>alert(1)</script>", "é∑😀", "\x00"]
LOCATIONS = ["../external_data.onnx.data", "/etc/passwd", "external_data.onnx.data", "missing.bin",
             "C:\\x", "sub/../../x", "", "\\\\server\\share"]


def _values(graph) -> list[str]:
    names = [v.name for v in graph.input] + [t.name for t in graph.initializer]
    for node in graph.node:
        names += list(node.output)
    return names or ["x"]


def _mutate_model(m: ModelProto, rng: random.Random) -> None:
    g = m.graph
    nodes = g.node
    choice = rng.randrange(16)
    if choice == 0 and nodes:  # rewire an input: dangling, cycle, or another value
        node = rng.choice(nodes)
        if node.input:
            pool = _values(g) + NASTY_NAMES
            node.input[rng.randrange(len(node.input))] = rng.choice(pool)
    elif choice == 1 and nodes:  # duplicate producer
        nodes.add().CopyFrom(rng.choice(nodes))
    elif choice == 2 and nodes:
        del nodes[rng.randrange(len(nodes))]
    elif choice == 3 and nodes:
        node = rng.choice(nodes)
        node.op_type = rng.choice(["If", "Loop", "Scan", "Constant", "Foo", "", "Add", node.op_type])
        node.domain = rng.choice(["", "com.microsoft", "x.y", node.domain])
    elif choice == 4:
        m.ir_version = rng.choice([0, 1, 3, 7, 10, 10**9, -1, 2**62])
    elif choice == 5:
        if m.opset_import and rng.random() < 0.5:
            del m.opset_import[rng.randrange(len(m.opset_import))]
        else:
            m.opset_import.add(domain=rng.choice(["", "x.y"]), version=rng.choice([-1, 0, 1, 99, 2**40]))
    elif choice == 6:  # dims
        pool = list(g.input) + list(g.output)
        if pool:
            vi = rng.choice(pool)
            dims = vi.type.tensor_type.shape.dim
            d = dims.add() if not dims or rng.random() < 0.3 else rng.choice(dims)
            d.dim_value = rng.choice([-1, 0, 2**62, 3])
    elif choice == 7 and g.initializer:
        t = rng.choice(g.initializer)
        op = rng.randrange(4)
        if op == 0:
            t.dims.append(rng.choice([-5, 0, 2**40, 7]))
        elif op == 1:
            t.raw_data = t.raw_data[: rng.randrange(len(t.raw_data) + 1)] if t.raw_data else b"\x01\x02\x03"
        elif op == 2:
            t.data_type = rng.choice([0, TensorProto.STRING, TensorProto.INT4, TensorProto.BFLOAT16, 99])
        else:
            t.data_location = TensorProto.EXTERNAL
            del t.external_data[:]
            for key, value in (("location", rng.choice(LOCATIONS)),
                               ("offset", rng.choice(["0", "-1", "x", "32760", str(2**63)])),
                               ("length", rng.choice(["", "8", "-8", "99999999", "0"]))):
                if rng.random() < 0.85:
                    e = t.external_data.add()
                    e.key, e.value = key, value
    elif choice == 8:  # nest the graph in an If / wrap as subgraph
        depth = rng.choice([1, 2, 30])
        for _ in range(depth):  # one branch carries the chain: two would double the size per level
            inner = helper.make_graph(list(g.node), "then", [], list(g.output))
            other = helper.make_graph([], "else", [], list(g.output)[:1])
            if_node = helper.make_node("If", ["cond"], [o.name for o in g.output], then_branch=inner, else_branch=other)
            del g.node[:]
            g.node.append(if_node)
        if not any(i.name == "cond" for i in g.input):
            g.input.append(helper.make_tensor_value_info("cond", TensorProto.BOOL, []))
    elif choice == 9 and nodes:  # rename a value everywhere it is produced
        node = rng.choice(nodes)
        if node.output:
            node.output[rng.randrange(len(node.output))] = rng.choice(NASTY_NAMES + _values(g))
    elif choice == 10:
        g.output.add().CopyFrom(rng.choice(list(g.output) or [helper.make_tensor_value_info("y", 1, None)]))
        if rng.random() < 0.5:
            g.output[-1].name = rng.choice(NASTY_NAMES)
    elif choice == 11 and nodes:  # attribute type confusion
        node = rng.choice(nodes)
        if node.attribute:
            a = rng.choice(node.attribute)
            a.type = rng.choice([AttributeProto.GRAPH, AttributeProto.TENSOR, AttributeProto.STRING, 0, 99])
    elif choice == 12:  # local function, possibly recursive or broken
        f = m.functions.add()
        f.name, f.domain = rng.choice(["F", "Add"]), rng.choice(["local", ""])
        f.input.append("a")
        f.output.append(rng.choice(["b", "a", ""]))
        f.node.append(helper.make_node(rng.choice(["F", "Relu"]), ["a"], ["b"], domain=rng.choice(["local", ""])))
        f.opset_import.add(domain="", version=rng.choice([17, 0, -3]))
        if nodes and rng.random() < 0.5:
            nodes.append(helper.make_node(f.name, [_values(g)[0]], [f"call_{len(nodes)}"], domain=f.domain))
    elif choice == 13:
        g.initializer.add().CopyFrom(rng.choice(list(g.initializer) or [helper.make_tensor("w", 1, [1], [1.0])]))
    elif choice == 14 and nodes:
        node = rng.choice(nodes)
        node.input.append(rng.choice(["", "nope"] + _values(g)))
    elif choice == 15:
        g.sparse_initializer.add().values.name = rng.choice(NASTY_NAMES)


def CustomMutator(data: bytes, max_size: int, seed: int) -> bytes:
    rng = random.Random(seed)
    m = ModelProto()
    try:
        m.ParseFromString(data)
        ok = m.HasField("graph")
    except Exception:
        ok = False
    if ok and rng.random() < 0.75:
        for _ in range(rng.randrange(1, 4)):
            try:
                _mutate_model(m, rng)
            except Exception:
                break  # the mutator itself hit an odd proto; keep what we have
        try:
            out = m.SerializeToString()
        except Exception:
            out = data
        if len(out) <= max_size:
            return out if rng.random() < 0.8 else atheris.Mutate(out, max_size)
    return atheris.Mutate(data, max_size)


FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures")


def seed(corpus: str) -> None:
    """An empty corpus folder starts from the small fixture models (valid and broken ones)."""
    if os.path.isdir(corpus) and not os.listdir(corpus):
        for folder in (FIXTURES, os.path.join(FIXTURES, "broken")):
            for name in sorted(os.listdir(folder)):
                if name.endswith(".onnx"):
                    shutil.copy(os.path.join(folder, name), os.path.join(corpus, name))


def main() -> None:
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 20000))  # as graphtool.cli.main does
    argv = list(sys.argv)
    folders = [a for a in argv[1:] if not a.startswith("-") and os.path.isdir(a)]
    if folders:
        seed(folders[0])
    if not any(a.startswith("-max_len") for a in argv):
        argv.append("-max_len=65536")
    atheris.Setup(argv, TestOneInput, custom_mutator=CustomMutator)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
