"""report.svg: the memory plan as a picture, step (x) by workspace offset (y, 0 at the top).

One rectangle per workspace buffer from the step that writes it to the last step that reads it, at
its offset and size; hovering shows the tensor. Buffers that share bytes with the input they replace
are hatched. Lines mark the workspace size and the lower bound. A workspace split over memory regions
is drawn as the regions one below the other, fastest first, each under a line with its name. The file
is built with ElementTree (which escapes every name) and has no timestamps, no floats beyond two
decimals and no set or dict order, so two builds of one model write the same bytes.
"""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator

from aot.program import Program, sharing_used
from aot.report import describe

PLOT_WIDTH = 960        # px for all steps; a step is at most STEP_MAX wide
PLOT_HEIGHT = 480       # px for the larger of the workspace and the lower bound
STEP_MAX = 48
LEFT, TOP, RIGHT, BOTTOM = 90, 64, 200, 84
MIN_WIDTH = 800         # px: room for the heading and the legend
MIN_HEIGHT = 1.0        # px: a buffer too small to see at the scale still gets a line to hover over


def render(program: Program, banner: str, target: str) -> str:
    plan = program.plan
    span = max(plan.size, plan.lower_bound)
    title = f"{program.name} on {target}: memory plan"
    heading = f"{program.name} on {target}: workspace {plan.size:,} bytes ({plan.strategy}), " \
              f"aligned to {plan.alignment}"
    if program.regions:
        heading += ": " + ", ".join(f"{p.region.name} {p.plan.size:,} of {p.region.size:,}" for p in program.regions)
    if span == 0:       # no buffers, or only empty ones
        svg = _svg(MIN_WIDTH, 48, title)
        _label(svg, 8, 18, heading, bold=True)
        _label(svg, 8, 34, "the workspace is empty: every tensor lives in the caller's input and output buffers "
               "or in constants")
        return _document(svg, banner)
    steps = len(program.calls)
    step_w = min(STEP_MAX, PLOT_WIDTH / steps)
    svg = _svg(max(LEFT + steps * step_w + RIGHT, MIN_WIDTH), TOP + PLOT_HEIGHT + BOTTOM, title)
    _label(svg, 8, 18, heading, bold=True)
    _label(svg, 8, 34, f"lower bound without sharing {plan.lower_bound:,} bytes; {_count(steps, 'step')}, "
           f"{_count(len(program.buffers), 'workspace buffer')}; hover a rectangle for its tensor")
    scale = PLOT_HEIGHT / span
    _hatch(svg)
    plot = ET.SubElement(svg, "g", transform=f"translate({LEFT},{TOP})")
    _steps(plot, program, step_w)
    _address_axis(plot, span, scale, steps * step_w)
    _buffers(plot, program, step_w, scale)
    _regions(plot, program, scale, steps * step_w)
    _bounds(plot, plan.size, plan.lower_bound, scale, steps * step_w)
    _legend(svg, TOP + PLOT_HEIGHT + 56)
    return _document(svg, banner)


def _svg(width: float, height: float, title: str) -> ET.Element:
    svg = ET.Element("svg", {"xmlns": "http://www.w3.org/2000/svg", "width": _num(width), "height": _num(height),
                             "viewBox": f"0 0 {_num(width)} {_num(height)}", "font-family": "monospace",
                             "font-size": "12"})
    ET.SubElement(svg, "title").text = _text(title)
    return svg


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def _steps(plot: ET.Element, program: Program, step_w: float) -> None:
    """A column per kernel call, shaded every other step; hovering it names the node. Columns thinner
    than a pixel cannot be hovered one by one and are left out; the axis keeps its ticks."""
    if step_w >= 1:
        for i, call in enumerate(program.calls):
            col = ET.SubElement(plot, "rect", {"class": "step", "x": _num(i * step_w), "y": "0", "width": _num(step_w),
                                               "height": str(PLOT_HEIGHT), "fill": "#f2f2f2" if i % 2 else "#fafafa"})
            node = call.node
            ET.SubElement(col, "title").text = _text(f"step {i}: {node.name} ({describe(program.graph, node)})")
    every = next(k for k in _one_two_five() if len(program.calls) / k <= 24)
    for i in range(0, len(program.calls), every):
        _label(plot, (i + 0.5) * step_w, PLOT_HEIGHT + 14, str(i), anchor="middle")
    _label(plot, 0, PLOT_HEIGHT + 30, "step (kernel call)")


def _one_two_five() -> Iterator[int]:
    """1, 2, 5, 10, 20, 50, ...: tick spacings a reader counts in easily."""
    k = 1
    while True:
        yield from (k, 2 * k, 5 * k)
        k *= 10


def _address_axis(plot: ET.Element, span: int, scale: float, plot_w: float) -> None:
    """Byte ticks every power of two, at most eight of them, with a faint grid line each."""
    tick = 2 ** max(4, math.ceil(math.log2(span / 8)))
    for offset in range(0, span + 1, tick):
        y = _num(offset * scale)
        ET.SubElement(plot, "line", x1="-4", y1=y, x2=_num(plot_w), y2=y, stroke="#ddd")
        _label(plot, -8, offset * scale + 4, f"{offset:,}", anchor="end")
    _label(plot, -8, -12, "offset", anchor="end")


def _buffers(plot: ET.Element, program: Program, step_w: float, scale: float) -> None:
    """One rectangle per buffer, coloured by its place in write order (golden-angle hues, so
    neighbours differ); a hatched copy on top of those that share bytes, which hovering passes
    through to the buffer."""
    plan, graph = program.plan, program.graph
    sharing: dict[str, list[str]] = {}
    for step, source, result, reuse in sharing_used(program):
        how = "in place" if reuse.exact else "overlapping"
        sharing.setdefault(source, []).append(f"shares bytes with {result} at step {step} ({how})")
        sharing.setdefault(result, []).append(f"shares bytes with {source} at step {step} ({how})")
    views: dict[str, list[str]] = {}
    for value, root in sorted(program.roots.items()):
        if value != root and root in plan.offsets:
            views.setdefault(root, []).append(value)
    base, region = _region_bases(program)
    for i, b in enumerate(sorted(program.buffers, key=lambda b: (b.first, b.name))):
        offset, value = plan.offsets[b.name], graph.values[b.name]
        box = {"x": _num(b.first * step_w), "y": _num((base.get(b.name, 0) + offset) * scale),
               "width": _num((b.last - b.first + 1) * step_w), "height": _num(max(b.size * scale, MIN_HEIGHT))}
        rect = ET.SubElement(plot, "rect", {"class": "buffer", **box, "fill": f"hsl({i * 137.508 % 360:.0f},60%,68%)",
                                            "stroke": "#333", "stroke-width": "0.5"})
        lines = [f"{b.name}: {'x'.join(map(str, value.shape))} {value.dtype}, {b.size:,} bytes "
                 f"at offset {offset:,}" + (f" of region {region[b.name]}" if region else ""),
                 f"live steps {b.first}-{b.last}: written by {program.calls[b.first].node.name}, "
                 f"last read by {program.calls[b.last].node.name}"]
        if b.name in views:
            lines.append("views: " + ", ".join(views[b.name]))
        ET.SubElement(rect, "title").text = _text("\n".join(lines + sharing.get(b.name, [])))
        if b.name in sharing:
            ET.SubElement(plot, "rect", {"class": "shared", **box, "fill": "url(#shared)", "pointer-events": "none"})


def _region_bases(program: Program) -> tuple[dict[str, int], dict[str, str]]:
    """Where each buffer's region starts on the drawing (the regions stacked, fastest first), and its region."""
    base, region, start = {}, {}, 0
    for p in program.regions:
        for name in p.plan.offsets:
            base[name], region[name] = start, p.region.name
        start += p.plan.size
    return base, region


def _regions(plot: ET.Element, program: Program, scale: float, plot_w: float) -> None:
    """A line where each memory region starts, its name and size below it at the left."""
    start = 0
    for p in program.regions:
        y = _num(start * scale)
        ET.SubElement(plot, "line", {"class": "region", "x1": "0", "y1": y, "x2": _num(plot_w), "y2": y,
                                     "stroke": "#06c", "stroke-width": "1", "stroke-dasharray": "2,2"})
        weights = f" + {p.weights:,} kept for weights" if p.weights else ""
        _label(plot, 4, start * scale + 12, f"{p.region.name}: {p.plan.size:,}{weights} of {p.region.size:,} bytes",
               fill="#06c")
        start += p.plan.size


def _bounds(plot: ET.Element, size: int, lower_bound: int, scale: float, plot_w: float) -> None:
    """The workspace size (solid) and the lower bound (dashed), labelled to the right; the upper of the
    two lines is labelled above it, the lower below, so the labels never collide."""
    lines = sorted([(size, "workspace-size", f"workspace {size:,}", "#000", {}),
                    (lower_bound, "lower-bound", f"lower bound {lower_bound:,}", "#c00",
                     {"stroke-dasharray": "6,4"})], key=lambda line: line[0])
    for (offset, kind, text, colour, style), dy in zip(lines, (-4, 12)):
        y = _num(offset * scale)
        ET.SubElement(plot, "line", {"class": kind, "x1": "0", "y1": y, "x2": _num(plot_w + 8), "y2": y,
                                     "stroke": colour, "stroke-width": "1.5", **style})
        _label(plot, plot_w + 12, offset * scale + dy, text, fill=colour)


def _hatch(svg: ET.Element) -> None:
    pattern = ET.SubElement(ET.SubElement(svg, "defs"), "pattern", id="shared", width="6", height="6",
                            patternUnits="userSpaceOnUse", patternTransform="rotate(45)")
    ET.SubElement(pattern, "line", x1="0", y1="0", x2="0", y2="6", stroke="#000",
                  attrib={"stroke-width": "2", "stroke-opacity": "0.5"})


def _legend(svg: ET.Element, y: float) -> None:
    ET.SubElement(svg, "rect", x=str(LEFT), y=_num(y - 10), width="24", height="12", fill="url(#shared)",
                  stroke="#333")
    _label(svg, LEFT + 30, y, "shares bytes with the input it replaces (in place or overlapping)")
    _label(svg, LEFT, y + 16, "lower bound: the most bytes live at one step if no two tensors shared bytes",
           fill="#c00")


def _label(parent: ET.Element, x: float, y: float, text: str, anchor: str = "start", bold: bool = False,
           fill: str = "#000") -> None:
    attrs = {"x": _num(x), "y": _num(y), "fill": fill}
    if anchor != "start":
        attrs["text-anchor"] = anchor
    if bold:
        attrs["font-weight"] = "bold"
    ET.SubElement(parent, "text", attrs).text = _text(text)


def _num(v: float) -> str:
    """Two decimals at most, no trailing zeros: the same number prints the same on every machine."""
    return f"{v:.2f}".rstrip("0").rstrip(".")


# characters XML 1.0 cannot hold even escaped; a model's names may contain them
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _text(text: str) -> str:
    return _NOT_XML.sub("\ufffd", text)


def _document(svg: ET.Element, banner: str) -> str:
    comment = re.sub("-(?=-)", "- ", _text(banner))      # "--" may not appear inside an XML comment
    ET.indent(svg)
    return f"<!-- {comment} -->\n" + ET.tostring(svg, encoding="unicode") + "\n"
