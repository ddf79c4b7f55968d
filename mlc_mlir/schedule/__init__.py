"""Schedules: TVM-style primitives recorded as traces and emitted as transform scripts."""

from .loop_nest import Block, Dim, Loop, LoopNestModel, OpInfo  # noqa: F401
from .schedule import BlockRV, ExprRV, LoopRV, Schedule  # noqa: F401
from .trace import Instruction, Trace  # noqa: F401
from .transform_script import TransformScript, apply_transform_script  # noqa: F401
