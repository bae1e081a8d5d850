"""The layered viewer at scale, in a real browser: ``graphtool viz MODEL -o page.html`` (a fresh
process) on a 50k-node chain, a 1M-node chain (``bench/gen_models.py``'s residual stack) and an
LLM-size decoder (``decoder()`` below: 32 layers in the TorchScript exporter's naming, with its
shape arithmetic and a KV cache, random weights), then the page in headless chromium (Debian's
``chromium`` through Playwright, as the tests): file size, first paint, interactive (the page's
``data-ready`` stamp: its first screen laid out and drawn), and a search for the model's last op
(by name) that must open the layers around it and put it on screen. Screenshots go to ``--out``.

    python bench/viewer_scale.py [--sizes 50000,1000000] [--layers 32] [--out bench/out/viewer]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def decoder(layers: int = 32, hidden: int = 64, heads: int = 4, vocab: int = 1000, seed: int = 0) -> onnx.ModelProto:
    """A Llama-style decoder as torch.onnx.export (TorchScript) writes it: every op named by its
    module scope (``/model/layers.3/self_attn/q_proj/MatMul``), RMSNorm spelled out, rotary
    embedding, the reshape targets computed from Shape/Gather/Unsqueeze/Concat, a KV cache
    (``past_key_values.N.key`` in, ``present.N.key`` out), SiLU-gated MLP; random weights."""
    rng = np.random.default_rng(seed)
    nodes: list[onnx.NodeProto] = []
    inits: list[TensorProto] = []
    head = hidden // heads

    def w(name: str, *shape: int) -> str:
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) * 0.02).astype(np.float32), name))
        return name

    def c(name: str, value) -> str:
        arr = np.array(value)
        nodes.append(helper.make_node("Constant", [], [name + "_output_0"], name=name, value=numpy_helper.from_array(arr)))
        return name + "_output_0"

    def op(kind: str, scope: str, ins: list[str], n_out: int = 1, suffix: str = "", **attrs) -> list[str]:
        name = f"{scope}/{kind}{suffix}"
        outs = [f"{name}_output_{k}" for k in range(n_out)]
        nodes.append(helper.make_node(kind, ins, outs, name=name, **attrs))
        return outs

    def rmsnorm(scope: str, x: str, weight: str) -> str:
        two = c(f"{scope}/Constant", np.float32(2.0))
        p = op("Pow", scope, [x, two])[0]
        m = op("ReduceMean", scope, [p], axes=[-1], keepdims=1)[0]
        eps = c(f"{scope}/Constant_1", np.float32(1e-6))
        a = op("Add", scope, [m, eps])[0]
        s = op("Sqrt", scope, [a])[0]
        d = op("Div", scope, [x, s])[0]
        return op("Mul", scope, [d, weight])[0]

    def shape_of(scope: str, x: str, index: int, suffix: str) -> str:
        sh = op("Shape", scope, [x], suffix=suffix)[0]
        idx = c(f"{scope}/Constant_{suffix or 0}g", np.int64(index))
        g = op("Gather", scope, [sh, idx], suffix=suffix, axis=0)[0]
        return op("Unsqueeze", scope, [g, c(f"{scope}/Constant_{suffix or 0}u", np.array([0], np.int64))],
                  suffix=suffix)[0]

    def heads_view(scope: str, x: str, suffix: str) -> str:
        b = shape_of(scope, x, 0, suffix + "b")
        s = shape_of(scope, x, 1, suffix + "s")
        rest = c(f"{scope}/Constant_{suffix}r", np.array([heads, head], np.int64))
        target = op("Concat", scope, [b, s, rest], suffix=suffix, axis=0)[0]
        r = op("Reshape", scope, [x, target], suffix=suffix)[0]
        return op("Transpose", scope, [r], suffix=suffix, perm=[0, 2, 1, 3])[0]

    def rotary(scope: str, x: str, cos: str, sin: str, suffix: str) -> str:
        half = head // 2
        a = op("Slice", scope, [x, c(f"{scope}/Constant_{suffix}s0", np.array([0])), c(f"{scope}/Constant_{suffix}s1", np.array([half])),
                                c(f"{scope}/Constant_{suffix}s2", np.array([3]))], suffix=suffix + "_1")[0]
        b = op("Slice", scope, [x, c(f"{scope}/Constant_{suffix}s3", np.array([half])), c(f"{scope}/Constant_{suffix}s4", np.array([head])),
                                c(f"{scope}/Constant_{suffix}s5", np.array([3]))], suffix=suffix + "_2")[0]
        nb = op("Neg", scope, [b], suffix=suffix)[0]
        rot = op("Concat", scope, [nb, a], suffix=suffix + "_rot", axis=-1)[0]
        m1 = op("Mul", scope, [x, cos], suffix=suffix + "_1")[0]
        m2 = op("Mul", scope, [rot, sin], suffix=suffix + "_2")[0]
        return op("Add", scope, [m1, m2], suffix=suffix)[0]

    ids, mask = "input_ids", "attention_mask"
    emb = op("Gather", "/model/embed_tokens", [w("model.embed_tokens.weight", vocab, hidden), ids], axis=0)[0]
    pos = op("Range", "/model/rotary_emb", [c("/model/rotary_emb/Constant", np.int64(0)),
                                            shape_of("/model/rotary_emb", ids, 1, "p"), c("/model/rotary_emb/Constant_1", np.int64(1))])[0]
    posf = op("Cast", "/model/rotary_emb", [pos], to=TensorProto.FLOAT)[0]
    posu = op("Unsqueeze", "/model/rotary_emb", [posf, c("/model/rotary_emb/Constant_2", np.array([1], np.int64))], suffix="_f")[0]
    freqs = op("Mul", "/model/rotary_emb", [posu, w("model.rotary_emb.inv_freq", 1, head)])[0]
    cos = op("Cos", "/model/rotary_emb", [freqs])[0]
    sin = op("Sin", "/model/rotary_emb", [freqs])[0]
    maskf = op("Cast", "/model", [mask], to=TensorProto.FLOAT, suffix="_mask")[0]
    m1 = op("Sub", "/model", [c("/model/Constant_m", np.float32(1.0)), maskf])[0]
    bias = op("Mul", "/model", [m1, c("/model/Constant_m2", np.float32(-1e4))], suffix="_mask")[0]
    bias = op("Unsqueeze", "/model", [bias, c("/model/Constant_m3", np.array([1, 2], np.int64))], suffix="_mask")[0]
    h = emb
    inputs = [helper.make_tensor_value_info(ids, TensorProto.INT64, ["batch_size", "sequence_length"]),
              helper.make_tensor_value_info(mask, TensorProto.INT64, ["batch_size", "total_sequence_length"])]
    outputs = []
    for i in range(layers):
        s = f"/model/layers.{i}"
        x = rmsnorm(f"{s}/input_layernorm", h, w(f"model.layers.{i}.input_layernorm.weight", hidden))
        q = op("MatMul", f"{s}/self_attn/q_proj", [x, w(f"model.layers.{i}.self_attn.q_proj.weight", hidden, hidden)])[0]
        k = op("MatMul", f"{s}/self_attn/k_proj", [x, w(f"model.layers.{i}.self_attn.k_proj.weight", hidden, hidden)])[0]
        v = op("MatMul", f"{s}/self_attn/v_proj", [x, w(f"model.layers.{i}.self_attn.v_proj.weight", hidden, hidden)])[0]
        a = f"{s}/self_attn"
        q = rotary(a, heads_view(a, q, "_q"), cos, sin, "_q")
        k = rotary(a, heads_view(a, k, "_k"), cos, sin, "_k")
        v = heads_view(a, v, "_v")
        past_k, past_v = f"past_key_values.{i}.key", f"past_key_values.{i}.value"
        for name in (past_k, past_v):
            inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT,
                                                        ["batch_size", heads, "past_sequence_length", head]))
        k = op("Concat", a, [past_k, k], suffix="_past_k", axis=2)[0]
        v = op("Concat", a, [past_v, v], suffix="_past_v", axis=2)[0]
        for name, val in ((f"present.{i}.key", k), (f"present.{i}.value", v)):
            nodes.append(helper.make_node("Identity", [val], [name], name=f"{a}/present_{name.split('.')[-1]}"))
            outputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT,
                                                         ["batch_size", heads, "total_sequence_length", head]))
        kt = op("Transpose", a, [k], suffix="_kt", perm=[0, 1, 3, 2])[0]
        sc = op("MatMul", a, [q, kt], suffix="_qk")[0]
        sc = op("Div", a, [sc, c(f"{a}/Constant_scale", np.float32(np.sqrt(head)))])[0]
        sc = op("Add", a, [sc, bias], suffix="_mask")[0]
        p = op("Softmax", a, [sc], axis=-1)[0]
        o = op("MatMul", a, [p, v], suffix="_pv")[0]
        o = op("Transpose", a, [o], suffix="_o", perm=[0, 2, 1, 3])[0]
        o = op("Reshape", a, [o, c(f"{a}/Constant_o", np.array([0, 0, hidden], np.int64))], suffix="_o")[0]
        o = op("MatMul", f"{a}/o_proj", [o, w(f"model.layers.{i}.self_attn.o_proj.weight", hidden, hidden)])[0]
        h = op("Add", s, [h, o])[0]
        x = rmsnorm(f"{s}/post_attention_layernorm", h, w(f"model.layers.{i}.post_attention_layernorm.weight", hidden))
        g = op("MatMul", f"{s}/mlp/gate_proj", [x, w(f"model.layers.{i}.mlp.gate_proj.weight", hidden, 4 * hidden)])[0]
        act = op("Mul", f"{s}/mlp/act_fn", [g, op("Sigmoid", f"{s}/mlp/act_fn", [g])[0]])[0]
        u = op("MatMul", f"{s}/mlp/up_proj", [x, w(f"model.layers.{i}.mlp.up_proj.weight", hidden, 4 * hidden)])[0]
        m = op("Mul", f"{s}/mlp", [act, u])[0]
        d = op("MatMul", f"{s}/mlp/down_proj", [m, w(f"model.layers.{i}.mlp.down_proj.weight", 4 * hidden, hidden)])[0]
        h = op("Add", s, [h, d], suffix="_1")[0]
    x = rmsnorm("/model/norm", h, w("model.norm.weight", hidden))
    logits = op("MatMul", "/lm_head", [x, w("lm_head.weight", hidden, vocab)])[0]
    nodes.append(helper.make_node("Identity", [logits], ["logits"], name="/lm_head/logits"))
    outputs.insert(0, helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch_size", "sequence_length", vocab]))
    graph = helper.make_graph(nodes, "decoder", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="pytorch")
    model.ir_version = 8
    return model


def write_page(model: str, page: str) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "graphtool", "viz", model, "-o", page], capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"viz {model} failed: {done.stderr.strip()}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


IN_VIEW = """name => {
  var k = graphtool.find(name), e = document.getElementById('n' + k), v = document.getElementById('view');
  if (!e) { return false; }
  var r = e.getBoundingClientRect(), w = v.getBoundingClientRect();
  return r.width > 0 && r.left >= w.left && r.right <= w.right && r.top >= w.top && r.bottom <= w.bottom;
}"""


def open_page(browser, page_path: str, last: str, shots: str) -> dict[str, float | bool | str]:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda err: errors.append(str(err)))
    start = time.perf_counter()
    page.goto("file://" + page_path, wait_until="commit", timeout=600_000)
    page.wait_for_selector("body[data-ready]", timeout=600_000)
    wall = time.perf_counter() - start
    paint = page.evaluate("(performance.getEntriesByType('paint').filter(e => e.name === 'first-contentful-paint')[0] "
                          "|| {startTime: NaN}).startTime")
    ready = float(page.get_attribute("body", "data-ready"))
    page.screenshot(path=shots + "_open.png")
    before = page.evaluate(IN_VIEW, last)
    start = time.perf_counter()
    page.keyboard.press("/")
    page.keyboard.type(last)
    page.keyboard.press("Enter")
    page.wait_for_selector("g.node.lit", timeout=600_000)
    found = time.perf_counter() - start
    shown = page.evaluate(IN_VIEW, last)
    panel = page.text_content("#details") or ""
    page.screenshot(path=shots + "_search.png")
    out = {"wall": wall, "paint": paint / 1000, "ready": ready / 1000, "search": found, "before": before,
           "shown": shown and last in panel, "hits": page.text_content("#hits"), "errors": "; ".join(errors)}
    context.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="50000,1000000")
    parser.add_argument("--layers", type=int, default=32)
    parser.add_argument("--out", default=os.path.join(HERE, "out", "viewer"))
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    from playwright.sync_api import sync_playwright

    import gen_models

    models = []
    for n in (int(s) for s in args.sizes.split(",") if s):
        path = os.path.join(args.out, f"chain_{n}.onnx")
        if not os.path.exists(path):
            onnx.save(gen_models.big_graph(n), path)
        proto = onnx.load(path, load_external_data=False)
        models.append((f"chain {n:,} nodes", path, proto.graph.node[-1].name))
    path = os.path.join(args.out, f"decoder_{args.layers}.onnx")
    proto = decoder(args.layers)
    onnx.save(proto, path)
    models.append((f"decoder {args.layers} layers ({len(proto.graph.node):,} nodes)", path, proto.graph.node[-2].name))
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("needs chromium (apt-get install -y chromium)")
    rows = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
        for label, model, last in models:
            page = os.path.splitext(model)[0] + ".html"
            write = write_page(model, page)
            opened = open_page(browser, page, last, os.path.splitext(page)[0])
            rows.append((label, last, os.path.getsize(page), write, opened))
            print(label, opened, flush=True)
        browser.close()
    print(f"\nload average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; seconds\n")
    print("| model | page size | write (wall / CPU) | first paint | interactive (stamp / wall) | search last op | "
          "last op on screen + panel |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for label, last, size, (wall, cpu), o in rows:
        print(f"| {label} | {size / 1e6:.1f} MB | {wall:.1f} / {cpu:.1f} | {o['paint']:.2f} | {o['ready']:.2f} / "
              f"{o['wall']:.2f} | {o['search']:.2f} ({o['hits']}) | {'yes' if o['shown'] else 'NO'} `{last}`"
              f"{' errors: ' + str(o['errors']) if o['errors'] else ''} |")


if __name__ == "__main__":
    main()
