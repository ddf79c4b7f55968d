"""The orchestrator: lowering pipelines (files in ``pipelines/``), compile options, the stages of
:func:`compile`, AOT export and CUDA lowering."""

from ..target import Target, get_target  # noqa: F401
from .compile import CPU_STAGES, Stage, build_library, compile, lower  # noqa: F401
from .options import CompileOptions  # noqa: F401
from .registry import available, load_pipeline  # noqa: F401
