"""Tuning tasks: one per distinct workload among a module's primitive functions.

:func:`extract_tasks` outlines primitive functions with :class:`~mlc_mlir.graph.FuseOps` (unless
the module already has them) and groups them by :func:`~mlc_mlir.ir.workload.workload_key`; a
task's weight is how many times graph functions call a function of its workload, so the task
scheduler spends trials where they pay off most. Source: TVM MetaSchedule ``ExtractedTask``
(``extract_task_from_relax``) and ``TuneContext``'s task.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Dict, List

from .._mlir import ir
from ..errors import TuningError
from ..graph.fuse_ops import PRIMITIVE_ATTR, FuseOps
from ..graph.zero_size import fold_zero_size
from ..ir.module import Module
from ..ir.workload import workload_key
from ..pipeline.compile import compile
from ..pipeline.scheduling import layout_rewrites
from ..schedule.loop_nest import analyze_module
from ..target import get_target


@dataclasses.dataclass(frozen=True, eq=False)
class Task:
    """One tuning task (TVM MetaSchedule ``ExtractedTask``).

    Attributes
    ----------
    name : str
        The name of the first primitive function of this workload (``fused_dense_relu``).
    workload : str
        :func:`~mlc_mlir.ir.workload.workload_key` of that function as :class:`FuseOps` leaves
        it (private, ``mlc.primitive``): the key of the database's records.
    module : Module
        Just that function, made public (a payload for ``Schedule`` and ``compile``).
    func_name : str
        Its name in ``module`` (equal to ``name``).
    weight : int
        Calls of functions of this workload from the graph functions (summed over them).
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


def is_fused(mod: Module) -> bool:
    """Whether ``mod`` already has primitive functions (``mlc.primitive``), i.e. went through
    :class:`FuseOps`."""
    return any(PRIMITIVE_ATTR in f.attributes for f in mod.func_ops())


def primitive_functions(mod: Module) -> List[str]:
    """Names of the primitive functions of ``mod`` with static shapes, in module order (those
    with symbolic sizes are not tasks: measuring needs concrete sizes; the default schedule
    serves them)."""
    def static(f) -> bool:
        types = list(f.type.inputs) + list(f.type.results)
        return all(not isinstance(t, ir.RankedTensorType) or ir.RankedTensorType(t).has_static_shape
                   for t in types)

    return [f.sym_name.value for f in mod.func_ops() if PRIMITIVE_ATTR in f.attributes and static(f)]


def _evaluate(m: Module):
    """The constant evaluator of the layout rewrites (``graph.FoldConstant``)."""
    return compile(m, "cpu", threads=1, schedule="none")


def fused(mod: Module, target=None) -> Module:
    """``mod`` with ops on zero-size tensors folded (:func:`~mlc_mlir.graph.zero_size.fold_zero_size`)
    and primitive functions outlined (:class:`FuseOps`), unless it has them already. On a CPU ``target``, the default schedule's per-op layout rewrites come first
    (:func:`~mlc_mlir.pipeline.scheduling.layout_rewrites`: NCHW convolutions the NHWC rule
    prefers become NHWC ones, constant filters folded), as ``mlc.compile`` does before it
    applies a database, so tasks and records see the layout the compiler runs (TVM:
    ``AlterOpLayout`` before task extraction).

    Raises
    ------
    TuningError
        If ``mod`` is not a Module.
    """
    if not isinstance(mod, Module):
        raise TuningError(f"tune: expected an mlc.Module, got {type(mod).__name__}")
    mod = fold_zero_size(mod)  # as mlc.compile's graph stage: no task has an extent of 0
    if is_fused(mod):
        return mod
    tgt = get_target(target) if target is not None else None
    if tgt is not None and tgt.kind == "cpu":
        mod = layout_rewrites(mod, tgt, mod.function_names(), _evaluate)
    return FuseOps()(mod)


def task_module(mod: Module, func_name: str) -> Module:
    """Function ``func_name`` of ``mod`` alone, public (``Module.extract`` + visibility)."""
    one = mod.extract(func_name)
    with one.context:
        fn = one.get_function(func_name)
        if "sym_visibility" in fn.attributes:
            del fn.attributes["sym_visibility"]
    return one


def estimate_flops(mod: Module, func_name: str) -> float:
    """Floating-point operations of one call of ``func_name`` (see :attr:`Task.flops`)."""
    total = 0.0
    for (fn, _), info in analyze_module(mod).items():
        if fn != func_name or info.op_name == "linalg.fill" or not info.dims:
            continue
        points = math.prod(d.extent for d in info.dims)
        total += 2.0 * points if any(d.kind == "reduction" for d in info.dims) else float(points)
    return total


def _call_counts(mod: Module) -> Dict[str, int]:
    """``{callee: number of func.call sites in non-primitive functions}``."""
    counts: Dict[str, int] = {}

    def visit(op):
        op = op.operation if hasattr(op, "operation") else op
        if op.name == "func.call":
            callee = ir.FlatSymbolRefAttr(op.attributes["callee"]).value
            counts[callee] = counts.get(callee, 0) + 1
        return ir.WalkResult.ADVANCE

    with mod.context:
        for f in mod.func_ops():
            if PRIMITIVE_ATTR not in f.attributes:
                f.operation.walk(visit, ir.WalkOrder.PRE_ORDER)
    return counts


def extract_tasks(mod: Module, target="cpu") -> List[Task]:
    """One :class:`Task` per distinct workload among the primitive functions of ``mod``.

    Parameters
    ----------
    mod : Module
        A graph module (outlined with :class:`FuseOps` here) or one that has primitive functions.
    target : str or Target
        Checked only (tasks do not depend on it; records do).

    Returns
    -------
    list of Task
        In the order of the primitive functions; weights summed over functions of one workload.

    Raises
    ------
    TuningError
        If ``mod`` is not a Module, or has no primitive functions after :class:`FuseOps`.
    """
    fmod = fused(mod, get_target(target))
    names = primitive_functions(fmod)
    if not names:
        raise TuningError(f"extract_tasks: the module has no primitive functions with static shapes "
                          f"after FuseOps (functions: {fmod.function_names()}); nothing to tune "
                          "(symbolic sizes keep the default schedules)")
    calls = _call_counts(fmod)
    by_key: Dict[str, Task] = {}
    for name in names:
        key = workload_key(fmod, name)
        weight = calls.get(name, 0)
        if key in by_key:
            by_key[key] = dataclasses.replace(by_key[key], weight=by_key[key].weight + weight)
            continue
        one = task_module(fmod, name)
        by_key[key] = Task(name, key, one, name, weight, estimate_flops(one, name))
    return list(by_key.values())
