"""Memory regions: declared in a target file, filled by the plan (hottest buffers in the fastest region that
fits), one workspace block per region in the C API, each in its own linker section. Checked against
onnxruntime on the host and under qemu on a Cortex-M7 whose linker script maps the two regions to two
memories, and against the ELF symbol table."""

from __future__ import annotations

import pytest

import aot
from aot.target import Region, get_target, target_text

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


def region_target(tmp_path, dtcm: str = "4KiB", base: str = "cortex-m7", extra: str = "") -> str:
    """A copy of a shipped target with two regions (declared slowest first), as a file in tmp_path."""
    path = tmp_path / f"{base}-regions.toml"
    text = target_text(base).replace(f'name = "{base}"', f'name = "{base}-regions"')
    path.write_text(text + extra + TWO_REGIONS.format(dtcm=dtcm))
    return str(path)


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
    ('name = "dtcm"\nsize = "64 KB!"\nrank = 0', r"memory.regions\[0\] \('dtcm'\): '64 KB!' is not a size"),
    ('name = "dtcm"\nsize = 0\nrank = 0', "size must be a positive number of bytes"),
    ('name = "dtcm"\nsize = "1K"\nrank = -1', "rank must be an integer from 0"),
    ('name = "dtcm"\nsize = "1K"\nrank = "fast"', "rank must be an integer from 0"),
    ('name = "dtcm"\nsize = "1K"', "lacks rank"),
    ('name = "dtcm"\nsize = "1K"\nrank = 0\nspeed = 3', "unknown key 'speed'"),
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
    with pytest.raises(aot.TargetError, match="memory.regions must be an array of tables"):
        get_target(str(path))
