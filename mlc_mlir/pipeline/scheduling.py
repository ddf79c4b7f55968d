"""Stage ``schedule`` of :func:`mlc_mlir.compile`: every function that nobody scheduled gets,
unit by unit (the ``tasks`` stage's units, :mod:`mlc_mlir.pipeline.tasks`), the tuning
database's record of the unit or the target's default schedule.

A function is *already scheduled* when its body holds ``scf`` loops (it came from ``sch.mod``):
it is compiled as given. The others are scheduled in one :class:`~mlc_mlir.schedule.Schedule`
of the whole module:

* with a ``database`` (anything with ``query_best_trace(workload, target_key, names=,
  func_name=)``, e.g. the tuner's :class:`~mlc_mlir.tune.database.Database`), each unit whose
  workload has a record that beats the default gets that record's trace, replayed where the
  unit is (:meth:`Schedule.apply_trace`); the unit's other blocks are left as the record left
  them. A record that does not replay in the module is skipped with a warning (the unit then
  gets its default schedule);
* ``schedule="default"``: the rest gets :func:`mlc_mlir.schedule.default_rules.apply_default_schedule`
  with the options' target and threads (TVM dlight's default rules); ``schedule="none"``: the
  rest stays plain linalg (lowered to naive loops).

With an empty database the result is the default compile's, op for op: a record replaces the
default decisions of its unit and nothing else (TVM's ``MetaScheduleApplyDatabase``, on the
unfused graph).
"""

from __future__ import annotations

import warnings
from typing import Dict, List, Optional, Protocol, Tuple

from .._mlir import ir
from ..errors import PipelineError, ScheduleError
from ..ir.module import OP_NAME_ATTR, Module
from ..schedule.default_rules import apply_default_schedule
from ..schedule.schedule import Schedule
from ..schedule.trace import Trace
from ..target import Target
from .tasks import TaskUnit, strip_task_marks, task_units
from .unit_scopes import inline_units, outline_units

#: Values of ``CompileOptions.schedule``.
SCHEDULE_MODES = ("default", "none")


class ScheduleDatabase(Protocol):
    """What :func:`mlc_mlir.compile` needs from a tuning database (a protocol: the pipeline
    layer never imports the tuner)."""

    def query_best_trace(self, workload: str, target_key: str, names: Optional[Dict[str, str]] = None,
                         func_name: Optional[str] = None) -> Optional[str]:
        """The trace JSON that replaces the default schedule of a unit of ``workload`` on
        ``target_key``, its blocks renamed through ``names`` and ``func_name``; None when no
        record beats the default."""


def _has_loops(fn) -> bool:
    found = []

    def visit(op):
        op = op.operation if hasattr(op, "operation") else op
        if op.name in ("scf.for", "scf.forall", "scf.parallel"):
            found.append(op)
            return ir.WalkResult.INTERRUPT
        return ir.WalkResult.ADVANCE

    fn.operation.walk(visit, ir.WalkOrder.PRE_ORDER)
    return bool(found)


def _has_named_ops(fn) -> bool:
    return any(OP_NAME_ATTR in op.operation.attributes and op.operation.name.startswith("linalg.")
               for op in fn.regions[0].blocks[0].operations) if fn.regions[0].blocks else False


def unscheduled_functions(module: Module) -> List[str]:
    """Names of the functions with named linalg ops at top level and no ``scf`` loops."""
    with module.context:
        return [f.sym_name.value for f in module.func_ops()
                if not f.is_external and _has_named_ops(f) and not _has_loops(f)]


def _replay(module: Module, traces: Dict[str, str], units: Dict[str, TaskUnit]) -> Schedule:
    """A schedule of ``module`` with each unit's trace replayed; a trace that does not replay is
    dropped with a warning and the schedule rebuilt without it."""
    while True:
        sch = Schedule(module)
        try:
            for name, text in traces.items():
                failing = name
                sch.apply_trace(Trace.from_json(text))
                unit = units[name]
                taken = {(b.func, b.name) for b in sch.model.blocks}
                for b in unit.blocks:  # the record decided for every block of its unit
                    if (unit.func, b) not in taken and (unit.func, b) in sch.model.ops:
                        sch.get_block(b, func_name=unit.func)
            return sch
        except ScheduleError as e:
            warnings.warn(f"compile: the database record of unit '{failing}' does not replay in "
                          f"@{units[failing].func} ({e}); the unit gets its default schedule",
                          stacklevel=3)
            traces = {n: t for n, t in traces.items() if n != failing}


def _records(module: Module, database: ScheduleDatabase, target: Target,
             functions: List[str]) -> Dict[str, Tuple[str, TaskUnit]]:
    """``{unit name: (trace JSON, unit)}`` for the units of ``functions`` whose workload has a record
    that beats the default, renamed for the unit."""
    tkey = target.key()
    out = {}
    for u in task_units(module, functions):
        text = database.query_best_trace(u.workload, tkey, names=u.block_names, func_name=u.func)
        if text is not None and Trace.from_json(text).insts:
            out[u.name] = (text, u)
    return out


def schedule_module(module: Module, target: Target, mode: str, threads: Optional[int],
                    database: Optional[ScheduleDatabase] = None) -> Module:
    """Schedule the functions of ``module`` that are not scheduled yet (see the module docstring).

    Raises
    ------
    PipelineError
        For an unknown ``mode``, a database without ``query_best_trace``, or a default rule that
        fails (the message names the rule, the op and the function).
    """
    if mode not in SCHEDULE_MODES:
        raise PipelineError(f"compile: schedule={mode!r}; expected one of {list(SCHEDULE_MODES)}")
    if database is not None and not callable(getattr(database, "query_best_trace", None)):
        raise PipelineError(f"compile: database {type(database).__name__} has no query_best_trace("
                            "workload, target_key, names=, func_name=); pass an mlc.tune database")
    module = strip_task_marks(module)
    if mode == "none" and database is None:
        return module
    todo = unscheduled_functions(module)
    if not todo:
        return module
    found = _records(module, database, target, todo) if database is not None else {}
    if mode == "none" and not found:
        return module
    if mode == "default" and not found:
        # each unit scheduled in a function of its own, then inlined back (pipeline.unit_scopes)
        module, scoped = outline_units(module, todo)
        todo = todo + scoped
    sch = _replay(module, {n: t for n, (t, _) in found.items()}, {n: u for n, (_, u) in found.items()})
    try:
        if mode == "default":
            apply_default_schedule(sch, target, threads, functions=todo)
        return inline_units(sch.mod)
    except ScheduleError as e:  # a rule could not schedule this op
        if found:   # the records together with the default rules: the default schedule alone
            warnings.warn(f"compile: the database records of {sorted(found)} do not apply with the "
                          f"default schedules ({e}); compiling with the default schedules only",
                          stacklevel=3)
            return schedule_module(module, target, mode, threads, None)
        raise PipelineError(f"schedule: {e}; compile with schedule='none' to skip default "
                            "schedules") from None
