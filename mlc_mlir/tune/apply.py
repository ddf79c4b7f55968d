"""``apply_best``: a module with every unit scheduled, by its best record or by default.

The compiler's stages up to ``schedule`` with the database (:func:`mlc_mlir.compile` with
``database=``, stopped before lowering): each unit whose workload has a record that beats the
default schedule (:meth:`~mlc_mlir.tune.database.Database.query_best_trace`) gets that record's
trace, replayed in place; the other units get the default schedule. Source: TVM MetaSchedule
``ApplyHistoryBest`` (``database.query_tuning_record`` + ``Trace.apply_to_schedule``).
"""

from __future__ import annotations

from typing import Optional

from ..errors import TuningError
from ..ir.module import Module
from ..pipeline.compile import run_stages
from ..pipeline.options import CompileOptions
from ..target import get_target


def apply_best(mod: Module, database, target="cpu", threads: Optional[int] = None) -> Module:
    """``mod`` after the ``schedule`` stage of ``mlc.compile(mod, target, database=database)``.

    Parameters
    ----------
    mod : Module
    database : Database
        Typically the result of :func:`mlc_mlir.tune.tune` (anything with its
        ``query_best_trace``).
    target : str or Target
        Only records of exactly this target (``Target.key()``) apply.
    threads : int, optional
        ``CompileOptions.threads`` of the default schedules.

    Returns
    -------
    Module
        A new, scheduled module (``mod`` is unchanged); compile it with ``mlc.compile``.

    Raises
    ------
    TuningError
        If ``database`` is not a tuning database.
    """
    if not callable(getattr(database, "query_best_trace", None)):
        raise TuningError(f"apply_best: argument 'database' is {type(database).__name__}; "
                          "expected a mlc_mlir.tune.Database")
    if not isinstance(mod, Module):
        raise TuningError(f"apply_best: expected an mlc.Module, got {type(mod).__name__}")
    options = CompileOptions(target=get_target(target), threads=threads, database=database)
    return run_stages(mod, options, until="schedule")[1]
