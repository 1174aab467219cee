"""Write the C header of the input examples/firmware compiles into its image, and the same input as
an .npz beside it (for a reference to run on):

    python examples/firmware/make_input.py MODEL.onnx build/firmware/input.h [--seed N] [--inputs X.npz]

Each input of the model becomes a const array, seeded random values (floats in [0, 1), integers over
their type's range) unless --inputs gives them; `example_inputs` points model_run at them and
EXAMPLE_SCORES is the length of the model's output, which must be one float32 tensor (the scores).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import helper

_CTYPES = {np.float32: "float", np.int8: "int8_t", np.uint8: "uint8_t"}


def _literal(value, dtype) -> str:
    return f"{float(value):.9g}f" if dtype == np.float32 else str(int(value))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("header", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--inputs", type=Path, help=".npz with an array per input name")
    parser.add_argument("--name", default="model", help="the build's C name (aot build --name)")
    args = parser.parse_args(argv)
    graph = onnx.load(args.model, load_external_data=False).graph
    initialized = {t.name for t in graph.initializer}
    inputs = [v for v in graph.input if v.name not in initialized]
    if len(graph.output) != 1 or graph.output[0].type.tensor_type.elem_type != onnx.TensorProto.FLOAT:
        sys.exit(f"{args.model}: the firmware example prints scores: the model needs one float32 output")
    given = dict(np.load(args.inputs)) if args.inputs else {}
    rng = np.random.default_rng(args.seed)
    arrays = {}
    for v in inputs:
        dtype = helper.tensor_dtype_to_np_dtype(v.type.tensor_type.elem_type).type
        shape = [d.dim_value for d in v.type.tensor_type.shape.dim]
        if dtype not in _CTYPES or not all(shape):
            sys.exit(f"{args.model}: input '{v.name}' ({dtype.__name__}, shape {shape}) is not a fixed-shape "
                     "float32, int8 or uint8 tensor")
        if v.name in given:
            arrays[v.name] = np.asarray(given[v.name], dtype).reshape(shape)
        elif dtype == np.float32:
            arrays[v.name] = rng.random(shape, dtype=np.float32)
        else:
            info = np.iinfo(dtype)
            arrays[v.name] = rng.integers(info.min, info.max + 1, shape).astype(dtype)
    scores = int(np.prod([d.dim_value for d in graph.output[0].type.tensor_type.shape.dim]))
    lines = [f"/* The input compiled into the firmware: {args.model.name}, seed {args.seed}. "
             "Written by make_input.py. */", "#ifndef EXAMPLE_INPUT_H", "#define EXAMPLE_INPUT_H", "",
             f"#define EXAMPLE_SCORES {scores}u", ""]
    for i, (name, array) in enumerate(arrays.items()):
        ctype = _CTYPES[array.dtype.type]
        values = [_literal(x, array.dtype.type) for x in array.reshape(-1)]
        rows = ",\n".join("    " + ", ".join(values[k:k + 8]) for k in range(0, len(values), 8))
        lines += [f"/* \"{name}\" {list(array.shape)} */",
                  f"static const {ctype} example_input_{i}[{array.size}] __attribute__((aligned(16))) = {{",
                  rows, "};", ""]
    fields = ", ".join(f"example_input_{i}" for i in range(len(arrays)))
    lines += [f"static const {args.name}_inputs example_inputs = {{{fields}}};", "", "#endif", ""]
    args.header.parent.mkdir(parents=True, exist_ok=True)
    args.header.write_text("\n".join(lines))
    np.savez(args.header.with_suffix(".npz"), **arrays)
    print(f"{args.header} and {args.header.with_suffix('.npz')}: {', '.join(arrays)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
