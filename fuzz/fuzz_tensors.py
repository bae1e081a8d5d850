"""Coverage-guided fuzzing of what a model's tensors may hold: string and sparse tensors.

Why: these are the two tensor kinds whose contents Python code decodes (UTF-8 strings, sparse
indices and dims) rather than handing to numpy as raw bytes, and where hostile values turned into
"internal error" (a string initializer that is not UTF-8 crashed optimize, diff, viz, compare).
Each input is decoded by ``FuzzedDataProvider`` into a small valid model around one string tensor
(bytes of any kind, as an initializer or a Constant) and one sparse tensor (any dims, values,
indices, index layout), then goes through what the commands do: load, inspect, check, optimize
(level 1, no verification), diff against itself, the viz picture, save and load again. The only
acceptable outcomes are success or a ``GraphtoolError``; anything else is a bug.

    .venv/bin/python fuzz/fuzz_tensors.py -max_total_time=60 -timeout=20 [CORPUS_DIR]
    .venv/bin/python fuzz/fuzz_tensors.py crash-<sha1>          # reproduce one

onnxruntime runs in-process here (``GRAPHTOOL_SANDBOX=0``): libFuzzer's own ``-rss_limit_mb``
bounds memory, and a child per input would only slow the search.
"""

from __future__ import annotations

import os
import sys
import tempfile

os.environ.setdefault("GRAPHTOOL_SANDBOX", "0")

import atheris  # noqa: E402

with atheris.instrument_imports(include=["graphtool"]):
    from graphtool import io
    from graphtool.check import check
    from graphtool.diff import diff
    from graphtool.errors import GraphtoolError
    from graphtool.inspect import inspect_model
    from graphtool.optimize import optimize
    from graphtool.render.dot import model_picture

import numpy as np  # noqa: E402
from onnx import ModelProto, TensorProto, helper  # noqa: E402

OUT = os.path.join(tempfile.mkdtemp(prefix="graphtool-fuzz-tensors-"), "out.onnx")
SPARSE_TYPES = [TensorProto.FLOAT, TensorProto.INT64, TensorProto.INT32, TensorProto.UINT8, TensorProto.STRING,
                TensorProto.FLOAT16, TensorProto.BOOL, TensorProto.DOUBLE, 0, 99]


def _dims(fdp: atheris.FuzzedDataProvider, most: int = 3) -> list[int]:
    return [fdp.ConsumeIntInRange(-2, 6) for _ in range(fdp.ConsumeIntInRange(0, most))]


def build(data: bytes) -> bytes:
    """The model ``data`` describes (serialized): string tensor s, sparse tensor sp, both read."""
    fdp = atheris.FuzzedDataProvider(data)
    # Choices read "valid unless the data says otherwise" (an exhausted provider returns zeros),
    # so most inputs load and reach the commands; the rest test the refusals.
    count = fdp.ConsumeIntInRange(0, 4)
    hostile = fdp.ConsumeIntInRange(0, 3) == 3
    strings = [fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 12)) if hostile
               else fdp.ConsumeUnicodeNoSurrogates(fdp.ConsumeIntInRange(0, 12)).encode() for _ in range(count)]
    s_dims = _dims(fdp) if fdp.ConsumeIntInRange(0, 3) == 3 else [count]
    s = TensorProto(name="s", data_type=TensorProto.STRING)
    s.dims.extend(s_dims)
    s.string_data.extend(strings)
    if fdp.ConsumeIntInRange(0, 7) == 7:
        s.raw_data = fdp.ConsumeBytes(8)
    values = TensorProto(name="sp", data_type=SPARSE_TYPES[fdp.ConsumeIntInRange(0, len(SPARSE_TYPES) - 1)])
    n = fdp.ConsumeIntInRange(0, 6)
    values.dims.extend(_dims(fdp, 1) if fdp.ConsumeIntInRange(0, 3) == 3 else [n])
    if values.data_type == TensorProto.STRING:
        values.string_data.extend(fdp.ConsumeBytes(3) for _ in range(n))
    elif values.data_type in (TensorProto.FLOAT,):
        values.float_data.extend(fdp.ConsumeFloat() for _ in range(n))
    elif values.data_type in (TensorProto.INT64,):
        values.int64_data.extend(fdp.ConsumeIntInRange(-2**63, 2**63 - 1) for _ in range(n))
    else:
        values.raw_data = fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 24))
    indices = TensorProto(name="sp_idx", data_type=TensorProto.INT64 if fdp.ConsumeIntInRange(0, 5) else TensorProto.INT32)
    idx = sorted({fdp.ConsumeIntInRange(0, 30) for _ in range(n)}) if fdp.ConsumeIntInRange(0, 3) != 3 else \
        [fdp.ConsumeIntInRange(-3, 40) for _ in range(fdp.ConsumeIntInRange(0, 8))]
    indices.dims.extend(_dims(fdp, 2) if fdp.ConsumeIntInRange(0, 3) == 3 else [len(idx)])
    indices.int64_data.extend(idx)
    sparse = helper.make_sparse_tensor(values, indices, _dims(fdp) if fdp.ConsumeIntInRange(0, 3) == 3 else [32])
    as_constant = fdp.ConsumeBool()
    nodes = [helper.make_node("Identity", ["s"], ["s_out"], name="id_s"),
             helper.make_node("Identity", ["sp"], ["sp_out"], name="id_sp")]
    if as_constant:
        nodes.insert(0, helper.make_node("Constant", [], ["sp"], sparse_value=sparse, name="const_sp"))
    if fdp.ConsumeBool():
        nodes.insert(0, helper.make_node("Constant", [], ["s"], value=s, name="const_s"))
        inits = []
    else:
        inits = [s]
    graph = helper.make_graph(nodes, "tensors", [], [helper.make_tensor_value_info("s_out", TensorProto.STRING, None),
                                                    helper.make_tensor_value_info("sp_out", values.data_type or 1, None)],
                              inits)
    if not as_constant:
        graph.sparse_initializer.append(sparse)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def check_one(data: bytes) -> None:
    """The property under test; raises only for bugs."""
    try:
        model = io.load_proto(io.parse_model(build(data), "fuzz input"))
    except GraphtoolError:
        return
    inspect_model(model, None)
    for step in (lambda: check(model, "ort"), lambda: optimize(model, level=1), lambda: diff(model, model),
                 lambda: model_picture(model)):
        try:
            step()
        except GraphtoolError:
            pass
    try:
        io.save(model, OUT)
    except GraphtoolError:
        return
    io.load(OUT)  # what save wrote must load again


def TestOneInput(data: bytes) -> None:
    try:
        check_one(data)
    finally:
        if os.path.exists(OUT):
            os.unlink(OUT)


def main() -> None:
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
