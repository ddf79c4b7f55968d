"""Builder/runner: measure candidates in worker processes (``python -m mlc_mlir.tune.worker``).

A :class:`MeasureInput` (task module text, trace JSON, target, compile options, seed) goes to a
worker over a pipe in two phases: ``build`` (replay the trace, compile; builds of several workers
overlap) and ``run`` (check numerics against the reference, time it; a :class:`RunGate` keeps
runs from overlapping each other, and stops the other workers, building or idle, during a run
that uses every core, so nothing of the tuner disturbs its timing). Each phase has a timeout. The reference (outputs of the unscheduled function) is computed once per task by
:func:`reference_on`, outside any candidate's timeout, and loaded by every candidate.
A worker that crashes (segfault, abort), hangs past the timeout or fails to compile yields a
:class:`MeasureResult` with an ``error``, never an exception in the tuner; a dead or killed
worker is restarted for the next candidate. Source: TVM MetaSchedule ``LocalBuilder`` /
``LocalRunner`` (``BuilderInput``, ``RunnerInput``, ``RunnerResult.error_msg``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..errors import TuningError
from ..pipeline.options import CompileOptions
from ..target import Target

#: Seconds a fresh worker may take to import mlc_mlir and say it is ready.
STARTUP_TIMEOUT_S = 120.0
#: Characters of a dead worker's stderr quoted in the error message.
STDERR_TAIL = 1500


@dataclasses.dataclass(frozen=True)
class MeasureInput:
    """One candidate to build and run (TVM ``BuilderInput`` + ``RunnerInput``).

    Attributes
    ----------
    task_name : str
        The task's function name (``func_name`` in ``module``).
    module : str
        MLIR text of the task module (the function alone, public).
    trace : str
        ``Trace.as_json()`` of the candidate; an empty trace measures the compiler's default
        schedule of the function.
    target : Target
    threads : int or None
        ``CompileOptions.threads``.
    opt_level : int
        ``CompileOptions.opt_level`` (its default: candidates are measured as ``compile`` builds).
    seed : int
        Seed of the random inputs.
    number : int
        Calls per timed repeat; 0 picks enough calls for about 1 ms per repeat.
    repeat : int
        Timed repeats; the record keeps each repeat's mean latency (ms).
    rtol, atol : float
        Tolerance of the comparison with the unscheduled function (``numpy.allclose``).
    reference : str or None
        Path of the task's reference (``.npz`` of inputs and expected outputs, written once per
        task by :func:`reference_on`); None: the worker computes it (once per task and process).
    cutoff_ms : float
        When > 0: a candidate whose checked call takes longer (ms) is recorded with that call's
        time alone, without further timed calls (it is clearly slower than the best so far).
    records : tuple of str
        ``TuningRecord.to_json()`` lines the module is compiled with
        (:class:`~mlc_mlir.tune.database.RecordSet`; a whole model with some of a database's
        choices, :mod:`~mlc_mlir.tune.model_check`); empty: none.
    """

    task_name: str
    module: str
    trace: str
    target: Target
    threads: Optional[int] = None
    opt_level: int = CompileOptions.opt_level
    seed: int = 0
    number: int = 0
    repeat: int = 3
    rtol: float = 1e-3
    atol: float = 1e-3
    reference: Optional[str] = None
    cutoff_ms: float = 0.0
    records: Tuple[str, ...] = ()

    def to_dict(self) -> Dict[str, Any]:
        """JSON-able form (the worker's request payload)."""
        d = dataclasses.asdict(self)
        d["target"] = dataclasses.asdict(self.target)
        return d

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "MeasureInput":
        """Inverse of :meth:`to_dict`."""
        t = dict(d["target"])
        t["features"] = tuple(t["features"])
        return cls(**{**d, "target": Target(**t), "records": tuple(d.get("records", ()))})


@dataclasses.dataclass(frozen=True)
class MeasureResult:
    """The outcome of one candidate (TVM ``RunnerResult``).

    Attributes
    ----------
    latencies_ms : tuple of float
        Mean latency of one call in each timed repeat, ms; empty on error.
    error : str or None
        ``schedule error: ...``, ``compile error: ...``, ``crash: ...`` (the worker died, with the
        signal and its stderr), ``timeout: ...``, ``wrong result: ...``; None on success.
    elapsed_s : float
        Wall time of build and run, s.
    phases_s : dict of str to float
        Seconds per phase as the worker measured them (``reference`` load, ``replay``,
        ``compile``, ``check``, ``timing``) and ``wait`` (for the run turn); for profiling.
    """

    latencies_ms: Tuple[float, ...] = ()
    error: Optional[str] = None
    elapsed_s: float = 0.0
    phases_s: Dict[str, float] = dataclasses.field(default_factory=dict)


class WorkerFailed(Exception):
    """A worker died or timed out (internal: becomes a MeasureResult error)."""


def _signal_name(returncode: int) -> str:
    if returncode < 0:
        with contextlib.suppress(ValueError):
            return f"signal {signal.Signals(-returncode).name}"
    return f"exit code {returncode}"


class WorkerProcess:
    """One worker process and the pipes to it; restarted on demand after a crash or timeout.

    The worker runs in its own session (Ctrl-C at the terminal reaches the tuner, not the
    workers) and dies with its parent (``PR_SET_PDEATHSIG``). Its stderr goes to a temporary
    file, quoted in crash messages.
    """

    def __init__(self):
        self._proc: Optional[subprocess.Popen] = None
        self._buf = b""
        self._log = tempfile.TemporaryFile()
        self._closed = False
        self._paused_s = 0.0                # seconds spent stopped by pause(), in all
        self._paused_since: Optional[float] = None
        #: Processes killed so far: builds kept in the process (:func:`build_on`) are gone
        #: once it changes.
        self.generation = 0

    def _start(self) -> None:
        self._log.seek(0)
        self._log.truncate()
        self._buf = b""
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "mlc_mlir.tune.worker"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=self._log, start_new_session=True)
        ready = self._read(STARTUP_TIMEOUT_S, "startup")
        if ready.get("ready") is not True:
            raise WorkerFailed(f"crash: the worker did not start: {ready}")

    def ensure_started(self) -> None:
        """Start the worker if it is not running (blocks until it is ready).

        Raises
        ------
        TuningError
            If the worker cannot start (e.g. mlc_mlir does not import in a child process).
        """
        if self._closed:
            raise TuningError("WorkerProcess: used after close()")
        if self._proc is None or self._proc.poll() is not None:
            try:
                self._start()
            except WorkerFailed as e:
                self.kill()
                raise TuningError(f"measure: cannot start a worker process: {e}") from None

    def _stderr_tail(self) -> str:
        self._log.flush()
        self._log.seek(0)
        text = self._log.read().decode(errors="replace").strip()
        return text[-STDERR_TAIL:]

    def _stopped_s(self) -> float:
        """Seconds this worker has spent stopped by :meth:`pause` (the current stop included)."""
        since = self._paused_since
        return self._paused_s + (time.monotonic() - since if since is not None else 0.0)

    def _read(self, timeout: float, phase: str) -> Dict[str, Any]:
        """The next reply line; ``timeout`` s of the worker's own time: a stop by :meth:`pause`
        moves the deadline by its length."""
        deadline = time.monotonic() + timeout - self._stopped_s()
        proc = self._proc
        if proc is None:
            raise WorkerFailed(f"crash: the worker was closed during {phase}")
        fd = proc.stdout.fileno()
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while b"\n" not in self._buf:
                left = deadline + self._stopped_s() - time.monotonic()
                if left > 0 and not sel.select(left):
                    continue        # recheck: a pause may have moved the deadline
                if left <= 0:
                    self.kill()
                    raise WorkerFailed(f"timeout: no result within {timeout:g} s during {phase} "
                                       "(worker killed)")
                try:
                    chunk = os.read(fd, 1 << 16)
                except OSError:  # closed under us by kill() from another thread
                    chunk = b""
                if not chunk:
                    code = proc.wait()
                    tail = self._stderr_tail()
                    self.kill()
                    raise WorkerFailed(f"crash: the worker died with {_signal_name(code)} during "
                                       f"{phase}" + (f"; stderr:\n{tail}" if tail else ""))
                self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return json.loads(line)

    def request(self, msg: Dict[str, Any], timeout: float) -> Dict[str, Any]:
        """Send ``msg``, return the reply.

        Raises
        ------
        WorkerFailed
            If the worker dies or does not answer within ``timeout`` s (it is killed).
        """
        self.ensure_started()
        self._log.seek(0)
        self._log.truncate()
        try:
            self._proc.stdin.write((json.dumps(msg) + "\n").encode())
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # it died: the read below reports how
        return self._read(timeout, msg["op"])

    def _signal(self, sig: int) -> None:
        proc = self._proc
        if proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, sig)

    def pause(self) -> None:
        """Stop the worker's processes (``SIGSTOP``) until :meth:`resume`; the time stopped does
        not count toward a request's timeout."""
        if self._paused_since is None:
            self._paused_since = time.monotonic()
        self._signal(signal.SIGSTOP)

    def resume(self) -> None:
        """Continue the worker's processes after :meth:`pause`."""
        self._signal(signal.SIGCONT)
        since, self._paused_since = self._paused_since, None
        if since is not None:
            self._paused_s += time.monotonic() - since

    def kill(self) -> None:
        """Kill the worker (its whole process group) and reap it."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        self.generation += 1
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        for f in (proc.stdin, proc.stdout):
            with contextlib.suppress(OSError):
                f.close()

    def close(self) -> None:
        """Kill the worker; the object cannot be used afterwards."""
        self._closed = True
        self.kill()
        self._log.close()


class RunGate:
    """Orders builds and runs of the workers of one executor: runs never overlap each other;
    an *exclusive* run (a candidate that uses every core) holds new builds back and stops every
    other worker process of the gate (``SIGSTOP``, ``SIGCONT`` after the run): those that are
    building, and the idle ones too, whose OpenMP threads keep spinning on the cores after their
    own run (LLVM's libomp waits ``KMP_BLOCKTIME``, 200 ms, before it sleeps: longer than a
    whole run of most candidates). A build of no known worker is waited for instead. So nothing
    else of the tuner competes with the timing, while the builds of the other workers need not
    finish first (a run takes milliseconds, a build about a second). The search itself never
    overlaps a measurement: the tuner proposes a batch, measures it, then updates the search.

    Parameters
    ----------
    workers : sequence of WorkerProcess, optional
        The executor's workers: an exclusive run stops all of them but its own.
    """

    def __init__(self, workers: Sequence["WorkerProcess"] = ()):
        self._workers = list(workers)
        self._cond = threading.Condition()
        self._builds = 0                    # builds of no known worker (cannot be paused)
        self._building: List["WorkerProcess"] = []
        self._running = False
        self._exclusive_waiting = 0
        self._exclusive = False

    @contextlib.contextmanager
    def build(self, worker: Optional["WorkerProcess"] = None):
        """Context of a build on ``worker`` (several at once; an exclusive run pauses it)."""
        with self._cond:
            self._cond.wait_for(lambda: not self._exclusive and not self._exclusive_waiting)
            if worker is None:
                self._builds += 1
            else:
                self._building.append(worker)
        try:
            yield
        finally:
            with self._cond:
                if worker is None:
                    self._builds -= 1
                else:
                    self._building.remove(worker)
                self._cond.notify_all()

    @contextlib.contextmanager
    def run(self, exclusive: bool, worker: Optional["WorkerProcess"] = None):
        """Context of a run on ``worker`` (one at a time; ``exclusive``: the other workers and
        the builds are stopped)."""
        with self._cond:
            self._exclusive_waiting += exclusive
            self._cond.wait_for(lambda: not self._running and (not exclusive or self._builds == 0))
            self._exclusive_waiting -= exclusive
            self._running, self._exclusive = True, exclusive
            others = dict.fromkeys(self._building + self._workers)   # each once, in order
            paused = [w for w in others if w is not worker] if exclusive else []
            for w in paused:
                w.pause()
        try:
            yield
        finally:
            with self._cond:
                for w in paused:
                    w.resume()
                self._running = self._exclusive = False
                self._cond.notify_all()


def measure_on(worker: WorkerProcess, inp: MeasureInput, timeout_s: float,
               gate: Optional[RunGate] = None, exclusive: bool = False) -> MeasureResult:
    """Build then run ``inp`` on ``worker`` (ordered by ``gate``; ``exclusive``: the run waits
    for other builds, see :class:`RunGate`).

    Returns
    -------
    MeasureResult
        With the error of a failed phase; a crash or timeout kills the worker (the next
        request restarts it).

    Raises
    ------
    TuningError
        Only if a worker cannot be started at all.
    """
    t0 = time.monotonic()
    gate = gate or RunGate()
    phases: Dict[str, float] = {}
    try:
        with gate.build(worker):
            reply = worker.request({"op": "build", "input": inp.to_dict()}, timeout_s)
        phases.update(reply.get("phases_s") or {})
        if reply.get("error") is None:
            tw = time.monotonic()
            with gate.run(exclusive, worker):
                phases["wait"] = time.monotonic() - tw
                reply = worker.request({"op": "run"}, timeout_s)
            phases.update(reply.get("phases_s") or {})
    except WorkerFailed as e:
        return MeasureResult((), str(e), time.monotonic() - t0, phases)
    if reply.get("error") is not None:
        return MeasureResult((), str(reply["error"]), time.monotonic() - t0, phases)
    return MeasureResult(tuple(float(x) for x in reply["latencies_ms"]), None,
                         time.monotonic() - t0, phases)


def build_on(worker: WorkerProcess, inp: MeasureInput, slot: int, timeout_s: float,
             gate: RunGate) -> Tuple[Optional[str], Dict[str, float]]:
    """Build ``inp`` into ``slot`` of ``worker``, keeping its other slots' builds (for
    :func:`run_on`); returns ``(error or None, phases_s)``."""
    try:
        with gate.build(worker):
            reply = worker.request({"op": "build", "input": inp.to_dict(), "slot": slot,
                                    "keep": True}, timeout_s)
    except WorkerFailed as e:
        return str(e), {}
    return reply.get("error"), dict(reply.get("phases_s") or {})


def run_on(worker: WorkerProcess, slot: int, timeout_s: float, gate: RunGate,
           exclusive: bool) -> MeasureResult:
    """Run (check and time) the build in ``slot`` of ``worker`` again, keeping it (see
    :func:`build_on`; ``exclusive`` as for :func:`measure_on`)."""
    t0 = time.monotonic()
    try:
        with gate.run(exclusive, worker):
            reply = worker.request({"op": "run", "slot": slot, "keep": True}, timeout_s)
    except WorkerFailed as e:
        return MeasureResult((), str(e), time.monotonic() - t0)
    if reply.get("error") is not None:
        return MeasureResult((), str(reply["error"]), time.monotonic() - t0)
    return MeasureResult(tuple(float(x) for x in reply["latencies_ms"]), None,
                         time.monotonic() - t0, dict(reply.get("phases_s") or {}))


def reference_on(worker: WorkerProcess, inp: MeasureInput, path: str, timeout_s: float) -> Optional[str]:
    """Compute the reference of ``inp`` 's task on ``worker`` and save it to ``path`` (see
    :mod:`mlc_mlir.tune.worker`), once per task: candidates then load it
    (:attr:`MeasureInput.reference`) instead of each worker running the unscheduled function.

    Returns
    -------
    str or None
        The error (``reference error: ...``, ``timeout: ...``, ``crash: ...``), None on success.

    Raises
    ------
    TuningError
        Only if the worker cannot be started at all.
    """
    try:
        reply = worker.request({"op": "reference", "input": inp.to_dict(), "path": path}, timeout_s)
    except WorkerFailed as e:
        return str(e)
    return None if reply.get("error") is None else str(reply["error"])


def measure_one(inp: MeasureInput, timeout_s: float) -> MeasureResult:
    """Measure ``inp`` in a fresh worker process that is killed afterwards (used by executors
    whose tasks run elsewhere, e.g. :class:`~mlc_mlir.tune.executor.RayExecutor`)."""
    worker = WorkerProcess()
    try:
        return measure_on(worker, inp, timeout_s)
    finally:
        worker.close()


def make_reference(inp: MeasureInput, path: str, timeout_s: float) -> Optional[str]:
    """:func:`reference_on` in a fresh worker process that is killed afterwards."""
    worker = WorkerProcess()
    try:
        return reference_on(worker, inp, path, timeout_s)
    finally:
        worker.close()
