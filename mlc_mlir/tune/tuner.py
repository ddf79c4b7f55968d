"""``tune()``: tasks, a task scheduler, batches of candidates through an executor, every result
committed to the database at once. Source: TVM MetaSchedule ``tune_tasks`` / ``tune_tir``."""

from __future__ import annotations

import os
import random
import time
from typing import List, Optional

from ..errors import TuningError
from ..ir.workload import canonical_names
from ..schedule.trace import Trace
from ..target import get_target
from .database import Database
from .evolutionary import EvolutionarySearch
from .executor import Executor, LocalExecutor
from .measure import MeasureInput, MeasureResult
from .record import TuningRecord, candidate_id
from .report import ProgressBar, plot_curve, print_summary
from .search import SearchStrategy, Space, TuneContext
from .space_rules import default_space
from .task import Task, extract_tasks
from .task_scheduler import TaskScheduler

#: File names inside ``work_dir``.
DATABASE_FILE = "database.jsonl"
CURVE_FILE = "tuning_curve.png"


def _record(task: Task, names, tkey: str, trace_json: str, res: MeasureResult) -> TuningRecord:
    return TuningRecord(task.workload, tkey, trace_json, Trace.from_json(trace_json).decisions,
                        res.latencies_ms, res.error, time.time(),
                        candidate_id(task.workload, tkey, trace_json), task.name, names, task.flops)


def tune(mod, target="cpu", trials: int = 64, work_dir: str = "tune/", space: Optional[Space] = None,
         strategy: Optional[SearchStrategy] = None, executor: Optional[Executor] = None,
         timeout_s: float = 30.0, threads: Optional[int] = None, progress: bool = True,
         batch_size: Optional[int] = None, seed: int = 0) -> Database:
    """Tune the primitive functions of ``mod`` for ``target`` (TVM MetaSchedule ``tune_tasks``).

    Tasks come from :func:`extract_tasks`; for each, the first candidate is the empty trace (the
    compiler's default schedule, the baseline of the speedup column), the rest come from
    ``strategy`` over ``space``. A task scheduler (:mod:`.task_scheduler`) gives batches to the
    tasks with the largest expected gain. Every result, failures included, is committed to
    ``work_dir/database.jsonl`` as soon as it is measured; a later call with the same
    ``work_dir`` resumes (records there count toward ``trials`` and are not measured again).
    Ctrl-C stops tuning and returns the database with every completed record.

    Parameters
    ----------
    mod : Module
        A graph module (outlined with ``FuseOps``) or one with primitive functions.
    target : str or Target
    trials : int
        Total measured candidates over all tasks (records of earlier runs included).
    work_dir : str
        Folder of the database and ``tuning_curve.png``.
    space : callable, optional
        ``space(sch) -> None``, a stochastic schedule function applied to
        ``Schedule(task.module, seed=s)`` for every task; default
        :func:`~mlc_mlir.tune.space_rules.default_space` (schedule rules per op kind).
    strategy : SearchStrategy, optional
        Default :class:`~mlc_mlir.tune.evolutionary.EvolutionarySearch` guided by the XGBoost
        cost model (needs ``pip install 'mlc-mlir[tune]'``); :class:`RandomSearch` needs nothing.
    executor : Executor, optional
        Default ``LocalExecutor()`` (closed at the end; a given one is left open).
    timeout_s : float
        Limit of each candidate's build and of its run, s.
    threads : int, optional
        ``CompileOptions.threads`` of the candidates.
    progress : bool
        Show a progress bar, the summary table, and write the tuning curve.
    batch_size : int, optional
        Candidates per batch (default: twice the executor's workers, at least 4).
    seed : int
        Seed of the search (equal seeds propose the same candidates).

    Returns
    -------
    Database

    Raises
    ------
    TuningError
        For invalid arguments, a module without primitive functions, or a space that applies to
        no sample of a task.
    """
    if type(trials) is not int or trials < 1:
        raise TuningError(f"tune: trials={trials!r}; expected an int >= 1")
    if not (isinstance(timeout_s, (int, float)) and timeout_s > 0):
        raise TuningError(f"tune: timeout_s={timeout_s!r}; expected a positive number of seconds")
    tgt = get_target(target)
    space = default_space(tgt, threads) if space is None else space
    tkey = tgt.key()
    tasks = extract_tasks(mod, tgt)
    db = Database(os.path.join(work_dir, DATABASE_FILE))
    strategy = strategy if strategy is not None else EvolutionarySearch()
    own = executor is None
    executor = LocalExecutor() if own else executor
    batch = batch_size or max(4, 2 * executor.max_workers)
    ctxs = []
    for t in tasks:
        history = db.records(t.workload, tkey)  # a resumed run draws a fresh random stream
        ctxs.append(TuneContext(t, space, tgt, random.Random(f"{seed}:{t.workload}:{len(history)}"), history))
    sched = TaskScheduler([t.weight for t in tasks], [c.history for c in ctxs])
    try:
        with ProgressBar(trials, min(trials, sum(len(c.history) for c in ctxs)), progress) as bar:
            try:
                _loop(tasks, ctxs, sched, db, strategy, executor, tkey, trials, batch, timeout_s,
                      threads, seed, bar)
            except KeyboardInterrupt:
                bar.log(f"interrupted: {len(db)} records kept in {db.path}")
    finally:
        if own:
            executor.close()
    print_summary(tasks, db, tkey, progress)
    if progress:
        png = plot_curve(tasks, db, tkey, os.path.join(work_dir, CURVE_FILE))
        print(f"tuning curve: {png}" if png else
              "tuning curve not written: matplotlib is not installed (pip install 'mlc-mlir[tune]')")
    return db


def _loop(tasks: List[Task], ctxs: List[TuneContext], sched, db: Database, strategy: SearchStrategy,
          executor: Executor, tkey: str, trials: int, batch: int, timeout_s: float,
          threads: Optional[int], seed: int, bar: ProgressBar) -> None:
    used = sum(len(c.history) for c in ctxs)
    baseline = Trace().as_json()
    while used < trials:
        i = sched.next_task()
        if i is None:
            bar.log("every task's space is exhausted")
            return
        task, ctx = tasks[i], ctxs[i]
        n = min(batch, trials - used)
        traces = [] if any(r.trace == baseline for r in ctx.history) else [baseline]
        if n > len(traces):
            traces += [t.as_json() for t in strategy.propose(ctx, n - len(traces))]
        traces = [t for t in dict.fromkeys(traces)
                  if not db.has_candidate(candidate_id(task.workload, tkey, t))]
        if not traces:
            sched.exhaust(i)
            continue
        inputs = [MeasureInput(task.func_name, str(task.module), t, ctx.target, threads=threads,
                               seed=seed) for t in traces]
        names = canonical_names(task.module, task.func_name)
        new = []
        for j, res in executor.measure(inputs, timeout_s):
            rec = _record(task, names, tkey, traces[j], res)
            db.commit(rec)
            ctx.history.append(rec)
            new.append(rec)
            used += 1
            best = min((r.latency_ms for r in ctx.history if r.ok), default=float("inf"))
            bar.update(task.name, min(used, trials), best, task.flops / (best * 1e6))
            if rec.error:
                bar.log(f"[{task.name}] candidate {rec.candidate}: {rec.error.splitlines()[0][:200]}")
        sched.update(i, new)
        strategy.notify(ctx, new)
