"""``WaitPolicy``: whether the OpenMP threads of a multi-threaded decode step spin or sleep while
they wait, chosen by timing the step itself and re-chosen as the machine's load changes.

A decode step runs one OpenMP region per GEMV and attention (61 for GPT-2 124M), each ending in
a barrier. libomp's threads spin at a barrier and between regions for its blocktime (200 ms)
before they sleep: on cores the process has to itself that saves a futex wake-up per region;
when other processes want the same cores, a spinning thread burns the time slice its partner
needs to reach the barrier, and each of the step's barriers waits for a thread the OS has
descheduled. Measured on a 2-core AMD EPYC (znver5) with a load average of 10-17, GPT-2 124M
decode on 2 threads, one process, rounds interleaved: blocktime 0 (sleep at once) 13-64 tokens/s
against 1-18 with the default, while 50 us and 500 us were no better than the default
(``benchmarks/results/llm_cpu_2026-11-26_znver5_decode-2t.txt``). Which one wins depends on the
load at the time, not on the target, so it is measured: the first ``2 * probe`` steps of each
period of ``period`` steps alternate the two blocktimes, and the rest of the period uses the
one whose median step time was lower.

The blocktime is the calling thread's libomp setting (``kmp_set_blocktime``; the teams it forks
copy it); it is restored after each step, so other code on that thread keeps its own. A user
who set ``KMP_BLOCKTIME`` or ``OMP_WAIT_POLICY`` keeps that setting (no probing), and so does a
step compiled for one thread (no team to wait for).

Source: the OpenMP ``OMP_WAIT_POLICY`` (active / passive) and libomp's ``KMP_BLOCKTIME``;
libgomp's ``GOMP_SPINCOUNT`` lowered when threads outnumber CPUs; ONNX Runtime's
``session.intra_op.allow_spinning`` option for oversubscribed hosts.
"""

from __future__ import annotations

import ctypes
import os
import statistics
import time
from typing import Callable, Dict, List, Optional

from ..pipeline.libraries import libomp_path

#: Environment variables that set libomp's wait policy; when one is set it is kept.
USER_SETTINGS = ("KMP_BLOCKTIME", "OMP_WAIT_POLICY", "KMP_LIBRARY")


class WaitPolicy:
    """Runs a step under the libomp blocktime that its recent timings favour (see the module
    docstring).

    Parameters
    ----------
    threads : int
        The step's OpenMP threads; 1 disables the policy (the step runs as it is).
    probe : int
        Steps timed per candidate at the start of each period.
    period : int
        Steps between two probes (the load of a shared machine changes over minutes).

    Attributes
    ----------
    chosen : int or None
        The blocktime in use after the last probe (libomp's unit, ms by default), None while
        probing or when disabled.
    """

    def __init__(self, threads: int, probe: int = 4, period: int = 256):
        self.probe, self.period = probe, period
        self._omp = None
        if threads > 1 and not any(v in os.environ for v in USER_SETTINGS):
            self._omp = ctypes.CDLL(libomp_path())
        self.candidates: List[int] = [self._omp.kmp_get_blocktime(), 0] if self._omp else []
        self._samples: Dict[int, List[float]] = {c: [] for c in self.candidates}
        self.chosen: Optional[int] = None
        self._calls = 0

    def run(self, step: Callable, *args):
        """``step(*args)`` under the current blocktime; returns its result."""
        if self._omp is None:
            return step(*args)
        phase = self._calls % self.period
        self._calls += 1
        probing = phase < 2 * self.probe
        bt = self.candidates[phase % 2] if probing else self.chosen
        before = self._omp.kmp_get_blocktime()
        self._omp.kmp_set_blocktime(bt)
        try:
            t = time.perf_counter()
            out = step(*args)
            dt = time.perf_counter() - t
        finally:
            self._omp.kmp_set_blocktime(before)
        if probing:
            if phase == 0:
                self.chosen = None
                self._samples = {c: [] for c in self.candidates}
            self._samples[bt].append(dt)
            if phase == 2 * self.probe - 1:
                self.chosen = min(self.candidates, key=lambda c: statistics.median(self._samples[c]))
        return out
