"""A model file → what its frontend loads: a TFLite flatbuffer (frontend/tflite.py), known by its file
identifier whatever its name, or an ONNX model (frontend/onnx.py)."""

from __future__ import annotations

import os

import onnx

from aot.frontend import onnx as onnx_frontend
from aot.frontend import tflite
from aot.graph.ir import Graph

Loaded = onnx_frontend.LoadedModel | tflite.TfliteModel


def load(model: str | os.PathLike | onnx.ModelProto, input_shapes: dict[str, tuple[int, ...]] | None = None,
         freeze: dict | None = None) -> Loaded:
    if isinstance(model, (str, os.PathLike)):
        try:
            with open(model, "rb") as f:
                data = f.read(8)
                data = data + f.read() if tflite.is_tflite(data) else None
        except OSError:
            data = None         # the ONNX frontend says what is wrong with the path
        if data is not None:
            return tflite.load(model, data, input_shapes, freeze)
    return onnx_frontend.load(model, input_shapes, freeze)


def to_graph(model: Loaded) -> Graph:
    if isinstance(model, tflite.TfliteModel):
        return model.graph
    return onnx_frontend.to_graph(model)
