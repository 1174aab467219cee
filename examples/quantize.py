"""Quantize a float model to int8 the way onnxruntime documents it: pre-process (shape inference,
BatchNorm folding), then quantize_static with a fixed random calibration set.

    python examples/quantize.py model.onnx -o model_int8.onnx [--format QDQ|QOperator] [--per-tensor]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx


def quantize_model(model: onnx.ModelProto, fmt: str = "QDQ", per_channel: bool = True,
                   activations: str = "QInt8", calibration_batches: int = 8) -> onnx.ModelProto:
    """onnxruntime's quantize_static on a fixed random calibration set."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    class Calibration(CalibrationDataReader):
        def __init__(self):
            rng = np.random.default_rng(0)
            feeds = [vi for vi in model.graph.input if vi.name not in {t.name for t in model.graph.initializer}]
            self.batches = iter([{vi.name: rng.standard_normal(
                [d.dim_value for d in vi.type.tensor_type.shape.dim]).astype(np.float32) for vi in feeds}
                for _ in range(calibration_batches)])

        def get_next(self):
            return next(self.batches, None)

    with tempfile.TemporaryDirectory() as tmp:
        src, pre, out = Path(tmp) / "float.onnx", Path(tmp) / "pre.onnx", Path(tmp) / "int8.onnx"
        onnx.save(model, src)
        quant_pre_process(str(src), str(pre), skip_symbolic_shape=True)
        # int16 activations are symmetric (zero point 0), as TFLite's 16x8 mode has them
        quantize_static(str(pre), str(out), Calibration(), quant_format=getattr(QuantFormat, fmt),
                        per_channel=per_channel, activation_type=getattr(QuantType, activations),
                        weight_type=QuantType.QInt8,
                        extra_options={"ActivationSymmetric": True} if activations == "QInt16" else None)
        return onnx.load(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model")
    parser.add_argument("-o", "--output", required=True)
    parser.add_argument("--format", choices=["QDQ", "QOperator"], default="QDQ")
    parser.add_argument("--per-tensor", action="store_true", help="one weight scale per tensor, not per channel")
    parser.add_argument("--activations", choices=["QInt8", "QUInt8", "QInt16"], default="QInt8")
    args = parser.parse_args()
    onnx.save(quantize_model(onnx.load(args.model), args.format, not args.per_tensor, args.activations), args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
