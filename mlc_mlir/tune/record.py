"""``TuningRecord``: one measured candidate, a line of the tuning database.

Source: TVM MetaSchedule ``TuningRecord`` (trace, run_secs, target, workload) plus what this
project needs to resume and to replay on another function of the same workload: the error of a
failed candidate, a deterministic candidate id and the block names the trace uses.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from typing import Any, Dict, Optional, Tuple

from ..errors import TuningError

#: Format tag of a record line.
RECORD_FORMAT = "mlc-tuning-record-v1"


def candidate_id(workload: str, target_key: str, trace_json: str) -> str:
    """The id of a candidate: the first 16 hex digits of SHA-256 over workload, target key and
    trace JSON (instructions and decisions). Equal candidates get equal ids across runs."""
    h = hashlib.sha256("\0".join((workload, target_key, trace_json)).encode())
    return h.hexdigest()[:16]


@dataclasses.dataclass(frozen=True)
class TuningRecord:
    """A measured candidate (TVM MetaSchedule ``TuningRecord``).

    Attributes
    ----------
    workload : str
        :func:`~mlc_mlir.ir.workload.workload_key` of the task's function.
    target : str
        :meth:`Target.key` of the target it was measured on.
    trace : str
        ``Trace.as_json()`` of the candidate (instructions and decisions).
    decisions : dict of int to decision
        The trace's decisions (instruction index -> factors or categorical index).
    latencies_ms : tuple of float
        Per-repeat mean latency of one call, ms (empty for a failed candidate).
    error : str or None
        Why the candidate failed (schedule, compile, crash, timeout, wrong result); None if it ran.
    timestamp : float
        Seconds since the epoch when the result was committed.
    candidate : str
        :func:`candidate_id` of (workload, target, trace).
    task_name : str
        The function the trace was recorded on (its ``get_block`` names are that function's).
    block_names : dict of str to str
        ``canonical_names`` of that function (``{mlc.name: "op<i>"}``): renames the trace's blocks
        for another function of the same workload.
    flops : float
        Floating-point operations of one call (for GFLOP/s).
    final : str
        Empty for a candidate measured during the search; for a re-measurement of the task's
        finalists (the default and the best candidates, full repeats, interleaved), the id of
        that re-measurement: the database decides between the finals of the latest one.
    """

    workload: str
    target: str
    trace: str
    decisions: Dict[int, Any]
    latencies_ms: Tuple[float, ...]
    error: Optional[str]
    timestamp: float
    candidate: str
    task_name: str = ""
    block_names: Dict[str, str] = dataclasses.field(default_factory=dict)
    flops: float = 0.0
    final: str = ""

    @property
    def is_default(self) -> bool:
        """Whether the trace is empty: the compiler's default schedule of the task."""
        try:
            return not json.loads(self.trace).get("insts")
        except (ValueError, AttributeError):
            return False

    @property
    def ok(self) -> bool:
        """Whether the candidate ran and gave the right result."""
        return self.error is None and bool(self.latencies_ms)

    @property
    def latency_ms(self) -> float:
        """Best (min) latency over repeats, ms; ``inf`` for a failed candidate."""
        return min(self.latencies_ms) if self.ok else math.inf

    @property
    def gflops(self) -> float:
        """Throughput at :attr:`latency_ms`, GFLOP/s (0 for a failed candidate)."""
        return self.flops / (self.latency_ms * 1e6) if self.ok and self.latency_ms > 0 else 0.0

    def to_json(self) -> str:
        """One line of JSON (no newline)."""
        return json.dumps({
            "format": RECORD_FORMAT, "workload": self.workload, "target": self.target,
            "trace": self.trace, "decisions": {str(k): v for k, v in sorted(self.decisions.items())},
            "latencies_ms": list(self.latencies_ms), "error": self.error,
            "timestamp": self.timestamp, "candidate": self.candidate, "task_name": self.task_name,
            "block_names": self.block_names, "flops": self.flops, "final": self.final,
        }, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> "TuningRecord":
        """Parse :meth:`to_json` output.

        Raises
        ------
        TuningError
            If ``text`` is not a record (bad JSON, another format, a missing or mistyped field).
        """
        try:
            d = json.loads(text)
        except ValueError as e:
            raise TuningError(f"TuningRecord.from_json: invalid JSON ({e})") from None
        if not isinstance(d, dict) or d.get("format") != RECORD_FORMAT:
            got = d.get("format") if isinstance(d, dict) else type(d).__name__
            raise TuningError(f"TuningRecord.from_json: format {got!r}; expected {RECORD_FORMAT!r}")
        try:
            rec = cls(str(d["workload"]), str(d["target"]), str(d["trace"]),
                      {int(k): v for k, v in d["decisions"].items()},
                      tuple(float(x) for x in d["latencies_ms"]),
                      None if d["error"] is None else str(d["error"]), float(d["timestamp"]),
                      str(d["candidate"]), str(d.get("task_name", "")),
                      dict(d.get("block_names", {})), float(d.get("flops", 0.0)),
                      str(d.get("final", "")))
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise TuningError(f"TuningRecord.from_json: missing or mistyped field ({e!r})") from None
        return rec


def rename_blocks(trace_json: str, recorded: Dict[str, str], names: Dict[str, str],
                  func_name: Optional[str] = None) -> str:
    """The trace ``trace_json`` with its blocks renamed for another function of the same workload.

    Parameters
    ----------
    trace_json : str
        ``Trace.as_json()`` text recorded on a function whose ``canonical_names`` are ``recorded``.
    recorded, names : dict of str to str
        ``canonical_names`` (``{mlc.name: "op<i>"}``) of the recorded function and of the
        function the trace will be replayed on.
    func_name : str, optional
        The ``func_name`` of every ``get_block`` instruction (the function that holds the
        blocks where the trace is replayed).

    Raises
    ------
    TuningError
        If the trace is not JSON, or a block it gets has no counterpart in ``names``.
    """
    try:
        d = json.loads(trace_json)
    except ValueError as e:
        raise TuningError(f"rename_blocks: the trace is not JSON ({e})") from None
    by_canon = {c: n for n, c in names.items()}
    for idx, inst in enumerate(d.get("insts", [])):
        if inst.get("kind") != "get_block":
            continue
        old = inst["inputs"][0]
        new = by_canon.get(recorded.get(old, ""))
        if new is None:
            raise TuningError(f"rename_blocks: instruction {idx} gets block {old!r}, which the "
                              f"target function does not have (its blocks: {sorted(names)})")
        inst["inputs"][0] = new
        if func_name is not None:
            inst.setdefault("attrs", {})["func_name"] = func_name
    return json.dumps(d, indent=1)
