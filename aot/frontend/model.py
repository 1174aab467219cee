"""A model file → what its frontend loads: a TFLite flatbuffer (frontend/tflite.py), known by its file
identifier whatever its name, or an ONNX model (frontend/onnx.py)."""

from __future__ import annotations

import os

import onnx

from aot.errors import OptionError
from aot.frontend import onnx as onnx_frontend
from aot.frontend import tflite
from aot.graph.ir import Graph

Loaded = onnx_frontend.LoadedModel | tflite.TfliteModel


def load(model: str | os.PathLike | onnx.ModelProto, input_shapes: dict[str, tuple[int, ...]] | None = None,
         freeze: dict | None = None, tflite_arithmetic: str | None = None) -> Loaded:
    """An ONNX or TFLite model, checked and mapped. `tflite_arithmetic` ("litert", "tflite-micro") is whose
    reference kernels a TFLite model's integer arithmetic follows (frontend/tflite.py load)."""
    if isinstance(model, (str, os.PathLike)):
        try:
            with open(model, "rb") as f:
                data = f.read(8)
                data = data + f.read() if tflite.is_tflite(data) else None
        except OSError:
            data = None         # the ONNX frontend says what is wrong with the path
        if data is not None:
            return tflite.load(model, data, input_shapes, freeze, tflite_arithmetic)
    if tflite.check_arithmetic(tflite_arithmetic) is not None:
        label = os.path.basename(os.fspath(model)) if isinstance(model, (str, os.PathLike)) else "the model"
        raise OptionError(f"{label}: --tflite-arithmetic chooses a TFLite model's integer arithmetic; an ONNX "
                          "model's is onnxruntime's")
    return onnx_frontend.load(model, input_shapes, freeze)


def to_graph(model: Loaded) -> Graph:
    if isinstance(model, tflite.TfliteModel):
        return model.graph
    return onnx_frontend.to_graph(model)
