"""Executors: where candidates are measured. :class:`LocalExecutor` (default) keeps a pool of
worker processes on this machine; :class:`RayExecutor` sends each candidate to a Ray cluster
(extra ``mlc-mlir[ray]``), where it is measured in a fresh worker process all the same.

``executor.measure(inputs, timeout_s)`` yields ``(index, MeasureResult)`` as candidates finish,
so the tuner commits each record at once. Source: TVM MetaSchedule ``Builder``/``Runner`` with
``PopenPoolExecutor``, and its RPC runner for remote machines.
"""

from __future__ import annotations

import abc
import concurrent.futures
import os
import queue
from typing import Iterator, List, Optional, Sequence, Tuple

from ..errors import TuningError
from .measure import (MeasureInput, MeasureResult, RunGate, WorkerProcess, build_on,
                      make_reference, measure_on, measure_one, reference_on, run_on)


def _cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


class Executor(abc.ABC):
    """Measures batches of candidates (the builder/runner pair of TVM MetaSchedule)."""

    #: How many candidates it measures at once (the tuner sizes its batches by it).
    max_workers: int = 1
    #: Whether its workers read this machine's files (a reference written here reaches them).
    shares_files: bool = True

    def prepare_reference(self, inp: MeasureInput, path: str, timeout_s: float):
        """Compute the reference of ``inp`` 's task (random inputs and the unscheduled
        function's outputs) and save it to ``path`` for :attr:`MeasureInput.reference`; the
        default runs it in a fresh worker process.

        Returns
        -------
        str or None
            The error, None on success.
        """
        return make_reference(inp, path, timeout_s)

    def compare(self, inputs: Sequence[MeasureInput], rounds: int,
                timeout_s: float) -> List[MeasureResult]:
        """Measure ``inputs`` against each other: ``rounds`` rounds, each running every input
        once in a rotated order (round ``r`` starts at input ``r``), so that a change of the
        machine's load reaches them all alike. Returns one result per input, its latencies
        those of every round (empty, with the first error, if any round failed). The default
        builds each input again in each round (:meth:`measure`); :class:`LocalExecutor` builds
        each once and runs the builds in turn. Source: TVM MetaSchedule's ``RunnerInput``
        repeats (``number``, ``repeat``), measured here across candidates, interleaved."""
        n = len(inputs)
        latencies: List[List[float]] = [[] for _ in range(n)]
        errors: List[Optional[str]] = [None] * n
        for rnd in range(rounds):
            order = [(rnd + j) % n for j in range(n)]
            for j, res in self.measure([inputs[i] for i in order], timeout_s):
                i = order[j]
                errors[i] = errors[i] or res.error
                latencies[i].extend(res.latencies_ms)
        return [MeasureResult((), e) if e else MeasureResult(tuple(lat)) for lat, e in zip(latencies, errors)]

    @abc.abstractmethod
    def measure(self, inputs: Sequence[MeasureInput],
                timeout_s: float) -> Iterator[Tuple[int, MeasureResult]]:
        """Measure ``inputs``; yields ``(index into inputs, result)`` in completion order, one
        per input. A failed candidate is a result with ``error``, never an exception.

        Raises
        ------
        TuningError
            If the executor itself cannot work (no worker process starts, the cluster is gone).
        """

    def close(self) -> None:
        """Release workers (idempotent)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def compare(executor, inputs: Sequence[MeasureInput], rounds: int,
            timeout_s: float) -> List[MeasureResult]:
    """``executor.compare(inputs, rounds, timeout_s)``; an executor that only measures (any
    object with :meth:`Executor.measure`, not an Executor subclass) compares by measuring
    each round (:meth:`Executor.compare`)."""
    method = getattr(executor, "compare", None)
    return method(inputs, rounds, timeout_s) if method else Executor.compare(executor, inputs, rounds, timeout_s)


class LocalExecutor(Executor):
    """A pool of ``max_workers`` worker processes on this machine.

    Builds run in parallel; runs (numerics check and timing) never overlap, and a run of a
    candidate that uses every core stops the other workers, building or idle
    (:class:`~.measure.RunGate`). Workers
    start on first use and are restarted after a crash or timeout.

    Parameters
    ----------
    max_workers : int, optional
        Worker processes (default: the CPU cores this process may use).

    Raises
    ------
    TuningError
        If ``max_workers`` is not a positive int.
    """

    def __init__(self, max_workers: Optional[int] = None):
        if max_workers is None:
            max_workers = _cpus()
        if type(max_workers) is not int or max_workers < 1:
            raise TuningError(f"LocalExecutor: max_workers={max_workers!r}; expected an int >= 1")
        self.max_workers = max_workers
        self._workers: List[WorkerProcess] = []
        self._free: "queue.Queue[WorkerProcess]" = queue.Queue()
        self._gate = RunGate()
        self._pool: Optional[concurrent.futures.ThreadPoolExecutor] = None

    def _start(self) -> None:
        if self._pool is not None:
            return
        self._workers = [WorkerProcess() for _ in range(self.max_workers)]
        self._gate = RunGate(self._workers)
        self._pool = concurrent.futures.ThreadPoolExecutor(self.max_workers, "mlc-tune")
        for f in [self._pool.submit(w.ensure_started) for w in self._workers]:  # start in parallel
            f.result()
        for w in self._workers:
            self._free.put(w)

    def _one(self, inp: MeasureInput, timeout_s: float) -> MeasureResult:
        w = self._free.get()
        exclusive = (inp.threads or inp.target.cores) >= _cpus()
        try:
            return measure_on(w, inp, timeout_s, self._gate, exclusive)
        finally:
            self._free.put(w)

    def prepare_reference(self, inp, path, timeout_s):
        self._start()
        w = self._free.get()
        try:
            return reference_on(w, inp, path, timeout_s)
        finally:
            self._free.put(w)

    def measure(self, inputs, timeout_s):
        self._start()
        futs = {self._pool.submit(self._one, inp, timeout_s): i for i, inp in enumerate(inputs)}
        try:
            for f in concurrent.futures.as_completed(futs):
                yield futs[f], f.result()
        finally:
            for f in futs:
                f.cancel()

    def compare(self, inputs, rounds, timeout_s):
        self._start()
        n = len(inputs)
        workers = [self._free.get() for _ in range(max(1, min(n, self.max_workers)))]
        m = len(workers)
        errors: List[Optional[str]] = [None] * n
        built = [0] * n   # the generation of the worker process that holds each build
        try:
            def build(i: int) -> None:   # input i lives in worker i % m, slot i // m
                w = workers[i % m]
                errors[i] = build_on(w, inputs[i], i // m, timeout_s, self._gate)[0]
                built[i] = w.generation

            list(self._pool.map(lambda k: [build(i) for i in range(k, n, m)], range(m)))
            latencies: List[List[float]] = [[] for _ in range(n)]
            for rnd in range(rounds):
                for i in [(rnd + j) % n for j in range(n)]:
                    if errors[i] is None and built[i] != workers[i % m].generation:
                        build(i)   # its worker was restarted (another input crashed or hung)
                    if errors[i] is None:
                        exclusive = (inputs[i].threads or inputs[i].target.cores) >= _cpus()
                        res = run_on(workers[i % m], i // m, timeout_s, self._gate, exclusive)
                        errors[i] = res.error
                        latencies[i].extend(res.latencies_ms)
        finally:
            for w in workers:
                self._free.put(w)
        return [MeasureResult((), e) if e else MeasureResult(tuple(lat)) for lat, e in zip(latencies, errors)]

    def close(self) -> None:
        for w in self._workers:
            w.close()
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
        self._workers, self._pool = [], None
        self._free = queue.Queue()


class RayExecutor(Executor):
    """Measure candidates as Ray tasks (extra ``mlc-mlir[ray]``); each task measures its
    candidate in a fresh worker process on the Ray node (:func:`measure_one`).

    Parameters
    ----------
    address : str, optional
        Passed to ``ray.init`` when Ray is not initialized yet (None: start or join a local
        cluster); an initialized Ray (e.g. ``ray.init(num_cpus=2)``) is used as it is.
    max_workers : int, optional
        Candidates in flight (default: the cluster's CPUs).

    Raises
    ------
    TuningError
        If Ray is not installed.
    """

    def __init__(self, address: Optional[str] = None, max_workers: Optional[int] = None):
        try:
            import ray  # the optional extra mlc-mlir[ray]

            self._ray = ray
        except ImportError:
            raise TuningError("RayExecutor: ray is not installed; pip install 'mlc-mlir[ray]'") from None
        if not self._ray.is_initialized():
            self._ray.init(address=address)
        self.max_workers = max_workers or max(1, int(self._ray.cluster_resources().get("CPU", 1)))
        self._remote = self._ray.remote(num_cpus=1)(measure_one)

    #: Ray workers may run on other machines: each measures with a reference of its own.
    shares_files = False

    def measure(self, inputs, timeout_s):
        ray = self._ray
        pending = {self._remote.remote(inp, timeout_s): i for i, inp in enumerate(inputs)}
        try:
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                for ref in done:
                    i = pending.pop(ref)
                    try:
                        yield i, ray.get(ref)
                    except ray.exceptions.RayError as e:
                        yield i, MeasureResult((), f"crash: the Ray task failed: {e}")
        finally:
            for ref in pending:
                ray.cancel(ref, force=True)
