"""``apply_best``: put the best measured schedule of each primitive function into a module.

For each primitive function (after ``FuseOps``) whose workload has a record without error on
the target, the best trace (the fastest record without error) is replayed on the function alone
(its blocks renamed through ``canonical_names`` when the record came from another function of
the same workload) and the result replaces the function (``Module.update_func``). Functions
without a record without error are left as they are, for the compiler's default schedule, and
so are functions whose default schedule was measured (the empty trace) and failed every time:
no record is known to beat the default then (a timeout of the default under load must not make
a slower record win). ``mlc.compile(mod, database=db)`` calls :meth:`Database.apply_best`,
which is this function. Source: TVM MetaSchedule ``ApplyHistoryBest``
(``database.query_tuning_record`` + ``Trace.apply_to_schedule``).
"""

from __future__ import annotations

from ..errors import ScheduleError, TuningError
from ..ir.module import Module
from ..ir.workload import canonical_names, workload_key
from ..schedule.schedule import Schedule
from ..schedule.trace import Trace
from ..target import get_target
from .task import fused, primitive_functions, task_module


def apply_best(mod: Module, database, target="cpu") -> Module:
    """``mod`` (outlined with ``FuseOps`` if it is not yet) with every primitive function that
    has a record in ``database`` for ``target`` replaced by its best schedule.

    Parameters
    ----------
    mod : Module
    database : Database
        Typically the result of :func:`mlc_mlir.tune.tune` (anything with its ``best``,
        ``records`` and ``query_best_trace``).
    target : str or Target
        Only records of exactly this target (``Target.key()``) apply.

    Returns
    -------
    Module
        A new module (``mod`` is unchanged); compile it with ``mlc.compile``.

    Raises
    ------
    TuningError
        If ``database`` is not a tuning database, or a best trace does not replay on its function
        (names the function and the candidate).
    """
    if not all(callable(getattr(database, m, None)) for m in ("best", "query_best_trace", "records")):
        raise TuningError(f"apply_best: argument 'database' is {type(database).__name__}; "
                          "expected a mlc_mlir.tune.Database")
    tkey = get_target(target).key()
    out = fused(mod, get_target(target))
    for name in primitive_functions(out):
        key = workload_key(out, name)
        rec = database.best(key, tkey)
        if rec is None or not Trace.from_json(rec.trace).insts:
            continue
        defaults = [r for r in database.records(key, tkey) if not Trace.from_json(r.trace).insts]
        if defaults and not any(r.ok for r in defaults):
            continue   # the default failed to measure: nothing is known to beat it
        text = database.query_best_trace(key, tkey, names=canonical_names(out, name), func_name=name)
        try:
            sch = Schedule.from_trace(task_module(out, name), Trace.from_json(text))
            scheduled = sch.mod
        except ScheduleError as e:
            raise TuningError(f"apply_best: the best trace of '{name}' (candidate {rec.candidate}, "
                              f"recorded on '{rec.task_name}') does not replay: {e}") from None
        out = out.update_func(name, scheduled)
    return out
