"""Generate the bad-input corpus: malformed, hostile and odd-but-valid ONNX models.

graphtool opens models from strangers. Each case here is one way a file can be broken or
hostile, built from protobuf at test time (no binary is committed), with the exit code every
command must give: 2 for bad input (one line on stderr, nothing written), or a documented 0/1
when the model is valid but odd. ``CASES`` is the table; ``build(case, root)`` writes one case.

    python tests/bad_inputs/make_bad_inputs.py OUTDIR [--slow]    # writes OUTDIR/<case>/model.onnx

Layout: every case gets its own folder ``OUTDIR/<case>/`` holding ``model.onnx`` (and any
companion data file). ``OUTDIR/secret.bin`` sits *outside* every case folder: the external-data
cases point at it with '..', an absolute path or a symlink, and the tests assert it is never
opened.
"""

from __future__ import annotations

import os
import random
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, helper, numpy_helper

from graphtool.ir.stream import key, varint

MODEL = "model.onnx"
SECRET = "secret.bin"
COMMANDS = ("inspect", "check", "optimize", "diff", "viz", "compare", "convert")


@dataclass(frozen=True)
class Case:
    name: str
    tests: str  # what the case tests, one line
    build: Callable[[Path], None]  # writes folder/model.onnx (and companions)
    expect: dict[str, int] = field(default_factory=dict)  # command -> exit code; others: default
    default: int = 2
    message: str = ""  # for exit 2: a fragment the one stderr line must contain (lower case)
    slow: bool = False
    only: tuple[str, ...] = ()  # run only these commands (the rest would take minutes)
    why: str = ""  # why the expectation is what it is, when it is not plain "exit 2"

    def expected(self, command: str) -> int:
        return self.expect.get(command, self.default)

    def runs(self, command: str) -> bool:
        return not self.only or command in self.only


# ------------------------------------------------------------------------------- helpers


def _write(folder: Path, data: bytes) -> None:
    (folder / MODEL).write_bytes(data)


def _save(folder: Path, model: onnx.ModelProto) -> None:
    _write(folder, model.SerializeToString())


def _vi(name: str, elem: int = TensorProto.FLOAT, shape: list | None = None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, [2, 3] if shape is None else shape)


def _model(nodes, inputs, outputs, inits=(), opset: int = 17, ir_version: int = 8,
           extra_opsets: dict[str, int] | None = None, name: str = "g") -> onnx.ModelProto:
    graph = helper.make_graph(list(nodes), name, list(inputs), list(outputs), list(inits))
    imports = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in (extra_opsets or {}).items()]
    model = helper.make_model(graph, opset_imports=imports, producer_name="graphtool-bad-inputs")
    model.ir_version = ir_version
    return model


def _weights(name: str = "w", shape=(2, 3)) -> TensorProto:
    return numpy_helper.from_array(np.arange(np.prod(shape), dtype=np.float32).reshape(shape), name)


def _good() -> onnx.ModelProto:
    """x[2,3] + w → Relu → y: the valid model most cases start from."""
    return _model([helper.make_node("Add", ["x", "w"], ["h"], name="add"),
                   helper.make_node("Relu", ["h"], ["y"], name="relu")],
                  [_vi("x")], [_vi("y")], [_weights()])


def _with_init(tensor: TensorProto) -> Callable[[Path], None]:
    def build(folder: Path) -> None:
        m = _good()
        m.graph.initializer[0].CopyFrom(tensor)
        _save(folder, m)

    return build


def _external(location: str | Callable[[Path], str], offset: int = 0, length: int | None = 24,
              data: bytes | None = b"\0" * 24, setup: Callable[[Path], None] | None = None,
              dims=(2, 3), data_type: int = TensorProto.FLOAT) -> Callable[[Path], None]:
    """The good model with ``w`` in external data at ``location`` (relative to the model)."""

    def build(folder: Path) -> None:
        if data is not None:
            (folder / "weights.bin").write_bytes(data)
        if setup is not None:
            setup(folder)
        loc = location(folder) if callable(location) else location
        m = _good()
        w = m.graph.initializer[0]
        w.ClearField("raw_data")
        w.ClearField("float_data")
        w.data_type = data_type
        del w.dims[:]
        w.dims.extend(dims)
        w.data_location = TensorProto.EXTERNAL
        for key, value in (("location", loc), ("offset", str(offset)), ("length", None if length is None else str(length))):
            if value is not None:
                entry = w.external_data.add()
                entry.key, entry.value = key, value
        _save(folder, m)

    return build


def _named(name: str) -> Callable[[Path], None]:
    """A valid model whose graph, nodes, values, doc strings and an attribute carry ``name``:
    renderers must escape it (DOT, SVG, HTML), reports must print it on one line."""

    def build(folder: Path) -> None:
        x, h, y = f"{name}x", f"{name}h", f"{name}y"
        nodes = [helper.make_node("Add", [x, "w"], [h], name=f"{name}add", doc_string=name),
                 helper.make_node("Transpose", [h], [y], name=name, perm=[1, 0])]
        m = _model(nodes, [_vi(x)], [_vi(y, shape=[3, 2])], [_weights()], name=name)
        m.doc_string = name
        m.graph.doc_string = name
        helper.set_model_props(m, {name: name})
        _save(folder, m)

    return build


def nested_if_bytes(depth: int) -> bytes:
    """``depth`` If ops, each nested in the previous one's then-branch (captures x and cond).

    Serialized by hand: past ~30 levels protobuf's Python API refuses to build the message."""
    def attr(name: str, graph: bytes) -> bytes:
        return _field(1, name.encode()) + varint(20 << 3) + varint(AttributeProto.GRAPH) + _field(6, graph)

    inner = helper.make_graph([helper.make_node("Identity", ["x"], ["y0"])], "leaf", [], [_vi("y0")]).SerializeToString()
    for level in range(1, depth + 1):
        other = helper.make_graph([helper.make_node("Neg", ["x"], [f"e{level}"])], f"else{level}", [],
                                  [_vi(f"e{level}")]).SerializeToString()
        node = (_field(1, b"cond") + _field(2, b"y%d" % level) + _field(3, b"if%d" % level) + _field(4, b"If")
                + _field(5, attr("then_branch", inner)) + _field(5, attr("else_branch", other)))
        outputs = _field(12, _vi(f"y{level}").SerializeToString())
        inner = _field(1, node) + _field(2, b"then%d" % level) + outputs
    inputs = _field(11, _vi("x").SerializeToString())
    inputs += _field(11, helper.make_tensor_value_info("cond", TensorProto.BOOL, []).SerializeToString())
    shell = _model([], [], [])
    shell.ClearField("graph")
    return shell.SerializeToString() + _field(7, inner + inputs)


def _field(number: int, payload: bytes) -> bytes:
    return key(number) + varint(len(payload)) + payload


def chain_model_bytes(n: int, op: str = "Relu") -> bytes:
    """An ``n``-node Relu chain, serialized by hand: protobuf lets repeated fields be appended
    as raw bytes, so a million nodes take ~2 s instead of a minute of NodeProto objects."""
    head = helper.make_graph([], "chain", [_vi("v0")], [_vi(f"v{n}")])
    op_field = _field(4, op.encode())
    parts = [head.SerializeToString()]
    for i in range(n):
        parts.append(_field(1, _field(1, b"v%d" % i) + _field(2, b"v%d" % (i + 1)) + op_field))
    shell = _model([], [], [])
    shell.ClearField("graph")
    return shell.SerializeToString() + _field(7, b"".join(parts))


def _bytes_case(data: bytes) -> Callable[[Path], None]:
    return lambda folder: _write(folder, data)


def _bytes_case_of(make: Callable[[], bytes]) -> Callable[[Path], None]:
    return lambda folder: _write(folder, make())


def _proto_case(make: Callable[[], onnx.ModelProto]) -> Callable[[Path], None]:
    return lambda folder: _save(folder, make())


def _edit(edit: Callable[[onnx.ModelProto], None]) -> Callable[[Path], None]:
    def build(folder: Path) -> None:
        m = _good()
        edit(m)
        _save(folder, m)

    return build


def _outside_ref(t: TensorProto) -> TensorProto:
    t.data_location = TensorProto.EXTERNAL
    for key, value in (("location", f"../{SECRET}"), ("offset", "0"), ("length", "8")):
        entry = t.external_data.add()
        entry.key, entry.value = key, value
    return t


def _sparse_outside() -> onnx.SparseTensorProto:
    values = _outside_ref(TensorProto(name="sp", data_type=TensorProto.FLOAT, dims=[2]))
    return helper.make_sparse_tensor(values, numpy_helper.from_array(np.array([0, 3], np.int64), "sp_idx"), [2, 3])


def _ext_sparse_initializer() -> onnx.ModelProto:
    m = _model([helper.make_node("Add", ["x", "sp"], ["y"])], [_vi("x")], [_vi("y")])
    m.graph.sparse_initializer.append(_sparse_outside())
    return m


def _ext_sparse_attribute() -> onnx.ModelProto:
    return _model([helper.make_node("Constant", [], ["c"], sparse_value=_sparse_outside()),
                   helper.make_node("Add", ["x", "c"], ["y"])], [_vi("x")], [_vi("y")])


def _symlink_file(folder: Path) -> None:
    os.symlink(os.path.join("..", SECRET), folder / "link.bin")


def _symlink_dir(folder: Path) -> None:
    os.symlink("..", folder / "up")


# -------------------------------------------------------------------------- model makers


def _cycle() -> onnx.ModelProto:
    return _model([helper.make_node("Relu", ["b"], ["a"], name="r1"), helper.make_node("Relu", ["a"], ["b"], name="r2"),
                   helper.make_node("Add", ["x", "b"], ["y"])], [_vi("x")], [_vi("y")])


def _two_producers() -> onnx.ModelProto:
    return _model([helper.make_node("Relu", ["x"], ["y"], name="one"), helper.make_node("Neg", ["x"], ["y"], name="two")],
                  [_vi("x")], [_vi("y")])


def _unused_input() -> onnx.ModelProto:
    m = _good()
    m.graph.input.append(_vi("unused", shape=[4]))
    return m


def _output_not_produced() -> onnx.ModelProto:
    m = _good()
    m.graph.output.append(_vi("nowhere"))
    return m


def _undefined_value() -> onnx.ModelProto:
    m = _good()
    m.graph.node[1].input[0] = "never_defined"
    return m


def _duplicate_initializer() -> onnx.ModelProto:
    m = _good()
    m.graph.initializer.append(_weights())
    return m


def _unknown_op() -> onnx.ModelProto:
    return _model([helper.make_node("FrobnicateTensor", ["x"], ["y"], name="frob")], [_vi("x")], [_vi("y")])


def _unknown_domain() -> onnx.ModelProto:
    return _model([helper.make_node("Frobnicate", ["x"], ["y"], name="frob", domain="com.example")],
                  [_vi("x")], [_vi("y")], extra_opsets={"com.example": 1})


def _no_opset() -> onnx.ModelProto:
    m = _good()
    del m.opset_import[:]
    return m


def _ir(version: int) -> Callable[[], onnx.ModelProto]:
    def make() -> onnx.ModelProto:
        m = _good()
        m.ir_version = version
        return m

    return make


def _input_dims(dims: list[int]) -> Callable[[], onnx.ModelProto]:
    def make() -> onnx.ModelProto:
        return _model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [_vi("x", shape=dims)], [_vi("y", shape=dims)])

    return make


def _strings() -> onnx.ModelProto:
    w = helper.make_tensor("w", TensorProto.STRING, [2], [b"alpha", b"<b>beta</b>"])
    return _model([helper.make_node("Concat", ["s", "w"], ["y"], axis=0, name="concat")],
                  [_vi("s", TensorProto.STRING, [2])], [_vi("y", TensorProto.STRING, [4])], [w])


def _capture_cycle() -> onnx.ModelProto:
    """Fuzz regression: the If's branch returns the If's own output (a capture closes a cycle)."""
    then = helper.make_graph([], "then", [], [_vi("y")])
    node = helper.make_node("If", ["cond"], ["y"], then_branch=then, else_branch=then)
    return _model([node], [helper.make_tensor_value_info("cond", TensorProto.BOOL, [])], [_vi("y")])


def _opset_version(version: int) -> Callable[[], onnx.ModelProto]:
    def make() -> onnx.ModelProto:
        m = _good()
        m.opset_import[0].version = version
        return m

    return make


def _non_utf8(folder: Path) -> None:
    data = _good().SerializeToString()
    assert data.count(b"relu") >= 1
    _write(folder, data.replace(b"relu", b"r\xffl\xfe", 1))


def _int4_huge() -> TensorProto:
    t = TensorProto(name="w", data_type=TensorProto.INT4)
    t.dims.extend([2**40])
    return t


def _raw_mismatch() -> TensorProto:
    t = _weights()
    t.raw_data = t.raw_data[:-4]
    return t


def _truncated() -> bytes:
    data = _good().SerializeToString()
    return data[: len(data) // 2]


# ------------------------------------------------------------------ hostile files (issue 20)


def _fifo(folder: Path) -> None:
    os.mkfifo(folder / MODEL)  # open() would block until a writer comes: forever


def _dev_zero(folder: Path) -> None:
    os.symlink("/dev/zero", folder / MODEL)  # read() never ends: the OOM killer would


def _folder_model(folder: Path) -> None:
    (folder / MODEL).mkdir()


def _hardlink(folder: Path) -> None:
    os.link(folder.parent / SECRET, folder / "hard.bin")  # same bytes as ../secret.bin, one more name


def _data_fifo(folder: Path) -> None:
    os.mkfifo(folder / "pipe.bin")


HARDLINK_NAME = "hard.bin"

BOMB_COPIES = 24  # Expands of just under 1 GB each (ORT's per-node folding limit), 24 GB together


def fold_bomb() -> onnx.ModelProto:
    """``BOMB_COPIES`` Expands of a scalar to [16384, 16320] floats, concatenated: each Expand is
    under the 1 GB that ORT's constant folding allows per node, so its optimizer folds them one by
    one (and running the model allocates them) until memory runs out. The file is 1 KB."""
    inits = [numpy_helper.from_array(np.array([1 << 14, (1 << 14) - 64], np.int64), "shape")]
    nodes, outs = [], []
    for i in range(BOMB_COPIES):  # distinct constants: common-subexpression elimination cannot merge them
        inits.append(numpy_helper.from_array(np.full([1], i + 1, np.float32), f"c{i}"))
        nodes.append(helper.make_node("Expand", [f"c{i}", "shape"], [f"big{i}"], name=f"expand{i}"))
        outs.append(f"big{i}")
    nodes += [helper.make_node("Concat", outs, ["cat"], axis=0, name="concat"),
              helper.make_node("ReduceMax", ["cat"], ["m"], keepdims=0, name="max"),
              helper.make_node("Add", ["x", "m"], ["y"], name="add")]
    return _model(nodes, [_vi("x", shape=[1])], [_vi("y", shape=[1])], inits)


def _bad_utf8_string() -> onnx.ModelProto:
    m = _strings()
    m.graph.initializer[0].string_data[1] = b"\xff\xfe(\xc3"
    return m


def _recursive(mutual: bool) -> Callable[[], onnx.ModelProto]:
    def make() -> onnx.ModelProto:
        imports = [helper.make_opsetid("", 17), helper.make_opsetid("custom", 1)]
        fns = [helper.make_function("custom", "F", ["a"], ["b"],
                                    [helper.make_node("G" if mutual else "F", ["a"], ["b"], domain="custom")], imports)]
        if mutual:
            fns.append(helper.make_function("custom", "G", ["a"], ["b"],
                                            [helper.make_node("F", ["a"], ["b"], domain="custom")], imports))
        m = _model([helper.make_node("F", ["x"], ["y"], domain="custom", name="call")], [_vi("x")], [_vi("y")],
                   extra_opsets={"custom": 1})
        m.functions.extend(fns)
        return m

    return make


def _two_fields() -> TensorProto:
    t = _weights()
    t.float_data.extend([9.0] * 6)  # raw_data says 0..5, float_data says 9s: which one runs?
    return t


def fanout_model_bytes(n: int) -> bytes:
    """x read by ``n`` Relu nodes (identical: CSE merges them), summed by a chain of Adds."""
    head = helper.make_graph([], "fanout", [_vi("x")], [_vi(f"v{n}")])
    parts = [head.SerializeToString()]
    relu, add = _field(4, b"Relu"), _field(4, b"Add")
    for i in range(n):
        prev = b"x" if i == 0 else b"v%d" % i
        parts.append(_field(1, _field(1, b"x") + _field(2, b"u%d" % i) + relu))
        parts.append(_field(1, _field(1, prev) + _field(1, b"u%d" % i) + _field(2, b"v%d" % (i + 1)) + add))
    shell = _model([], [], [])
    shell.ClearField("graph")
    return shell.SerializeToString() + _field(7, b"".join(parts))


# ------------------------------------------------------------------------------ the table

BAD_NO_MODEL = "not an onnx model"
ODD_OK = {c: 0 for c in COMMANDS}
# A model onnxruntime refuses: inspect/viz/diff work from the file alone; check reports it
# (exit 1); optimize/compare/convert need onnxruntime to prove their result, so they stop
# with one line (exit 2) and write nothing.
NEEDS_ORT = {"inspect": 0, "check": 1, "diff": 0, "viz": 0, "optimize": 2, "compare": 2, "convert": 2}

CASES: list[Case] = [
    # --- not a model at all
    Case("empty", "zero-byte file", _bytes_case(b""), message="empty"),
    Case("random_bytes", "4 KiB of random bytes", _bytes_case(random.Random(1).randbytes(4096))),
    Case("truncated", "a valid model cut in half", _bytes_case(_truncated())),
    Case("tensor_proto", "a serialized TensorProto, not a ModelProto", _bytes_case(_weights().SerializeToString())),
    Case("graph_proto", "a serialized GraphProto, not a ModelProto", _bytes_case(_good().graph.SerializeToString())),
    Case("text_file", "a text file", _bytes_case(b"this is not a model\nnot at all\n")),
    Case("missing_graph", "a ModelProto with opsets but no graph", _edit(lambda m: m.ClearField("graph")),
         message="no graph"),
    Case("non_utf8_name", "a node name with bytes that are not UTF-8", _non_utf8, message="utf-8"),
    # --- broken graph structure
    Case("cycle", "two nodes feeding each other", _proto_case(_cycle), message="cycle"),
    Case("two_producers", "two nodes produce the same value (duplicate output names)", _proto_case(_two_producers),
         message="produce"),
    Case("undefined_value", "a node reads a value nothing defines", _proto_case(_undefined_value), message="never defined"),
    Case("undefined_newline_name", "an undefined value named 'a\\nb': the error must still be one line",
         _edit(lambda m: m.graph.node[1].input.__setitem__(0, "evil\nTraceback (most recent call last):")),
         message="never defined"),
    Case("output_not_produced", "a graph output no node produces", _proto_case(_output_not_produced),
         message="not produced"),
    Case("empty_op_type", "sweep regression: a node with an empty op_type (viz drew <B></B>, dot choked)",
         _edit(lambda m: setattr(m.graph.node[1], "op_type", "")), message="no op_type"),
    Case("duplicate_initializer", "two initializers with one name", _proto_case(_duplicate_initializer),
         message="defined twice"),
    Case("unused_input", "a graph input nothing reads (dangling input): valid", _proto_case(_unused_input),
         default=0, why="valid ONNX; optimize keeps the input (it is part of the interface)"),
    # --- opsets and versions
    Case("missing_opset_import", "IR 8 model with no opset_import", _proto_case(_no_opset), message="no opset"),
    Case("ir_version_0", "IR version 0", _proto_case(_ir(0)), message="ir version"),
    Case("ir_version_huge", "IR version 10**9", _proto_case(_ir(10**9)), expect=NEEDS_ORT,
         why="readable; check reports the IR version; onnxruntime refuses to load it"),
    Case("opset_version_huge", "fuzz regression: opset version 2**40 (onnx schema lookups take a C int)",
         _proto_case(_opset_version(2**40)), message="opset version"),
    Case("unknown_op", "op FrobnicateTensor in the ai.onnx domain", _proto_case(_unknown_op), expect=NEEDS_ORT,
         why="inspect lists it as without kernel, check reports it; ORT cannot load it"),
    Case("unknown_domain", "op in an imported custom domain com.example", _proto_case(_unknown_domain),
         expect=NEEDS_ORT, why="as unknown_op: a custom op needs its runtime library"),
    # --- shapes and tensors
    Case("negative_dim_input", "graph input with dim -3", _proto_case(_input_dims([-3, 2])), default=0,
         why="the onnx checker and onnxruntime accept it (old exporters wrote -1 for 'unknown'): an unknown dim"),
    Case("huge_dim_input", "graph input with dim 2**40 (verification must not allocate it)",
         _proto_case(_input_dims([2**40, 3])), expect={**ODD_OK, "optimize": 2, "compare": 2, "convert": 2},
         why="valid; random inputs of 2**40 elements cannot be made, so verification stops with one line"),
    Case("dims_2_62_squared", "graph input with dims 2**62 x 2**62 (the element count wraps int64 to 0)",
         _proto_case(_input_dims([2**62, 2**62])), expect={**ODD_OK, "optimize": 2, "compare": 2, "convert": 2},
         message="too big for random inputs",
         why="valid; random inputs of 2**124 elements cannot be made, so verification stops with one line"),
    Case("negative_dim_initializer", "initializer with dims [-2, 3]",
         _with_init(TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[-2, 3])), message="negative dim"),
    Case("huge_dim_initializer", "initializer claiming 2**40 floats with no data (save must not materialize it)",
         _with_init(TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[2**20, 2**20])), message="need"),
    Case("raw_data_mismatch", "initializer whose raw_data is 4 bytes short of its dims", _with_init(_raw_mismatch()),
         message="need"),
    Case("int4_huge_dims", "fuzz regression: int4 initializer with 2**40 elements and no data", _with_init(_int4_huge()),
         message="need"),
    Case("unknown_dtype", "initializer with data type 99", _with_init(TensorProto(name="w", data_type=99, dims=[1])),
         message="data type"),
    Case("unknown_elem_type", "sweep regression: a graph output typed tensor(64), no such element type",
         _edit(lambda m: setattr(m.graph.output[0].type.tensor_type, "elem_type", 64)), message="element type"),
    Case("shape_of_nothing", "sweep regression: Shape whose required input is omitted ('')",
         _proto_case(lambda: _model([helper.make_node("Shape", [""], ["s"], name="shape"),
                                     helper.make_node("Add", ["x", "w"], ["y"])],
                                    [_vi("x")], [_vi("y"), helper.make_tensor_value_info("s", TensorProto.INT64, [0])],
                                    [_weights()])),
         expect=NEEDS_ORT, why="structurally readable; onnxruntime and check reject the empty required input"),
    Case("matmul_three_inputs", "deep-fuzz regression: MatMul with 3 inputs (breaks its schema's arity)",
         _proto_case(lambda: _model([helper.make_node("MatMul", ["x", "w", "w"], ["m"], name="mm"),
                                     helper.make_node("Add", ["m", "w"], ["y"], name="add")],
                                    [_vi("x", shape=[2, 2])], [_vi("y", shape=[2, 2])], [_weights(shape=(2, 2))])),
         expect=NEEDS_ORT, message="schema",
         why="readable; check reports the arity; optimize refuses before any pass, ORT cannot load it"),
    Case("attribute_type_undefined", "deep-fuzz regression: an attribute with type UNDEFINED (fuse-conv-bn read None)",
         _edit(lambda m: m.graph.node[0].attribute.append(onnx.AttributeProto(name="epsilon", f=1e-5))),
         message="no valid type"),
    Case("string_tensor", "string initializer and input through Concat: valid", _proto_case(_strings), default=0),
    Case("string_raw_data", "string tensor whose values sit in raw_data",
         _with_init(TensorProto(name="w", data_type=TensorProto.STRING, dims=[2], raw_data=b"abcd")),
         message="string"),
    # --- external data
    Case("ext_valid", "weights in a data file beside the model: valid",
         _external("weights.bin", data=np.ones(6, np.float32).tobytes()), default=0),
    Case("ext_dotdot", "external data at ../secret.bin", _external(f"../{SECRET}", data=None), message="leaves"),
    Case("ext_absolute", "external data at an absolute path", _external(lambda f: str(f.parent.resolve() / SECRET), data=None),
         message="absolute"),
    Case("ext_symlink_file", "external data through a symlink to ../secret.bin", _external("link.bin", data=None,
         setup=_symlink_file), message="leaves"),
    Case("ext_symlink_dir", "external data under a symlinked folder pointing out", _external(f"up/{SECRET}", data=None,
         setup=_symlink_dir), message="leaves"),
    Case("ext_sparse_initializer", "a sparse initializer whose values are at ../secret.bin",
         _proto_case(_ext_sparse_initializer), message="leaves"),
    Case("ext_sparse_attribute", "a Constant's sparse_value with values at ../secret.bin",
         _proto_case(_ext_sparse_attribute), message="leaves"),
    Case("ext_offset_past_eof", "offset beyond the end of the data file", _external("weights.bin", offset=100),
         message="past the end"),
    Case("ext_length_past_eof", "length beyond the end of the data file", _external("weights.bin", length=4096),
         message="past the end"),
    Case("ext_missing_file", "external data file does not exist", _external("nowhere.bin", data=None),
         message="does not exist"),
    Case("ext_empty_tensor_length", "fuzz regression: a [3,0] tensor whose external data holds 24 bytes",
         _external("weights.bin", dims=(3, 0)), message="need 0"),
    Case("ext_nul_location", "fuzz regression: a NUL byte in the location", _external("weights.bin\0../../x"),
         message="nul"),
    Case("ext_string_tensor", "fuzz regression: a string tensor in external data",
         _external("weights.bin", data_type=TensorProto.STRING, dims=(3,)), message="string"),
    # --- nesting and size
    Case("nested_if_1000", "1,000 If ops nested in each other's branches", _bytes_case_of(lambda: nested_if_bytes(1000)),
         message="nests deeper",
         why="deeper than protobuf's parse limit (onnx and onnxruntime cannot read it either)"),
    Case("nested_if_30", "30 nested If ops (within protobuf's limit)", _bytes_case_of(lambda: nested_if_bytes(30)), default=0),
    Case("capture_cycle", "fuzz regression: an If branch returns the If's own output", _proto_case(_capture_cycle),
         message="cycle"),
    Case("million_nodes", "a 1,000,000-node Relu chain", lambda f: _write(f, chain_model_bytes(1_000_000)),
         default=0, slow=True,
         only=("inspect",), why="valid; only inspect runs it (loading alone takes ~20 s)"),
    # --- hostile files (issue 20): never hang, never get killed, never trust a link
    Case("fifo_model", "model.onnx is a FIFO (open() would block forever)", _fifo, message="named pipe"),
    Case("dev_zero_link", "model.onnx is a symlink to /dev/zero (read() never ends)", _dev_zero,
         message="character device"),
    Case("folder_model", "model.onnx is a folder", _folder_model, message="directory"),
    Case("ext_hardlink", "external data is a hard link (st_nlink 2) to ../secret.bin",
         _external(HARDLINK_NAME, data=None, setup=_hardlink), message="hard link"),
    Case("ext_fifo", "external data file is a FIFO", _external("pipe.bin", data=None, setup=_data_fifo),
         message="named pipe"),
    Case("ort_fold_bomb", "24 Expands of ~1 GB each that ORT's optimizer folds (and running allocates)",
         _proto_case(fold_bomb), expect={"inspect": 0, "check": 0, "diff": 0, "viz": 0},
         message="out of memory",
         why="valid and 1 KB on disk; graphtool's folding refuses it, but onnxruntime (compare's optimized "
             "graphs, verification) runs out of memory in its child: one line, exit 2, never a SIGKILL"),
    Case("string_not_utf8", "a string initializer holding bytes that are not UTF-8", _proto_case(_bad_utf8_string),
         message="utf-8"),
    Case("recursive_function", "a model-local function that calls itself", _proto_case(_recursive(False)),
         expect=NEEDS_ORT, why="readable; check reports the recursion; onnxruntime refuses to load it"),
    Case("mutual_recursion", "two model-local functions that call each other", _proto_case(_recursive(True)),
         expect=NEEDS_ORT, why="as recursive_function"),
    Case("two_data_fields", "an initializer with both raw_data and float_data", _with_init(_two_fields()),
         expect={**ODD_OK, "check": 1, "optimize": 2, "compare": 2, "convert": 2}, message="float_data and raw_data",
         why="readable (inspect, viz, diff read it; check reports the contradiction); the commands that run "
             "or write the model refuse it: onnxruntime reads raw_data, another runtime may read float_data"),
    Case("fanout_100k", "one value read by 100,000 nodes", lambda f: _write(f, fanout_model_bytes(100_000)),
         default=0, slow=True, only=("inspect", "optimize", "compare"),
         why="valid; a scale case: optimize and compare are timed by bench/fanout.py"),
    # --- names that are markup
    Case("name_quotes", "names with \" and '", _named("a\"b'c"), default=0),
    Case("name_newline", "names with newlines", _named("line1\nline2\r\n"), default=0),
    Case("name_script", "names that are <script> tags", _named("<script>alert(1)</script>&amp;"), default=0),
    Case("name_dot", "names that close a DOT attribute and add a node", _named('"]; evil [label="pwned'), default=0),
    Case("name_unicode", "non-ASCII names, RTL and emoji", _named("héllo_世界_\u202e_😀"), default=0),
]

BY_NAME = {c.name: c for c in CASES}


def build(case: Case, root: Path) -> Path:
    """Write ``case`` into ``root/<name>/`` (and ``root/secret.bin``); returns the model path."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    secret = root / SECRET
    if not secret.exists():
        secret.write_bytes(b"SECRET" * 4096)
    folder = root / case.name
    if folder.exists():  # rebuild from scratch: builders create files and symlinks
        shutil.rmtree(folder)
    folder.mkdir()
    case.build(folder)
    return folder / MODEL


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 2
    root, slow = Path(argv[0]), "--slow" in argv
    for case in CASES:
        if case.slow and not slow:
            continue
        print(build(case, root))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
