"""The one way in (``load``) and the one way out (``save``).

``load`` refuses what it cannot represent safely before reading a single weight byte: paths that
leave the model's folder, byte ranges past the end of a file. ``save`` never leaves a
half-written file: it writes temp files in the target folder and renames them into place, and it
streams external weights one tensor at a time, so a 10 GB model saves in constant memory.
"""

from __future__ import annotations

import contextlib
import functools
import os
import secrets
from typing import BinaryIO, Callable, Iterator

from google.protobuf.message import DecodeError
from onnx import GraphProto, ModelProto, NodeProto, TensorProto

from graphtool import fileguard
from graphtool.errors import BadModel, GraphtoolError
from graphtool.ir.from_onnx import from_onnx
from graphtool.ir.protos import MODEL_GRAPH_FIELD, _read_varint, key, shell_of, split_repeated, top_level_records, varint
from graphtool.ir.model import Model
from graphtool.ir.tensor import Tensor
from graphtool.ir.stream import write_model
from graphtool.ir.to_onnx import _as_is, model_bytes

PROTOBUF_LIMIT = 2**31 - 1
INLINE_LIMIT = 1_800_000_000  # above this many weight bytes, a save goes to external data
EXTERNAL_MIN_BYTES = 1024  # smaller tensors stay inline, as onnx's own converter does
PAGE = 4096  # big external tensors start on a page boundary so runtimes can mmap them


def parse_model(data: bytes, what: str = "file") -> ModelProto:
    if not data:
        raise BadModel(f"{what} is empty")
    if len(data) > PROTOBUF_LIMIT:
        raise BadModel(f"{what} is larger than 2 GB: ONNX models that big must keep weights as external data")
    proto = ModelProto()
    try:
        proto.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as err:
        reason = str(err).splitlines()[0] if str(err) else "protobuf parse failed"
        if "MaxDepth" in reason:
            raise BadModel(f"{what}: the model nests deeper than protobuf can parse (subgraphs inside subgraphs; "
                           "onnx and onnxruntime cannot read it either)") from None
        raise BadModel(f"{what} is not an ONNX model (truncated or another format): {reason}") from None
    if not _utf8_ok(data):
        raise BadModel(f"{what}: a name or string field of the model is not valid UTF-8")
    if not proto.HasField("graph"):
        raise BadModel(f"{what} is not an ONNX model: it holds no graph")
    if proto.ir_version <= 0:
        raise BadModel(f"{what} is not an ONNX model: IR version {proto.ir_version} is not valid")
    if proto.ir_version >= 3 and not proto.opset_import:
        raise BadModel(f"{what}: the model imports no opset (IR version {proto.ir_version} requires one)")
    for imports in (proto.opset_import, *(fn.opset_import for fn in proto.functions)):
        for op in imports:  # onnx's schema lookups take a C int: larger versions crash them
            if not 0 <= op.version < 2**31:
                raise BadModel(f"{what}: opset version {op.version} of domain '{op.domain or 'ai.onnx'}' is not valid")
    return proto


@functools.lru_cache(maxsize=1)
def _strict_model_class() -> type | None:
    """ModelProto as a protobuf-editions message with UTF-8 validation on every string field.

    onnx.proto is proto2, whose parser accepts any bytes in a string field; Python then hands
    back ``bytes`` (or raises) wherever such a name is read, deep inside graphtool. Parsing once
    more with this twin rejects them up front, in C, at the cost of one extra parse.
    """
    try:
        from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

        fdp = descriptor_pb2.FileDescriptorProto()
        ModelProto.DESCRIPTOR.file.CopyToProto(fdp)
        fdp.syntax, fdp.edition = "editions", descriptor_pb2.EDITION_2023
        features = fdp.options.features
        features.field_presence = features.EXPLICIT  # proto2 semantics, except for UTF-8
        features.enum_type = features.CLOSED
        features.repeated_field_encoding = features.EXPANDED
        features.utf8_validation = features.VERIFY
        pool = descriptor_pool.DescriptorPool()
        pool.Add(fdp)
        return message_factory.GetMessageClass(pool.FindMessageTypeByName(ModelProto.DESCRIPTOR.full_name))
    except Exception:  # an old protobuf without editions: names are then checked as they are read
        return None


def _utf8_ok(data: bytes) -> bool:
    strict = _strict_model_class()
    if strict is None:
        return True
    try:
        strict().ParseFromString(data)
    except DecodeError as err:
        return "UTF-8" not in str(err)
    return True


def load(path: str | os.PathLike[str], validated: Callable[[], None] | None = None,
         parsed: Callable[[bytes, ModelProto], None] | None = None) -> Model:
    """Read a model into the IR. External data stays on disk until a tensor is asked for.

    The file is ``stat``-ed before it is opened: FIFOs, devices, sockets and folders are refused
    by kind (a FIFO would block forever, ``/dev/zero`` would read until the OOM killer came), and
    no more than its stat size (at most 2 GB) is ever read.

    ``validated`` is called once the file has parsed and passed those checks, before the IR is
    built and with as little of the parse alive as the build allows: ``graphtool inspect`` runs
    onnx's checker there, so the checker's own parse and the IR never coexist (issue 19).

    ``parsed`` gets the file's bytes and their parse as soon as they parsed, before anything else
    is checked or built: ``compare`` starts onnxruntime's optimizer on them meanwhile (it must not
    trust them before ``load`` returns)."""
    path = os.fspath(path)
    data = fileguard.read_regular(path, PROTOBUF_LIMIT)
    proto = parse_model(data, path)
    if parsed is not None:
        parsed(data, proto)
    base_dir = os.path.dirname(os.path.abspath(path))
    if len(proto.graph.node) >= BATCH_NODES:
        split = _split_main_nodes(data)
        if split is not None:  # the full parse only validated: build from the parts (peak: IR + one chunk)
            del proto, data
            if validated is not None:
                validated()
            shell, chunks = split
            return from_onnx(ModelProto.FromString(shell), base_dir, main_nodes=_chunked_nodes(chunks))
    del data
    if validated is not None:
        validated()
    return from_onnx(proto, base_dir)


BATCH_NODES = 100_000  # main graphs this big are built from chunks of their nodes ...
NODES_PER_CHUNK = 50_000  # ... parsed one at a time


def _split_main_nodes(data: bytes) -> tuple[bytes, list[bytes]] | None:
    """The model without its main graph's nodes, and those nodes' records in chunks (each parses
    as a GraphProto holding just them). A parsed million-node model is ~350 MB of protobuf
    (upb's messages, not the 25 MB file): building the IR from chunks, it is never all alive
    next to the IR. None when the bytes do not have the one expected graph record."""
    try:
        records = top_level_records(data)
        graphs = [(start, end) for number, start, end in records if number == MODEL_GRAPH_FIELD]
        if len(graphs) != 1:
            return None
        start, end = graphs[0]
        _, body = _read_varint(data, start)  # the key
        length, body = _read_varint(data, body)
        chunks, rest = split_repeated(data[body:body + length], 1, NODES_PER_CHUNK)
    except (ValueError, IndexError):
        return None
    return b"".join((data[:start], key(MODEL_GRAPH_FIELD), varint(len(rest)), rest, data[end:])), chunks


def _chunked_nodes(chunks: list[bytes]) -> Iterator[NodeProto]:
    while chunks:
        part = GraphProto.FromString(chunks.pop(0))  # dropped (and its bytes) once read
        yield from part.node
        del part


def load_proto(model: ModelProto, base_dir: str | None = None) -> Model:
    """The IR of an in-memory ModelProto (tests, and models that onnx tooling returns)."""
    return from_onnx(model, base_dir)


def _all_tensors(model: Model) -> Iterator[Tensor]:
    for _, graph in model.graphs():
        yield from graph.initializers.values()


def wants_external(model: Model) -> bool:
    """Keep weights external when they were, or when they would not fit in one protobuf."""
    total = 0
    for tensor in _all_tensors(model):
        if tensor.external is not None:
            return True
        total += tensor.nbytes
    return total > INLINE_LIMIT


class _ExternalWriter:
    """Writes tensors into one data file beside the model, returning the proto that points there."""

    def __init__(self, handle: BinaryIO, location: str):
        self.handle = handle
        self.location = location
        self.offset = 0

    def __call__(self, tensor: Tensor) -> TensorProto:
        if tensor.nbytes < EXTERNAL_MIN_BYTES or tensor.data_type == TensorProto.STRING:
            if tensor.external is None:
                return tensor.proto
            inline = shell_of(tensor.proto, ("external_data", "data_location"))
            inline.raw_data = tensor.raw_bytes()
            return inline
        align = PAGE if tensor.nbytes >= (1 << 20) else 64
        pad = (-self.offset) % align
        if pad:
            self.handle.write(b"\0" * pad)
            self.offset += pad
        start = self.offset
        for chunk in tensor.iter_chunks():
            self.handle.write(chunk)
            self.offset += len(chunk)
        tensor.release()
        proto = tensor.metadata_proto()
        proto.data_location = TensorProto.EXTERNAL
        for key, value in (("location", self.location), ("offset", str(start)), ("length", str(self.offset - start))):
            entry = proto.external_data.add()
            entry.key, entry.value = key, value
        return proto


@contextlib.contextmanager
def atomic_file(path: str) -> Iterator[BinaryIO]:
    """A temp file in ``path``'s folder that becomes ``path`` only if the block succeeds.

    The rename is what makes a crash, Ctrl-C or kill leave no partial output. There is no fsync:
    it guards only against power loss, and cost more than the whole optimization on a busy disk
    (0.4 s for a 47 MB ResNet-18), which no peer tool pays either."""
    folder = os.path.dirname(os.path.abspath(path))
    # Named before it exists, and created inside a try: a Ctrl-C landing at any instant (even
    # inside the call that creates it, where mkstemp would not yet have told us the name) still
    # knows what to remove.
    tmp = os.path.join(folder, f".{os.path.basename(path)}.{secrets.token_hex(8)}.tmp")
    try:
        handle = open(tmp, "xb")
    except FileExistsError:
        raise GraphtoolError(f"{tmp}: temp file already exists") from None
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    try:
        with handle:
            yield handle
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def save(model: Model, path: str | os.PathLike[str], external: bool | None = None) -> None:
    """Write ``model`` to ``path`` atomically; weights go to ``<name>.data`` when ``external`` is
    true, or (by default) when the source kept them external or they exceed 1.8 GB."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise GraphtoolError(f"{path}: folder does not exist")
    if external is None:
        external = wants_external(model)
    if not external:
        with atomic_file(path) as handle:
            written = write_model(model, handle, _as_is)
            if written > PROTOBUF_LIMIT:
                raise GraphtoolError("model exceeds 2 GB; save it with external data")
        return
    location = os.path.basename(path) + ".data"
    data_path = os.path.join(folder, location)
    placed = False
    try:  # the data file goes into place first: the model must never exist without its weights
        with atomic_file(path) as handle:
            with atomic_file(data_path) as data_handle:
                data = model_bytes(model, _ExternalWriter(data_handle, location))
            placed = True
            handle.write(data)
    except BaseException:
        if placed:  # weights without their model are of no use to anyone
            with contextlib.suppress(FileNotFoundError):
                os.unlink(data_path)
        raise


def to_bytes(model: Model) -> bytes:
    """The serialized model with weights inline (for onnxruntime sessions and tests)."""
    return model_bytes(model, _inline)


def _inline(tensor: Tensor) -> TensorProto:
    if tensor.external is None:
        return tensor.proto
    proto = shell_of(tensor.proto, ("external_data", "data_location"))
    proto.raw_data = tensor.raw_bytes()
    return proto
