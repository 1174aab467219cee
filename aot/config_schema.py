"""The schemas of the files users write: target files (targets/*.toml) and board files (boards/*.toml), as
JSON Schema (draft 2020-12), which `aot schema target|board` prints for an editor to complete and check
them with (taplo, VS Code's Even Better TOML: `#:schema ./target.schema.json` at a file's top).

A file is checked against its schema before aot reads it: an error names the file, the key's path
(`memory.ram`, `knobs.mr`), what was expected and, for a key that is not one, the closest that is. What a
schema cannot say (a 32-bit address range, a source file beside the board file) the readers check after.
"""

from __future__ import annotations

import difflib
from typing import Any

from aot.isa import INT_SIMD

TIMERS = ("dwt", "pmu", "systick")
LOADER_OPTIONS = {                         # tool -> (required options, optional options)
    "qemu": (("machine",), ("extra",)),
    "pyocd": (("target",), ("uid", "frequency")),
    "openocd": (("config",), ("commands",)),
    "probe-rs": (("chip",), ("probe",)),
    "st-flash": ((), ("serial",)),
    "command": (("command",), ()),
}

_SIZE_PATTERN = r"^\s*[0-9.]+\s*([kKmMgG]([iI]?[bB])?|[bB])?\s*$"


def _text(description: str) -> dict:
    return {"type": "string", "description": description}


def _strings(description: str) -> dict:
    return {"type": "array", "items": {"type": "string"}, "description": description}


def _integer(description: str, minimum: int | None = None) -> dict:
    return {"type": "integer", "description": description, **({"minimum": minimum} if minimum is not None else {})}


def _flag(description: str) -> dict:
    return {"type": "boolean", "description": description}


def _one_of(values, description: str) -> dict:
    return {"enum": list(values), "description": description}


def _table(properties: dict, description: str, required: tuple[str, ...] = (), open_keys: bool = False) -> dict:
    schema: dict[str, Any] = {"type": "object", "description": description, "properties": properties}
    if required:
        schema["required"] = list(required)
    if not open_keys:
        schema["additionalProperties"] = False
    return schema


SIZE = {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "string", "pattern": _SIZE_PATTERN}],
        "description": "a size in bytes: an integer, or a string such as \"512KiB\", \"2MiB\", \"1.5MB\""}
REGIONS = {"type": "array", "description": "memory regions the workspace is split over, each a [[memory.regions]] "
           "table", "items": _table({"name": _text("the region's name (a C identifier)"), "size": SIZE,
                                     "rank": _integer("its speed: 0 is the fastest", 0),
                                     "weights": _flag("the weights are copied into it at start-up")},
                                    "a memory region", ("name", "size", "rank"))}

TARGET = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "aot target file",
    **_table({
        "name": _text("the target's name, as --target takes it"),
        "description": _text("one line for `aot targets`"),
        "aliases": _strings("other names --target takes for it"),
        "os": _one_of(("linux", "none"), "linux, or none for bare metal"),
        "triple": _text("the LLVM triple (bare-metal ARM needs all four parts for the hard-float ABI)"),
        "cpu": _text("the LLVM CPU name"),
        "features": _text("LLVM target features, e.g. \"+vfp4d16sp,+dsp\""),
        "float_abi": _one_of(("hard", "soft"), "floats in FPU registers (hard) or library calls (soft)"),
        "fpu": _flag("floating-point instructions in hardware"),
        "fp64": _flag("double precision in hardware too, for float64 kernels (default: as fpu)"),
        "int_simd": _one_of(INT_SIMD, "the integer SIMD form the int8 kernels use"),
        "reloc": _one_of(("pic", "static"), "pic for Linux, static for bare metal"),
        "pointer_bits": _one_of((32, 64), "32 or 64"),
        "vector_bits": _one_of((32, 64, 128, 256, 512), "the float SIMD width in bits; 32 is a scalar FPU"),
        "vector_registers": _integer("registers the micro-kernel tiles are sized for", 1),
        "fma": _flag("fused multiply-add in hardware"),
        "align": _integer("workspace and weight alignment in bytes", 1),
        "weights_section": _text("the weights go to <weights_section>.<symbol>, for a linker script"),
        "cpu_flags": _strings("/proc/cpuinfo flags needed to run its code natively (x86)"),
        "toolchain": _table({"cc": _text("the C compiler"), "cflags": _strings("its flags for the target"),
                             "ldflags": _strings("its link flags"),
                             "linker_script": _text("bare metal: a shipped board's script or a file beside this one")},
                            "how C for the target is compiled and linked"),
        "run": _table({"command": _strings("the emulator's command line, the program's path appended")},
                      "how its programs run here (none: natively)"),
        "memory": _table({"flash": SIZE, "ram": SIZE, "regions": REGIONS}, "the device's memory limits"),
        "knobs": {"type": "object", "description": "schedule defaults (aot/knobs.py), checked when a build reads them",
                  "additionalProperties": {"type": ["integer", "boolean"]}},
    }, "a target: how aot compiles for a CPU and how its programs run",
       ("name", "description", "triple", "cpu", "features", "reloc", "pointer_bits", "vector_bits",
        "vector_registers", "fma", "align", "weights_section")),
}

_SSH = {"anyOf": [{"type": "string", "pattern": r"^[^@\s]+@[^:\s]+(:\d+)?$"},
                  _table({"host": _text("host name or address"), "user": _text("user name"),
                          "port": _integer("SSH port", 1), "identity_file": _text("private key file"),
                          "known_hosts": _text("known_hosts file"), "work_dir": _text("where runs happen")},
                         "the host the probe is attached to", ("host", "user"))],
        "description": "\"user@host[:port]\", or a table, for a probe attached to another machine"}
_MEMORY = _table({"origin": _integer("start address", 0), "size": SIZE}, "an address range", ("origin", "size"))
_LOADER_KEYS = sorted({k for required, optional in LOADER_OPTIONS.values() for k in required + optional})

DEVICE_BOARD = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "aot microcontroller board file",
    **_table({
        "name": _text("the board's name, as --board takes it"),
        "description": _text("one line for `aot boards`"),
        "target": _text("the aot target its core is"),
        "clock_hz": _integer("the core clock in Hz", 1),
        "timer": _one_of(TIMERS, "what times a run: the DWT cycle counter, the PMU, or SysTick"),
        "stack": SIZE,
        "flash": _MEMORY, "ram": _MEMORY,
        "linker_script": _text("the board's own linker script, beside this file (instead of [flash] and [ram])"),
        "loader": _table({"tool": _one_of(LOADER_OPTIONS, "how an image gets onto the device"),
                          **{k: {"description": f"a {k} option of the loader"} for k in _LOADER_KEYS}},
                         "how a program gets onto the device", ("tool",)),
        "console": _table({"url": _text("a pyserial URL: /dev/ttyACM0, hwgrep://VID:PID, rfc2217://host:port"),
                           "baud": _integer("baud rate", 1),
                           "sources": _strings("the C files that define aot_board_init and aot_console_putc/getc"),
                           "defines": {"type": "object", "description": "C macros for those sources",
                                       "additionalProperties": {"type": ["string", "integer"]}}},
                          "the console the device harness speaks over", ("sources",)),
        "ssh": _SSH,
    }, "a microcontroller board: its target, memory, loader and console", ("name", "target", "clock_hz", "loader",
                                                                           "console")),
}

LINUX_BOARD = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "aot Linux board file",
    **_table({
        "name": _text("the board's name, as --board takes it"),
        "description": _text("one line for `aot boards`"),
        "target": _text("the aot target its CPU is"),
        "host": _text("host name or address"), "user": _text("user name"),
        "port": _integer("SSH port", 1),
        "identity_file": _text("private key file (board files never hold passwords)"),
        "known_hosts": _text("known_hosts file holding the board's host key"),
        "work_dir": _text("a fresh directory is made here per run and removed after"),
        "runner": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}],
                   "description": "a prefix the program runs under (an emulator)"},
        "env": {"type": "object", "description": "environment variables for the run",
                "additionalProperties": {"type": "string"}},
        "cpus": _text("cores to pin to with taskset, e.g. \"3\""),
        "memory": _table({"regions": REGIONS}, "the board's memory regions"),
    }, "a Linux board reached over SSH", ("name", "target", "host", "user")),
}

# A board file is a microcontroller's if it has any of these keys
DEVICE_KEYS = ("loader", "console", "clock_hz", "flash", "ram", "timer", "linker_script", "stack")


def board_schema(data: dict) -> dict:
    return DEVICE_BOARD if any(k in data for k in DEVICE_KEYS) else LINUX_BOARD


def published(kind: str) -> dict:
    """The schema `aot schema KIND` prints: a target file's, or a board file's (either kind of board)."""
    if kind == "target":
        return TARGET
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": "aot board file",
            "description": "a microcontroller board (it has [loader]) or a Linux board reached over SSH",
            "anyOf": [{k: v for k, v in s.items() if k != "$schema"} for s in (DEVICE_BOARD, LINUX_BOARD)]}


def problems(data: dict, schema: dict) -> list[str]:
    """What is wrong with `data` by `schema`, a line each, the first error of each key path first."""
    from jsonschema import Draft202012Validator

    errors = sorted(Draft202012Validator(schema).iter_errors(data),      # a misspelt key before the one missing
                    key=lambda e: (len(e.absolute_path), e.validator != "additionalProperties",
                                   list(map(str, e.absolute_path))))
    return list(dict.fromkeys(_describe(e) for e in errors))


def _describe(error) -> str:
    path = ".".join(str(p) if not isinstance(p, int) else f"[{p}]" for p in error.absolute_path).replace(".[", "[")
    where = f"{path}: " if path else ""
    schema, value = error.schema, error.instance
    if error.validator == "additionalProperties":
        allowed = sorted(schema.get("properties", {}))
        unknown = sorted(set(value) - set(allowed))
        key = unknown[0]
        close = difflib.get_close_matches(key, allowed, n=1)
        table = f"[{path}]" if path else "the file's top level"
        return (f"{path + '.' if path else ''}{key}: not a key of {table}"
                + (f"; did you mean '{close[0]}'?" if close else "") + f" (keys: {', '.join(allowed)})")
    if error.validator == "required":
        missing = [k for k in schema["required"] if k not in value]
        return f"{where}missing {', '.join(repr(k) for k in missing)}"
    expected = schema.get("description", "")
    if error.validator == "enum":
        close = difflib.get_close_matches(str(value), [str(v) for v in schema["enum"]], n=1)
        return (f"{where}{value!r} is not one of {', '.join(map(repr, schema['enum']))}"
                + (f"; did you mean {close[0]!r}?" if close else ""))
    if error.validator == "type":
        return f"{where}expected {_kind(schema)}" + (f" ({expected})" if expected else "") + f", not {value!r}"
    if error.validator == "minimum":
        return f"{where}expected at least {schema['minimum']}" + (f" ({expected})" if expected else "") + \
            f", not {value!r}"
    if error.validator in ("anyOf", "pattern"):
        return f"{where}expected {expected or _kind(schema)}, not {value!r}"
    return f"{where}{error.message}"


_KINDS = {"string": "a string", "integer": "an integer", "boolean": "true or false", "array": "an array",
          "object": "a table", "number": "a number"}


def _kind(schema: dict) -> str:
    kinds = schema.get("type")
    if kinds is None:
        return "a value"
    return " or ".join(_KINDS.get(k, k) for k in ([kinds] if isinstance(kinds, str) else kinds))
