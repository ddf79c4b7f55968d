"""Search strategies and their context: what to measure next for a task.

A *space* is a stochastic schedule function ``space(sch) -> None`` that applies primitives,
sampling ones included, to a fresh ``Schedule(task.module, seed=s, defaults=False)`` (the seed chapter's
``stochastic_schedule_mm``; TVM MetaSchedule ``ScheduleFn``). A :class:`SearchStrategy` proposes
traces of that space; the tuner measures them and notifies it of the records.
:class:`RandomSearch` draws fresh samples, deduplicated against everything measured.
Source: TVM MetaSchedule ``SearchStrategy`` (``generate_measure_candidates``,
``notify_runner_results``), ``TuneContext``, ``ReplayTrace``.
"""

from __future__ import annotations

import abc
import dataclasses
import random
from typing import Callable, List

from ..errors import ScheduleError, TuningError
from ..schedule.schedule import Schedule
from ..schedule.trace import Trace
from ..target import Target
from .record import TuningRecord
from .task import Task

#: A stochastic schedule function: applies primitives (sampling ones too) to a fresh Schedule.
Space = Callable[[Schedule], None]


@dataclasses.dataclass
class TuneContext:
    """What a strategy knows about one task (TVM MetaSchedule ``TuneContext``).

    Attributes
    ----------
    task : Task
    space : callable
        ``space(sch) -> None`` on ``Schedule(task.module, seed=s, defaults=False)``.
    target : Target
    rng : random.Random
        The strategy's random source (seeded by the tuner: runs are reproducible).
    history : list of TuningRecord
        This task's records on this target, errors included, in commit order (the tuner appends).
    """

    task: Task
    space: Space
    target: Target
    rng: random.Random
    history: List[TuningRecord] = dataclasses.field(default_factory=list)

    def sample(self, seed: int) -> Trace:
        """One sample of the space: the trace of ``space(Schedule(task.module, seed=seed,
        defaults=False))`` (schedule rules draw their decisions rather than take their defaults).

        Raises
        ------
        ScheduleError
            If the space does not apply to this sample (the space's own error).
        TuningError
            If ``space`` is not callable.
        """
        if not callable(self.space):
            raise TuningError(f"tune: space is {type(self.space).__name__}; expected a callable "
                              "space(sch) -> None")
        sch = Schedule(self.task.module, seed=seed, defaults=False)
        self.space(sch)
        return sch.trace

    def measured(self) -> set:
        """Trace JSON of every candidate in :attr:`history` (for deduplication)."""
        return {r.trace for r in self.history}


class SearchStrategy(abc.ABC):
    """Proposes candidates for a task, learns from their records (TVM ``SearchStrategy``)."""

    @abc.abstractmethod
    def propose(self, ctx: TuneContext, n: int) -> List[Trace]:
        """Up to ``n`` traces of ``ctx.space`` not measured yet (fewer, or none, when the space
        is exhausted).

        Raises
        ------
        TuningError
            If no sample of the space applies at all (the message quotes the space's error).
        """

    def notify(self, ctx: TuneContext, records: List[TuningRecord]) -> None:
        """Called with the records of the last proposals once they are committed (already in
        ``ctx.history``); the default does nothing."""


class RandomSearch(SearchStrategy):
    """Fresh samples of the space, deduplicated by trace (instructions and decisions) against
    the task's history and each other (TVM ``ReplayTrace``).

    Parameters
    ----------
    max_attempts_per_candidate : int
        Samples drawn per wanted candidate before giving up on finding new ones.
    """

    def __init__(self, max_attempts_per_candidate: int = 16):
        self.max_attempts_per_candidate = max_attempts_per_candidate

    def propose(self, ctx: TuneContext, n: int) -> List[Trace]:
        seen = ctx.measured()
        out: List[Trace] = []
        failures: List[str] = []
        for _ in range(max(n, 1) * self.max_attempts_per_candidate):
            if len(out) >= n:
                break
            try:
                trace = ctx.sample(ctx.rng.randrange(2**31))
            except ScheduleError as e:
                failures.append(str(e))
                continue
            key = trace.as_json()
            if key not in seen:
                seen.add(key)
                out.append(trace)
        if not out and failures and not ctx.history:
            raise TuningError(f"RandomSearch: no sample of the space applies to task "
                              f"'{ctx.task.name}'; the space failed with: {failures[0]}")
        return out
