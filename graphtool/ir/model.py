"""A whole model: the main graph, model-local functions, and everything else the file held."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator

from onnx import FunctionProto, ModelProto, OperatorSetIdProto

from graphtool.ir.graph import Graph, Node


@dataclass
class Function:
    """A model-local function: its body is a ``Graph`` whose inputs and outputs are bare names."""

    body: Graph
    proto_shell: FunctionProto  # name, domain, attributes, opset imports, doc string...

    @property
    def name(self) -> str:
        return self.proto_shell.name

    @property
    def domain(self) -> str:
        return self.proto_shell.domain

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.proto_shell.domain, self.proto_shell.name, self.proto_shell.overload)


@dataclass
class Model:
    """``proto_shell`` is the ModelProto minus graph and functions: metadata, opsets, producer,
    training info and any field this IR does not model, so that saving loses nothing."""

    graph: Graph
    proto_shell: ModelProto
    functions: list[Function] = field(default_factory=list)
    base_dir: str | None = None  # the folder external data was resolved against

    @property
    def ir_version(self) -> int:
        return self.proto_shell.ir_version

    @property
    def opset_imports(self) -> dict[str, int]:
        return {op.domain: op.version for op in self.proto_shell.opset_import}

    def opset(self, domain: str = "") -> int | None:
        """The imported version of a domain ('' and 'ai.onnx' are the same domain)."""
        imports = self.opset_imports
        if domain in ("", "ai.onnx"):
            return imports.get("", imports.get("ai.onnx"))
        return imports.get(domain)

    def set_opset(self, domain: str, version: int) -> None:
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
        for _, graph in self.graphs():
            yield from graph.nodes()


def _scope(graph: Graph, root: str) -> str:
    parts: list[str] = []
    g: Graph | None = graph
    while g is not None and g.parent is not None:
        parts.append(g.name or "subgraph")
        g = g.parent
    return "/".join([root, *reversed(parts)])
