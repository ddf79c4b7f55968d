"""Timing shared by the benchmarks: the best of 7 repeats, each of enough calls to last at
least 50 ms (TVM ``time_evaluator``'s ``number``/``repeat``, with ``number`` chosen like
``timeit.Timer.autorange``), and :class:`Rounds`: whole measurements repeated in interleaved rounds,
each row keeping its best round."""

import resource
import statistics
import time


def best_seconds(fn, repeat: int = 7, min_repeat_s: float = 0.05) -> float:
    """Seconds per call of ``fn()``: the minimum over ``repeat`` repeats (after one warm-up call)."""
    return min_median_seconds(fn, repeat, min_repeat_s)[0]


def calls_per_repeat(fn, min_repeat_s: float = 0.05) -> int:
    """After one warm-up call, the number of calls of ``fn()`` (a power of two) that last more
    than ``min_repeat_s`` seconds together."""
    fn()
    number = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        if time.perf_counter() - t0 > min_repeat_s:
            return number
        number *= 2


def min_median_seconds(fn, repeat: int = 7, min_repeat_s: float = 0.05):
    """``(min, median)`` seconds per call of ``fn()`` over ``repeat`` repeats (one warm-up call)."""
    number = calls_per_repeat(fn, min_repeat_s)
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        ts.append((time.perf_counter() - t0) / number)
    return min(ts), statistics.median(ts)


def cpu_seconds() -> float:
    """CPU seconds of this process and its reaped children (e.g. the tuner's worker processes,
    reaped when it returns), user + system (``getrusage``). Threads of the process, such as
    LLVM compiling in the calling thread, are counted."""
    return sum(r.ru_utime + r.ru_stime for r in (resource.getrusage(resource.RUSAGE_SELF),
                                                 resource.getrusage(resource.RUSAGE_CHILDREN)))


class Rounds:
    """Rows of measurements repeated in rounds. The shared hosts have fast and slow phases lasting
    minutes, longer than one measurement: a benchmark measures every (model, implementation, ...)
    once per round, all of them in turn, and :meth:`best` keeps each key's best round (the
    min-of-repeats idea of TVM ``time_evaluator``, one level up), while :meth:`spread` shows how
    far the rounds disagree.

    A row is a dict (one round's measurement of ``key``, any hashable); a failed round is recorded
    with :meth:`fail` and only reported when every round of its key failed.
    """

    def __init__(self):
        self._rows: dict = {}
        self._errors: dict = {}

    def add(self, key, row: dict) -> None:
        """Record one round's ``row`` of ``key``."""
        self._rows.setdefault(key, []).append(row)
        self._errors.setdefault(key, None)

    def fail(self, key, why: str) -> None:
        """Record that one round of ``key`` failed (``why``: the reason printed)."""
        self._rows.setdefault(key, [])
        self._errors[key] = why

    def keys(self) -> list:
        """The keys in the order they were first recorded."""
        return list(self._rows)

    def rows(self, key) -> list:
        """Every recorded round's row of ``key`` (failed rounds left out), in round order."""
        return list(self._rows.get(key, ()))

    def error(self, key):
        """The last failure of ``key`` when no round of it succeeded, else None."""
        return None if self._rows.get(key) else self._errors.get(key)

    def best(self, key, score):
        """The row of ``key`` with the highest ``score(row)`` (a float: e.g. ``-ms`` or tokens/s),
        None when no round succeeded."""
        return max(self._rows.get(key) or [None], key=lambda r: float("-inf") if r is None else score(r))

    def spread(self, key, value):
        """``(min, max)`` of ``value(row)`` over the rounds of ``key``, None when none succeeded."""
        vals = [value(r) for r in self._rows.get(key, ())]
        return (min(vals), max(vals)) if vals else None
