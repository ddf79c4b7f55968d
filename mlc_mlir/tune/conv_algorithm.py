"""Algorithm tasks: the per-convolution algorithm decision of the ``layout`` stage (direct,
im2col + GEMM, Winograd F(2x2, 3x3) or F(4x4, 3x3); :func:`~mlc_mlir.schedule.rules.conv_strategy.conv_algorithms`),
tuned by measurement before the schedules.

One task per distinct decision key (:func:`~mlc_mlir.pipeline.layout.conv_algorithm_key`)
among the convolutions of a module: its module is the graph unit that holds the convolution
(the convolution with its epilogue and the filter as a constant, as ``graph.FuseOps`` groups
it) after the ``nhwc`` step, so a candidate is measured in the context it has in the model:
the filter transforms folded, the input transform, the GEMM and the output transform with the
epilogue. Each candidate is that module with the convolution's ``mlc.conv_algorithm`` set to
the candidate, compiled with default schedules (what ``mlc.compile`` does with the decision)
and checked against the unit's plain loops. Its record holds the decision as the
``sample_categorical`` of :func:`~mlc_mlir.schedule.rules.conv_strategy.sample_conv_algorithm`
(the default's record has the empty trace), so the database's rules (ties keep the default,
the re-measurement of the finalists) apply unchanged and ``mlc.compile(database=)`` replays
the choice in its ``algorithm`` step. Source: TVM Relay ``OpStrategy`` (the conv2d
implementations, Winograd among them, chosen per workload by measurement); Ansor and
MetaSchedule treating layout and algorithm choices as decisions of the search.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional, Tuple

from ..ir.module import Module
from ..ir.walk import has_op
from ..pipeline.compile import run_stages
from ..pipeline.layout import conv_choices, set_conv_algorithm, to_nhwc
from ..pipeline.options import CompileOptions
from ..pipeline.scheduling import unscheduled_functions
from ..pipeline.tasks import task_units
from ..schedule.rules.conv_strategy import sample_conv_algorithm
from ..schedule.schedule import Schedule
from ..schedule.trace import Trace
from ..target import Target
from .task import Task, estimate_flops

#: The convolutions that have an algorithm decision (NCHW ones become NHWC in the ``nhwc`` step).
CONV_OPS = ("linalg.conv_2d_nchw_fchw", "linalg.conv_2d_nhwc_hwcf")


@dataclasses.dataclass(frozen=True, eq=False)
class AlgorithmTask:
    """The algorithm decision of the convolutions that share one key.

    Attributes
    ----------
    task : Task
        ``workload`` is the decision key; ``module`` the first unit of that key after the
        ``nhwc`` step; ``weight`` the convolutions with that key.
    candidates : tuple of int
        ``mlc.conv_algorithm`` values (0 direct, 1 im2col, 2 and 4 Winograd tiles).
    default : int
        The compile's own choice.
    target : Target
        The target it was extracted for.
    """

    task: Task
    candidates: Tuple[int, ...]
    default: int
    target: Target

    def module_for(self, algorithm: int) -> str:
        """The text of the task's module with its convolution set to ``algorithm``."""
        mod = self.task.module.clone()
        for op, key, _, _ in conv_choices(mod, self.target, [self.task.func_name], None):
            if key == self.task.workload:
                set_conv_algorithm(op, algorithm)
        return str(mod)

    def trace_for(self, algorithm: int) -> str:
        """The record trace of ``algorithm``: empty for the default, else the decision as
        ``sample_categorical`` (:func:`~mlc_mlir.schedule.rules.conv_strategy.sample_conv_algorithm`)."""
        if algorithm == self.default:
            return Trace().as_json()
        sch = Schedule(self.task.module)
        sample_conv_algorithm(sch, self.candidates, self.default, decision=algorithm)
        return sch.trace.as_json()


def extract_algorithm_tasks(mod: Module, target: Target, winograd: Optional[bool]) -> List[AlgorithmTask]:
    """One :class:`AlgorithmTask` per decision key with more than one candidate among the
    convolutions of ``mod``'s unscheduled functions, in program order (``winograd``: as
    :func:`~mlc_mlir.schedule.rules.conv_strategy.conv_algorithms`)."""
    options = CompileOptions(target=target)
    _, graph = run_stages(mod, options, until="graph")
    if not has_op(graph, *CONV_OPS):
        return []
    by_key: Dict[str, AlgorithmTask] = {}
    for u in task_units(graph, unscheduled_functions(graph)):
        if not has_op(u.module, *CONV_OPS):
            continue
        unit = to_nhwc(u.module, target, [u.func], options)
        for _, key, cands, default in conv_choices(unit, target, [u.func], winograd):
            if len(cands) < 2:
                continue
            if key in by_key:
                old = by_key[key]
                by_key[key] = dataclasses.replace(old, task=dataclasses.replace(old.task, weight=old.task.weight + 1))
                continue
            task = Task(u.name, key, unit, u.func, 1, estimate_flops(unit, u.func))
            by_key[key] = AlgorithmTask(task, tuple(cands), default, target)
    return list(by_key.values())
