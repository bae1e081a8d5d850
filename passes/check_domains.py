"""Analysis: every domain a node uses is imported, and known to someone.

Cases:

1. A node's domain is not imported by its graph's owner (the model, or the function whose body
   it is): the checker and onnxruntime refuse the model → error. Missing the default domain gets
   its own message, since it usually means the opset import was lost by a tool.
2. A domain that is neither standard ONNX (ai.onnx, ai.onnx.ml, ai.onnx.training,
   ai.onnx.preview…), an onnxruntime domain (com.microsoft…), nor a model-local function's
   domain: valid ONNX, but every runtime needs a custom-op library for it → warning, once per
   graph and domain (``check-ort-kernels`` says whether onnxruntime can run it).
"""

from __future__ import annotations

import functools

import onnx

from graphtool.check import add, local_functions, norm_domain, place_of, show_domain
from graphtool.ir.graph import Graph, Node
from graphtool.pass_manager import Pass, PassContext, PassResult, register

RUNTIME_DOMAINS = {"com.microsoft", "com.microsoft.nchwc", "com.microsoft.experimental", "com.ms.internal.nhwc"}


@functools.lru_cache(maxsize=1)
def standard_domains() -> frozenset[str]:
    found = {norm_domain(s.domain) for s in onnx.defs.get_all_schemas_with_history()}
    return frozenset(found | {"", "ai.onnx.ml", "ai.onnx.training", "ai.onnx.preview", "ai.onnx.preview.training"})


def known_domain(domain: str) -> bool:
    return norm_domain(domain) in standard_domains() or domain in RUNTIME_DOMAINS


@register(level=1, priority=20)
class CheckDomains(Pass):
    """Check that every node's domain is imported, and flag domains no standard or runtime defines."""

    analysis = True

    def run(self, graph: Graph, ctx: PassContext) -> PassResult:
        place = place_of(ctx.model, graph)
        local_domains = {d for d, _ in local_functions(ctx.model)}
        first: dict[str, Node] = {}
        counts: dict[str, int] = {}
        for node in graph.nodes():
            domain = norm_domain(node.domain)
            counts[domain] = counts.get(domain, 0) + 1
            first.setdefault(domain, node)
        before = len(ctx.findings)
        owner = "the model" if place.function is None else f"function {place.function.domain}:{place.function.name}"
        for domain, node in first.items():
            n = counts[domain]
            uses = f"{n} node{'s' * (n != 1)}"
            verb = "use" if n != 1 else "uses"
            if domain not in place.opsets:
                if domain == "":
                    add(ctx, "error", "opset-import",
                        f"{owner} imports no ai.onnx opset, yet {uses} {verb} the default domain",
                        place, node, hint="add an opset import for '' (the opset the model was written for)")
                else:
                    add(ctx, "error", "opset-import",
                        f"{owner} does not import domain '{domain}', yet {uses} {verb} it",
                        place, node, hint=f"add an opset import for '{domain}'")
            if not known_domain(domain) and domain not in local_domains:
                add(ctx, "warning", "unknown-domain",
                    f"domain '{show_domain(domain)}' is not a standard ONNX or onnxruntime domain, nor a model-local function's",
                    place, node, hint=f"runtimes need a custom-op library that implements {domain} ops")
        n = len(ctx.findings) - before
        return PassResult(changed=False, stats={"findings": n} if n else {})
