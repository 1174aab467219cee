"""ONNX ops aot never compiles to kernels: those whose result depends only on their input's static
shape, which constant folding evaluates, and random generators, which it must not (they are refused)."""

from __future__ import annotations

from aot.registry import define

for _op in ("Shape", "Size"):
    define(_op, shape_only=True)
for _op in ("RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli"):
    define(_op, random=True)
define("EyeLike", shape_only=True)      # ones on a diagonal: a function of the input's shape alone
