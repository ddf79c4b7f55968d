"""The whole-model check, the tuner's last step: the module compiled with the records the
database chose against its default compile, measured as a whole, so that tuning never leaves a
model slower than its default (a record can win its task alone and lose in the model: other
cache contents, another layout around it, a measurement disturbed by noise).

Both builds run through the executor like any candidate (:meth:`Executor.compare`: each built
once, :data:`MODEL_ROUNDS` interleaved rounds of :data:`MODEL_REPEATS` repeats, outputs checked
against the module's plain loops). The tuned model is kept only if it beats the default by more
than the database's tie tolerance (:data:`~.database.TIE_TOLERANCE`) in most rounds: the median
over rounds of the default's time over the tuned model's, each round's fastest repeats paired (a
slow phase of the machine that hits the tuned build's turn in a minority of the rounds cannot
decide; one that lasts most of the check keeps the default). Otherwise the records
are ranked by the time they claim to save (default minus record latency, times the task's
weight) and the prefixes of half, a quarter, ... of them are measured against the default in
one more comparison; the prefix that beats the default by the most keeps its records, and every
record outside it is rejected (:meth:`Database.reject`: ``mlc.compile(mod, database=db)``
gives those workloads their default schedules). Source: the "ties keep the default" rule of
TVM MetaSchedule's database applied to the whole model; the halving is a one-sided form of
delta debugging (Zeller and Hildebrandt, "Simplifying and Isolating Failure-Inducing Input",
TSE 2002).
"""

from __future__ import annotations

import dataclasses
import statistics
from typing import Callable, List, Optional, Sequence

from ..ir.module import Module
from ..schedule.trace import Trace
from ..target import Target
from .database import TIE_TOLERANCE, Database
from .executor import Executor, compare
from .measure import MeasureInput, MeasureResult
from .record import TuningRecord
from .task import Task

#: Interleaved rounds of the model comparison, and timed repeats per round.
MODEL_ROUNDS = 5
MODEL_REPEATS = 5


@dataclasses.dataclass(frozen=True)
class ModelVerdict:
    """What the whole-model check decided.

    Attributes
    ----------
    default_ms, tuned_ms : float
        The model's latency (median over rounds of each round's fastest repeat, ms) with its
        default schedules and with the records kept (equal to ``default_ms`` when none is kept).
    kept, rejected : tuple of str
        Task names of the records kept and of those rejected.
    error : str or None
        Why the check could not decide (a build or run failed); nothing is rejected then.
    """

    default_ms: float
    tuned_ms: float
    kept: tuple
    rejected: tuple
    error: Optional[str] = None

    def describe(self) -> str:
        """One line for the tuning log."""
        if self.error:
            return f"model check: not decided ({self.error.splitlines()[0][:200]})"
        head = (f"model check: default {self.default_ms:.4f} ms, tuned {self.tuned_ms:.4f} ms "
                f"({self.default_ms / self.tuned_ms:.2f}x): ")
        if not self.rejected:
            return head + f"kept all {len(self.kept)} tuned records"
        if not self.kept:
            return head + f"default kept, {len(self.rejected)} tuned records rejected"
        return (head + f"kept {len(self.kept)} tuned records, rejected {len(self.rejected)} "
                f"({', '.join(self.rejected)})")


def entry_function(mod: Module) -> Optional[str]:
    """The function a model check times: ``main``, else the only public function (None when
    there are several and none is ``main``)."""
    names = mod.function_names(public_only=True)
    return "main" if "main" in names else (names[0] if len(names) == 1 else None)


def _claimed_saving(db: Database, task: Task, rec: TuningRecord, tkey: str) -> float:
    default = db.default(task.workload, tkey)
    base = default.latency_ms if default is not None and default.ok else rec.latency_ms
    return (base - rec.latency_ms) * task.weight


def check_model(mod: Module, func_name: str, tasks: Sequence[Task], db: Database,
                executor: Executor, target: Target, threads: Optional[int], seed: int,
                timeout_s: float, reference: Callable[[MeasureInput], Optional[str]],
                log: Callable[[str], None]) -> Optional[ModelVerdict]:
    """Compare ``mod`` compiled with the records ``db`` chose for ``tasks`` against its default
    compile and reject the records that do not pay (see the module docstring).

    Parameters
    ----------
    mod : Module
        The graph module that was tuned; ``func_name`` is the function timed (random inputs
        of ``seed``, outputs checked against the plain loops' outputs).
    tasks : sequence of Task
        The tuned tasks (algorithm, attention and schedule tasks).
    db : Database
        Where the records are and where rejections are committed.
    executor : Executor
        Measures both builds (the candidates' executor).
    target, threads, seed, timeout_s
        As for the candidates (:class:`~.measure.MeasureInput`).
    reference : callable
        ``reference(inp)``: the path of the reference of ``inp`` 's module (see
        :attr:`MeasureInput.reference`), or None; called only when there is something to check.
    log : callable
        Receives the verdict line.

    Returns
    -------
    ModelVerdict or None
        None when no record replaces a default (nothing to check).
    """
    tkey = target.key()
    chosen = [(t, db.best(t.workload, tkey)) for t in tasks]
    chosen = [(t, r) for t, r in chosen if r is not None and r.ok and not r.is_default]
    if not chosen:
        return None
    chosen.sort(key=lambda tr: -_claimed_saving(db, tr[0], tr[1], tkey))
    proto = MeasureInput(func_name, str(mod), Trace().as_json(), target, threads=threads,
                         seed=seed, repeat=MODEL_REPEATS)
    proto = dataclasses.replace(proto, reference=reference(proto))

    def measure(prefixes: List[int]) -> List[MeasureResult]:
        inputs = [proto] + [dataclasses.replace(proto, records=tuple(r.to_json() for _, r in chosen[:k]))
                            for k in prefixes]
        return compare(executor, inputs, MODEL_ROUNDS, timeout_s)

    names = [t.name for t, _ in chosen]
    prefixes = [len(chosen)]
    results = measure(prefixes)
    verdict = _decide(results, prefixes, names)
    if verdict.error is None and verdict.rejected and len(chosen) > 1:
        halves = []
        k = len(chosen) // 2
        while k >= 1:
            halves.append(k)
            k //= 2
        verdict = _decide(measure(halves), halves, names)
    if verdict.error is None:
        kept = set(verdict.kept)
        for t, _ in chosen:
            if t.name not in kept:
                db.reject(t.workload, tkey, f"the whole model was not faster with it "
                                            f"({verdict.describe()})")
    log(verdict.describe())
    return verdict


def _round_mins(res: MeasureResult) -> List[float]:
    """The fastest repeat of each round (:meth:`Executor.compare` concatenates the rounds)."""
    lat = res.latencies_ms
    return [min(lat[i:i + MODEL_REPEATS]) for i in range(0, len(lat), MODEL_REPEATS)]


def _decide(results: List[MeasureResult], prefixes: List[int], names: List[str]) -> ModelVerdict:
    """The verdict of one comparison: ``results[0]`` the default, ``results[i + 1]`` the model
    with the first ``prefixes[i]`` records of ``names``. A prefix wins when the median over
    rounds of the default's time over its own (each round's fastest repeats, paired by round)
    is above ``1 + TIE_TOLERANCE``; the winner with the largest such speedup is kept, else the
    default."""
    if results[0].error is not None:
        return ModelVerdict(0.0, 0.0, tuple(names), (), f"the default build: {results[0].error}")
    default = _round_mins(results[0])
    default_ms = statistics.median(default)
    wins = []
    for r, k in zip(results[1:], prefixes):
        tuned = _round_mins(r) if r.error is None else []
        if len(tuned) == len(default):
            speedup = statistics.median(d / t for t, d in zip(tuned, default))
            if speedup > 1 + TIE_TOLERANCE:
                wins.append((speedup, k, statistics.median(tuned)))
    if not wins:
        return ModelVerdict(default_ms, default_ms, (), tuple(names))
    _, k, best_ms = max(wins, key=lambda w: (w[0], -w[1]))   # ties: the fewer records
    return ModelVerdict(default_ms, best_ms, tuple(names[:k]), tuple(names[k:]))
