"""ONNX ops aot never compiles to kernels: those that read only their input's static shape, which
constant folding evaluates, and random generators, which it must not (they are refused)."""

from __future__ import annotations

from aot.ops.registry import define

for _op in ("Shape", "Size"):
    define(_op, shape_only=True)
for _op in ("RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli"):
    define(_op, random=True)
