"""aot against onnxruntime as a Raspberry Pi user runs it, in instructions executed under qemu-aarch64.

    python benchmarks/arm_peer.py --arm64 DIR [MODEL ...] [--precision fp32|int8 ...]
                                  [--cpu cortex-a72|cortex-a76|neoverse-n2 ...] [--extra 10]

DIR is an arm64 CPython with numpy and onnxruntime's official aarch64 wheels, made by
`bash benchmarks/arm64_python.sh DIR` (root: it adds dpkg's arm64 architecture to download Debian's
packages, and runs onnxruntime in a private mount namespace). Not part of CI: it takes minutes.

Both sides run under the same qemu-aarch64 with the same instruction-counting plugin (aot/run/count.py's),
as whole processes: aot's timing harness (linked statically) and a Python script calling onnxruntime
(one intra-op thread, all graph optimizations; onnxruntime's cpuinfo reads an ARM /proc/cpuinfo bound
over the host's, or it crashes). One inference costs (count(1 + K runs) - count(1 run)) / K, so loading,
the interpreter's start-up and session creation cancel out (PYTHONHASHSEED is fixed; K = --extra).
onnxruntime's process is not exactly repeatable (up to some 10 M of its 2 G start-up instructions vary, and
now and then a run does 100 M more): each of its two counts is the least of 3 processes, and its K is
raised until the extra inferences execute some 500 M instructions (by aot's count). aot's is exact.
`-cpu cortex-a72` (Pi 4) runs aot's `aarch64` build, `-cpu cortex-a76` (Pi 5, dot product) its
`aarch64-dotprod` build, and a Neoverse N2 (dot product and int8 matrix multiply, i8mm) its `aarch64-i8mm`
build: this qemu has no N2 model, so `-cpu max` stands in with SME off and SVE at the N2's 128 bits.
onnxruntime picks its kernels from the cpuinfo it reads (asimddp on the A76, i8mm on the N2).
aot's outputs are checked against onnxruntime's on the host.

The table: millions of instructions per inference, aot / onnxruntime (below 1: aot executes fewer),
and for int8 aot's int8 / aot's fp32 on the same core.
"""

from __future__ import annotations

import argparse
import math
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import zoo  # noqa: E402
from quantize import quantize_model  # noqa: E402

import aot  # noqa: E402
from aot import reference  # noqa: E402
from aot.api import quantization_steps  # noqa: E402
from aot.bench import _render_timing  # noqa: E402
from aot.codegen import wrapper  # noqa: E402
from aot.run import local  # noqa: E402
from aot.run.count import build_plugin  # noqa: E402

# core -> (aot's target, qemu's -cpu)
CPUS = {"cortex-a72": ("aarch64", "cortex-a72"), "cortex-a76": ("aarch64-dotprod", "cortex-a76"),
        "neoverse-n2": ("aarch64-i8mm", "max,sme=off,sve-default-vector-length=16")}
MODELS = ("ds_cnn", "mobilenet_v1", "resnet8", "mobilenet_v2")
MIN_EXTRA_INSNS = 5e8   # onnxruntime runs at least this many instructions of extra inferences (by aot's count)
ORT_TRIES = 3           # onnxruntime's processes vary (start-up work, now and then a large outlier): the least of 3
ORT_SCRIPT = """
import sys
import numpy as np
import onnxruntime as ort
options = ort.SessionOptions()
options.intra_op_num_threads = 1
options.inter_op_num_threads = 1
options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
options.add_session_config_entry("session.intra_op.allow_spinning", "0")   # no busy-waiting to count
options.add_session_config_entry("session.inter_op.allow_spinning", "0")
session = ort.InferenceSession(sys.argv[1], options, providers=["CPUExecutionProvider"])
feeds = dict(np.load(sys.argv[2]))
for _ in range(int(sys.argv[3])):
    session.run(None, feeds)
"""


def counted(command: list[str], what: str, cwd: Path | None = None) -> int:
    """The instructions the plugin counted in one run of `command`."""
    proc = subprocess.run(command, capture_output=True, text=True, timeout=3600, cwd=cwd)
    found = re.findall(r"^insns: (\d+)$", proc.stderr, re.M)
    if proc.returncode != 0 or len(found) != 1:
        raise RuntimeError(f"{what}: exit {proc.returncode}: {proc.stderr.strip()[-400:]}")
    return int(found[0])


def per_inference(command, extra: int, what: str, cwd: Path | None = None, tries: int = 1) -> float:
    """(count(1 + extra runs) - count(1 run)) / extra, each count the least of `tries` processes;
    `command(n)` is the argv running n inferences."""
    def least(n: int) -> int:
        return min(counted(command(n), what, cwd) for _ in range(tries))

    return (least(1 + extra) - least(1)) / extra


def aot_count(model: onnx.ModelProto, cpu: str, feeds: dict, plugin: Path, work: Path,
              extra: int) -> tuple[float, bool]:
    """aot's instructions per inference on `cpu`, and whether its outputs match onnxruntime's."""
    artifact = aot.build(model, target=CPUS[cpu][0], out_dir=work / "build")
    _render_timing(artifact, work / "timing.c", profile=False)
    exe = work / "bench"
    local.link(artifact.target, [work / "timing.c", artifact.source], [artifact.object], artifact.dir, exe,
               "the timing harness", static=True)
    ins, outs = wrapper.io_tensors(artifact.program)
    for t in ins:
        np.ascontiguousarray(feeds[t.onnx_name], dtype=t.dtype).reshape(t.shape).tofile(work / f"input_{t.index}.bin")

    def command(n: int) -> list[str]:
        return ["qemu-aarch64", "-cpu", CPUS[cpu][1], "-plugin", str(plugin), "-d", "plugin", str(exe),
                "0", "1", str(n), "0"]

    insns = per_inference(command, extra, f"aot on {cpu}", work)
    got = {t.onnx_name: np.fromfile(work / f"output_{t.index}.bin", dtype=t.dtype).reshape(t.shape) for t in outs}
    checks = reference.compare(got, reference.reference_outputs(model, feeds), quantization_steps(artifact.program))
    return insns, all(c.ok for c in checks)


def ort_count(path: Path, inputs: Path, cpu: str, arm64: Path, plugin: Path, script: Path, extra: int) -> float:
    def command(n: int) -> list[str]:
        inner = (f"mount --bind {arm64}/cpuinfo.{cpu} /proc/cpuinfo && exec qemu-aarch64 -cpu {CPUS[cpu][1]} "
                 f"-L {arm64}/root -E PYTHONPATH={arm64}/site -E PYTHONHASHSEED=0 -plugin {plugin} -d plugin "
                 f"{arm64}/root/usr/bin/python3.11 {script} {path} {inputs} {n}")
        return ["unshare", "-m", "sh", "-c", inner]

    return per_inference(command, extra, f"onnxruntime on {cpu}", tries=ORT_TRIES)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="*", default=list(MODELS), help="zoo model names")
    parser.add_argument("--arm64", required=True, type=Path, help="the arm64 Python tree (arm64_python.sh DIR)")
    parser.add_argument("--precision", nargs="+", default=["fp32", "int8"], choices=["fp32", "int8"])
    parser.add_argument("--cpu", nargs="+", default=list(CPUS), choices=list(CPUS))
    parser.add_argument("--extra", type=int, default=20, help="extra inferences whose count is divided out")
    args = parser.parse_args(argv)
    if not (args.arm64 / "root/usr/bin/python3.11").exists():
        parser.error(f"{args.arm64}: not an arm64 Python tree (make one with benchmarks/arm64_python.sh)")
    unknown = [m for m in args.models if m not in zoo.ZOO]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)} (known: {', '.join(zoo.ZOO)})")
    rows = [("model", "precision", "cpu", "aot M insns", "onnxruntime M insns", "aot/ort", "int8/fp32", "check")]
    ok = True
    with tempfile.TemporaryDirectory(prefix="aot-arm-peer-") as tmp:
        work = Path(tmp)
        plugin = build_plugin(work)
        script = work / "ort_run.py"
        script.write_text(ORT_SCRIPT)
        for name in args.models:
            float_model = zoo.ZOO[name]()
            fp32: dict[str, float] = {}
            for precision in args.precision:
                model = float_model if precision == "fp32" else quantize_model(float_model)
                path = work / f"{name}_{precision}.onnx"
                onnx.save(model, path)
                feeds = reference.random_inputs(model, 0)
                inputs = work / f"{name}_{precision}.npz"
                np.savez(inputs, **feeds)
                for cpu in args.cpu:
                    run_dir = work / f"{name}_{precision}_{cpu}"
                    run_dir.mkdir()
                    ours, good = aot_count(model, cpu, feeds, plugin, run_dir, args.extra)
                    # enough inferences that their count dwarfs the noise of onnxruntime's start-up
                    extra = max(args.extra, math.ceil(MIN_EXTRA_INSNS / ours))
                    theirs = ort_count(path, inputs, cpu, args.arm64, plugin, script, extra)
                    if precision == "fp32":
                        fp32[cpu] = ours
                    ok &= good
                    vs_fp32 = f"{ours / fp32[cpu]:.2f}" if precision == "int8" and cpu in fp32 else ""
                    rows.append((name, precision, cpu, f"{ours / 1e6:.2f}", f"{theirs / 1e6:.2f}",
                                 f"{ours / theirs:.2f}", vs_fp32, "ok" if good else "MISMATCH"))
                    print("  ".join(rows[-1]), file=sys.stderr, flush=True)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) if i < 3 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
