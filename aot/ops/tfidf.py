"""TfIdfVectorizer: count the n-grams of a constant pool in each row of integer tokens (with skips),
then weigh the counts (TF, IDF, TFIDF).

The pool is compiled into one table per n-gram length (tokens, and the output column of each n-gram),
and the kernel loops over them at run time, so a large vocabulary costs data, not code. A position
counts an n-gram of length n at skip distance s when its tokens, s apart, equal the n-gram's; unigrams
are counted at skip distance 1 only, as ONNX's reference counts them.
"""

from __future__ import annotations

import numpy as np

from aot.graph.ir import Node, Rewriter
from aot.kernel.ir import Builder, Cast, Expr, Kernel, binop, const, select
from aot.ops import LowerContext
from aot.ops.rewrite import refuse
from aot.registry import define

_MODES = ("TF", "IDF", "TFIDF")


def canonical_tfidf(rw: Rewriter, node: Node) -> None:
    attrs = node.attrs
    if attrs.get("pool_strings"):
        raise refuse(node, "string pools are not supported (integer tokens only)")
    if attrs.get("mode") not in _MODES:
        raise refuse(node, f"mode '{attrs.get('mode')}' is not one of {', '.join(_MODES)}")
    rank = len(rw.values[node.inputs[0]].shape)
    if rank not in (1, 2):
        raise refuse(node, f"the input must be [C] or [B, C], not rank {rank}")
    rw.add("TfIdf", node.name, node.inputs[:1], node.outputs, **_pool(attrs))


def _pool(attrs: dict) -> dict:
    """The n-grams by length: {n: (tokens (count, n), columns (count,))} for min <= n <= max, and the rest
    of what the kernel needs."""
    pool = np.asarray(attrs.get("pool_int64s", ()), np.int64)
    starts = list(attrs["ngram_counts"]) + [len(pool)]
    indexes = np.asarray(attrs["ngram_indexes"], np.int64)
    lo, hi = int(attrs["min_gram_length"]), int(attrs["max_gram_length"])
    grams: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    ngram_id = 0
    for size, (begin, end) in enumerate(zip(starts[:-1], starts[1:]), start=1):
        count = (end - begin) // size
        if lo <= size <= hi and count:
            grams[size] = (pool[begin:begin + count * size].reshape(count, size),
                           indexes[ngram_id:ngram_id + count])
        ngram_id += count
    weights = tuple(float(w) for w in attrs.get("weights", ()))
    return {"grams": grams, "min": lo, "skips": int(attrs["max_skip_count"]) + 1, "mode": attrs["mode"],
            "weights": weights}


def tfidf(ctx: LowerContext, node: Node, name: str) -> Kernel:
    ins, outs, params = ctx.io(node)
    x, y = ins[0], outs[0]
    shape = ctx.graph.shape(node.inputs[0])
    rows, length = (1, shape[0]) if len(shape) == 1 else shape
    width = ctx.graph.shape(node.outputs[0])[-1]
    a = node.attrs
    b = Builder()
    with b.loop("i", 0, rows * width) as i:
        b.store(y, i, const(0.0, "f32"))
    with b.loop("row", 0, rows) as row:
        for skip in range(1, a["skips"] + 1):
            for size, (tokens, columns) in sorted(a["grams"].items()):
                if size < max(a["min"], 1 if skip == 1 else 2) or length - skip * (size - 1) <= 0:
                    continue
                table = ctx.const(tokens.reshape(-1), "pool")
                column = ctx.const(columns, "col")
                with b.loop("start", 0, length - skip * (size - 1)) as start, b.loop("g", 0, len(columns)) as g:
                    match: Expr | None = None
                    for k in range(size):
                        token = x[row * length + start + k * skip]
                        token = Cast(token, "i64") if token.dtype != "i64" else token
                        same = binop("eq", token, table[g * size + k])
                        match = same if match is None else binop("and", match, same)
                    at = b.let("at", row * width + Cast(column[g], "idx"))
                    b.store(y, at, y[at] + select(match, 1.0, 0.0))
    _weigh(b, y, rows, width, a["mode"], a["weights"], ctx)
    return Kernel(name, params, b.block())


def _weigh(b: Builder, y, rows: int, width: int, mode: str, weights: tuple[float, ...], ctx: LowerContext) -> None:
    """Counts to TF (as they are), IDF (the weight where the count is positive) or TFIDF (weight x count)."""
    if mode == "TF" or (mode == "TFIDF" and not weights):
        return
    w = ctx.const(np.asarray(weights or (1.0,) * width, np.float32), "idf")
    with b.loop("row", 0, rows) as row, b.loop("j", 0, width) as j:
        count = y[row * width + j]
        value = select(binop("gt", count, 0.0), w[j], 0.0) if mode == "IDF" else count * w[j]
        b.store(y, row * width + j, value)


define("TfIdfVectorizer", canonical=canonical_tfidf, dtypes=frozenset({"int32", "int64"}))
define("TfIdf", lower=tfidf, dtypes=frozenset({"int32", "int64"}))
