"""The measuring worker: ``python -m mlc_mlir.tune.worker`` (one JSON request per line on
stdin, one JSON reply per line on the original stdout; stray output goes to stderr).

Requests: ``{"op": "reference", "input": ..., "path": ...}`` computes the reference of a task
once (random inputs of the seed, the outputs of the unscheduled function compiled as plain loops,
``schedule="none"``) and saves both to ``path`` (``.npz``, written atomically), for the tuner to
hand to every candidate (:attr:`MeasureInput.reference`); ``{"op": "build", "input":
MeasureInput.to_dict()}`` replays the trace (``Schedule.from_trace``) on the task module and
compiles it (an empty trace: the compiler's default schedule; with ``records``, compiled with
those tuning records, :class:`~mlc_mlir.tune.database.RecordSet`); ``{"op": "run"}`` runs the last
build once on the inputs, compares with the reference (loaded from ``reference`` or, without one,
computed here and cached per task) and times it (``benchmark``, each repeat's mean, ms; a
candidate slower than ``cutoff_ms`` keeps one time only: its checked call's, or where that call
is under ``WARM_MS`` and so mostly cold start, the fastest of ``PROBE_CALLS`` native calls). A build
goes to a numbered ``slot`` (default 0); ``"keep": true`` on a build keeps the other slots'
builds, on a run keeps the build for another run (an interleaved comparison of candidates,
:meth:`~mlc_mlir.tune.executor.Executor.compare`, builds each once). Replies
carry ``error`` (a string) or the result, and ``phases_s`` (seconds per phase). Started by :class:`~mlc_mlir.tune.measure.WorkerProcess`. Source: TVM MetaSchedule's
``LocalBuilder``/``LocalRunner`` worker functions (``default_build``, ``default_run_evaluator``).

Test-only hook: a trace that annotates a block with ``mlc.tune.test_fault`` = ``"segv"``,
``"abort"``, ``"hang"`` or ``"wrong"`` makes the run phase crash, abort, sleep forever or
perturb the result, so tests can plant failing candidates through the real tuner.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import json
import math
import os
import signal
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional

import numpy as np

from ..errors import MlcError
from ..ir.constants import line_aligned
from ..ir.module import Module
from ..pipeline.compile import compile as compile_module
from ..pipeline.options import CompileOptions
from ..schedule.schedule import Schedule
from ..schedule.trace import Trace
from .database import RecordSet
from .measure import MeasureInput
from .record import TuningRecord

#: The annotation key of the test-only fault hook (see the module docstring).
FAULT_KEY = "mlc.tune.test_fault"
#: Target wall time of one timed repeat when ``number`` is 0, ms.
REPEAT_MS = 1.0
#: A checked call at least this long (ms) is warm-up enough for the timed calls.
WARM_MS = 20.0
#: Native calls (the fastest counts) that decide the cutoff of a candidate whose checked call,
#: shorter than ``WARM_MS``, is over ``cutoff_ms``.
PROBE_CALLS = 3


def _faults(trace_json: str) -> List[str]:
    d = json.loads(trace_json)
    return [i["inputs"][2] for i in d.get("insts", [])
            if i.get("kind") == "annotate" and len(i["inputs"]) == 3 and i["inputs"][1] == FAULT_KEY]


#: The integer inputs of a reference, ``[low, high)``: signed small values (sign handling is
#: checked), then, where the plain loops refuse those (an index input: ``take`` checks
#: ``0 <= index < n``), :data:`INDEX_INTEGERS`, valid indices of any table and values of any mask.
SIGNED_INTEGERS = (-4, 5)
INDEX_INTEGERS = (0, 2)


def _random_inputs(mod: Module, func_name: str, seed: int, integers=SIGNED_INTEGERS) -> List[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for a in mod.signature(func_name).args:
        dt = np.dtype(a.dtype)
        if np.issubdtype(dt, np.floating):
            out.append(rng.standard_normal(a.shape).astype(dt))
        elif np.issubdtype(dt, np.integer):
            out.append(rng.integers(*integers, size=a.shape).astype(dt))
        else:
            raise MlcError(f"worker: argument '{a.name}' has dtype {a.dtype}; random inputs are "
                           "made for floating-point and integer tensors only")
    return out


def _as_list(res) -> List[np.ndarray]:
    return list(res) if isinstance(res, tuple) else [res]


def compute_reference(inp: MeasureInput):
    """``(inputs, expected outputs)`` of the task of ``inp``: random inputs of ``inp.seed`` and
    the outputs of the unscheduled function compiled as plain loops (``schedule="none"``);
    integer inputs in :data:`SIGNED_INTEGERS`, or in :data:`INDEX_INTEGERS` where the function
    refuses those (a model whose input ids index an embedding table).

    Raises
    ------
    MlcError
        If the function does not compile, or does not run on its inputs.
    """
    mod = Module.parse(inp.module)
    plain = CompileOptions(target=inp.target, threads=inp.threads, opt_level=inp.opt_level,
                           schedule="none")
    ref = compile_module(mod, options=plain)[inp.task_name]
    args = _random_inputs(mod, inp.task_name, inp.seed)
    try:
        return args, _as_list(ref(*args))
    except MlcError:
        if not any(np.issubdtype(a.dtype, np.integer) for a in args):
            raise
    args = _random_inputs(mod, inp.task_name, inp.seed, INDEX_INTEGERS)
    return args, _as_list(ref(*args))


def save_reference(path: str, args: List[np.ndarray], expected: List[np.ndarray]) -> None:
    """Write ``args`` and ``expected`` to ``path`` (``.npz``: ``arg<i>``, ``out<i>``) through a
    temporary file and ``os.replace``, so a reader never sees a partial file."""
    folder = os.path.dirname(path) or "."
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, suffix=".npz.tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **{f"arg{i}": a for i, a in enumerate(args)},
                     **{f"out{i}": e for i, e in enumerate(expected)})
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def load_reference(path: str):
    """``(inputs, expected outputs)`` saved by :func:`save_reference`."""
    with np.load(path) as z:
        args = [z[f"arg{i}"] for i in range(sum(k.startswith("arg") for k in z.files))]
        expected = [z[f"out{i}"] for i in range(sum(k.startswith("out") for k in z.files))]
    return args, expected


class Worker:
    """The state of one worker process: per-task references, the last build."""

    def __init__(self):
        self._refs: Dict[str, Any] = {}   # task key -> (module, inputs, expected outputs)
        self._built: Dict[int, Dict[str, Any]] = {}   # slot -> build

    def _reference(self, inp: MeasureInput):
        key = hashlib.sha256("\0".join((inp.module, inp.target.key(), str(inp.threads),
                                        str(inp.opt_level), str(inp.seed), inp.reference or "")
                                       ).encode()).hexdigest()
        if key not in self._refs:
            if inp.reference:
                args, expected = load_reference(inp.reference)
            else:
                args, expected = compute_reference(inp)
            # every candidate of every worker reads its inputs from a cache line's start, as the
            # model's own buffers do: numpy's arrays start 16 (computed) or 32 (np.load) bytes
            # past one, which costs a Winograd batch_matmul of ResNet-18 20-30 % and made a
            # candidate's time depend on the worker that measured it
            args = [line_aligned(a) for a in args]
            self._refs = {key: (Module.parse(inp.module), args, expected)}  # one task at a time
        return self._refs[key]

    def reference(self, inp: MeasureInput, path: str) -> Dict[str, Any]:
        """Compute the reference of ``inp`` 's task and save it to ``path``."""
        t0 = time.perf_counter()
        try:
            args, expected = compute_reference(inp)
        except MlcError as e:
            return {"error": f"reference error: the unscheduled function does not compile or run: {e}"}
        save_reference(path, args, expected)
        return {"error": None, "phases_s": {"reference": time.perf_counter() - t0}}

    def build(self, inp: MeasureInput, slot: int = 0, keep: bool = False) -> Dict[str, Any]:
        """Replay and compile ``inp`` into ``slot``; ``keep``: other slots' builds stay (a
        comparison of several candidates), else they are released."""
        if not keep:
            self._built = {}
        self._built.pop(slot, None)
        phases: Dict[str, float] = {}
        t0 = time.perf_counter()
        database = RecordSet(TuningRecord.from_json(r) for r in inp.records) if inp.records else None
        options = CompileOptions(target=inp.target, threads=inp.threads, opt_level=inp.opt_level,
                                 database=database)
        try:
            mod, args, expected = self._reference(inp)
        except (MlcError, OSError, ValueError, KeyError) as e:
            return {"error": f"reference error: the unscheduled function does not compile or run: {e}"}
        t1 = time.perf_counter()
        phases["reference"] = t1 - t0
        try:
            trace = Trace.from_json(inp.trace)
            scheduled = Schedule.from_trace(mod, trace).mod if trace.insts else mod
        except MlcError as e:
            return {"error": f"schedule error: {e}", "phases_s": phases}
        t2 = time.perf_counter()
        phases["replay"] = t2 - t1
        try:
            fn = compile_module(scheduled, options=options)[inp.task_name]
        except MlcError as e:
            return {"error": f"compile error: {e}", "phases_s": phases}
        phases["compile"] = time.perf_counter() - t2
        self._built[slot] = {"fn": fn, "args": args, "expected": expected, "input": inp,
                       "faults": _faults(inp.trace)}
        return {"error": None, "phases_s": phases}

    def run(self, slot: int = 0, keep: bool = False) -> Dict[str, Any]:
        """Check and time the build of ``slot``; ``keep``: it stays for another run."""
        b = self._built.get(slot) if keep else self._built.pop(slot, None)
        if b is None:
            return {"error": "worker: run without a successful build"}
        inp: MeasureInput = b["input"]
        faults = b["faults"]
        if "segv" in faults:
            os.kill(os.getpid(), signal.SIGSEGV)
        if "abort" in faults:
            os.abort()
        if "hang" in faults:
            time.sleep(1e9)
        t0 = time.perf_counter()
        try:
            got = _as_list(b["fn"](*b["args"]))
        except MlcError as e:
            return {"error": f"run error: {e}"}
        first_ms = (time.perf_counter() - t0) * 1e3
        if "wrong" in faults:
            got = [g + 1 for g in got]
        for n, (g, e) in enumerate(zip(got, b["expected"])):
            # equal_nan: random inputs may be outside an op's domain (rsqrt of a negative
            # "variance" fed to a fused primitive): NaN where the reference has NaN is right
            if g.shape != e.shape or not np.allclose(g, e, rtol=inp.rtol, atol=inp.atol, equal_nan=True):
                err = float(np.max(np.abs(g.astype(np.float64) - e))) if g.shape == e.shape else math.inf
                return {"error": f"wrong result: output {n} differs from the unscheduled function "
                                 f"(max abs error {err:.3g}; rtol={inp.rtol:g}, atol={inp.atol:g})"}
        t1 = time.perf_counter()
        phases = {"check": t1 - t0}
        fn = b["fn"]
        call_ms = first_ms
        if inp.cutoff_ms > 0 and first_ms > inp.cutoff_ms:
            # a checked call under WARM_MS is mostly cold start (the code, the outputs' pages,
            # the OpenMP team: 0.2 ms for a matmul that runs in 0.018 ms), so warm calls decide
            if first_ms < WARM_MS:
                call_ms = fn.benchmark(*b["args"], number=1, repeat=PROBE_CALLS, warmup=0).min_ms
            if call_ms > inp.cutoff_ms:
                phases["timing"] = time.perf_counter() - t1
                return {"error": None, "latencies_ms": [call_ms], "phases_s": phases}
        number = inp.number or max(1, min(10000, int(REPEAT_MS / max(call_ms, 1e-6))))
        # the checked call warmed the code up; a slow call needs no further warm-up call
        res = fn.benchmark(*b["args"], number=number, repeat=inp.repeat,
                           warmup=0 if first_ms >= WARM_MS else 1)
        phases["timing"] = time.perf_counter() - t1
        return {"error": None, "latencies_ms": list(res.per_repeat_ms), "phases_s": phases}


def _die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent dies (``PR_SET_PDEATHSIG``)."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1


def main() -> int:
    """Serve requests until stdin closes."""
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # prints from compiled code or libraries must not corrupt the protocol
    _die_with_parent()
    worker = Worker()
    proto.write(json.dumps({"ready": True}) + "\n")
    for line in sys.stdin:
        req = json.loads(line)
        try:
            if req["op"] == "reference":
                reply = worker.reference(MeasureInput.from_dict(req["input"]), req["path"])
            elif req["op"] == "build":
                reply = worker.build(MeasureInput.from_dict(req["input"]), req.get("slot", 0),
                                     req.get("keep", False))
            elif req["op"] == "run":
                reply = worker.run(req.get("slot", 0), req.get("keep", False))
            else:
                reply = {"error": f"worker: unknown op {req['op']!r}; expected 'reference', 'build' or 'run'"}
        except Exception as e:  # noqa: BLE001 -- any failure of a candidate is a result
            reply = {"error": f"worker: {type(e).__name__}: {e}"}
        proto.write(json.dumps(reply) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
