"""Schedules: how a kernel template computes one node, as a value.

A template (the dense convolution micro-kernel, the depthwise one, ...) leaves choices open: the register
tile, the loop order. Lowering a node first chooses a Schedule, then emits the kernel for it. The default
choice is the target's knobs (aot/knobs.py) and the template's rules (the loop order by memory traffic);
a choice can be overridden per node or per workload (`--knobs FILE` tables `[node.NAME]` and
`[workload."KEY"]`) or taken from tuning records (`--records FILE`, aot/tune.py), and every build records
each kernel's schedule, where it came from and its workload key in metadata.json.

A workload is what a schedule's cost depends on: the template and the node's shapes, strides, padding
and data type. Two nodes with the same key run the same code for the same schedule, so tuning measures
each key once and a record applies to every node with its key.
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from aot.errors import OptionError
from aot.target import Target

LOOPS = ("pixels", "weights")     # dense: pixel tiles outside (weights re-read per row), or weight panels outside
BORDERS = ("clip", "tiles")       # dense: border columns one at a time, window clipped at run time; or in tiles
# dense_core on the Arm DSP: a full tile's channels in a loop of their own (kernel IR's PairLoop), or in the
# generic tile loop (the only one elsewhere)
CHANNELS = ("pairs", "generic")


@dataclass(frozen=True)
class Schedule:
    template: str
    mr: int             # register tile: output pixels
    nr: int             # register tile: vectors of output channels (scalars for core-register tiles)
    loop: str = ""      # dense only: see LOOPS
    border: str = ""    # dense only: see BORDERS
    channels: str = ""  # dense_core only: see CHANNELS

    @property
    def tag(self) -> str:
        """What the kernel's symbol says of it: `6x2`, `6x2_wouter` (`4` for a template with no nr)."""
        tile = f"{self.mr}x{self.nr}" if "nr" in TEMPLATES[self.template].fields else f"{self.mr}"
        return (tile + ("_wouter" if self.loop == "weights" else "") + ("_btiles" if self.border == "tiles" else "")
                + ("_pairs" if self.channels == "pairs" else ""))

    def describe(self) -> dict:
        """The template and the fields it reads."""
        return {"template": self.template, **{k: getattr(self, k) for k in TEMPLATES[self.template].fields}}


@dataclass(frozen=True)
class Template:
    """A kernel template's open choices: which fields of Schedule it reads, the values tuning tries, and
    its register budget (what the tile needs, what the target has)."""
    name: str
    fields: tuple[str, ...]
    space: dict[str, tuple]
    registers: Callable[[Schedule, Target], tuple[int, int, str]]


def _core_registers(target: Target) -> int:
    """General registers a kernel's tile may hold (the rest keep addresses and loop counters)."""
    return 11 if target.pointer_bits == 32 else 24


# A tile is refused when its accumulators alone need more registers than the target has: then every
# multiply-accumulate would go through memory. Tiles that fit but leave too few registers for their
# operands spill a little; measuring tells (see aot/tune.py).

def _vector_tile(s: Schedule, t: Target) -> tuple[int, int, str]:
    return s.mr * s.nr, t.vector_registers, "vector registers for accumulators"


def _core_tile(s: Schedule, t: Target) -> tuple[int, int, str]:
    return s.mr * s.nr, _core_registers(t), "general registers for accumulators"


def _pairs_tile(s: Schedule, t: Target) -> tuple[int, int, str]:
    # 4 channels' accumulators per pixel: past 2 pixels they live on the stack (cheap on a Cortex-M, and
    # measured faster for 4 pixels), past 8 the shared weight loads no longer pay for the spills
    return s.mr, 8, "pixels (4 accumulators each)"


_TILES = tuple(range(1, 9))
TEMPLATES = {t.name: t for t in (
    Template("dense", ("mr", "nr", "loop", "border"),
             {"mr": _TILES, "nr": (1, 2, 3, 4), "loop": LOOPS, "border": BORDERS}, _vector_tile),
    Template("dense_core", ("mr", "nr", "loop", "border", "channels"),
             {"mr": (1, 2, 3, 4), "nr": (1, 2, 3, 4), "loop": LOOPS, "border": BORDERS, "channels": CHANNELS},
             _core_tile),
    Template("depthwise", ("mr", "nr"), {"mr": _TILES, "nr": (1, 2, 3, 4)}, _vector_tile),
    Template("depthwise_pairs", ("mr",), {"mr": _TILES}, _pairs_tile),
    Template("rows", ("mr", "nr"), {"mr": (1, 2, 3, 4), "nr": (1, 2, 3, 4)}, _core_tile),
    Template("depthwise_rows", ("mr", "nr"), {"mr": _TILES, "nr": (1, 2, 3)}, _vector_tile),
    Template("direct", ("mr", "nr"), {"mr": _TILES, "nr": (1, 2, 3, 4)}, _vector_tile),
    Template("row_windows", ("mr", "nr"), {"mr": _TILES, "nr": (1, 2, 3, 4)}, _vector_tile),
    # x86 AMX (aot/ops/conv/amx.py): 32 pixels x 2 blocks of 16 channels in four tile registers
    Template("amx", ("mr", "nr"), {"mr": (32,), "nr": (2,)}, lambda s, t: (s.mr * s.nr // 16, 4, "tiles")),
)}


def check(schedule: Schedule, target: Target, where: str) -> None:
    """Reject a schedule its template cannot run on the target, saying why."""
    template = TEMPLATES[schedule.template]
    if schedule.loop and schedule.loop not in LOOPS:
        raise OptionError(f"{where}: loop must be one of {', '.join(LOOPS)}, not {schedule.loop!r}")
    if schedule.border and schedule.border not in BORDERS:
        raise OptionError(f"{where}: border must be one of {', '.join(BORDERS)}, not {schedule.border!r}")
    if schedule.channels and schedule.channels not in CHANNELS:
        raise OptionError(f"{where}: channels must be one of {', '.join(CHANNELS)}, not {schedule.channels!r}")
    if schedule.channels == "pairs" and not target.int_simd.byte_pairs:
        raise OptionError(f"{where}: channels = \"pairs\" needs the Arm DSP's byte pairs, which {target.name} lacks")
    if schedule.mr < 1 or schedule.nr < 1:
        raise OptionError(f"{where}: the {schedule.mr}x{schedule.nr} tile is empty")
    need, have, what = template.registers(schedule, target)
    if need > have:
        raise OptionError(f"{where}: the {schedule.mr}x{schedule.nr} {schedule.template} tile needs {need} {what}; "
                          f"{target.name} has {have}")


@dataclass(frozen=True)
class Chosen:
    """The schedule a kernel was emitted for, and why that one."""
    node: str
    workload: str
    schedule: Schedule
    source: str         # "default", "node" or "workload" (a --knobs table), "records"

    def describe(self) -> dict:
        return {"node": self.node, "workload": self.workload, "source": self.source, **self.schedule.describe()}


_FIELD_TYPES = {"mr": int, "nr": int, "loop": str, "border": str, "channels": str}


Fields = tuple[tuple[str, object], ...]


@dataclass(frozen=True)
class Overrides:
    """Schedule choices made outside the default rules: by node name, by workload key (both partial:
    the fields given), and from tuning records (whole schedules by workload key, best first). Per node
    wins over per workload, which wins over records. A node takes its workload's best record unless
    `ranks` moves it further down the list (past the end: no record), which the build does where the
    best would grow the workspace."""
    nodes: tuple[tuple[str, Fields], ...] = ()
    workloads: tuple[tuple[str, Fields], ...] = ()
    records: tuple[tuple[str, tuple[Fields, ...]], ...] = ()
    records_file: str = ""
    ranks: tuple[tuple[str, int], ...] = ()
    _index: dict = field(default_factory=dict, compare=False, repr=False)

    @staticmethod
    def of(nodes: dict | None = None, workloads: dict | None = None, records: dict | None = None,
           records_file: str = "", source: str = "knobs") -> Overrides:
        """From tables {key: {field: value}}; records as {workload: [schedule fields, best first]}."""
        def checked(fields: dict, where: str) -> Fields:
            if not isinstance(fields, dict):
                raise OptionError(f"{source}: {where} must be a table of schedule fields")
            for name, value in fields.items():
                if name == "template":
                    continue
                kind = _FIELD_TYPES.get(name)
                if kind is None:
                    raise OptionError(f"{source}: {where}: unknown schedule field '{name}' "
                                      f"(fields: {', '.join(_FIELD_TYPES)})")
                if isinstance(value, bool) or not isinstance(value, kind):
                    raise OptionError(f"{source}: {where}: '{name}' must be "
                                      f"{'an integer' if kind is int else 'a string'}, not {value!r}")
            return tuple(sorted(fields.items()))

        def table(rows: dict | None, what: str) -> tuple:
            return tuple((key, checked(fields, f"[{what}.{key}]")) for key, fields in sorted((rows or {}).items()))

        ranked = tuple((key, tuple(checked(f, f"records of {key}") for f in ranked))
                       for key, ranked in sorted((records or {}).items()))
        return Overrides(table(nodes, "node"), table(workloads, "workload"), ranked, records_file)

    def __bool__(self) -> bool:
        return bool(self.nodes or self.workloads or self.records)

    def lookup(self, node: str, workload: str) -> tuple[dict, str]:
        """The fields to lay over the default schedule of `node` (of workload `workload`), and their source."""
        if not self._index:
            self._index.update({"node": dict(self.nodes), "workload": dict(self.workloads),
                                "records": dict(self.records), "ranks": dict(self.ranks)})
        for source, key in (("node", node), ("workload", workload)):
            fields = self._index[source].get(key)
            if fields is not None:
                return {k: v for k, v in fields if k != "template"}, source
        ranked = self._index["records"].get(workload, ())
        rank = self._index["ranks"].get(node, 0)
        if rank < len(ranked):
            return {k: v for k, v in ranked[rank] if k != "template"}, "records"
        return {}, "default"

    def rank(self, node: str) -> int:
        return dict(self.ranks).get(node, 0)

    def reranked(self, ranks: dict[str, int]) -> Overrides:
        """The same overrides with these nodes taking their workload's record at these ranks."""
        merged = {**dict(self.ranks), **ranks}
        return dataclasses.replace(self, ranks=tuple(sorted(merged.items())), _index={})

    def describe(self) -> dict:
        out: dict = {}
        if self.nodes:
            out["node"] = {k: dict(v) for k, v in self.nodes}
        if self.workloads:
            out["workload"] = {k: dict(v) for k, v in self.workloads}
        if self.records_file:
            out["records"] = {"file": self.records_file, "workloads": len(self.records)}
            if self.ranks:      # nodes whose best record would have grown the workspace: the rank taken instead
                out["records"]["ranks"] = {node: rank for node, rank in self.ranks}
        return out


def choose(overrides: Overrides, target: Target, node: str, workload: str, default: Schedule,
           rules: Callable[[Schedule], Schedule] = lambda s: s) -> Chosen:
    """The schedule of `node`: the overrides that apply laid over `default`, then `rules` filling in what
    neither decided (fields left ""), checked against the template and the target."""
    fields, source = overrides.lookup(node, workload)
    template = TEMPLATES[default.template]
    unknown = sorted(set(fields) - set(template.fields))
    where = f"node '{node}' ({workload})"
    if unknown and source != "records":
        raise OptionError(f"{where}: the {default.template} template has no {', '.join(unknown)} "
                          f"(it takes {', '.join(template.fields)})")
    fields = {k: v for k, v in fields.items() if k in template.fields}
    schedule = rules(dataclasses.replace(default, **fields))
    check(schedule, target, f"{where}, schedule from {source}")
    return Chosen(node, workload, schedule, source)


def workload_key(template: str, shape: tuple[int, ...], out_channels: int, kernel: tuple[int, int],
                 strides: tuple[int, int], dilations: tuple[int, int], pads: tuple[int, ...], groups: int,
                 dtype: str) -> str:
    """`dense 1x56x56x64>64 k3x3 s1x1 d1x1 p1,1,1,1 g1 f32`: template, NHWC input > output channels,
    window, strides, dilations, pads (top, left, bottom, right), groups, input type."""
    return (f"{template} {'x'.join(map(str, shape))}>{out_channels} k{kernel[0]}x{kernel[1]} "
            f"s{strides[0]}x{strides[1]} d{dilations[0]}x{dilations[1]} p{','.join(map(str, pads))} "
            f"g{groups} {dtype}")


def input_pixels(key: str) -> int:
    """The input pixels (H x W) of a workload key (see workload_key)."""
    _, h, w, _ = key.split()[1].split(">")[0].split("x")
    return int(h) * int(w)


# --- tuning records ---------------------------------------------------------------------------------

def read_records(path: str | os.PathLike) -> list[dict]:
    """The records of a tuning log (one JSON object per line; see aot/tune.py)."""
    try:
        text = Path(path).read_text()
    except OSError as err:
        raise OptionError(f"--records {path}: cannot read it: {err.strerror}") from None
    records = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise OptionError(f"--records {path}:{number}: not a JSON record: {err.msg}") from None
        if not isinstance(record, dict) or not {"workload", "target", "schedule"} <= set(record):
            raise OptionError(f"--records {path}:{number}: a record needs workload, target and schedule")
        records.append(record)
    return records


RANKED = 4     # records kept per workload, best first: the build may step down them to keep the workspace


def best_records(records: list[dict], target: str) -> dict[str, list[dict]]:
    """Per workload of `target`, the schedules measured without error, by the median of each one's
    costs, best first (ties: a fixed order, so the same records always give the same build). Costs in
    different units are not compared: a workload's are those in the unit of its last record."""
    costs: dict[str, dict[str, list[float]]] = {}
    unit = {r["workload"]: r.get("unit") for r in records if r["target"] == target}
    for record in records:
        if record["target"] != target or record.get("error") or record.get("cost") is None \
                or record.get("unit") != unit[record["workload"]]:
            continue
        schedule = json.dumps(record["schedule"], sort_keys=True)
        costs.setdefault(record["workload"], {}).setdefault(schedule, []).append(float(record["cost"]))
    return {key: [json.loads(s) for s, _ in sorted(seen.items(), key=lambda kv: (statistics.median(kv[1]), kv[0]))
                  [:RANKED]] for key, seen in sorted(costs.items())}
