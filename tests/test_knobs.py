"""Schedule knobs: every target's table is complete, `--knobs FILE` overrides it and any setting still
computes the right answer, bad knob files get one clear line."""

import json
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import helper
from oracle import assert_matches_onnxruntime, make_model

import aot
from aot.knobs import Knobs, resolve
from aot.ops.conv.dense import _weights_outer
from aot.ops.conv.geometry import Geometry
from aot.target import all_targets, get_target


def aot_cli(*args):
    return subprocess.run([sys.executable, "-m", "aot", *map(str, args)], capture_output=True, text=True)


def conv_model(c=16, m=40, size=9, group=1, pads=(1, 1, 1, 1), stride=1, seed=0):
    rng = np.random.default_rng(seed)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=list(pads), group=group,
                              strides=[stride, stride]),
             helper.make_node("Relu", ["c"], ["y"], name="relu")]
    inits = {"w": rng.standard_normal((m, c // group, 3, 3)).astype(np.float32),
             "b": rng.standard_normal(m).astype(np.float32)}
    return make_model(nodes, {"x": (1, c, size, size)}, {"y": None}, inits)


@pytest.mark.parametrize("target", [t.name for t in all_targets()])
def test_every_target_has_a_complete_knob_table(target):
    knobs = resolve(get_target(target))
    assert isinstance(knobs, Knobs) and knobs.simd is True
    assert knobs.mr * knobs.nr + knobs.nr + 1 <= max(get_target(target).vector_registers, 8) + 24
    from aot.schedule import Schedule, check  # every default tile is one its template accepts
    tgt = get_target(target)
    for template, tile in (("dense", (knobs.mr, knobs.nr)), ("dense_core", (knobs.core_mr, knobs.core_nr)),
                           ("depthwise", (knobs.dw_mr, knobs.dw_nr)), ("rows", (knobs.core_mr, knobs.core_nr)),
                           ("depthwise_rows", (knobs.dw_mr, knobs.dw_nr)), ("depthwise_pairs", (knobs.dw_mr, 1)),
                           ("direct", (knobs.mr, knobs.nr))):
        check(Schedule(template, *tile), tgt, target)


@pytest.mark.parametrize("knobs", [{"mr": 1, "nr": 1}, {"mr": 5, "nr": 2, "dw_mr": 3, "dw_nr": 1},
                                   {"simd": False}, {"cache_kib": 1}, {"cache_kib": 1 << 20}])
@pytest.mark.parametrize("model", [conv_model(), conv_model(c=24, m=24, group=24, stride=2),
                                   conv_model(c=8, m=12, group=2, pads=(0, 1, 2, 1))],
                         ids=["dense", "depthwise", "grouped"])
def test_any_knob_setting_matches_onnxruntime(model, knobs, tmp_path):
    proto = model
    inputs = {"x": np.random.default_rng(1).standard_normal((1,) + tuple(
        d.dim_value for d in proto.graph.input[0].type.tensor_type.shape.dim[1:])).astype(np.float32)}
    expected = assert_matches_onnxruntime(proto, inputs)
    got = aot.run(proto, inputs, knobs=knobs)
    for name in expected:
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-4, atol=1e-4 * np.abs(expected[name]).max())


def test_the_cache_knob_picks_the_loop_order():
    # 7x7 output, 512 -> 512 channels: 9.4 MB of weights. With a small cache each weight panel is
    # kept while all pixels pass over it; when everything fits, pixels go outside.
    g = Geometry(1, 7, 7, 512, 7, 7, 512, 3, 3, (1, 1), (1, 1), (1, 1, 1, 1))
    weights, x = 512 * 512 * 9 * 4, 7 * 7 * 512 * 4
    assert _weights_outer(g, weights, x, panels=11, cache=1 << 20)
    assert not _weights_outer(g, weights, x, panels=11, cache=1 << 30)


def test_knobs_file_overrides_and_is_recorded(tmp_path):
    model, knobs = tmp_path / "m.onnx", tmp_path / "knobs.toml"
    onnx.save(conv_model(), model)
    knobs.write_text("mr = 2\nnr = 1\n")
    proc = aot_cli("build", model, "--knobs", knobs, "-o", tmp_path / "tuned")
    assert proc.returncode == 0, proc.stderr
    assert aot_cli("build", model, "-o", tmp_path / "default").returncode == 0
    tuned = json.loads((tmp_path / "tuned" / "metadata.json").read_text())["knobs"]
    default = json.loads((tmp_path / "default" / "metadata.json").read_text())["knobs"]
    assert (tuned["mr"], tuned["nr"]) == (2, 1)
    assert {k: v for k, v in tuned.items() if k not in ("mr", "nr")} == \
           {k: v for k, v in default.items() if k not in ("mr", "nr")}
    assert (tmp_path / "tuned" / "m.o").read_bytes() != (tmp_path / "default" / "m.o").read_bytes()
    proc = aot_cli("run", model, "--knobs", knobs)
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.parametrize("text, needle", [
    ("mx = 4\n", "unknown knob 'mx'"),
    ("mr = 0\n", "knob 'mr' must be an integer from 1 to 32"),
    ("mr = 'big'\n", "knob 'mr' must be an integer"),
    ("simd = 1\n", "knob 'simd' must be true or false"),
    ("mr = \n", "not valid TOML"),
])
def test_bad_knob_files_get_one_clear_line(tmp_path, text, needle):
    model, knobs = tmp_path / "m.onnx", tmp_path / "knobs.toml"
    onnx.save(conv_model(), model)
    knobs.write_text(text)
    proc = aot_cli("build", model, "--knobs", knobs, "-o", tmp_path / "out")
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert needle in proc.stderr and str(knobs) in proc.stderr, proc.stderr
    assert not (tmp_path / "out").exists()


def test_missing_knob_file(tmp_path):
    model = tmp_path / "m.onnx"
    onnx.save(conv_model(), model)
    proc = aot_cli("build", model, "--knobs", tmp_path / "none.toml")
    assert proc.returncode == 1 and "cannot read it" in proc.stderr and "Traceback" not in proc.stderr


def test_scalar_build_has_no_vector_code(tmp_path):
    from aot.codegen.llvm import ModuleBuilder
    from aot.knobs import scalar_variant
    from aot.program import build_program

    tgt = get_target("aarch64")
    artifact = aot.build(conv_model(), target=tgt, knobs={"simd": False}, out_dir=tmp_path)
    program = build_program(artifact.program.graph, scalar_variant(tgt), "m", resolve(tgt, {"simd": False}))
    mb = ModuleBuilder("m", tgt, vectorize=False)
    for call in program.calls:
        mb.add_kernel(call.kernel)
    asm = mb.emit_assembly()
    assert "fmadd\ts" in asm                              # scalar single-precision FMA
    assert "fmla\tv" not in asm and ".4s" not in asm      # and no NEON lanes
