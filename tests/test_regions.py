"""Memory regions: declared in a target file, filled by the plan (hottest buffers in the fastest region that
fits), one workspace block per region in the C API, each in its own linker section. Checked against
onnxruntime on the host and under qemu on a Cortex-M7 whose linker script maps the two regions to two
memories, and against the ELF symbol table."""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import xml.etree.ElementTree as ET

import numpy as np
import onnx
import pytest
from oracle import onnxruntime_outputs
from test_memory_plan import small_cnn

import aot
from aot.cli import _memory_option
from aot.data import shipped
from aot.kernel.ir import Reuse
from aot.plan import memory, regions
from aot.run import local
from aot.target import Region, all_targets, get_target, target_text

STRICT = ["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-O2"]
TWO_REGIONS = """
[[memory.regions]]
name = "sdram"
size = "1MiB"
rank = 1

[[memory.regions]]
name = "dtcm"
size = "{dtcm}"
rank = 0
"""


def region_target(tmp_path, dtcm: str = "4KiB", base: str = "cortex-m7") -> str:
    """A copy of a shipped target with two regions (declared slowest first), as a file in tmp_path."""
    path = tmp_path / f"{base}-regions.toml"
    text = target_text(base).replace(f'name = "{base}"', f'name = "{base}-regions"')
    path.write_text(text + TWO_REGIONS.format(dtcm=dtcm))
    return str(path)


def host_with_regions(dtcm: int, sdram: int = 1 << 20):
    return dataclasses.replace(get_target("host"), regions=(Region("dtcm", dtcm, 0), Region("sdram", sdram, 1)))


# --------------------------------------------------------------------------- declarations


def test_regions_load_fastest_first(tmp_path):
    tgt = get_target(region_target(tmp_path, dtcm="8K"))
    assert tgt.regions == (Region("dtcm", 8192, 0), Region("sdram", 1 << 20, 1))
    assert tgt.regions[0].section == ".bss.aot.dtcm"
    assert tgt.memory == {"flash": 4 << 20, "ram": 12 << 20}      # [memory] keeps its totals beside the regions


@pytest.mark.parametrize("entries, why", [
    ('name = "dtcm"\nsize = "1K"\nrank = 0\n[[memory.regions]]\nname = "dtcm"\nsize = "2K"\nrank = 1',
     "two are named 'dtcm'"),
    ('name = "sram"\nsize = "1K"\nrank = 0\n[[memory.regions]]\nname = "SRAM"\nsize = "2K"\nrank = 1',
     "two are named 'SRAM'"),
    ('name = "dtcm"\nsize = "1K"\nrank = 0\n[[memory.regions]]\nname = "sram"\nsize = "2K"\nrank = 0',
     "'dtcm' and 'sram' both have rank 0"),
    ('name = "d-tcm"\nsize = "1K"\nrank = 0', r"memory.regions\[0\] \('d-tcm'\): name 'd-tcm' is not a C identifier"),
    ('name = "int"\nsize = "1K"\nrank = 0', "name 'int' is not a C identifier"),
    ('name = "ram"\nsize = "1K"\nrank = 0', "name 'ram' is taken"),
    ('name = "dtcm"\nsize = "64 KB!"\nrank = 0', r"memory.regions\[0\].size: expected a size in bytes.*not '64 KB!'"),
    ('name = "dtcm"\nsize = 0\nrank = 0', "size must be a positive number of bytes"),
    ('name = "dtcm"\nsize = "1K"\nrank = -1', r"memory.regions\[0\].rank: expected at least 0"),
    ('name = "dtcm"\nsize = "1K"\nrank = "fast"', r"memory.regions\[0\].rank: expected an integer .*not 'fast'"),
    ('name = "dtcm"\nsize = "1K"', r"memory.regions\[0\]: missing 'rank'"),
    ('name = "dtcm"\nsize = "1K"\nrank = 0\nspeed = 3', r"memory.regions\[0\].speed: not a key of"),
    ('name = "dtcm"\nsize = "1K"\nrank = 0\nweights = "yes"', r"memory.regions\[0\].weights: expected true or false"),
    ('name = "dtcm"\nsize = "1K"\nrank = 0\nweights = true\n[[memory.regions]]\nname = "sram"\nsize = "2K"\n'
     'rank = 1\nweights = true', "'dtcm' and 'sram' both hold the weights"),
])
def test_bad_region_declarations_name_the_file_and_field(tmp_path, entries, why):
    path = tmp_path / "bad.toml"
    path.write_text(target_text("cortex-m7").replace('name = "cortex-m7"', 'name = "bad"')
                    + "\n[[memory.regions]]\n" + entries + "\n")
    with pytest.raises(aot.TargetError, match=why) as err:
        get_target(str(path))
    assert str(path) in str(err.value)


def test_regions_must_be_an_array_of_tables(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text(target_text("cortex-m7").replace('ram = "12MiB"', 'ram = "12MiB"\nregions = "dtcm"'))
    with pytest.raises(aot.TargetError,
                       match=r"memory.regions: expected an array \(memory regions .* \[\[memory.regions\]\] table\)"):
        get_target(str(path))


def test_memory_option_takes_region_sizes():
    assert _memory_option("dtcm=64K,RAM=1M") == {"dtcm": 65536, "ram": 1 << 20}
    with pytest.raises(argparse.ArgumentTypeError, match="REGION=SIZE"):
        _memory_option("d-tcm=64K")


def test_memory_option_resizes_a_region_and_refuses_unknown_ones(tmp_path):
    target = region_target(tmp_path)
    built = aot.build(small_cnn(), target=target, out_dir=tmp_path / "b", memory={"dtcm": 6144})
    assert [(p.region.name, p.region.size) for p in built.program.regions] == [("dtcm", 6144), ("sdram", 1 << 20)]
    assert built.metadata["workspace"]["regions"][0]["capacity"] == 6144
    with pytest.raises(aot.OptionError, match="no memory region 'itcm' .*; its regions are dtcm, sdram\\)"):
        aot.build(small_cnn(), target=target, out_dir=tmp_path / "c", memory={"itcm": 1024})
    with pytest.raises(aot.OptionError, match="declares none"):
        aot.build(small_cnn(), target="cortex-m7", out_dir=tmp_path / "d", memory={"dtcm": 1024})


# --------------------------------------------------------------------------- the assignment policy


def test_hottest_buffers_take_the_fastest_region_that_still_fits():
    """All live at once: h1 (10 accesses per byte) fits the 100-byte region, h2 (5) no longer does, c (2)
    still does beside h1, the big cold one never could."""
    buffers = [memory.Buffer("h2", 64, 0, 2), memory.Buffer("cold", 256, 0, 2), memory.Buffer("h1", 64, 0, 2),
               memory.Buffer("c", 32, 0, 2)]
    accesses = {"h1": 640, "h2": 320, "c": 64, "cold": 256}
    placed = regions.place(buffers, [], accesses, (Region("slow", 1000, 1), Region("fast", 100, 0)), 16, "m")
    assert [p.region.name for p in placed] == ["fast", "slow"]
    assert sorted(placed[0].plan.offsets) == ["c", "h1"] and sorted(placed[1].plan.offsets) == ["cold", "h2"]
    assert placed[0].plan.size == 96 and placed[1].plan.size == 320


def test_ties_are_broken_by_first_use_then_name():
    buffers = [memory.Buffer(name, 64, first, 3) for name, first in (("b", 0), ("a", 0), ("early", 0), ("late", 1))]
    accesses = {b.name: 64 for b in buffers}
    placed = regions.place(buffers, [], accesses, (Region("fast", 128, 0), Region("slow", 1000, 1)), 16, "m")
    assert sorted(placed[0].plan.offsets) == ["a", "b"]


def test_an_in_place_pair_moves_as_one_and_an_overlap_across_regions_is_dropped():
    # a -> b in place at step 1 (one buffer); s -> r overlapping from 16 bytes on at step 3
    buffers = [memory.Buffer("a", 64, 0, 1), memory.Buffer("b", 64, 1, 2), memory.Buffer("s", 64, 2, 3),
               memory.Buffer("r", 64, 3, 4)]
    overlaps = [memory.Overlap("a", "b", 1, exact=True), memory.Overlap("s", "r", 3, shift=16)]
    accesses = {"a": 64, "b": 64 * 9, "s": 64 * 8, "r": 64}
    placed = regions.place(buffers, overlaps, accesses, (Region("fast", 64, 0), Region("slow", 1000, 1)), 16, "m")
    fast, slow = (set(p.plan.offsets) for p in placed)
    assert {"a", "b"} <= fast and "s" in slow     # a and b (hot together) first; s, live beside them, no longer fits
    # with room for only s, r goes to the slow region and their overlap is dropped: the plans still verify
    placed = regions.place(buffers, overlaps, {**accesses, "b": 1, "a": 1}, (Region("fast", 64, 0),
                           Region("slow", 1000, 1)), 16, "m")
    assert set(placed[0].plan.offsets) == {"s"} and "r" in placed[1].plan.offsets
    steps = [([], ["a"]), (["a"], ["b"]), (["b"], ["s"]), (["s"], ["r"]), (["r"], [])]
    sizes = {b.name: b.size for b in buffers}
    shared = [(1, "a", "b", Reuse(0, exact=True)),
              (3, "s", "r", Reuse(0, progress=((16, 0),)))]
    regions.verify(steps, placed, sizes, 16, shared)


def test_verify_rejects_a_region_over_its_size_and_buffers_in_two_or_no_regions():
    buffers = [memory.Buffer("x", 64, 0, 1), memory.Buffer("y", 64, 1, 2)]
    steps = [([], ["x"]), (["x"], ["y"]), (["y"], [])]
    sizes = {"x": 64, "y": 64}
    fast, slow = Region("fast", 64, 0), Region("slow", 64, 1)
    plan = lambda *names: memory.plan([b for b in buffers if b.name in names], 16)    # noqa: E731
    regions.verify(steps, [regions.Placement(fast, plan("x")), regions.Placement(slow, plan("y"))], sizes, 16)
    with pytest.raises(aot.PlanError, match="region fast holds 64 bytes, its plan needs 128"):
        regions.verify(steps, [regions.Placement(fast, memory.Plan({"x": 0, "y": 64}, 128, 128, "", 16))], sizes, 16)
    with pytest.raises(aot.PlanError, match="'x' is in two regions"):
        regions.verify(steps, [regions.Placement(fast, plan("x")), regions.Placement(slow, plan("x", "y"))],
                       sizes, 16)
    with pytest.raises(aot.PlanError, match="'y' is in no region"):
        regions.verify(steps, [regions.Placement(fast, plan("x"))], sizes, 16)


# --------------------------------------------------------------------------- builds


@pytest.fixture(scope="module")
def split(tmp_path_factory):
    """small_cnn on the host with a DTCM too small for its whole workspace: (one-workspace build, region build)."""
    tmp = tmp_path_factory.mktemp("regions")
    whole = aot.build(small_cnn(), target="host", out_dir=tmp / "whole", name="cnn")
    dtcm = whole.program.plan.size // 2
    return whole, aot.build(small_cnn(), target=host_with_regions(dtcm), out_dir=tmp / "split", name="cnn")


def test_the_workspace_is_split_and_each_region_plan_verifies(split):
    whole, built = split
    program = built.program
    dtcm, sdram = program.regions
    assert 0 < dtcm.plan.size <= dtcm.region.size < whole.program.plan.size and sdram.plan.size > 0
    assert program.plan.size == dtcm.plan.size + sdram.plan.size
    assert sorted(dtcm.plan.offsets.keys() | sdram.plan.offsets.keys()) == sorted(b.name for b in program.buffers)
    for p in program.regions:
        for name, offset in p.plan.offsets.items():
            assert program.locations[name].region == p.region.name and program.locations[name].index == offset
    assert all(program.locations[s].region == program.locations[r].region for _, s, r, _ in program.shared)
    plan = built.plan        # plan.json: every buffer inside its region, each region re-verified from the file
    steps = [(s["reads"], s["writes"]) for s in plan["steps"]]
    sizes = {b["tensor"]: b["size"] for b in plan["buffers"]}
    for r in plan["regions"]:
        inside = [b for b in plan["buffers"] if b["region"] == r["name"]]
        assert all(b["offset"] + b["size"] <= r["size"] <= r["capacity"] for b in inside)
        shared = [(d["step"], d["source"], d["result"], Reuse(
                   0, exact=d["exact"], backward=d["backward"],
                   progress=((0, d["shift"]) if d["backward"] else (d["shift"], 0),))) for d in plan["shared"]]
        memory.verify(steps, {b["tensor"]: b["offset"] for b in inside}, sizes, r["size"], plan["alignment"], shared)


def test_outputs_match_onnxruntime_on_the_host(split):
    _, built = split
    result = aot.check(built)
    assert result.ok, result.comparisons


def test_region_builds_are_byte_identical(split, tmp_path):
    _, built = split
    again = aot.build(small_cnn(), target=host_with_regions(built.program.regions[0].region.size), out_dir=tmp_path,
                      name="cnn")
    for name in sorted(p.name for p in built.dir.iterdir()):
        assert (built.dir / name).read_bytes() == (again.dir / name).read_bytes(), name


def test_reports_give_each_buffers_region_and_each_regions_size(split):
    _, built = split
    dtcm, sdram = built.program.regions
    report = built.report
    assert f"region dtcm       {dtcm.plan.size:,} of {dtcm.region.size:,} bytes (rank 0" in report
    assert "Memory plan: step x region dtcm offset" in report and "Memory plan: step x region sdram offset" in report
    assert any(f"  sdram+{offset}\n" in report for offset in sdram.plan.offsets.values())     # the "where" column
    assert built.metadata["workspace"]["regions"] == [
        {"name": "dtcm", "rank": 0, "size": dtcm.plan.size, "capacity": dtcm.region.size, "weights": 0,
         "section": ".bss.aot.dtcm"},
        {"name": "sdram", "rank": 1, "size": sdram.plan.size, "capacity": sdram.region.size, "weights": 0,
         "section": ".bss.aot.sdram"}]
    svg = ET.fromstring((built.dir / "report.svg").read_text())
    lines = [e for e in svg.iter("{http://www.w3.org/2000/svg}line") if e.get("class") == "region"]
    assert len(lines) == 2
    texts = [e.text for e in svg.iter("{http://www.w3.org/2000/svg}text")]
    assert f"sdram: {sdram.plan.size:,} of {sdram.region.size:,} bytes" in texts


def test_regions_that_cannot_hold_the_workspace_fail_naming_their_sizes_and_the_need(tmp_path):
    with pytest.raises(aot.PlanError) as err:
        aot.build(small_cnn(), target=host_with_regions(2048, 4096), out_dir=tmp_path / "b", name="cnn")
    message = str(err.value)
    assert "does not fit its memory regions, dtcm 2,048 bytes (rank 0), sdram 4,096 bytes (rank 1)" in message
    assert "sdram needs" in message and "--memory sdram=SIZE" in message
    whole = aot.build(small_cnn(), target="host", out_dir=tmp_path / "whole").program.plan.size
    assert f"the workspace in one piece needs {whole:,}" in message
    assert not (tmp_path / "b").exists()


def test_a_region_that_holds_the_weights_keeps_room_for_them(tmp_path):
    """The weights leave flash for the RAM region's .data sections, and its workspace takes only what they leave."""
    whole = aot.build(small_cnn(), target="host", out_dir=tmp_path / "whole", name="cnn")
    weights = whole.metadata["memory"]["weights"]
    dtcm = weights + whole.program.plan.size // 2
    target = dataclasses.replace(host_with_regions(dtcm), regions=(Region("dtcm", dtcm, 0, weights=True),
                                                                    Region("sdram", 1 << 20, 1)))
    built = aot.build(small_cnn(), target=target, out_dir=tmp_path / "held", name="cnn")
    held = built.program.regions[0]
    assert 0 < held.weights and 0 < held.plan.size <= dtcm - held.weights < whole.program.plan.size
    def sections(artifact) -> list[str]:
        listed = subprocess.run(["objdump", "-h", str(artifact.object)], capture_output=True, text=True).stdout
        return [word for word in listed.split() if word.startswith(".")]

    assert [n.replace(".data.aot.dtcm.", ".rodata.aot.") for n in sections(built) if ".aot." in n] == \
        [n for n in sections(whole) if ".aot." in n]
    listed = subprocess.run(["objdump", "-h", str(built.object)], capture_output=True, text=True).stdout.splitlines()
    sizes = [int(line.split()[2], 16) for line in listed if ".data.aot.dtcm." in line]
    assert 0 < sum(sizes) <= held.weights        # kept for them: the arrays the kernels read, before LLVM folds any
    assert built.metadata["memory"]["ram"] == whole.metadata["memory"]["ram"] - whole.program.plan.size \
        + built.program.plan.size + built.metadata["memory"]["weights"]
    assert f"region dtcm       {held.plan.size:,} + {held.weights:,} kept for weights of {dtcm:,} bytes" in built.report
    assert aot.check(built).ok
    with pytest.raises(aot.PlanError, match=f"the weights \\({held.weights:,} bytes\\) do not fit memory region dtcm"):
        aot.build(small_cnn(), target=target, out_dir=tmp_path / "none", name="cnn", memory={"dtcm": 1024})


def test_the_command_line_resizes_regions_and_reports_what_does_not_fit(tmp_path):
    onnx.save(small_cnn(), tmp_path / "cnn.onnx")
    target = region_target(tmp_path)
    build = [sys.executable, "-m", "aot", "build", "cnn.onnx", "--target", target]
    proc = subprocess.run([*build, "--memory", "dtcm=1K,sdram=2K", "-o", "small"], capture_output=True, text=True,
                          cwd=tmp_path)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert "dtcm 1,024 bytes (rank 0), sdram 2,048 bytes (rank 1)" in proc.stderr
    proc = subprocess.run([*build, "--memory", "dtcm=6K", "-o", "ok"], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "ok" / "plan.json").read_text())["regions"][0]["capacity"] == 6144


PROGRAM = r"""
#include <stdint.h>
#include <stdio.h>
#include "cnn.h"

static float x[CNN_INPUT_X_SIZE], probs[CNN_OUTPUT_PROBS_SIZE];
static uint8_t fast[CNN_WORKSPACE_DTCM_SIZE + 1]
    __attribute__((section(CNN_WORKSPACE_DTCM_SECTION), aligned(CNN_WORKSPACE_DTCM_ALIGN)));
static uint8_t slow[CNN_WORKSPACE_SDRAM_SIZE]
    __attribute__((section(CNN_WORKSPACE_SDRAM_SECTION), aligned(CNN_WORKSPACE_SDRAM_ALIGN)));

int main(void)
{
    cnn_inputs in;
    cnn_outputs out;
    cnn_workspaces ws;
    FILE *f = fopen("x.bin", "rb");
    if (f == NULL || fread(x, sizeof x, 1, f) != 1)
        return 10;
    fclose(f);
    in.x = x;
    out.probs = probs;
    ws.dtcm = NULL;
    ws.sdram = slow;
    if (cnn_run(&in, &out, NULL) != CNN_ERR_NULL) return 11;
    if (cnn_run(&in, &out, &ws) != CNN_ERR_NULL) return 12;
    ws.dtcm = fast + 1;
    if (cnn_run(&in, &out, &ws) != CNN_ERR_ALIGN) return 13;
    ws.dtcm = fast;
    if (cnn_run(&in, &out, &ws) != CNN_OK) return 14;
    f = fopen("probs.bin", "wb");
    fwrite(probs, sizeof probs, 1, f);
    fclose(f);
    return 0;
}
"""


def test_a_program_using_the_region_api(split, tmp_path):
    """The header as documented: one block per region in the region's section, the error codes, and the
    wrapper warning-free under strict C99."""
    _, built = split
    header = built.header.read_text()
    assert "int32_t cnn_run(const cnn_inputs *in, cnn_outputs *out, const cnn_workspaces *workspaces);" in header
    assert "#define CNN_WORKSPACE_SIZE" not in header        # one size per region, so no code assumes a single block
    x = np.random.default_rng(1).standard_normal((1, 3, 16, 16)).astype(np.float32)
    (tmp_path / "main.c").write_text(PROGRAM)
    (tmp_path / "x.bin").write_bytes(x.tobytes())
    compiled = subprocess.run([*STRICT, f"-I{built.dir}", "-c", "main.c"], cwd=tmp_path, capture_output=True, text=True)
    assert compiled.returncode == 0, compiled.stderr
    symbols = subprocess.run(["objdump", "-t", "main.o"], cwd=tmp_path, capture_output=True, text=True).stdout
    assert any(".bss.aot.dtcm" in line and line.endswith(" fast") for line in symbols.splitlines())
    assert any(".bss.aot.sdram" in line and line.endswith(" slow") for line in symbols.splitlines())
    linked = subprocess.run([*STRICT, f"-I{built.dir}", "main.o", str(built.source), str(built.object), "-o", "prog"],
                            cwd=tmp_path, capture_output=True, text=True)
    assert linked.returncode == 0, linked.stderr
    run = subprocess.run(["./prog"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, f"exit {run.returncode}: {run.stderr}"
    got = np.frombuffer((tmp_path / "probs.bin").read_bytes(), np.float32)
    expected = onnxruntime_outputs(small_cnn(), {"x": x})["probs"].ravel()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("target", [t.name for t in all_targets()])
def test_the_region_wrapper_compiles_warning_free_with_each_toolchain(target, tmp_path):
    """The wrapper and the run harness with three regions, one of them unused, under every target's compiler
    with -Wall -Wextra -Werror -pedantic."""
    tgt = get_target(target)
    built = aot.build(small_cnn(), target=dataclasses.replace(tgt, regions=(Region("fast", 4096, 0),
                      Region("slow", 1 << 20, 1), Region("unused", 64, 2))), out_dir=tmp_path / "b", name="cnn")
    assert built.program.regions[2].plan.size == 0
    compiled = subprocess.run([tgt.cc, *local.STRICT_CFLAGS, *tgt.cflags, "-c", str(built.source), "-o",
                               str(tmp_path / "cnn_wrapper.o")], capture_output=True, text=True)
    assert compiled.returncode == 0, compiled.stderr
    harness = tmp_path / "main.c"
    harness.write_text(local.render_harness(built))
    compiled = subprocess.run([tgt.cc, *local.STRICT_CFLAGS, *tgt.cflags, f"-I{built.dir}", "-c", str(harness), "-o",
                               str(tmp_path / "main.o")], capture_output=True, text=True)
    assert compiled.returncode == 0, compiled.stderr


# --------------------------------------------------------------------------- under qemu, two memories


def two_region_board(tmp_path, dtcm: int) -> str:
    """cortex-m7 on mps2-an500 with a DTCM of `dtcm` bytes (the weights and a workspace block) at 0x20000000,
    in front of the SSRAM2/3 bank that holds heap and stack, and SDRAM in the 16 MiB PSRAM at 0x60000000
    where the shipped script puts .bss (QEMU 7.2's memory map; see the shipped mps2-an500.ld)."""
    script = shipped("runtime_c", "baremetal", "mps2-an500.ld").read_text()
    memory_line = "    SSRAM23 (rwx) : ORIGIN = 0x20000000, LENGTH = 4M\n"
    rodata = "    /* Model weights: the generated object puts each in .rodata.<name>. */"
    assert memory_line in script and rodata in script
    script = script.replace(memory_line, "    DTCM    (rw)  : ORIGIN = 0x20000000, LENGTH = 64K\n"
                                         "    SSRAM23 (rwx) : ORIGIN = 0x20010000, LENGTH = 4M - 64K\n")
    # before .data and .bss, whose patterns would take these sections otherwise
    script = script.replace(rodata, "    .dtcm_weights : ALIGN(16) { *(.data.aot.dtcm.*) } > DTCM\n"
                                    "    .dtcm (NOLOAD) : ALIGN(16) { *(.bss.aot.dtcm) } > DTCM\n\n" + rodata)
    (tmp_path / "two-regions.ld").write_text(script)
    path = region_target(tmp_path, dtcm=str(dtcm))
    text = open(path).read().replace('linker_script = "mps2-an500.ld"', 'linker_script = "two-regions.ld"')
    open(path, "w").write(text.replace('name = "dtcm"', 'name = "dtcm"\nweights = true'))
    return path


@pytest.mark.qemu
def test_two_regions_on_a_cortex_m7_under_qemu(tmp_path):
    """The weights and the hottest tensors in DTCM, the rest in SDRAM: each where the linker script maps its
    section, and the outputs onnxruntime's."""
    whole = aot.build(small_cnn(), target="cortex-m7", out_dir=tmp_path / "whole", name="cnn")
    dtcm = whole.metadata["memory"]["weights"] + whole.program.plan.size // 2
    built = aot.build(small_cnn(), target=two_region_board(tmp_path, dtcm), out_dir=tmp_path / "split", name="cnn")
    fast, slow = built.program.regions
    assert fast.room < whole.program.plan.size                 # the workspace does not fit beside the weights ...
    assert fast.plan.size > 0 and slow.plan.size > 0 and fast.weights > 0     # ... so both regions hold tensors
    result = aot.check(built)
    assert result.ok, result.comparisons
    exe = local.compile_harness(built, tmp_path)
    table = subprocess.run(["arm-none-eabi-nm", "-S", str(exe)], capture_output=True, text=True, check=True).stdout
    symbols = {line.split()[-1]: (int(line.split()[0], 16), int(line.split()[1], 16))
               for line in table.splitlines() if len(line.split()) == 4}
    address, size = symbols["workspace_dtcm"]
    assert 0x20000000 <= address and address + size <= 0x20010000 and size == fast.plan.size
    address, size = symbols["workspace_sdram"]
    assert 0x60000000 <= address and address + size <= 0x61000000 and size == slow.plan.size
    weights = [name for name in symbols if name.startswith("cnn_w")]
    assert weights and all(0x20000000 <= symbols[w][0] < 0x20010000 for w in weights)
    in_dtcm = sum(size for name, (address, size) in symbols.items() if 0x20000000 <= address < 0x20010000)
    assert in_dtcm <= dtcm
    assert json.loads((built.dir / "metadata.json").read_text())["target"]["name"] == "cortex-m7-regions"


def test_without_regions_nothing_names_one(split):
    whole, _ = split
    assert whole.program.regions == () and all(loc.region == "" for loc in whole.program.locations.values())
    assert "region" not in json.dumps(whole.plan) and "regions" not in whole.metadata["workspace"]


def test_a_build_larger_than_the_emulated_boards_memory_says_so_first(tmp_path):
    """--memory may raise a limit above what qemu's board has: the build passes, the harness link cannot,
    and the error leads with the region that overflowed rather than 'failed:' and the linker's output."""
    import shutil

    if shutil.which("arm-none-eabi-gcc") is None:
        pytest.skip("arm-none-eabi-gcc is not installed")
    from onnx import TensorProto, helper, numpy_helper

    weight = np.zeros((64, 70000), np.float32)      # 17.1 MiB: more than the MPS2 board's 16 MiB
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "big",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 70000])],
                              [numpy_helper.from_array(weight, "w")])
    path = tmp_path / "big.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    proc = subprocess.run([sys.executable, "-m", "aot", "run", str(path), "--target", "cortex-m4", "--memory",
                           "flash=20M"], capture_output=True, text=True)
    assert proc.returncode != 0
    first = proc.stderr.splitlines()[0]
    assert "does not fit the memory" in first and "region PSRAM overflowed by" in first, first
    assert "Traceback" not in proc.stderr
