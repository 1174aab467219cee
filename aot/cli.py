"""The `aot` command: a thin layer over the Python API. User errors print one line and exit 1."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

from aot import api
from aot.build import build
from aot.errors import AotError, MismatchError, OptionError
from aot.target import all_targets, get_target, host_target_name, parse_size
from aot.version import __version__


def _shape_option(text: str) -> tuple[str, tuple[int, ...]]:
    name, sep, dims = text.rpartition("=")
    try:
        if not sep or not name:
            raise ValueError
        shape = tuple(int(d) for d in dims.lower().split("x"))
        if any(d <= 0 for d in shape):
            raise ValueError
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not NAME=DIMS (e.g. input=1x3x224x224)") from None
    return name, shape


def _memory_option(text: str) -> dict[str, int]:
    limits = {}
    try:
        for item in text.split(","):
            kind, _, size = item.partition("=")
            if kind.strip().lower() not in ("flash", "ram"):
                raise ValueError
            limits[kind.strip().lower()] = parse_size(size)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not flash=SIZE,ram=SIZE (e.g. flash=1M,ram=256K)") from None
    return limits


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="ONNX model file")
    p.add_argument("--target", default="host", help="target name from `aot targets` (default: host)")
    p.add_argument("--input-shape", type=_shape_option, action="append", default=[], metavar="NAME=DIMS",
                   help="fix an input's shape, e.g. input=1x3x224x224 (repeatable)")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="aot", description="Ahead-of-time compiler from ONNX models to "
                                     "object files and C wrappers.")
    parser.add_argument("--version", action="version", version=f"aot {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("build", help="compile a model into DIR: NAME.o, NAME.h, NAME.c, plan.json, "
                       "metadata.json, report.txt")
    _common(p)
    p.add_argument("-o", "--output", help="output directory (default: build/NAME)")
    p.add_argument("--name", help="C name prefix (default: the model's file name)")
    p.add_argument("--dump-graph", action="store_true", help="print the graph after import and after each pass")
    p.add_argument("--memory", type=_memory_option, default={}, metavar="flash=SIZE,ram=SIZE",
                   help="fail the build if the model needs more (e.g. flash=1M,ram=256K); overrides the target's")

    p = sub.add_parser("run", help="build, run through the C entry point, compare with onnxruntime")
    _common(p)
    p.add_argument("--inputs", help=".npz file with one array per model input (default: random, seed 0)")
    p.add_argument("--outputs", help="write the compiled model's outputs to this .npz file")
    p.add_argument("-o", "--output", help="keep the build in this directory")
    p.add_argument("--seed", type=int, default=0, help="seed for random inputs (default 0)")
    p.add_argument("--timeout", type=float, default=600.0, help="stop the program after this many seconds")

    p = sub.add_parser("targets", help="list the target configs, or show one")
    p.add_argument("name", nargs="?", help="show this target's whole config")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return {"build": _build, "run": _run, "targets": _targets}[args.command](args)
    except AotError as err:
        print(f"aot: error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("aot: interrupted", file=sys.stderr)
        return 130


def _shapes(args) -> dict[str, tuple[int, ...]]:
    return dict(args.input_shape)


def _build(args) -> int:
    def dump(name, graph) -> None:
        print(f"# after {name}\n{graph.dump()}\n")

    start = time.perf_counter()
    artifact = build(args.model, target=args.target, out_dir=args.output, name=args.name,
                     input_shapes=_shapes(args), memory=args.memory, on_pass=dump if args.dump_graph else None)
    plan = artifact.plan
    print(f"built {artifact.dir}/ for {artifact.target.name} in {time.perf_counter() - start:.2f} s: "
          f"{artifact.name}.o {artifact.object.stat().st_size:,} bytes, workspace {plan['workspace_size']:,} "
          f"bytes (lower bound {plan['lower_bound']:,}); flash {artifact.metadata['memory']['flash']:,}, "
          f"RAM {artifact.metadata['memory']['ram']:,} bytes")
    return 0


def _run(args) -> int:
    inputs = None
    if args.inputs:
        try:
            with np.load(args.inputs) as data:
                inputs = {k: data[k] for k in data.files}
        except (OSError, ValueError) as err:
            raise OptionError(f"--inputs {args.inputs}: cannot read it as .npz: {err}") from None
    result = api.check(args.model, inputs=inputs, target=args.target, input_shapes=_shapes(args),
                       out_dir=args.output, seed=args.seed, timeout=args.timeout)
    if args.outputs:
        Path(args.outputs).parent.mkdir(parents=True, exist_ok=True)
        np.savez(args.outputs, **result.outputs)
    print(f"{os.path.basename(str(args.model))} on {get_target(args.target).name} vs onnxruntime:")
    for c in result.comparisons:
        status = "ok" if c.ok else "MISMATCH"
        quantized = (f"; {c.off_by_one} of {c.size} elements one quantization step ({c.step:.3g}) off"
                     if c.step else "")
        print(f"  {c.output}: max abs error {c.max_abs:.3g} (output scale {c.scale:.3g}), "
              f"max rel error {c.max_rel:.3g}{quantized}: {status}")
    if not result.ok:
        raise MismatchError("outputs differ from onnxruntime beyond the tolerance (1e-4 of the output's scale, "
                            "or one quantization step for quantized outputs)")
    return 0


def _targets(args) -> int:
    if args.name:
        t = get_target(args.name)
        print(Path(t.source).read_text(), end="")
        return 0
    try:
        host = host_target_name()
    except AotError:
        host = None
    rows = [("name", "triple", "cpu", "vector", "description")]
    for t in all_targets():
        rows.append((t.name + (" (host)" if t.name == host else ""), t.triple, t.cpu, f"{t.vector_bits}-bit",
                     t.description))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
