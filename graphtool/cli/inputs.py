"""The input flags every command that runs a model shares: --inputs, --input-value, --input-shape.

Verification finds inputs by itself (graphtool.verify.discover); these flags are for the models where
only the user knows: a sample rate that must be 8000 or 16000, a real image, a token sequence.
"""

from __future__ import annotations

import os
from typing import Any, Callable

import click
import numpy as np

from graphtool.errors import UsageError


def input_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Add --input-shape, --inputs and --input-value to a click command."""
    command = click.option("--input-value", "input_values", multiple=True, metavar="NAME=V[,V2]",
                           help="Fill an input with one value (scalars: sr=16000); NAME=v1,v2 verifies on each. "
                                "Repeatable.")(command)
    command = click.option("--inputs", "inputs_file", type=click.Path(), default=None,
                           help="Real inputs: an .npz keyed by input name, or a folder of input_N.pb "
                                "TensorProtos (ONNX test-data layout).")(command)
    command = click.option("--input-shape", "input_shapes", multiple=True, metavar="NAME=1x3x224x224",
                           help="Fix an input's shape (for folding and for verification inputs). Repeatable.")(command)
    return command


def parse_input_shapes(specs: tuple[str, ...]) -> dict[str, list[int]]:
    """``name=1x3x224x224`` (repeatable) → {name: [1, 3, 224, 224]}."""
    shapes: dict[str, list[int]] = {}
    for spec in specs:
        name, sep, dims = spec.rpartition("=")
        try:
            if not sep or not name:
                raise ValueError
            shapes[name] = [int(d) for d in dims.lower().split("x")] if dims else []
        except ValueError:
            raise UsageError(f"--input-shape '{spec}' is not NAME=D1xD2x...") from None
    return shapes


def _scalar(text: str) -> Any:
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            continue
    return text  # a string input


def parse_input_values(specs: tuple[str, ...]) -> dict[str, list[Any]]:
    """``sr=16000`` or ``sr=8000,16000`` (repeatable) → {"sr": [8000, 16000]}."""
    values: dict[str, list[Any]] = {}
    for spec in specs:
        name, sep, text = spec.partition("=")
        if not sep or not name or not text:
            raise UsageError(f"--input-value '{spec}' is not NAME=V or NAME=V1,V2")
        values[name] = [_scalar(part) for part in text.split(",") if part.strip()]
    return values


def load_inputs(path: str, input_names: list[str]) -> dict[str, np.ndarray]:
    """An .npz, or a folder of input_N.pb TensorProtos; unnamed tensors map to inputs by order."""
    if os.path.isdir(path):
        from onnx import TensorProto, numpy_helper

        files = sorted((f for f in os.listdir(path) if f.startswith("input_") and f.endswith(".pb")),
                       key=lambda f: int(f[6:-3]) if f[6:-3].isdigit() else 1 << 30)
        if not files:
            raise UsageError(f"--inputs {path}: folder has no input_N.pb files")
        feeds: dict[str, np.ndarray] = {}
        for index, name in enumerate(files):
            tensor = TensorProto()
            try:
                with open(os.path.join(path, name), "rb") as handle:
                    tensor.ParseFromString(handle.read())
                array = numpy_helper.to_array(tensor)
            except Exception as err:  # noqa: BLE001 - any parse failure is the file's fault
                raise UsageError(f"--inputs {path}/{name}: not a TensorProto ({type(err).__name__})") from None
            key = tensor.name or (input_names[index] if index < len(input_names) else "")
            if not key:
                raise UsageError(f"--inputs {path}/{name}: unnamed, and the model has no input #{index}")
            feeds[key] = array
        return feeds
    if not os.path.isfile(path):
        raise UsageError(f"--inputs {path}: no such file or folder")
    try:
        with np.load(path, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    except Exception as err:  # noqa: BLE001 - not an npz, or one holding objects
        raise UsageError(f"--inputs {path}: not a readable .npz ({type(err).__name__})") from None


def resolve_inputs(model_inputs: list[str], input_shapes: tuple[str, ...], inputs_file: str | None,
                   input_values: tuple[str, ...]) -> tuple[dict[str, list[int]], dict[str, np.ndarray] | None,
                                                          dict[str, list[Any]]]:
    """Parse and check the three flags against the model's input names."""
    shapes = parse_input_shapes(input_shapes)
    values = parse_input_values(input_values)
    feeds = load_inputs(inputs_file, model_inputs) if inputs_file else None
    for flag, names in (("--input-shape", shapes), ("--input-value", values), ("--inputs", feeds or {})):
        unknown = [n for n in names if n not in model_inputs]
        if unknown:
            raise UsageError(f"{flag} names '{unknown[0]}', which is not an input of the model "
                             f"(inputs: {', '.join(model_inputs[:8])})")
    return shapes, feeds, values
