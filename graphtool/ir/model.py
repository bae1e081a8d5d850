"""A whole model: the main graph, model-local functions, and everything else the file held."""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator

from onnx import FunctionProto, ModelProto, OperatorSetIdProto, TypeProto

from graphtool.ir.graph import Graph, Node


@dataclass
class Function:
    """A model-local function: its body is a ``Graph`` whose inputs and outputs are bare names."""

    body: Graph
    proto_shell: FunctionProto  # name, domain, attributes, opset imports, doc string...

    @property
    def name(self) -> str:
        """The function's name (what nodes calling it use as op type)."""
        return self.proto_shell.name

    @property
    def domain(self) -> str:
        """The function's domain."""
        return self.proto_shell.domain

    @property
    def key(self) -> tuple[str, str, str]:
        """(domain, name, overload): what identifies a function in a model."""
        return (self.proto_shell.domain, self.proto_shell.name, self.proto_shell.overload)


# Model -> an object with ``type_of(graph, value)``: the shape oracle, which lives a floor above
# the IR (graphtool.shapes registers it on import; ``graphtool.load`` imports it)
SHAPE_ORACLE: Callable[["Model"], Any] | None = None


@dataclass(repr=False)
class Model:
    """A loaded model: the main ``graph``, model-local ``functions``, and ``proto_shell``, the
    ModelProto minus graph and functions (metadata, opsets, producer, training info and any field
    this IR does not model), so that saving loses nothing."""

    graph: Graph
    proto_shell: ModelProto
    functions: list[Function] = field(default_factory=list)
    base_dir: str | None = None  # the folder external data was resolved against

    def __post_init__(self) -> None:
        self._oracle: Any = None
        self._oracle_key: Any = None
        ref = weakref.ref(self)
        self.graph._model_ref = ref
        self.graph._model_of = Model.of_graph
        self.graph._model_parts = (self.proto_shell, self.functions, self.base_dir)  # ``of_graph``
        for fn in self.functions:
            fn.body._model_ref, fn.body._model_of = ref, Model.of_graph

    @staticmethod
    def of_graph(graph: Graph) -> "Model | None":
        """The model ``graph`` (a main graph) belongs to: alive, or rebuilt around it when only the
        graph was kept (``g = gt.load(p).graph``), so ``g.shape(v)`` still answers."""
        model = graph._model_ref() if graph._model_ref is not None else None
        if model is None and getattr(graph, "_model_parts", None) is not None:
            shell, functions, base_dir = graph._model_parts
            model = Model(graph, shell, functions, base_dir)
            graph._kept_model = model  # the graph now keeps its model alive (a cycle GC frees)
        return model

    def __repr__(self) -> str:
        shell = self.proto_shell
        producer = " ".join(p for p in (shell.producer_name, shell.producer_version) if p) or "unknown producer"
        opsets = ", ".join(f"{d or 'ai.onnx'} {v}" for d, v in self.opset_imports.items())
        functions = f", {len(self.functions)} functions" if self.functions else ""
        return f"<Model ({producer}; IR {self.ir_version}; opset {opsets}) {self.graph!r}{functions}>"

    def inferred_type(self, graph: Graph, value: str) -> TypeProto | None:
        """``value``'s type from ONNX shape inference over this model (as seen from ``graph``),
        computed once and again only after an edit (any graph's verbs, or a changed input
        declaration). None when no shape oracle is loaded (``import graphtool.shapes``)."""
        if SHAPE_ORACLE is None:
            return None
        key = (tuple(g._edits for _, g in self.graphs()),
               tuple(v.SerializeToString() if v is not None else b"" for v in self.graph.inputs.values()))
        if self._oracle is None or key != self._oracle_key:
            self._oracle, self._oracle_key = SHAPE_ORACLE(self), key
        return self._oracle.type_of(graph, value)

    def extract(self, inputs: Iterable[str], outputs: Iterable[str]) -> "Model":
        """A new model: the part of the main graph that computes ``outputs`` from ``inputs``
        (onnx-graphsurgeon's cut; ``onnx.utils.extract_model`` on the IR). This model is
        unchanged. Raises ValueError when the part reads a value that is neither one of
        ``inputs``, an initializer nor computed from them.

        >>> head = m.extract(["input"], ["/layer1/layer1.0/relu/Relu_output_0"])
        """
        cut = self.copy()
        g = cut.graph
        g.set_graph_outputs(outputs)
        g.set_graph_inputs(inputs)
        g.cleanup()
        for node in g.nodes():
            for v in node.inputs:
                if v and g.producer(v) is None and not g.is_input(v) and not g.is_initializer(v) \
                        and v not in g.sparse_initializers:
                    raise ValueError(f"the part between these tensors also reads '{v}' (by {node.op_type} "
                                     f"'{node.name}'); add it to the inputs")
        return cut

    @property
    def ir_version(self) -> int:
        """The file's IR version."""
        return self.proto_shell.ir_version

    @property
    def opset_imports(self) -> dict[str, int]:
        """Imported opsets: domain ('' = ONNX) -> version."""
        return {op.domain: op.version for op in self.proto_shell.opset_import}

    def opset(self, domain: str = "") -> int | None:
        """The imported version of a domain ('' and 'ai.onnx' are the same domain)."""
        imports = self.opset_imports
        if domain in ("", "ai.onnx"):
            return imports.get("", imports.get("ai.onnx"))
        return imports.get(domain)

    def set_opset(self, domain: str, version: int) -> None:
        """Import ``domain`` at ``version`` (replacing an existing import of it)."""
        for op in self.proto_shell.opset_import:
            if op.domain == domain:
                op.version = version
                return
        self.proto_shell.opset_import.append(OperatorSetIdProto(domain=domain, version=version))

    def graphs(self) -> Iterator[tuple[str, Graph]]:
        """(scope, graph) for every graph that holds nodes: subgraphs before their parents,
        the main graph, then each function body — so one loop can visit them all alike."""
        for graph in self.graph.walk():
            yield _scope(graph, "main"), graph
        for fn in self.functions:
            for graph in fn.body.walk():
                yield _scope(graph, f"function {fn.domain}:{fn.name}"), graph

    def copy(self) -> "Model":
        """An independent copy, built from the IR itself (no serialization): ``Graph.copy``."""
        shell = ModelProto()
        shell.CopyFrom(self.proto_shell)
        functions = []
        for fn in self.functions:
            fn_shell = FunctionProto()
            fn_shell.CopyFrom(fn.proto_shell)
            functions.append(Function(fn.body.copy(), fn_shell))
        return Model(graph=self.graph.copy(), proto_shell=shell, functions=functions, base_dir=self.base_dir)

    def pristine(self) -> bool:
        """True while no graph of the model had an op added or removed or an edge edited since
        load, and each one's file order was topological (its ids are then its load order)."""
        return all(graph._pristine and graph._in_order for _, graph in self.graphs())

    def node_count(self) -> int:
        """Op nodes in the main graph and all its subgraphs (functions counted separately)."""
        return sum(len(g) for g in self.graph.walk())

    def all_nodes(self) -> Iterator[Node]:
        """Every op node of every graph (``graphs()`` order)."""
        for _, graph in self.graphs():
            yield from graph.nodes()


def _scope(graph: Graph, root: str) -> str:
    parts: list[str] = []
    g: Graph | None = graph
    while g is not None and g.parent is not None:
        parts.append(g.name or "subgraph")
        g = g.parent
    return "/".join([root, *reversed(parts)])
