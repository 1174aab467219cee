"""An independent check of a kernel's Reuse declarations: replay the kernel's loops (index arithmetic
only, no values), record which bytes of each buffer every statement reads and writes, in order, and
test the declared placements against that record.

A statement's loads all happen at its step, before its store. Output over input is safe at a placement
when no byte of the input is overwritten at one step and read at a later one.
"""

from __future__ import annotations

import numpy as np

from aot.kernel import ir as k

_BYTES = {"f32": 4, "i64": 8, "i32": 4, "i16": 2}


def _size(buf: k.Buffer) -> int:
    return _BYTES.get(buf.dtype, 1)


class Trace:
    """reads[name]: per byte of the buffer, the last step that reads it (-1: never); writes[name]: a list
    of (step, first byte, end byte)."""

    def __init__(self, kernel: k.Kernel):
        self.kernel = kernel
        buffers = kernel.params + kernel.stack        # the stack's scratch is replayed too, never checked
        self.reads = {p.name: np.full(p.nbytes, -1, dtype=np.int64) for p in buffers}
        self.writes: dict[str, list[tuple[int, int, int]]] = {p.name: [] for p in buffers}
        self.step = 0
        self.block(kernel.body, {})

    # --- statements
    def block(self, block: k.Block, env: dict) -> None:
        env = dict(env)
        for s in block.stmts:
            self.stmt(s, env)

    def stmt(self, s: k.Stmt, env: dict) -> None:
        if isinstance(s, k.Block):
            self.block(s, env)
        elif isinstance(s, k.For):
            start, stop = self.value(s.start, env), self.value(s.stop, env)
            for i in range(start, stop, s.step):
                self.block(s.body, {**env, s.var.name: i})
        elif isinstance(s, (k.Let, k.Local, k.Assign)):
            value = s.value if isinstance(s, (k.Let, k.Assign)) else s.init
            self.loads(value, env)
            self.step += 1
            if isinstance(s, k.Let) and s.var.dtype in ("idx", "i1"):
                env[s.var.name] = self.value(value, env)
        elif isinstance(s, k.Store):
            self.loads(s.value, env)
            index = self.value(s.index, env)
            size = _size(s.buf)
            self.writes[s.buf.name].append((self.step, index * size, (index + s.value.lanes) * size))
            self.step += 1
        elif isinstance(s, k.PairLoop):     # one step: every word of every pixel it reads
            if s.x.name in self.reads:
                pixel = self.value(s.pixel, env)
                for i in range(len(s.accs)):
                    start = pixel + i * s.pixel_stride
                    self.reads[s.x.name][start:start + 4 * s.steps] = self.step
            self.step += 1
        elif isinstance(s, k.Tile):         # AMX: only scratch and weights, never a parameter
            if s.buf is not None and s.buf in self.kernel.params:
                raise TypeError(f"a tile {s.op} on parameter {s.buf.name} is not replayed")
            self.step += 1
        else:
            raise TypeError(s)

    # --- expressions
    def loads(self, e: k.Expr, env: dict) -> None:
        """Record the bytes every load in e reads (each shared subtree once)."""
        seen: set[int] = set()
        todo = [e]
        while todo:
            e = todo.pop()
            if id(e) in seen:
                continue
            seen.add(id(e))
            if isinstance(e, (k.Load, k.MaskedLoad)) and e.buf.name in self.reads:
                index, size = self.value(e.index, env), _size(e.buf)
                lo, hi = 0, e.lanes
                if isinstance(e, k.MaskedLoad):
                    lo = self.value(e.lo, env) if e.lo is not None else 0
                    hi = self.value(e.hi, env)
                if hi > lo:
                    self.reads[e.buf.name][(index + lo) * size:(index + hi) * size] = self.step
            for child in vars(e).values():
                if isinstance(child, k.Expr):
                    todo.append(child)
                elif isinstance(child, tuple):
                    todo.extend(c for c in child if isinstance(c, k.Expr))

    def value(self, e: k.Expr, env: dict) -> int:
        if isinstance(e, k.Const):
            return int(e.value)
        if isinstance(e, k.Var):
            return env[e.name]
        if isinstance(e, k.Select):
            return self.value(e.a if self.value(e.cond, env) else e.b, env)
        if isinstance(e, k.Cast):
            return self.value(e.value, env)
        if isinstance(e, k.Bin):
            a, b = self.value(e.a, env), self.value(e.b, env)
            return _BIN[e.op](a, b)
        raise TypeError(f"index expression {type(e).__name__} depends on data")

    # --- the check
    def unsafe(self, reuse: k.Reuse, delta: int) -> bool:
        """Whether the output, placed `delta` bytes after the input's start, overwrites an input byte
        that a later step reads."""
        last = self.reads[f"in{reuse.input}"]
        for step, lo, hi in self.writes[f"out{reuse.output}"]:
            lo, hi = max(lo + delta, 0), min(hi + delta, len(last))
            if lo < hi and last[lo:hi].max() > step:
                return True
        return False

    def check(self, reuse: k.Reuse) -> None:
        """Raise AssertionError unless every placement `reuse` allows (a sample of them) is safe."""
        size = _size(next(p for p in self.kernel.params if p.name == f"in{reuse.input}"))
        if reuse.exact:
            deltas = [0]
        else:
            first = -reuse.shift if not reuse.backward else reuse.shift
            sign = 1 if reuse.backward else -1          # farther from the input: above it, or below
            deltas = [first + sign * d for d in (0, size, 16, 64)]
        for delta in deltas:
            assert not self.unsafe(reuse, delta), \
                f"{self.kernel.name}: output at {delta:+} bytes from input {reuse.input} breaks its reads"


_BIN = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
        "div": lambda a, b: int(a / b) if b else 0, "rem": lambda a, b: a - int(a / b) * b if b else a,
        "min": min, "max": max, "lt": lambda a, b: a < b, "le": lambda a, b: a <= b,
        "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b, "eq": lambda a, b: a == b,
        "ne": lambda a, b: a != b, "and": lambda a, b: a & b, "or": lambda a, b: a | b,
        "xor": lambda a, b: a ^ b, "shl": lambda a, b: a << b, "shr": lambda a, b: a >> b}
