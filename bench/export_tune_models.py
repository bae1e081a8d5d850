"""Export the models ``bench/tune_table.py`` measures (random weights; never commit the output).

    /work/torchenv/bin/python bench/export_tune_models.py [--out ~/.cache/graphtool/tune_models] [--only NAME,...]

Run with a Python that has torch (2.13.0 CPU), transformers, onnx and onnxruntime. Writes into OUT:

* ``bert_base_ts.onnx`` / ``bert_base_dynamo.onnx`` — BERT-base (12 layers, hidden 768), both exporters,
  by ``fixtures/make_torch_fixtures.py``'s BERT code (the model ``--bert-base`` exports);
* ``gpt2.onnx`` — GPT-2 small (transformers ``GPT2Config()``: 124M, random init), TorchScript exporter,
  no past, logits only;
* ``resnet50.onnx`` / ``mobilenetv2.onnx`` — torchvision's architectures written out in plain torch
  (PyPI's torchvision does not import beside torch 2.13.0), BatchNorm in eval mode with perturbed
  statistics, TorchScript exporter;

and for each model and batch an inputs file ``NAME.b{1,2}.inputs.npz``: BERT at sequence 128 with a
padded attention mask (the last two tokens of row 0 and the last of row 1 masked), GPT-2 at
sequence 128, images 224×224. Every export is checked against torch (max abs diff) in onnxruntime.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import torch
from torch import nn

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
DEFAULT_OUT = Path(os.path.expanduser("~/.cache/graphtool/tune_models"))
SEQ = 128


def _save_single_file(path: Path) -> None:
    """Weights beside the graph in one NAME.onnx.data file (the exporter writes one protobuf under 2 GB)."""
    proto = onnx.load(str(path))
    onnx.save_model(proto, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location=path.name + ".data")


def export_ts(model: nn.Module, args: tuple, path: Path, inputs: list[str], outputs: list[str],
              dynamic: dict[str, dict[int, str]]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, args, str(path), dynamo=False, opset_version=17, do_constant_folding=True,
                          input_names=inputs, output_names=outputs, dynamic_axes=dynamic)
    _save_single_file(path)


def check(model: nn.Module, path: Path, feeds: dict[str, np.ndarray]) -> float:
    with torch.no_grad():
        want = model(*[torch.from_numpy(v) for v in feeds.values()])
    want = want if isinstance(want, torch.Tensor) else want[0]
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = sess.run(None, {i.name: feeds[i.name] for i in sess.get_inputs()})[0]
    return float(np.max(np.abs(got - want.numpy())))


# --------------------------------------------------------------------------------- CNNs


def _bn(c: int) -> nn.BatchNorm2d:
    bn = nn.BatchNorm2d(c)
    with torch.no_grad():  # random statistics, so folding them is not a no-op
        bn.running_mean.uniform_(-0.1, 0.1)
        bn.running_var.uniform_(0.5, 1.5)
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.uniform_(-0.1, 0.1)
    return bn


class Bottleneck(nn.Module):
    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        cout = width * 4
        self.conv1, self.bn1 = nn.Conv2d(cin, width, 1, bias=False), _bn(width)
        self.conv2, self.bn2 = nn.Conv2d(width, width, 3, stride, 1, bias=False), _bn(width)
        self.conv3, self.bn3 = nn.Conv2d(width, cout, 1, bias=False), _bn(cout)
        self.down = None if stride == 1 and cin == cout else \
            nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), _bn(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        y = torch.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return torch.relu(y + (x if self.down is None else self.down(x)))


class ResNet50(nn.Module):
    """torchvision.models.resnet50's layout: [3, 4, 6, 3] bottlenecks, stride on the 3x3."""

    def __init__(self, classes: int = 1000) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), _bn(64), nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        layers, cin = [], 64
        for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
            for i in range(blocks):
                layers.append(Bottleneck(cin, width, stride if i == 0 else 1))
                cin = width * 4
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(2048, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


def _conv_bn(cin: int, cout: int, k: int, stride: int, groups: int = 1, act: bool = True) -> nn.Sequential:
    parts: list[nn.Module] = [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), _bn(cout)]
    if act:
        parts.append(nn.ReLU6())
    return nn.Sequential(*parts)


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = cin * expand
        self.residual = stride == 1 and cin == cout
        layers = [] if expand == 1 else [_conv_bn(cin, hidden, 1, 1)]
        layers += [_conv_bn(hidden, hidden, 3, stride, groups=hidden), _conv_bn(hidden, cout, 1, 1, act=False)]
        self.body = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x) if self.residual else self.body(x)


class MobileNetV2(nn.Module):
    """torchvision.models.mobilenet_v2's layout (width 1.0)."""

    SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                (6, 320, 1, 1))

    def __init__(self, classes: int = 1000) -> None:
        super().__init__()
        layers: list[nn.Module] = [_conv_bn(3, 32, 3, 2)]
        cin = 32
        for t, c, n, s in self.SETTINGS:
            for i in range(n):
                layers.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
                cin = c
        layers.append(_conv_bn(cin, 1280, 1, 1))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.adaptive_avg_pool2d(self.features(x), 1)
        return self.classifier(torch.flatten(x, 1))


def image_inputs(batch: int) -> dict[str, np.ndarray]:
    return {"pixel_values": np.random.default_rng(batch).standard_normal((batch, 3, 224, 224)).astype(np.float32)}


def export_cnn(name: str, cls: type, out: Path) -> None:
    torch.manual_seed(0)
    model = cls().eval()
    path = out / f"{name}.onnx"
    feeds = image_inputs(1)
    export_ts(model, (torch.from_numpy(feeds["pixel_values"]),), path, ["pixel_values"], ["logits"],
              {"pixel_values": {0: "batch"}, "logits": {0: "batch"}})
    for batch in (1, 2):
        np.savez(out / f"{name}.b{batch}.inputs.npz", **image_inputs(batch))
    print(f"{path.name}: max abs diff vs torch {check(model, path, feeds):.2e}", flush=True)


# --------------------------------------------------------------------------------- text


def text_inputs(batch: int, vocab: int, mask: bool) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(batch)
    feeds = {"input_ids": rng.integers(0, vocab, size=(batch, SEQ), dtype=np.int64)}
    if mask:
        m = np.ones((batch, SEQ), dtype=np.int64)
        m[0, -2:] = 0  # padding, as fixtures/make_torch_fixtures.py makes it
        if batch > 1:
            m[1, -1] = 0
        feeds["attention_mask"] = m
    return feeds


def export_bert(out: Path) -> None:
    from fixtures import make_torch_fixtures as mtf

    spec = mtf.bert_spec(mtf.BERT_BASE, "bert_base")
    mtf.build_and_export([spec], out, seq=SEQ, tol=mtf.TOLERANCE, save_expected=False)
    for exporter in ("ts", "dynamo"):
        for batch in (1, 2):
            np.savez(out / f"bert_base_{exporter}.b{batch}.inputs.npz", **text_inputs(batch, mtf.BERT_BASE.vocab, True))


class _Logits(nn.Module):
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids, use_cache=False, return_dict=False)[0]


def export_gpt2(out: Path) -> None:
    from transformers import GPT2Config, GPT2LMHeadModel, masking_utils

    # transformers 5 looks for packed sequences with torch.diff, which the TorchScript exporter cannot
    # export; inference batches are never packed, so the check is left out of the trace.
    masking_utils.find_packed_sequence_indices = lambda _position_ids: None
    torch.manual_seed(0)
    config = GPT2Config(attn_implementation="eager")  # GPT-2 small: 12 layers, hidden 768, 12 heads, vocab 50257
    config.use_cache = False
    model = _Logits(GPT2LMHeadModel(config).eval()).eval()
    path = out / "gpt2.onnx"
    feeds = text_inputs(1, config.vocab_size, False)
    export_ts(model, (torch.from_numpy(feeds["input_ids"]),), path, ["input_ids"], ["logits"],
              {"input_ids": {0: "batch", 1: "sequence"}, "logits": {0: "batch", 1: "sequence"}})
    for batch in (1, 2):
        np.savez(out / f"gpt2.b{batch}.inputs.npz", **text_inputs(batch, config.vocab_size, False))
    print(f"{path.name}: max abs diff vs torch {check(model, path, feeds):.2e}", flush=True)


EXPORTS = {"bert": export_bert, "gpt2": export_gpt2,
           "resnet50": lambda out: export_cnn("resnet50", ResNet50, out),
           "mobilenetv2": lambda out: export_cnn("mobilenetv2", MobileNetV2, out)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--only", default=",".join(EXPORTS), help="comma-separated: " + ", ".join(EXPORTS))
    ns = ap.parse_args()
    ns.out.mkdir(parents=True, exist_ok=True)
    for name in ns.only.split(","):
        EXPORTS[name](ns.out)


if __name__ == "__main__":
    main()
