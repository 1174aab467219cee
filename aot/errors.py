"""One hierarchy for every error a user can cause. The CLI prints `str(err)` and exits non-zero."""


class AotError(Exception):
    """Base class: a problem with the user's model, options or environment, never a compiler bug."""


class ModelError(AotError):
    """The model file is missing, unreadable, not ONNX, or fails the ONNX checker."""


class UnsupportedOpError(AotError):
    """A node uses an op (or an attribute value) that aot cannot compile."""


class ShapeError(AotError):
    """A tensor has no static shape (a dynamic dimension without --input-shape)."""


class TargetError(AotError):
    """An unknown target, or a target whose toolchain is missing."""


class OptionError(AotError):
    """A bad command-line or API option (input shape syntax, output path, input file)."""


class PlanError(AotError):
    """The memory plan failed verification or does not fit a memory limit."""


class RunError(AotError):
    """The compiled program failed to build, crashed, timed out, or returned an error code."""


class MismatchError(AotError):
    """The compiled model's outputs differ from the reference beyond the tolerance."""


class InternalError(AotError):
    """aot broke one of its own invariants (a pass produced an ill-formed graph, a kernel an ill-typed
    or out-of-bounds access): a bug in aot, reported with the node or kernel at fault."""


def first_line(err: Exception) -> str:
    """An exception's message as one line (the first of its text), or its type's name."""
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__
