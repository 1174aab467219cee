"""A convolution's geometry: shapes, strides, dilations and padding, the input taps of an output window,
the columns whose window stays inside the input, and the workload key a schedule is chosen for."""

from __future__ import annotations

from dataclasses import dataclass

from aot.graph.ir import Graph, Node
from aot.kernel.ir import (
    Buffer,
    Expr,
    as_expr,
    binop,
    const,
    maximum,
    minimum,
)
from aot.schedule import workload_key


@dataclass(frozen=True)
class Geometry:
    n: int
    h: int
    w: int
    c: int
    oh: int
    ow: int
    m: int
    kh: int
    kw: int
    stride: tuple[int, int]
    dilation: tuple[int, int]
    pads: tuple[int, int, int, int]     # top, left, bottom, right

    def in_row(self, o: Expr | int, axis: int) -> Expr:
        """First input coordinate of output coordinate o along axis 0 (rows) or 1 (columns)."""
        return as_expr(o) * self.stride[axis] - self.pads[axis]

    def window(self, o: Expr, axis: int) -> tuple[Expr, Expr]:
        """Taps [lo, hi) of the window at output coordinate o that fall inside the input."""
        k, d, size = (self.kh, self.dilation[0], self.h) if axis == 0 else (self.kw, self.dilation[1], self.w)
        first = self.in_row(o, axis)          # input coordinate of tap 0; tap t reads first + t*d
        lo = maximum(binop("div", (0 - first) + (d - 1), const(d)), 0)
        hi = minimum(binop("div", (size - first) + (d - 1), const(d)), k)
        return lo, hi

    def tap_pixels(self, ow0: int, width: int) -> list[tuple[int, int, int]]:
        """(tap, first pixel, end pixel) of each column tap that reads inside the input for some of the
        `width` output columns from ow0: the pixels [first, end) of the tile (a contiguous range)."""
        s, out = self.stride[1], []
        for t in range(self.kw):
            off = t * self.dilation[1] - self.pads[1]       # output column o reads input column o * s + off
            lo = max(ow0, -(off // s))                      # the first o with o * s + off >= 0
            hi = min(ow0 + width, (self.w - 1 - off) // s + 1)
            if lo < hi:
                out.append((t, lo - ow0, hi - ow0))
        return out

    def interior(self, axis: int) -> tuple[int, int]:
        """Output coordinates [lo, hi) whose whole window lies inside the input."""
        k, d, size, s = ((self.kh, self.dilation[0], self.h, self.stride[0]) if axis == 0
                         else (self.kw, self.dilation[1], self.w, self.stride[1]))
        pad, out = self.pads[axis], (self.oh if axis == 0 else self.ow)
        lo = min(out, -(-pad // s))
        hi = max(lo, min(out, (size - 1 - (k - 1) * d + pad) // s + 1))
        return lo, hi


def geometry(graph: Graph, node: Node) -> Geometry:
    n, h, w, c = graph.shape(node.inputs[0])
    _, oh, ow, m = graph.shape(node.outputs[0])
    kh, kw = node.attrs["kernel"]
    return Geometry(n, h, w, c, oh, ow, m, kh, kw, tuple(node.attrs["strides"]),
                    tuple(node.attrs.get("dilations", (1, 1))), tuple(node.attrs["pads"]))


def workload(template: str, g: Geometry, groups: int, x: Buffer, form: str) -> str:
    """The workload key (aot/schedule.py) of a convolution computed by `template` in arithmetic `form`."""
    return workload_key(template, (g.n, g.h, g.w, g.c), g.m, (g.kh, g.kw), g.stride, g.dilation, g.pads,
                        groups, f"{x.dtype} {form}" if form else x.dtype)
