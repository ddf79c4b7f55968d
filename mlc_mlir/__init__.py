"""mlc-mlir: a Python-first machine-learning compiler on upstream MLIR.

>>> import mlc_mlir as mlc
>>> from mlc_mlir import ops
>>> bb = mlc.GraphBuilder()
>>> with bb.function("main") as f:
...     x = f.arg("x", shape=(1, 64), dtype="float32")
...     f.output(ops.relu(x))
>>> exe = mlc.compile(bb.finish(), target="cpu")
"""

from .builder import GraphBuilder, Tensor  # noqa: F401
from .errors import (  # noqa: F401
    BuildError, ExecutionError, IRError, MlcError, PipelineError, ScheduleError, TargetError,
    TuningError,
)
from .ir import Module  # noqa: F401
from .pipeline import build_library, compile  # noqa: F401
from .runtime import DeviceArray, Executable  # noqa: F401
from .schedule import Schedule, Trace  # noqa: F401
from .runtime.registry import register_func  # noqa: F401
from . import llm, ops, te, tune  # noqa: F401
from .tune import apply_best  # noqa: F401
from .ops import constant  # noqa: F401
from .frontends.onnx import from_onnx  # noqa: F401  (imports onnx only when called)
from .frontends.torch import from_torch  # noqa: F401
from .frontends.torch_fx import from_fx  # noqa: F401

__version__ = "0.1.0"
