"""The task scheduler: which task gets the next batch of trials.

Simplified from TVM MetaSchedule's ``GradientBased`` task scheduler: after a round-robin
warm-up (every task gets a batch), the next batch goes to the task with the largest expected
gain per trial, ``weight x (0.2 x recent improvement rate + 0.8 x best / trials)`` (ms per
trial): the measured slope of its best latency over its last batches, and the optimistic
forward estimate of a latency that falls like ``1 / trials``. A task whose candidates all failed
keeps priority for a few batches, then yields; an exhausted task (its space has nothing new)
is skipped, and so is a converged one: its best latency has not improved by more than its
noise threshold over its last ``patience`` trials (Ansor's per-task ``early_stopping``), so
its trials go to tasks that still improve. The threshold is ``MIN_IMPROVEMENT`` or, where the
machine is noisier, the median spread between the repeats of one candidate (``(max - min) /
min`` of its timed repeats): a new best that beats the old by less than one candidate's own
repeats differ is not told apart from noise by a minimum over those repeats.
"""

from __future__ import annotations

import math
from typing import List, Optional

from .record import TuningRecord

#: Weight of the measured (backward) improvement rate against the forward estimate (TVM's alpha).
ALPHA = 0.2
#: Batches over which the backward rate is measured (TVM's backward window).
WINDOW = 3
#: Trials a task without any valid candidate keeps first priority for.
MAX_FAILING_TRIALS = 16
#: Default trials without improvement after which a task is converged (early stopping).
PATIENCE = 24
#: An improvement smaller than this fraction of the best latency does not count (noise; the
#: database's tie tolerance); the least noise threshold.
MIN_IMPROVEMENT = 0.02


class TaskState:
    """Trials and best latency (ms) after each batch of one task."""

    def __init__(self, weight: int, history: List[TuningRecord]):
        self.weight = max(weight, 1)
        self.trials = len(history)
        ok = [r.latency_ms for r in history if r.ok]
        self.best = min(ok) if ok else math.inf
        self.curve = [(self.trials, self.best)]  # (trials, best ms) after each batch
        self.exhausted = False
        self.batches = 0
        self.improved_at = self.trials   # trials when the best last improved
        self.spreads: List[float] = []   # (max - min) / min of each candidate's repeats
        self.record_spreads(history)

    def record_spreads(self, records: List[TuningRecord]) -> None:
        """Add the repeat spread of each valid candidate of ``records`` with two repeats or more."""
        self.spreads += [(max(r.latencies_ms) - r.latency_ms) / r.latency_ms for r in records
                         if r.ok and len(r.latencies_ms) > 1 and r.latency_ms > 0]

    def noise(self) -> float:
        """The relative improvement that counts: the median repeat spread of the candidates so
        far, at least :data:`MIN_IMPROVEMENT`."""
        if not self.spreads:
            return MIN_IMPROVEMENT
        return max(MIN_IMPROVEMENT, sorted(self.spreads)[len(self.spreads) // 2])

    def gain(self) -> float:
        """Expected improvement of the weighted latency per trial, ms (inf: untried)."""
        if self.trials == 0:
            return math.inf
        if math.isinf(self.best):
            return math.inf if self.trials < MAX_FAILING_TRIALS else 0.0
        back = 0.0
        if len(self.curve) > WINDOW:
            (t0, b0), (t1, b1) = self.curve[-1 - WINDOW], self.curve[-1]
            if t1 > t0 and not math.isinf(b0):
                back = (b0 - b1) / (t1 - t0)
        return self.weight * (ALPHA * back + (1 - ALPHA) * self.best / self.trials)


class TaskScheduler:
    """Chooses the task of each batch (see the module docstring).

    Parameters
    ----------
    weights : list of int
        Task weights (calls per graph execution).
    histories : list of list of TuningRecord
        Each task's records so far (a resumed run starts from them).
    patience : int or None
        Trials without improvement after which a task is converged and skipped (None: never).
    """

    def __init__(self, weights: List[int], histories: List[List[TuningRecord]],
                 patience: Optional[int] = PATIENCE):
        self.tasks = [TaskState(w, h) for w, h in zip(weights, histories)]
        self.patience = patience

    def next_task(self) -> Optional[int]:
        """Index of the task for the next batch; None when every task is exhausted or converged."""
        live = [i for i, t in enumerate(self.tasks) if not t.exhausted and not self.converged(i)]
        if not live:
            return None
        warm = [i for i in live if self.tasks[i].batches == 0]
        if warm:
            return warm[0]
        return max(live, key=lambda i: (self.tasks[i].gain(), -self.tasks[i].trials))

    def update(self, i: int, records: List[TuningRecord]) -> None:
        """Account the records of task ``i`` 's last batch."""
        t = self.tasks[i]
        t.batches += 1
        t.trials += len(records)
        t.record_spreads(records)
        best = min((r.latency_ms for r in records if r.ok), default=math.inf)
        if best < t.best * (1 - t.noise()) or (math.isinf(t.best) and best < math.inf):
            t.improved_at = t.trials
        t.best = min(t.best, best)
        t.curve.append((t.trials, t.best))

    def converged(self, i: int) -> bool:
        """Whether task ``i`` has gone ``patience`` trials without improving its best by more
        than its :meth:`TaskState.noise` (a task without a valid candidate never converges; it
        yields by its gain)."""
        t = self.tasks[i]
        return self.patience is not None and not math.isinf(t.best) and \
            t.trials - t.improved_at >= self.patience

    def exhaust(self, i: int) -> None:
        """Mark task ``i`` as having no new candidates."""
        self.tasks[i].exhausted = True
