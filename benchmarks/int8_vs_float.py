"""int8 vs float32 on the host: each zoo model compiled by aot as fp32 and as int8 (onnxruntime's
quantize_static, QDQ, per-channel), timed through its C entry point, and onnxruntime (one thread, all
graph optimizations) timed on the same two models in the same run.

    python benchmarks/int8_vs_float.py [MODEL ...] [--seconds 1]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))

import zoo  # noqa: E402
from quantize import quantize_model  # noqa: E402

from aot.bench import bench  # noqa: E402
from aot.target import get_target  # noqa: E402


def time_aot(model: onnx.ModelProto, seconds: float) -> float:
    """Median ms of one run of the compiled model (aot bench: 10 measurements of at least seconds/10)."""
    result = bench(model, target="host", repeat=10, min_repeat_ms=seconds * 100, warmup=3)
    if not result.ok:
        raise SystemExit(f"{result.model}: outputs differ from onnxruntime")
    return result.stats.median


def time_onnxruntime(model: onnx.ModelProto, seconds: float) -> float:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    feeds = {i.name: np.random.default_rng(0).standard_normal(i.shape).astype(np.float32) for i in session.get_inputs()}
    for _ in range(3):
        session.run(None, feeds)
    times, start = [], time.perf_counter()
    while time.perf_counter() - start < seconds or len(times) < 10:
        t = time.perf_counter()
        session.run(None, feeds)
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="*", default=list(zoo.ZOO))
    parser.add_argument("--seconds", type=float, default=1.0, help="time to spend timing each measurement")
    args = parser.parse_args()
    rows = [("model", "aot fp32 ms", "aot int8 ms", "int8 speed-up", "ort fp32 ms", "ort int8 ms",
             "aot/ort fp32", "aot/ort int8")]
    for name in args.models:
        fp32 = zoo.ZOO[name]()
        int8 = quantize_model(fp32)
        af, ai = time_aot(fp32, args.seconds), time_aot(int8, args.seconds)
        of, oi = time_onnxruntime(fp32, args.seconds), time_onnxruntime(int8, args.seconds)
        rows.append((name, f"{af:.3f}", f"{ai:.3f}", f"{af / ai:.2f}x", f"{of:.3f}", f"{oi:.3f}",
                     f"{af / of:.2f}", f"{ai / oi:.2f}"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    print(f"host target {get_target('host').name}, one thread, median of repeats")
    for r in rows:
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
