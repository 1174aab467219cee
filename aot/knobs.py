"""Schedule knobs: the choices a kernel template leaves open (tile sizes, SIMD on or off).

Each target's defaults are data, the `[knobs]` table of its target file (targets/<name>.toml);
a TOML file of the same keys (`aot build --knobs FILE`) overrides them for one build. Its tables
`[node.NAME]` and `[workload."KEY"]` set one kernel's schedule (aot/schedule.py) by node name or by
workload key, and tuning records (`--records FILE`) set the schedules tuning found best.
The knobs a build used are recorded in its metadata.json.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from dataclasses import dataclass
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from aot.errors import OptionError, TargetError
from aot.schedule import Overrides, best_records, read_records
from aot.target import Target


@dataclass(frozen=True)
class Knobs:
    mr: int           # dense conv / gemm tile: output pixels (rows of accumulators)
    nr: int           # dense conv / gemm tile: vectors of output channels
    core_mr: int      # the same for int8 tiles held in core registers (no integer SIMD)
    core_nr: int
    dw_mr: int        # depthwise tile: output pixels
    dw_nr: int        # depthwise tile: vectors of channels
    cache_kib: int    # data cache a kernel may count on keeping its working set in (picks loop orders)
    simd: bool        # false: a scalar build (one lane, LLVM's vectorizers off), to measure SIMD against
    share_memory: bool = True   # outputs may overlap dying inputs where kernels allow it (false: the plain plan)
    reorder: bool = True        # run the kernels in the order searched for the smallest workspace (false: graph order)
    border_tiles: bool = True   # dense convolutions take their border columns in tiles (false: one at a time)
    # recurrent layers keep quantized weights as their int8/int16 codes, dequantized as loaded: flash 2-4x
    # smaller, each multiply-add a load, a convert and an FMA (false: float weights, dequantized now)
    weight_codes: bool = False
    # output channels of the int8 tile in core registers when the output is one pixel (a matrix times a
    # vector, whose tile has no second pixel to share the weights with); 0: core_nr
    core_vector_nr: int = 0
    # dense int8 channel loops on the Arm DSP run as loops of their own (PairLoop, schedule channels = "pairs")
    # from this many steps of 4 channels on (0: never); shorter ones LLVM unrolls whole either way
    pair_loop_steps: int = 0
    # a PairLoop ends when its weight pointer reaches the weights' end rather than on a counter: a register
    # fewer (Cortex-M4, estimated: DS-CNN int8 -3 %; the Cortex-M7's dual issue does better with the counter)
    pair_loop_to_end: bool = False
    # int8 weights of dense convolutions and Gemm on the Arm DSP stored as the 16-bit pairs sxtb16 would
    # make of them: twice their flash, one widening less per weight word (a build over its flash limit
    # falls back to int8 weights unless the knob was given)
    wide_weights: bool = False
    # LLVM's optimization pipeline, O3 or O2 (the target files say where O2 makes code as fast or faster)
    opt_level: int = 3
    # LLVM's loop strength reduction on the float kernels but matrix-vector products, in models whose kernels
    # hold up to this many IR nodes (codegen/parts.py's size); in larger ones they compile without it, in parts
    # of their own: it takes most of their compile time for about 1 % of their cycles. -1: in any model
    float_lsr_limit: int = -1
    # kernels whose code differs only in their weights share one body (false: each has its own, at twice
    # the code; a Cortex-M4's int8 convolutions ran up to 12 % fewer instructions so)
    share_bodies: bool = True
    # with share_bodies, kernels alike but for numbers in their code (zero points, scales, bounds) share one
    # body too, reading those numbers from a table (false: each keeps its numbers and its own body; three
    # int8 3x3 convolutions on a Cortex-M4 ran 8 % more instructions shared, in 12 % less code)
    share_numbers: bool = True
    # tuning records apply only where they do not grow the workspace (false: wherever they match)
    records_keep_workspace: bool = True
    schedules: Overrides = Overrides()  # per node, per workload, from tuning records (aot/schedule.py)

    def describe(self) -> dict:
        flat = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "schedules"}
        return {**flat, **self.schedules.describe()}


_FIELDS = {f.name: f.type for f in dataclasses.fields(Knobs) if f.name != "schedules"}
_TABLES = ("node", "workload")     # per-kernel schedule overrides in a knobs file
_RANGES = {"cache_kib": (1, 1 << 20), "core_vector_nr": (0, 32), "pair_loop_steps": (0, 1 << 20), "opt_level": (2, 3),
           "float_lsr_limit": (-1, 1 << 40)}
_TILE_RANGE = (1, 32)   # a tile of more accumulators than any register file holds makes no sense


def load_knobs(path: str | os.PathLike) -> dict:
    """The overrides in a knobs TOML file (flat `name = value` lines)."""
    try:
        data = tomllib.loads(Path(path).read_text())
    except OSError as err:
        raise OptionError(f"--knobs {path}: cannot read it: {err.strerror}") from None
    except tomllib.TOMLDecodeError as err:
        raise OptionError(f"--knobs {path}: not valid TOML: {err}") from None
    _check({k: v for k, v in data.items() if k not in _TABLES}, f"--knobs {path}")
    Overrides.of(data.get("node"), data.get("workload"), source=f"--knobs {path}")    # checked here, to name the file
    return data


def resolve(target: Target, overrides: dict | None = None, source: str = "knobs",
            records: str | os.PathLike | None = None) -> Knobs:
    """The target's knob table with `overrides` laid over it, checked; with the best schedule per workload
    of the tuning `records` file for this target."""
    _check(target.knobs, target.source or target.name)
    missing = [f.name for f in dataclasses.fields(Knobs)
               if f.name not in target.knobs and f.default is dataclasses.MISSING]
    if missing:
        raise TargetError(f"{target.source or target.name}: [knobs] lacks {', '.join(missing)}")
    overrides = dict(overrides or {})
    tables = {name: overrides.pop(name) for name in _TABLES if name in overrides}
    for name, table in tables.items():
        if not isinstance(table, dict):
            raise OptionError(f"{source}: '{name}' must be a table of [{name}.NAME] tables")
    _check(overrides, source)
    tuned = None
    if records is not None:
        logged = read_records(records)
        tuned = best_records(logged, target.name)
        if logged and not tuned:
            others = sorted({r["target"] for r in logged})
            raise OptionError(f"--records {records}: no successful measurement for target {target.name} "
                              f"(its records are for {', '.join(others)})")
    schedules = Overrides.of(tables.get("node"), tables.get("workload"), tuned,
                             os.path.basename(records) if records is not None else "", source)
    return Knobs(**{**target.knobs, **overrides}, schedules=schedules)


def _check(table: dict, source: str) -> None:
    for name, value in table.items():
        if name not in _FIELDS:
            raise OptionError(f"{source}: unknown knob '{name}' (knobs: {', '.join(_FIELDS)})")
        if _FIELDS[name] == "bool":
            if not isinstance(value, bool):
                raise OptionError(f"{source}: knob '{name}' must be true or false, not {value!r}")
            continue
        lo, hi = _RANGES.get(name, _TILE_RANGE)
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            raise OptionError(f"{source}: knob '{name}' must be an integer from {lo} to {hi}, not {value!r}")


def scalar_variant(target: Target) -> Target:
    """The target restricted to one lane and no integer SIMD (what `simd = false` builds for)."""
    return dataclasses.replace(target, vector_bits=32, int_simd="none")
