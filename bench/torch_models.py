"""Export the torch benchmark set for ``make bench`` into ``bench/out/models/`` (never committed).

Why
---
The peer benchmark has to measure graphs as real exporters emit them at realistic sizes, not the
tiny test fixtures. Each model below is exported twice, exactly as ``fixtures/make_torch_fixtures.py``
does it (same export functions, imported, not copied):

* ``<name>_ts.onnx``     -- TorchScript exporter, ``dynamo=False``, no constant folding, opset 17;
* ``<name>_dynamo.onnx`` -- ``torch.export``-based exporter (its default optimize=True).

Models (random, seeded weights; nothing is downloaded; torchvision is not needed):

===============  ==============================================================================
resnet18         ResNet-18 (torchvision layout, the fixture's ``BasicBlock``), 1x3x224x224
mobilenetv2      MobileNetV2 (torchvision layout, ReLU6, width 1.0), 1x3x224x224
unet             a small 4-level UNet (16..128 channels, ConvTranspose up, skip Concat), 1x3x128x128
bert4            the fixture's BERT encoder, 4 layers, hidden 256, 4 heads (decomposed LN, erf GELU)
gpt2_4, gpt2_12  the fixture's GPT-2 LM, 4 / 12 layers, hidden 256, 4 heads (tied lm_head)
===============  ==============================================================================

Next to every model goes ``<stem>.inputs.npz`` (sample inputs keyed by graph-input name), which
the benchmark feeds to both the original and each optimized model.

Run it with the torch venv (graphtool itself never imports torch)::

    /work/torchenv/bin/python bench/torch_models.py [--out bench/out/models] [--only gpt2_4,unet] [--force]
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import torch
from torch import nn

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_OUT = HERE / "out" / "models"


def _load_fixture_module():
    """Import fixtures/make_torch_fixtures.py (not a package) so its models and exporters are reused."""
    path = REPO / "fixtures" / "make_torch_fixtures.py"
    spec = importlib.util.spec_from_file_location("make_torch_fixtures", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses need the module registered
    spec.loader.exec_module(module)
    return module


F = _load_fixture_module()


# --------------------------------------------------------------------------- ResNet-18


class ResNet18(nn.Module):
    """torchvision's resnet18 layout: 7x7 stem, max-pool, four stages of two BasicBlocks."""

    def __init__(self, num_classes: int = 1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU()
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        stages, cin = [], 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            stages.append(nn.Sequential(F.BasicBlock(cin, cout, stride), F.BasicBlock(cout, cout, 1)))
            cin = cout
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(512, num_classes)

    def forward(self, pixel_values):
        x = self.maxpool(self.relu(self.bn1(self.conv1(pixel_values))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


# --------------------------------------------------------------------------- MobileNetV2


def _conv_bn_relu6(cin: int, cout: int, kernel: int, stride: int = 1, groups: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False),
                         nn.BatchNorm2d(cout), nn.ReLU6())


class InvertedResidualV2(nn.Module):
    """MobileNetV2 block: optional 1x1 expand, 3x3 depthwise, linear 1x1 project, residual if shapes match."""

    def __init__(self, cin: int, cout: int, stride: int, expand: int):
        super().__init__()
        mid = cin * expand
        layers: list[nn.Module] = [] if expand == 1 else [_conv_bn_relu6(cin, mid, 1)]
        layers += [_conv_bn_relu6(mid, mid, 3, stride, groups=mid),
                   nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout)]
        self.conv = nn.Sequential(*layers)
        self.use_res = stride == 1 and cin == cout

    def forward(self, x):
        return x + self.conv(x) if self.use_res else self.conv(x)


class MobileNetV2(nn.Module):
    """torchvision's mobilenet_v2 (width 1.0): (expand t, channels c, repeats n, stride s) table."""

    SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))

    def __init__(self, num_classes: int = 1000):
        super().__init__()
        layers: list[nn.Module] = [_conv_bn_relu6(3, 32, 3, 2)]
        cin = 32
        for t, c, n, s in self.SETTINGS:
            for i in range(n):
                layers.append(InvertedResidualV2(cin, c, s if i == 0 else 1, t))
                cin = c
        layers.append(_conv_bn_relu6(cin, 1280, 1))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, num_classes))

    def forward(self, pixel_values):
        x = nn.functional.adaptive_avg_pool2d(self.features(pixel_values), 1)
        return self.classifier(torch.flatten(x, 1))


# --------------------------------------------------------------------------- UNet


def _double_conv(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
                         nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU())


class UNet(nn.Module):
    """A small UNet: 3 down stages (max-pool), a bottleneck, 3 up stages (ConvTranspose + skip Concat)."""

    def __init__(self, cin: int = 3, classes: int = 2, widths: tuple[int, ...] = (16, 32, 64, 128)):
        super().__init__()
        self.downs = nn.ModuleList()
        c = cin
        for w in widths[:-1]:
            self.downs.append(_double_conv(c, w))
            c = w
        self.pool = nn.MaxPool2d(2)
        self.bottleneck = _double_conv(c, widths[-1])
        self.ups, self.up_convs = nn.ModuleList(), nn.ModuleList()
        c = widths[-1]
        for w in reversed(widths[:-1]):
            self.ups.append(nn.ConvTranspose2d(c, w, 2, stride=2))
            self.up_convs.append(_double_conv(2 * w, w))
            c = w
        self.head = nn.Conv2d(c, classes, 1)

    def forward(self, pixel_values):
        skips, x = [], pixel_values
        for down in self.downs:
            x = down(x)
            skips.append(x)
            x = self.pool(x)
        x = self.bottleneck(x)
        for up, conv, skip in zip(self.ups, self.up_convs, reversed(skips)):
            x = conv(torch.cat([up(x), skip], dim=1))
        return self.head(x)


# --------------------------------------------------------------------------- specs


@dataclasses.dataclass
class BenchSpec:
    """A fixture ``Spec`` (what the fixture exporters read) plus how to draw its sample inputs."""

    spec: object  # make_torch_fixtures.Spec
    image: int = 0  # image side for vision models; 0 for text
    seq: int = 32

    def inputs(self) -> dict[str, np.ndarray]:
        if self.image:
            rng = np.random.default_rng(0)
            return {"pixel_values": rng.standard_normal((1, 3, self.image, self.image)).astype(np.float32)}
        return F.make_inputs(self.spec, batch=2, seq=self.seq, seed=0)


BERT4 = F.BertConfig(num_layers=4, hidden=256, heads=4, intermediate=1024, vocab=8000, max_positions=128)


def _gpt2(layers: int) -> F.GPT2Config:
    return F.GPT2Config(num_layers=layers, hidden=256, heads=4, vocab=8000, n_positions=128)


def _vision(name: str, cls) -> BenchSpec:
    return BenchSpec(F.Spec(name, F._seeded(cls), ["pixel_values"], ["logits"], text=False),
                     image=128 if name == "unet" else 224)


def _gpt2_spec(layers: int) -> BenchSpec:
    cfg = _gpt2(layers)
    return BenchSpec(F.Spec(f"gpt2_{layers}", F._seeded(lambda: F.GPT2LMHeadModel(cfg), embeddings=True),
                            ["input_ids"], ["logits"], text=True, vocab=cfg.vocab, max_seq=cfg.n_positions))


SPECS: dict[str, BenchSpec] = {
    "resnet18": _vision("resnet18", ResNet18),
    "mobilenetv2": _vision("mobilenetv2", MobileNetV2),
    "unet": _vision("unet", UNet),
    "bert4": BenchSpec(F.bert_spec(BERT4, "bert4")),
    "gpt2_4": _gpt2_spec(4),
    "gpt2_12": _gpt2_spec(12),
}


def _ort_outputs(path: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, {i.name: feeds[i.name] for i in sess.get_inputs()})


def export(bench: BenchSpec, out: Path, force: bool = False) -> list[str]:
    """Export one model with both exporters; check ORT against torch (relative to output scale)."""
    spec = bench.spec
    model, feeds, lines = None, bench.inputs(), []
    for exporter, export_fn in F.EXPORTERS.items():
        stem = f"{spec.name}_{exporter}"
        path = out / f"{stem}.onnx"
        if path.exists() and (out / f"{stem}.inputs.npz").exists() and not force:
            lines.append(f"{stem}: exists")
            continue
        if model is None:
            model = spec.build()
            with torch.no_grad():
                expected = model(*(torch.from_numpy(feeds[n]) for n in spec.input_names)).numpy()
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            export_fn(spec, model, F._torch_args(spec, feeds), path)
        seconds = time.perf_counter() - start
        names = [i.name for i in onnx.load(str(path), load_external_data=False).graph.input]
        np.savez(out / f"{stem}.inputs.npz", **{n: feeds[n] for n in names})
        got = _ort_outputs(path, feeds)[0]
        rel = float(np.max(np.abs(got - expected)) / max(1e-6, float(np.max(np.abs(expected)))))
        nodes = len(onnx.load(str(path), load_external_data=False).graph.node)
        if rel > 1e-3:
            raise AssertionError(f"{stem}: onnxruntime differs from torch (max rel diff {rel:.2e})")
        lines.append(f"{stem}: {nodes} nodes, exported in {seconds:.1f}s, ORT vs torch max rel diff {rel:.1e}")
        print(lines[-1], flush=True)
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--only", help="comma-separated subset of " + ",".join(SPECS))
    ap.add_argument("--force", action="store_true", help="re-export even when the files exist")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(2)
    names = args.only.split(",") if args.only else list(SPECS)
    unknown = [n for n in names if n not in SPECS]
    if unknown:
        ap.error(f"unknown model(s) {unknown}; choose from {list(SPECS)}")
    for name in names:
        export(SPECS[name], args.out, args.force)
    return 0


if __name__ == "__main__":
    sys.exit(main())
