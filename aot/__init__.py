"""aot: an ahead-of-time compiler from ONNX models to object files and C wrappers for embedded targets."""

from aot.api import CheckResult, check, run
from aot.build import Artifact, build
from aot.errors import (
                        AotError,
                        MismatchError,
                        ModelError,
                        OptionError,
                        PlanError,
                        RunError,
                        ShapeError,
                        TargetError,
                        UnsupportedOpError,
)
from aot.knobs import Knobs, load_knobs
from aot.module import Module, TensorSpec, compile, load
from aot.tune import tune
from aot.version import __version__

__all__ = ["Artifact", "CheckResult", "Knobs", "Module", "TensorSpec", "build", "check", "compile", "load",
           "load_knobs", "run", "tune", "AotError", "MismatchError", "ModelError", "OptionError", "PlanError",
           "RunError", "ShapeError", "TargetError", "UnsupportedOpError",
           "__version__"]
