"""report.svg: the memory plan as a picture. Checked against plan.json, the plan's own record: one
rectangle per workspace buffer at its steps, offset and size on one scale, the shared ones hatched,
the lower bound and the workspace size drawn; the same bytes on every build."""

from __future__ import annotations

import json
import time
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from onnx import helper

import aot
from aot import report_svg
from aot.frontend.onnx import load, to_graph
from aot.graph.passes import optimize
from aot.program import build_program
from aot.target import get_target

try:
    from oracle import make_model
except ImportError:  # tests/ imported as a package
    from tests.oracle import make_model

SVG = "{http://www.w3.org/2000/svg}"
TOLERANCE = 0.02        # px: coordinates are written with two decimals


def residual_net():
    """Convolutions with a residual Add that dies where it is read, so some results share bytes."""
    rng = np.random.default_rng(0)
    f = lambda *shape: rng.standard_normal(shape).astype(np.float32) * 0.3
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], name="dw2", pads=[1, 1, 1, 1], group=16),
             helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
             helper.make_node("Conv", ["r2", "w3", "b3"], ["c3"], name="pw3"),
             helper.make_node("Relu", ["c3"], ["r3"], name="relu3"),
             helper.make_node("Conv", ["r3", "w4"], ["c4"], name="dw4", pads=[1, 1, 1, 1], group=16),
             helper.make_node("Add", ["c4", "r2"], ["s"], name="residual"),
             helper.make_node("GlobalAveragePool", ["s"], ["y"], name="pool")]
    inits = {"w1": f(16, 1, 3, 3), "b1": f(16), "w2": f(16, 1, 3, 3), "w3": f(16, 16, 1, 1), "b3": f(16),
             "w4": f(16, 1, 3, 3)}
    return make_model(nodes, {"x": (1, 1, 26, 12)}, {"y": None}, inits)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("svg")
    first = aot.build(residual_net(), out_dir=out / "a", name="net")
    aot.build(residual_net(), out_dir=out / "b", name="net")
    return first, out


def parse(path) -> ET.Element:
    return ET.fromstring(path.read_text())


def rects(root: ET.Element, kind: str) -> list[ET.Element]:
    return [r for r in root.iter(SVG + "rect") if r.get("class") == kind]


def line(root: ET.Element, kind: str) -> float:
    (found,) = [e for e in root.iter(SVG + "line") if e.get("class") == kind]
    assert found.get("y1") == found.get("y2")
    return float(found.get("y1"))


def box(rect: ET.Element) -> tuple[float, ...]:
    return tuple(float(rect.get(k)) for k in ("x", "y", "width", "height"))


def test_one_rectangle_per_buffer_on_one_scale(built):
    artifact, out = built
    plan = json.loads((out / "a" / "plan.json").read_text())
    root = parse(out / "a" / "report.svg")
    drawn = {r.find(SVG + "title").text.split(":")[0]: box(r) for r in rects(root, "buffer")}
    assert sorted(drawn) == sorted(b["tensor"] for b in plan["buffers"])
    assert len(rects(root, "buffer")) == len(plan["buffers"]) >= 4
    # the scales, read off the picture: bytes from the lower-bound line, steps from the step columns
    per_byte = line(root, "lower-bound") / plan["lower_bound"]
    step_w = float(rects(root, "step")[0].get("width"))
    assert len(rects(root, "step")) == len(plan["steps"])
    assert line(root, "workspace-size") == pytest.approx(plan["workspace_size"] * per_byte, abs=TOLERANCE)
    for b in plan["buffers"]:
        x, y, width, height = drawn[b["tensor"]]
        assert x == pytest.approx(b["first_use"] * step_w, abs=TOLERANCE)
        assert width == pytest.approx((b["last_use"] - b["first_use"] + 1) * step_w, abs=TOLERANCE)
        assert y == pytest.approx(b["offset"] * per_byte, abs=TOLERANCE)
        assert height == pytest.approx(max(b["size"] * per_byte, 1.0), abs=TOLERANCE)


def test_titles_name_the_tensor(built):
    artifact, out = built
    plan = json.loads((out / "a" / "plan.json").read_text())
    titles = {r.find(SVG + "title").text.split(":")[0]: r.find(SVG + "title").text for r in rects(parse(
        out / "a" / "report.svg"), "buffer")}
    for b in plan["buffers"]:
        value = artifact.program.graph.values[b["tensor"]]
        text = titles[b["tensor"]]
        for needle in ("x".join(map(str, value.shape)), value.dtype, f"{b['size']:,} bytes",
                       f"offset {b['offset']:,}", f"steps {b['first_use']}-{b['last_use']}"):
            assert needle in text, (needle, text)


def test_shared_buffers_are_hatched(built):
    _, out = built
    plan = json.loads((out / "a" / "plan.json").read_text())
    root = parse(out / "a" / "report.svg")
    sharing = {name for d in plan["shared"] if d["used"] for name in (d["source"], d["result"])}
    assert sharing, "the model should make the plan share bytes"
    by_box = {box(r): r.find(SVG + "title").text.split(":")[0] for r in rects(root, "buffer")}
    hatched = rects(root, "shared")
    assert all(r.get("fill") == "url(#shared)" for r in hatched)
    assert sorted(by_box[box(r)] for r in hatched) == sorted(sharing)
    assert root.find(f".//{SVG}pattern[@id='shared']") is not None


def test_heading_and_bounds_are_labelled(built):
    artifact, out = built
    svg = (out / "a" / "report.svg").read_text()
    assert svg.startswith("<!-- Generated by aot")
    plan = artifact.program.plan
    texts = [t.text for t in parse(out / "a" / "report.svg").iter(SVG + "text")]
    assert any(f"workspace {plan.size:,} bytes" in t and artifact.target.name in t for t in texts)
    assert f"lower bound {plan.lower_bound:,}" in texts
    assert f"workspace {plan.size:,}" in texts


def test_builds_write_the_same_bytes(built):
    _, out = built
    assert (out / "a" / "report.svg").read_bytes() == (out / "b" / "report.svg").read_bytes()


def test_no_workspace_buffers(tmp_path):
    model = make_model([helper.make_node("Relu", ["x"], ["y"], name="relu")], {"x": (1, 8)}, {"y": (1, 8)})
    artifact = aot.build(model, out_dir=tmp_path)
    assert not artifact.program.buffers
    root = parse(tmp_path / "report.svg")
    assert not rects(root, "buffer")
    assert any("the workspace is empty" in (t.text or "") for t in root.iter(SVG + "text"))


def skip_chain(count: int):
    """`count` Adds and Muls, each reading the previous result and the one that started its block of
    seven: as many buffers as steps, living two to eight steps."""
    nodes, names = [], ["x"]
    for i in range(count):
        a, b = names[-1], names[max(0, len(names) - 1 - i % 7)]
        out = "y" if i == count - 1 else f"t{i}"
        nodes.append(helper.make_node("Mul" if i % 2 else "Add", [a, b], [out], name=f"n{i}"))
        names.append(out)
    return make_model(nodes, {"x": (1, 8, 4, 4)}, {"y": (1, 8, 4, 4)})


def test_a_long_plan_stays_small_and_quick():
    graph = optimize(to_graph(load(skip_chain(500))))
    program = build_program(graph, get_target("cortex-m7"), "long")
    assert len(program.calls) == 500 and len(program.buffers) >= 300
    start = time.perf_counter()
    svg = report_svg.render(program, "banner", "cortex-m7")
    assert time.perf_counter() - start < 2.0
    assert len(svg.encode()) < 1_000_000
    assert len(rects(ET.fromstring(svg), "buffer")) == len(program.buffers)


def test_hostile_names_stay_xml():
    hostile = "a--b<&>\"'\x1b[31m\x00"
    nodes = [helper.make_node("Softmax", ["x"], [hostile], name="softmax--<1>"),
             helper.make_node("Softmax", [hostile], ["y"], name="softmax2")]
    model = make_model(nodes, {"x": (1, 8)}, {"y": (1, 8)})
    program = build_program(optimize(to_graph(load(model))), get_target("host"), "hostile")
    assert program.buffers
    svg = report_svg.render(program, "Generated by aot from a--b.onnx", "host")
    root = ET.fromstring(svg)         # parses: names are escaped, characters XML cannot hold replaced
    (title,) = [r.find(SVG + "title").text for r in rects(root, "buffer")]
    assert title.startswith("a--b<&>\"'\ufffd[31m\ufffd:")
