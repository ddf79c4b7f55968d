"""``tune()``: tasks, a task scheduler, batches of candidates through an executor, every result
committed to the database at once. Source: TVM MetaSchedule ``tune_tasks`` / ``tune_tir``."""

from __future__ import annotations

import collections
import hashlib
import os
import random
import time
from typing import Callable, Dict, List, Optional, Tuple

from ..errors import TuningError
from ..ir.workload import canonical_names
from ..schedule.trace import Trace
from ..target import get_target
from .attention_task import extract_attention_tasks
from .conv_algorithm import AlgorithmTask, extract_algorithm_tasks
from .database import Database
from .evolutionary import EvolutionarySearch
from .executor import Executor, LocalExecutor, compare
from .measure import MeasureInput, MeasureResult
from .model_check import check_model, entry_function
from .record import TuningRecord, candidate_id
from .report import ProgressBar, plot_curve, print_summary
from .search import SearchStrategy, Space, TuneContext
from .space_rules import default_point, default_space
from .task import Task, extract_tasks
from .task_scheduler import TaskScheduler

#: File names inside ``work_dir``.
DATABASE_FILE = "database.jsonl"
CURVE_FILE = "tuning_curve.png"
REFERENCE_DIR = "references"

#: A candidate whose checked call is this many times slower than the task's best so far is
#: recorded with that one call (:attr:`MeasureInput.cutoff_ms`): more calls would not rank it.
CUTOFF_RATIO = 2.0
#: The reference of a task (the unscheduled function, plain loops) may take this many times a
#: candidate's timeout, and at least ``REFERENCE_MIN_TIMEOUT_S`` s; it runs once per task.
REFERENCE_TIMEOUT_RATIO = 10.0
REFERENCE_MIN_TIMEOUT_S = 300.0
#: The re-measurement of a task's finalists: rounds (each measures every finalist once, in a
#: rotated order) and timed repeats per measurement.
REMEASURE_ROUNDS = 2
REMEASURE_REPEATS = 5


def reference_path(work_dir: str, name: str, inp: MeasureInput) -> str:
    """Where the reference of task (or model) ``name`` is kept in ``work_dir``: keyed by the
    module, the target, the compile options and the seed of the inputs."""
    key = hashlib.sha256("\0".join((inp.module, inp.target.key(), str(inp.threads),
                                    str(inp.opt_level), str(inp.seed))).encode()).hexdigest()[:16]
    return os.path.join(work_dir, REFERENCE_DIR, f"{name}-{key}.npz")


def _record(task: Task, names, tkey: str, trace_json: str, res: MeasureResult,
            final: str = "") -> TuningRecord:
    return TuningRecord(task.workload, tkey, trace_json, Trace.from_json(trace_json).decisions,
                        res.latencies_ms, res.error, time.time(),
                        candidate_id(task.workload, tkey, trace_json), task.name, names, task.flops,
                        final)


def tune(mod, target="cpu", trials: int = 64, work_dir: str = "tune/", space: Optional[Space] = None,
         strategy: Optional[SearchStrategy] = None, executor: Optional[Executor] = None,
         timeout_s: float = 30.0, threads: Optional[int] = None, progress: bool = True,
         batch_size: Optional[int] = None, seed: int = 0, finalists: int = 2,
         winograd: Optional[bool] = None, check_model: bool = True) -> Database:
    """Tune the units of ``mod`` for ``target`` (TVM MetaSchedule ``tune_tasks``).

    First the algorithm of each convolution (direct, im2col, Winograd F(2x2, 3x3) or
    F(4x4, 3x3); :mod:`.conv_algorithm`) and the knobs of each fused attention kernel
    (:mod:`.attention_task`): every candidate of each distinct convolution is
    measured in its unit, checked against the unit's plain loops (an attention kernel against
    its default knobs' kernel), and all of them are
    re-measured, interleaved, against the compile's default choice (ties keep the default). Then the
    schedules: tasks come from :func:`extract_tasks` on the layout those choices give; for each, the first candidates are the empty trace (the
    compiler's default schedule, the baseline of the speedup column) and the default point of
    the space (:func:`~.space_rules.default_point`: the same schedule as decisions the search can
    mutate), the rest come from ``strategy`` over ``space``. Every candidate is checked against
    the task's reference, computed once (``work_dir/references/*.npz``, outside the candidates'
    timeouts). A task scheduler (:mod:`.task_scheduler`) gives batches to the
    tasks with the largest expected gain: each task's first batch is its default alone (so the
    tasks are ranked by what they cost), and a task whose best has not improved by 2% over
    its last :data:`~.task_scheduler.PATIENCE` trials is converged and gets no more; tuning
    ends before ``trials`` when every task is converged or exhausted. Every result, failures included, is committed to
    ``work_dir/database.jsonl`` as soon as it is measured; a later call with the same
    ``work_dir`` resumes (records there count toward ``trials`` and are not measured again).
    Ctrl-C stops tuning and returns the database with every completed record.

    Parameters
    ----------
    mod : Module
        A graph module; its tasks are the units of ``mlc.compile``'s ``tasks`` stage
        (:func:`~.task.extract_tasks`).
    target : str or Target
    trials : int
        Most measured candidates over all tasks (records of earlier runs included).
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
        Candidates per batch (default: four times the executor's workers, at least 8, at most
        the trials per task, at least 2).
    seed : int
        Seed of the search (equal seeds propose the same candidates).
    finalists : int
        Candidates re-measured against the default at the end, per task, the default point
        of the space never among them (0: none; then the search's own measurements decide,
        with the same tie rule).
    winograd : bool or None
        Winograd in the algorithm decision of the convolutions, as ``CompileOptions.winograd``
        of the compile the records are for. None (default): F(2x2, 3x3) and F(4x4, 3x3) are
        candidates, F(2x2, 3x3) the default where ``mlc.compile`` takes it; a candidate that is
        not the default is kept only when it beats the default's time by more than the
        database's tie tolerance and its outputs match the unit's direct loops within
        ``rtol = atol = 1e-3`` on random inputs (:class:`~.measure.MeasureInput`), the
        tolerance the model tests use against onnxruntime and PyTorch. A chosen F(4x4, 3x3)
        has the numerics ``CompileOptions.winograd`` describes for it: a NaN or infinity in
        the input spreads to the whole output tile, and an input of huge magnitude (1e30)
        perturbs outputs that do not read it; tune with ``winograd=False`` (no Winograd
        candidate or default) for inputs that may hold such values. True: F(4x4, 3x3) also
        the default where ``mlc.compile(winograd=True)`` takes it. ``mlc.compile(mod,
        database=db)`` replays the recorded choice either way.
    check_model : bool
        At the end, time the whole module compiled with the chosen records against its default
        compile, interleaved, and reject the records that do not make it faster (ties keep the
        default; :mod:`.model_check`, :meth:`Database.reject`), so that
        ``mlc.compile(mod, database=db)`` is never slower than ``mlc.compile(mod)`` by more than
        the noise of that measurement. The verdict is logged and shown in the table.

    Returns
    -------
    Database

    Raises
    ------
    TuningError
        For invalid arguments, a module without a unit to tune, a space that applies to no
        sample of a task, or a ``work_dir`` another tuner is using (the database's lock,
        :meth:`Database.exclusive`, is held for the whole run).
    """
    if type(trials) is not int or trials < 1:
        raise TuningError(f"tune: trials={trials!r}; expected an int >= 1")
    if type(finalists) is not int or finalists < 0:
        raise TuningError(f"tune: finalists={finalists!r}; expected an int >= 0")
    if not (isinstance(timeout_s, (int, float)) and timeout_s > 0):
        raise TuningError(f"tune: timeout_s={timeout_s!r}; expected a positive number of seconds")
    tgt = get_target(target)
    db = Database(os.path.join(work_dir, DATABASE_FILE))
    with db.exclusive():
        return _tune(mod, tgt, trials, work_dir, space, strategy, executor, timeout_s, threads,
                     progress, batch_size, seed, finalists, winograd, check_model, db)


def _tune(mod, tgt, trials, work_dir, space, strategy, executor, timeout_s, threads, progress,
          batch_size, seed, finalists, winograd, check: bool, db: Database) -> Database:
    space = default_space(tgt, threads) if space is None else space
    tkey = tgt.key()
    algorithms = extract_algorithm_tasks(mod, tgt, winograd) + extract_attention_tasks(mod, tgt)
    strategy = strategy if strategy is not None else EvolutionarySearch()
    own = executor is None
    executor = LocalExecutor() if own else executor
    spent = sum(len([r for r in db.records(a.task.workload, tkey) if not r.final]) for a in algorithms)
    tasks: List[Task] = []
    try:
        with ProgressBar(trials, min(trials, spent), progress) as bar:
            stages = _Stages(bar)
            try:
                spent = _tune_algorithms(algorithms, db, executor, tkey, trials, spent, timeout_s,
                                         threads, seed, finalists, bar, work_dir)
                stages.done("algorithms")
                tasks = _schedule_tasks(mod, tgt, winograd, db, bool(algorithms))
                batch = batch_size or max(2, min(max(8, 4 * executor.max_workers),
                                                 max(1, trials - spent) // max(1, len(tasks))))
                ctxs = []
                for t in tasks:
                    history = [r for r in db.records(t.workload, tkey) if not r.final]  # resumed: a fresh stream
                    ctxs.append(TuneContext(t, space, tgt, random.Random(f"{seed}:{t.workload}:{len(history)}"),
                                            history))
                sched = TaskScheduler([t.weight for t in tasks], [c.history for c in ctxs])
                refs = _loop(tasks, ctxs, sched, db, strategy, executor, tkey, trials, batch,
                             timeout_s, threads, seed, bar, work_dir, spent)
                stages.done("search")
                if finalists:
                    for task, ctx in zip(tasks, ctxs):
                        _remeasure(task, ctx, db, executor, tkey, finalists, timeout_s, threads,
                                   seed, refs.get(id(task)), bar)
                    stages.done("re-measurement")
                if check:
                    _check_model(mod, [a.task for a in algorithms] + tasks, db, executor, tgt,
                                 threads, seed, timeout_s, work_dir, bar)
                    stages.done("model check")
                stages.report()
            except KeyboardInterrupt:
                bar.log(f"interrupted: {len(db)} records kept in {db.path}")
    finally:
        if own:
            executor.close()
    tasks = [a.task for a in algorithms] + tasks
    print_summary(tasks, db, tkey, progress)
    if progress:
        png = plot_curve(tasks, db, tkey, os.path.join(work_dir, CURVE_FILE))
        print(f"tuning curve: {png}" if png else
              "tuning curve not written: matplotlib is not installed (pip install 'mlc-mlir[tune]')")
    return db


class _Stages:
    """Wall time of each stage of one tuning run, logged as one line at the end."""

    def __init__(self, bar: ProgressBar):
        self._bar = bar
        self._t = time.monotonic()
        self._times: List[Tuple[str, float]] = []

    def done(self, name: str) -> None:
        """Close stage ``name`` (it began where the previous one ended)."""
        now = time.monotonic()
        self._times.append((name, now - self._t))
        self._t = now

    def report(self) -> None:
        """Log ``stages: name s, ...`` and the total."""
        total = sum(t for _, t in self._times)
        self._bar.log("stages: " + ", ".join(f"{n} {t:.1f} s" for n, t in self._times)
                      + f"; total {total:.1f} s")


def _check_model(mod, tasks: List[Task], db: Database, executor: Executor, tgt, threads, seed: int,
                 timeout_s: float, work_dir: str, bar: ProgressBar) -> None:
    """The whole-model check (:func:`~.model_check.check_model`) of ``mod`` 's entry function,
    its reference (the plain loops' outputs) computed once in ``work_dir``; builds and runs of
    the model get the time limit of a reference."""
    func = entry_function(mod)
    if func is None:
        bar.log("model check: skipped (several public functions, none named main)")
        return
    # a model builds and runs like a task's reference, not like one candidate: the same limit
    limit = max(REFERENCE_MIN_TIMEOUT_S, REFERENCE_TIMEOUT_RATIO * timeout_s)
    check_model(mod, func, tasks, db, executor, tgt, threads, seed, limit,
                lambda inp: _reference(executor, f"model-{func}", inp, work_dir, timeout_s, bar,
                                       collections.defaultdict(float)), bar.log)


def _schedule_tasks(mod, tgt, winograd: Optional[bool], db: Database, others: bool) -> List[Task]:
    """:func:`extract_tasks` with the layout ``db``'s records give; none (rather than the
    error) when ``others``, the algorithm and attention tasks, are all there is to tune (a
    module that is one fused attention)."""
    try:
        return extract_tasks(mod, tgt, winograd, database=db)
    except TuningError:
        if not others:
            raise
        return []


def _reference(executor: Executor, name: str, inp: MeasureInput, work_dir: str, timeout_s: float,
               bar: ProgressBar, prof: Dict[str, float]) -> Optional[str]:
    """The path of the reference of task (or model) ``name``, computed now if ``work_dir`` does
    not have it; None (each worker computes its own) when the executor's workers do not share
    files or it fails."""
    if not executor.shares_files:
        return None
    path = reference_path(work_dir, name, inp)
    if not os.path.exists(path):
        t0 = time.monotonic()
        err = executor.prepare_reference(inp, path, max(REFERENCE_MIN_TIMEOUT_S,
                                                         REFERENCE_TIMEOUT_RATIO * timeout_s))
        prof["reference (once per task)"] += time.monotonic() - t0
        if err is not None:
            bar.log(f"[{name}] reference: {err.splitlines()[0][:200]}")
            return None
    return path


def _loop(tasks: List[Task], ctxs: List[TuneContext], sched, db: Database, strategy: SearchStrategy,
          executor: Executor, tkey: str, trials: int, batch: int, timeout_s: float,
          threads: Optional[int], seed: int, bar: ProgressBar, work_dir: str,
          spent: int = 0) -> Dict[int, Optional[str]]:
    """The search (``spent``: trials used by the algorithm tasks); returns ``{id(task):
    reference path}`` of the tasks it measured."""
    used = spent + sum(len(c.history) for c in ctxs)
    baseline = Trace().as_json()
    refs: Dict[int, Optional[str]] = {}
    prof: Dict[str, float] = collections.defaultdict(float)
    measured = 0
    t_start = time.monotonic()
    while used < trials:
        i = sched.next_task()
        if i is None:
            bar.log(f"every task is exhausted or converged after {used} of {trials} trials")
            break
        task, ctx = tasks[i], ctxs[i]
        n = min(batch, trials - used)
        traces = [] if any(r.trace == baseline for r in ctx.history) else [baseline]
        point = default_point(ctx.space, task.module) if not ctx.history else None
        if point is not None:
            traces.append(point.trace.as_json())
        if not ctx.history:   # warm-up: the default alone, so tasks are ranked by what they cost
            n = min(n, max(1, len(traces)))
        t0 = time.monotonic()
        if n > len(traces):
            traces += [t.as_json() for t in strategy.propose(ctx, n - len(traces))]
        prof["search"] += time.monotonic() - t0
        traces = [t for t in dict.fromkeys(traces)
                  if not db.has_candidate(candidate_id(task.workload, tkey, t))][:n]
        if not traces:
            sched.exhaust(i)
            continue
        proto = MeasureInput(task.func_name, str(task.module), baseline, ctx.target,
                             threads=threads, seed=seed)
        if id(task) not in refs:
            refs[id(task)] = _reference(executor, task.name, proto, work_dir, timeout_s, bar, prof)
        best = min((r.latency_ms for r in ctx.history if r.ok), default=float("inf"))
        cutoff = CUTOFF_RATIO * best if best < float("inf") else 0.0
        inputs = [MeasureInput(task.func_name, str(task.module), t, ctx.target, threads=threads,
                               seed=seed, reference=refs[id(task)], cutoff_ms=cutoff) for t in traces]
        names = canonical_names(task.module, task.func_name)
        new = []
        for j, res in executor.measure(inputs, timeout_s):
            rec = _record(task, names, tkey, traces[j], res)
            db.commit(rec)
            ctx.history.append(rec)
            new.append(rec)
            used += 1
            measured += 1
            for k, v in res.phases_s.items():
                prof[k] += v
            best = min((r.latency_ms for r in ctx.history if r.ok), default=float("inf"))
            bar.update(task.name, min(used, trials), best, task.flops / (best * 1e6))
            if rec.error:
                bar.log(f"[{task.name}] candidate {rec.candidate}: {rec.error.splitlines()[0][:200]}")
        sched.update(i, new)
        t0 = time.monotonic()
        strategy.notify(ctx, new)
        prof["search"] += time.monotonic() - t0
    if measured:
        parts = ", ".join(f"{k} {v / measured:.2f} s" for k, v in sorted(prof.items()))
        bar.log(f"{measured} candidates in {time.monotonic() - t_start:.1f} s; per candidate: {parts}")
    return refs


def _remeasure(task: Task, ctx: TuneContext, db: Database, executor: Executor, tkey: str, k: int,
               timeout_s: float, threads: Optional[int], seed: int, reference: Optional[str],
               bar: ProgressBar) -> None:
    """Measure the default and the ``k`` fastest candidates that beat it again, interleaved,
    and commit the results as final records of one re-measurement (see :func:`tune`). The
    default point of the space (:func:`~.space_rules.default_point`: the rules' own decisions,
    the default's code) is no finalist: where it measured faster than the empty trace, the
    machine's speed changed between their runs (a 2-thread OpenMP region whose second vCPU is
    descheduled), and it would take a real candidate's place; the default alone is then the
    final batch, so it cannot win by its search time either."""
    ok = [r for r in ctx.history if r.ok]
    default = min((r for r in ok if r.is_default), key=lambda r: r.latency_ms, default=None)
    if default is None:
        return   # never measured, or failed: the default is kept anyway
    faster = [r for r in ok if not r.is_default and r.latency_ms < default.latency_ms]
    if not faster:
        return
    point = default_point(ctx.space, task.module)
    same = point.trace.as_json() if point is not None else None
    better = sorted((r for r in faster if r.trace != same), key=lambda r: r.latency_ms)
    traces = list(dict.fromkeys([default.trace] + [r.trace for r in better]))[:k + 1]
    _commit_final(task, db, executor, tkey, traces, lambda t: (str(task.module), t), ctx.target,
                  timeout_s, threads, seed, reference)
    best = db.best(task.workload, tkey)
    if best is not None and not best.is_default:
        bar.log(f"[{task.name}] re-measured: {best.latency_ms:.4f} ms against the default's "
                f"{db.default(task.workload, tkey).latency_ms:.4f} ms")


def _commit_final(task: Task, db: Database, executor: Executor, tkey: str, traces: List[str],
                  candidate: Callable[[str], Tuple[str, str]], target, timeout_s: float,
                  threads: Optional[int], seed: int, reference: Optional[str]) -> List[MeasureResult]:
    """Measure ``traces`` against each other (:meth:`Executor.compare`: each built once,
    ``REMEASURE_ROUNDS`` interleaved rounds of ``REMEASURE_REPEATS`` repeats) and commit the
    results as the final records of one re-measurement; returns them in the order of ``traces``."""
    inputs = [MeasureInput(task.func_name, *candidate(t), target, threads=threads, seed=seed,
                           repeat=REMEASURE_REPEATS, reference=reference) for t in traces]
    results = compare(executor, inputs, REMEASURE_ROUNDS, timeout_s)
    batch = f"{time.time():.6f}"
    names = canonical_names(task.module, task.func_name)
    for t, res in zip(traces, results):
        db.commit(_record(task, names, tkey, t, res, final=batch))
    return results


def _tune_algorithms(algorithms: List[AlgorithmTask], db: Database, executor: Executor, tkey: str,
                     trials: int, spent: int, timeout_s: float, threads: Optional[int], seed: int,
                     finalists: int, bar: ProgressBar, work_dir: str) -> int:
    """Measure every candidate of each algorithm task not measured yet (within ``trials``),
    then re-measure each task's finalists against its default; returns the trials used."""
    empty = Trace().as_json()
    for a in algorithms:
        task = a.task
        ctx = TuneContext(task, None, a.target, random.Random(seed),
                          [r for r in db.records(task.workload, tkey) if not r.final])
        by_trace = {a.trace_for(c): c for c in (a.default,) + tuple(c for c in a.candidates if c != a.default)}
        todo = [t for t in by_trace if not db.has_candidate(candidate_id(task.workload, tkey, t))]
        todo = todo[:max(0, trials - spent)]
        proto = MeasureInput(task.func_name, str(task.module), empty, a.target, threads=threads, seed=seed)
        ref = _reference(executor, task.name, proto, work_dir, timeout_s, bar, collections.defaultdict(float)) \
            if todo or finalists else None
        names = canonical_names(task.module, task.func_name)

        def candidate(t: str, a=a, by_trace=by_trace) -> Tuple[str, str]:
            return a.module_for(by_trace[t]), empty

        if not todo:
            continue
        if finalists:
            # a few candidates, far apart: every one is measured against every other at once,
            # interleaved; the same measurement is its search record and its final record
            traces = list(dict.fromkeys([empty] + [r.trace for r in ctx.history if r.ok] + todo))
            results = dict(zip(traces, _commit_final(task, db, executor, tkey, traces, candidate,
                                                     a.target, timeout_s, threads, seed, ref)))
            done = [(t, results[t]) for t in todo]
        else:
            inputs = [MeasureInput(task.func_name, *candidate(t), a.target, threads=threads,
                                   seed=seed, reference=ref) for t in todo]
            done = [(todo[j], res) for j, res in executor.measure(inputs, timeout_s)]
        for t, res in done:
            rec = _record(task, names, tkey, t, res)
            db.commit(rec)
            ctx.history.append(rec)
            spent += 1
            best = min((r.latency_ms for r in ctx.history if r.ok), default=float("inf"))
            bar.update(task.name, min(spent, trials), best, task.flops / (best * 1e6))
            if rec.error:
                bar.log(f"[{task.name} algorithm {by_trace[t]}] {rec.error.splitlines()[0][:200]}")
        best = db.best(task.workload, tkey)
        if finalists and best is not None and not best.is_default:
            bar.log(f"[{task.name}] algorithm {by_trace[best.trace]}: {best.latency_ms:.4f} ms "
                    f"against the default's {db.default(task.workload, tkey).latency_ms:.4f} ms")
    return spent
