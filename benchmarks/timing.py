"""Timing shared by the benchmarks: the best of 7 repeats, each of enough calls to last at
least 50 ms (TVM ``time_evaluator``'s ``number``/``repeat``, with ``number`` chosen like
``timeit.Timer.autorange``)."""

import resource
import statistics
import time


def best_seconds(fn, repeat: int = 7, min_repeat_s: float = 0.05) -> float:
    """Seconds per call of ``fn()``: the minimum over ``repeat`` repeats (after one warm-up call)."""
    return min_median_seconds(fn, repeat, min_repeat_s)[0]


def min_median_seconds(fn, repeat: int = 7, min_repeat_s: float = 0.05):
    """``(min, median)`` seconds per call of ``fn()`` over ``repeat`` repeats (one warm-up call)."""
    fn()
    number = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        if time.perf_counter() - t0 > min_repeat_s:
            break
        number *= 2
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
