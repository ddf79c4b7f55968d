"""The error hierarchy of mlc-mlir.

Every error a user can trigger is an :class:`MlcError`; messages name the op (or pass, primitive,
function), the argument, and the expected versus the actual value, e.g.
``matmul: argument 'b' has shape (3, 5); expected (4, N) to match a's inner dimension 4``.
"""


class MlcError(Exception):
    """Base class of every error raised by mlc-mlir on bad input or a failed stage."""


class BuildError(MlcError):
    """An op of the graph builder got an argument of the wrong shape, dtype or kind."""


class IRError(MlcError):
    """A module failed to parse or to verify; the message carries the MLIR diagnostics."""


class PipelineError(MlcError):
    """A lowering pipeline could not be found, parsed or run; the message has a repro command."""


class TargetError(PipelineError):
    """A :class:`~mlc_mlir.target.Target` names a CPU or feature LLVM does not know for its
    triple (the message lists close valid names)."""


class ExecutionError(MlcError):
    """An executable was called with the wrong arguments, or a compiled artifact failed to load."""


class ScheduleError(MlcError):
    """A schedule primitive's precondition does not hold (names the primitive and the loop)."""


class TuningError(MlcError):
    """Tuning could not proceed (no valid candidate, a broken database)."""


def format_shape(shape) -> str:
    """Format a shape as ``(2, 3)``; a scalar shape is ``()``."""
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"
