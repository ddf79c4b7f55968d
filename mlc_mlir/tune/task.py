"""Tuning tasks: one per distinct workload among the units of a module.

:func:`extract_tasks` runs the compiler's own ``graph``, ``layout`` and ``tasks`` stages and takes
the units of the result (:func:`mlc_mlir.pipeline.tasks.task_units`): the units the tuned and
the default compile schedule are the same (a unit repeated across layers is the one function
the ``tasks`` stage shares, its weights passed as arguments:
:mod:`mlc_mlir.pipeline.shared_units`), and a record replaces the default schedule of its unit
where ``mlc.compile`` schedules it. Units are grouped by workload key; a task's weight is how
many times units of its workload run (a shared unit once per call), so the task scheduler spends
trials where they pay off most.
Source: TVM MetaSchedule ``ExtractedTask`` (``extract_task_from_relax``) and ``TuneContext``'s
task.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from typing import Dict, List

from .._mlir import ir
from ..errors import TuningError
from ..ir.module import Module
from ..ir.walk import find_ops
from ..pipeline.compile import run_stages
from ..pipeline.options import CompileOptions
from ..pipeline.scheduling import unscheduled_functions
from ..pipeline.tasks import task_units
from ..schedule.loop_nest import analyze_module
from ..target import get_target


@dataclasses.dataclass(frozen=True, eq=False)
class Task:
    """One tuning task (TVM MetaSchedule ``ExtractedTask``).

    Attributes
    ----------
    name : str
        The name of the first unit of this workload (``fused_dense_relu``, the name
        ``FuseOps`` would give it).
    workload : str
        :func:`~mlc_mlir.ir.workload.workload_key` of that unit's function: the key of the
        database's records.
    module : Module
        Just that unit, as a public function named ``func_name`` (a payload for ``Schedule`` and
        ``compile``).
    func_name : str
        Its name in ``module``: the name of the user's function that holds the unit (``main``),
        so a space function may call ``sch.get_block("C", "main")``.
    weight : int
        Units of this workload in the module.
    flops : float
        Floating-point operations of one call (2 per multiply-add of a contraction, 1 per
        element of other ops; fills count 0), for GFLOP/s.
    """

    name: str
    workload: str
    module: Module
    func_name: str
    weight: int
    flops: float


def estimate_flops(mod: Module, func_name: str) -> float:
    """Floating-point operations of one call of ``func_name`` (see :attr:`Task.flops`)."""
    total = 0.0
    for (fn, _), info in analyze_module(mod).items():
        if fn != func_name or info.op_name == "linalg.fill" or not info.dims:
            continue
        points = math.prod(d.extent for d in info.dims)
        total += 2.0 * points if any(d.kind == "reduction" for d in info.dims) else float(points)
    return total


def extract_tasks(mod: Module, target="cpu", winograd: Optional[bool] = None, database=None) -> List[Task]:
    """One :class:`Task` per distinct workload among the units of ``mod``'s unscheduled
    functions, after the compiler's ``graph``, ``layout`` and ``tasks`` stages for ``target``.

    Parameters
    ----------
    mod : Module
        A graph module (functions with ``scf`` loops, scheduled by hand, have no tasks).
    target : str or Target
        The layout rewrites depend on it (NHWC, Winograd, packed weights).
    winograd : bool or None
        ``CompileOptions.winograd`` of the compile the records are for.
    database : optional
        ``CompileOptions.database``: its convolution algorithm records shape the layout (the
        tuner passes the database its algorithm tasks filled).

    Returns
    -------
    list of Task
        In program order of the units; weights summed over units of one workload.

    Raises
    ------
    TuningError
        If ``mod`` is not a Module, or it has no unit to tune.
    """
    if not isinstance(mod, Module):
        raise TuningError(f"tune: expected an mlc.Module, got {type(mod).__name__}")
    options = CompileOptions(target=get_target(target), winograd=winograd, database=database)
    _, laid = run_stages(mod, options, until="tasks")
    units = task_units(laid, unscheduled_functions(laid))
    with laid.context:   # a unit shared by the tasks stage runs once per call of its function
        calls = Counter(ir.FlatSymbolRefAttr(op.attributes["callee"]).value
                        for op in find_ops(laid, "func.call"))
    if not units:
        raise TuningError(f"extract_tasks: the module has no unit to tune (no named linalg op "
                          f"with static shapes in an unscheduled function; functions: "
                          f"{mod.function_names()}; symbolic sizes keep the default schedules)")
    by_key: Dict[str, Task] = {}
    for u in units:
        runs = max(1, calls[u.func])
        if u.workload in by_key:
            by_key[u.workload] = dataclasses.replace(by_key[u.workload], weight=by_key[u.workload].weight + runs)
            continue
        by_key[u.workload] = Task(u.name, u.workload, u.module, u.func, runs, estimate_flops(u.module, u.func))
    return list(by_key.values())
