"""Analysis: the model's IR version and opset imports agree with each other and with onnx.

The IR version is a promise about which protobuf features a file may use; each opset was
released with a minimum IR version (``onnx.helper.OP_SET_ID_VERSION_MAP``, built from
``VERSION_TABLE``). Cases, by what a consumer does with them:

1. IR version newer than this onnx knows: the checker and onnxruntime refuse the file → error.
2. Opset newer than this onnx defines (standard domains only): no schema to check against,
   onnxruntime refuses → error.
3. IR version older than an opset needs: the checker and onnxruntime accept it, so this is not an
   error. One IR version behind is what exporters of the opset-9 era wrote (IR 3 + opset 9 in the
   onnx model zoo): info. Two or more behind means the header was edited by hand or by a tool
   that forgot the IR: warning.
4. The file uses a feature its IR version lacks: initializers that are not graph inputs need
   IR ≥ 4 (the checker refuses them) → error; model-local functions need IR ≥ 8 (older readers
   drop them) → warning.
5. A domain imported twice (also '' and 'ai.onnx', which are one domain): readers keep either
   version → warning.
6. A function body importing another version of a domain than the model, while one of its ops
   changes definition between the two: the checker refuses it → error.
"""

from __future__ import annotations

import onnx

from graphtool.check import (
    Place,
    add,
    fn_label,
    max_known_opset,
    max_opset_for_ir,
    min_ir_for,
    norm_domain,
    place_of,
    show_domain,
)
from graphtool.ir.graph import Graph
from graphtool.ir.model import Model
from graphtool.pass_manager import Pass, PassContext, PassResult, register
from graphtool.runtime import schema_version

STANDARD = ("", "ai.onnx.ml", "ai.onnx.training", "ai.onnx.preview", "ai.onnx.preview.training")
FUNCTIONS_IR = 8
INITIALIZER_NOT_INPUT_IR = 4


@register(level=1, priority=10)
class CheckVersions(Pass):
    """Check the IR version against the opset imports, and opset imports for duplicates and unknown versions."""

    analysis = True

    def run(self, graph: Graph, ctx: PassContext) -> PassResult:
        place = place_of(ctx.model, graph)
        if not place.is_root:
            return PassResult(changed=False)
        if place.function is None:
            n = self.check_model(ctx, place)
        else:
            n = self.check_function(ctx, place, graph)
        return PassResult(changed=False, stats={"findings": n} if n else {})

    def check_model(self, ctx: PassContext, place: Place) -> int:
        model: Model = ctx.model
        before = len(ctx.findings)
        ir = model.ir_version
        if ir > onnx.IR_VERSION:
            add(ctx, "error", "ir-version", f"IR version {ir} is newer than this onnx release knows (≤ {onnx.IR_VERSION})",
                place, hint="the model was written by a newer onnx; upgrade onnx/onnxruntime to read it")
        duplicates(ctx, place, [(op.domain, op.version) for op in model.proto_shell.opset_import], "the model")
        for op in model.proto_shell.opset_import:
            domain, version = norm_domain(op.domain), op.version
            newest = max_known_opset(domain)
            if domain in STANDARD and newest is not None and (version > newest or version < 1):
                add(ctx, "error", "opset-import",
                    f"{show_domain(domain)} opset {version} is not a released version (onnx {onnx.__version__} knows 1–{newest})",
                    place, hint=f"import a released version (≤ {newest})")
                continue
            need = min_ir_for(domain, version)
            if need is None or ir >= need or ir > onnx.IR_VERSION:
                continue
            supported = max_opset_for_ir(domain, ir)
            severity = "info" if need - ir == 1 else "warning"
            add(ctx, severity, "ir-version",
                f"IR version {ir} is older than {show_domain(domain)} opset {version} needs (IR ≥ {need}; "
                f"IR {ir} goes with opset ≤ {supported})",
                place, hint=f"set ir_version to {need} or newer")
        if ir < INITIALIZER_NOT_INPUT_IR:
            main = model.graph
            loose = [name for name in main.initializers if not main.is_input(name)]
            if loose:
                add(ctx, "error", "ir-version",
                    f"IR version {ir} requires every initializer to be a graph input; {len(loose)} are not (e.g. '{loose[0]}')",
                    place, hint=f"set ir_version to {INITIALIZER_NOT_INPUT_IR} or newer")
        if model.functions and ir < FUNCTIONS_IR:
            add(ctx, "warning", "ir-version",
                f"model-local functions need IR version ≥ {FUNCTIONS_IR}; this model is IR {ir}, so older readers drop them",
                place, hint=f"set ir_version to {FUNCTIONS_IR} or newer")
        return len(ctx.findings) - before

    def check_function(self, ctx: PassContext, place: Place, body: Graph) -> int:
        """A function's own imports, and their agreement with the model's for the ops it uses."""
        before = len(ctx.findings)
        fn = place.function
        assert fn is not None
        imports = [(op.domain, op.version) for op in fn.proto_shell.opset_import]
        duplicates(ctx, place, imports, f"function {fn_label(fn)}")
        model_opsets = {norm_domain(d): v for d, v in ctx.model.opset_imports.items()}
        for domain, version in place.opsets.items():
            other = model_opsets.get(domain)
            if other is None or other == version or domain not in STANDARD:
                continue
            for graph in body.walk():
                clash = next(
                    (node for node in graph.nodes()
                     if norm_domain(node.domain) == domain
                     and schema_version(node.op_type, domain, version) != schema_version(node.op_type, domain, other)),
                    None,
                )
                if clash is not None:
                    add(ctx, "error", "opset-import",
                        f"function {fn_label(fn)} imports {show_domain(domain)} opset {version} but the model imports {other}, "
                        f"and {clash.op_type} differs between the two",
                        place, clash, hint="import the same version in the function as in the model")
                    break
        return len(ctx.findings) - before


def duplicates(ctx: PassContext, place: Place, imports: list[tuple[str, int]], owner: str) -> None:
    seen: dict[str, list[int]] = {}
    for domain, version in imports:
        seen.setdefault(norm_domain(domain), []).append(version)
    for domain, versions in seen.items():
        if len(versions) > 1:
            listed = " and ".join(str(v) for v in versions)
            add(ctx, "warning", "opset-import",
                f"{owner} imports {show_domain(domain)} {len(versions)} times (versions {listed}); readers may use either",
                place, hint="keep one import per domain ('' and 'ai.onnx' are the same domain)")
