"""``Database``: the tuning records, an append-only JSON-lines file.

Every :meth:`Database.commit` writes one line and ``fsync`` s it, so a run killed at any point
keeps every record it finished; loading skips a torn last line (a write cut short by the kill),
and the next commit truncates it away. :meth:`Database.query_best_trace` is the protocol the
compiler calls (``mlc.compile(mod, database=db)``; the pipeline layer receives the database
object, it never imports ``tune``).

Which record replaces the default schedule of a workload (:meth:`Database.best`): among the
records of the latest re-measurement of the task's finalists when there is one (the tuner's
last step: the default and the best candidates measured again with full repeats, interleaved),
else among all records, the fastest; it replaces the default only if it is faster than the
default by more than :data:`TIE_TOLERANCE` (ties, within noise, keep the default), and never
when the default was measured and failed (nothing is known to beat it then).
:meth:`Database.reject` records a verdict from outside the task (the whole-model check of
:mod:`.model_check`): a final batch in which the candidate carries the error
``rejected: ...``, so the default schedules the workload again.
:class:`RecordSet` answers the compiler's protocol for a given list of records (a model compiled
with some of the database's choices). Source: TVM MetaSchedule ``JSONDatabase``
(``database_tuning_record.json``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import os
import time
from typing import Dict, Iterable, Iterator, List, Optional, Union

from ..errors import TuningError
from ..target import Target, get_target
from .record import TuningRecord, rename_blocks

#: A record replaces the default schedule only when it is faster by more than this fraction.
TIE_TOLERANCE = 0.02
#: The error of a candidate rejected by :meth:`Database.reject` starts with this.
REJECTED = "rejected: "


def _trace_for_unit(rec: TuningRecord, names: Optional[Dict[str, str]],
                    func_name: Optional[str]) -> str:
    """``rec`` 's trace with its blocks renamed for the unit (see :meth:`Database.query_best_trace`)."""
    return rec.trace if names is None else rename_blocks(rec.trace, rec.block_names, names, func_name)


class Database:
    """Tuning records in a JSON-lines file (TVM MetaSchedule ``JSONDatabase``).

    Parameters
    ----------
    path : str or os.PathLike
        The file (created on the first commit; its folder is created too).

    Raises
    ------
    TuningError
        If the file cannot be read (a folder, no permission) or a line other than the last is
        not a record (the message names the line).

    Examples
    --------
    >>> db = mlc.tune(mod, trials=32, work_dir="tune/")
    >>> db.best().latency_ms                  # the only task, on the host
    >>> db.best("fused_dense_relu").trace     # a task by name (or its workload key, or a Task)
    """

    def __init__(self, path):
        self.path = os.fspath(path)
        self._reload()

    def _reload(self) -> None:
        self._records: List[TuningRecord] = []
        self._candidates: set = set()
        self._valid_bytes: Optional[int] = None  # where a torn tail starts, if there is one
        if os.path.exists(self.path):
            self._load()

    def _load(self) -> None:
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except OSError as e:
            raise TuningError(f"Database: cannot read {self.path}: {e.strerror}; expected a JSON-lines "
                              "file of tuning records (e.g. <work_dir>/database.jsonl)") from None
        lines = data.split(b"\n")
        offset = 0
        for n, line in enumerate(lines, 1):
            last = n == len(lines)
            if line.strip():
                try:
                    self._add(TuningRecord.from_json(line.decode()))
                except (TuningError, UnicodeDecodeError) as e:
                    if not last:  # a line with a newline after it was written whole
                        raise TuningError(f"Database: {self.path}:{n} is not a tuning record: {e}") from None
                    self._valid_bytes = offset  # torn by a kill mid-write: dropped on next commit
                    break
                if last:  # whole record without its newline: keep it, add the newline on commit
                    self._valid_bytes = -1
            offset += len(line) + 1

    def _add(self, rec: TuningRecord) -> None:
        self._records.append(rec)
        self._candidates.add(rec.candidate)

    @contextlib.contextmanager
    def exclusive(self) -> Iterator["Database"]:
        """Hold an exclusive lock on the database (``fcntl.flock`` of ``<path>.lock``) for the
        ``with`` block, so that two tuners never measure the same candidates into one file.

        Raises
        ------
        TuningError
            If another process holds the lock (the message names its pid), or the lock file
            cannot be created.
        """
        lock_path = self.path + ".lock"
        try:
            folder = os.path.dirname(self.path)
            if folder:
                os.makedirs(folder, exist_ok=True)
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise TuningError(f"Database: cannot create the lock {lock_path}: {e.strerror}") from None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
                raise TuningError(f"Database: {self.path} is in use by another tuner (pid {holder} holds "
                                  f"{lock_path}); wait for it to finish or tune into another work_dir") from None
            os.ftruncate(fd, 0)
            os.pwrite(fd, str(os.getpid()).encode(), 0)
            self._reload()  # what an earlier holder committed since this object read the file
            yield self
        finally:
            os.close(fd)  # closing the descriptor releases the lock

    # ----------------------------------------------------------------- writing
    def commit(self, record: TuningRecord) -> None:
        """Append ``record`` to the file (written, flushed and ``fsync`` ed before returning).

        Raises
        ------
        TuningError
            If ``record`` is not a TuningRecord, or the file cannot be written.
        """
        if not isinstance(record, TuningRecord):
            raise TuningError(f"Database.commit: expected a TuningRecord, got {type(record).__name__}")
        line = record.to_json() + "\n"
        try:
            folder = os.path.dirname(self.path)
            if folder:
                os.makedirs(folder, exist_ok=True)
            with open(self.path, "ab") as f:
                if self._valid_bytes is not None:
                    if self._valid_bytes >= 0:
                        f.truncate(self._valid_bytes)
                    else:
                        f.write(b"\n")
                    self._valid_bytes = None
                f.write(line.encode())
                f.flush()
                os.fsync(f.fileno())
        except OSError as e:
            raise TuningError(f"Database.commit: cannot write {self.path}: {e.strerror}") from None
        self._add(record)

    # ----------------------------------------------------------------- reading
    def __len__(self) -> int:
        return len(self._records)

    def has_candidate(self, candidate: str) -> bool:
        """Whether a record of candidate id ``candidate`` was committed (resume skips it)."""
        return candidate in self._candidates

    def records(self, workload: Optional[str] = None, target: Optional[str] = None) -> List[TuningRecord]:
        """Records in commit order, of ``workload`` and target key ``target`` where given."""
        return [r for r in self._records
                if (workload is None or r.workload == workload) and (target is None or r.target == target)]

    def _target_key(self, target) -> str:
        if isinstance(target, Target):
            return target.key()
        keys = {r.target for r in self._records}
        if target is None:
            return next(iter(keys)) if len(keys) == 1 else get_target("cpu").key()
        if not isinstance(target, str):
            raise TuningError(f"Database: target is {type(target).__name__}; expected a Target, "
                              "a target key or a target name such as 'cpu'")
        return target if target in keys or " " in target or "-" in target else get_target(target).key()

    def _workload(self, workload, target_key: str) -> str:
        recs = self.records(target=target_key)
        workloads = list(dict.fromkeys(r.workload for r in recs))
        if workload is None:
            if len(workloads) == 1:
                return workloads[0]
            raise TuningError(f"Database.best: the database has {len(workloads)} workloads on "
                              f"{target_key!r}; name one (a task name of "
                              f"{sorted({r.task_name for r in recs})}, a workload key or a Task)")
        workload = getattr(workload, "workload", workload)  # a Task
        if not isinstance(workload, str):
            raise TuningError(f"Database.best: workload is {type(workload).__name__}; expected a "
                              "workload key, a task name or a Task")
        if workload in workloads:
            return workload
        named = list(dict.fromkeys(r.workload for r in recs if r.task_name == workload))
        return named[0] if len(named) == 1 else workload

    def finalists(self, workload: str, target_key: str) -> List[TuningRecord]:
        """The records :meth:`best` chooses from: those of the latest re-measurement of the
        workload's finalists, or all records when it was never re-measured."""
        recs = self.records(workload, target_key)
        finals = [r for r in recs if r.final]
        return [r for r in finals if r.final == finals[-1].final] if finals else recs

    def best(self, workload: Union[str, object, None] = None,
             target: Union[str, Target, None] = None) -> Optional[TuningRecord]:
        """The record that schedules ``workload`` on ``target``: the fastest record without
        error among :meth:`finalists`, if it beats the default schedule's by more than
        :data:`TIE_TOLERANCE`; else the default's record (see the module docstring). Records of
        another target are never returned.

        Parameters
        ----------
        workload : str or Task, optional
            A workload key, a task name (``fused_dense_relu``) or a :class:`Task`; default: the
            only workload of the database.
        target : str or Target, optional
            A Target, its key, or a name (``"cpu"``: the host); default: the only target of the
            database, else the host.

        Returns
        -------
        TuningRecord or None
            None if no record without error exists for this workload and target.

        Raises
        ------
        TuningError
            If ``workload`` is not given and the database has several workloads on the target.
        """
        tkey = self._target_key(target)
        pool = self.finalists(self._workload(workload, tkey), tkey)
        ok = [r for r in pool if r.ok]
        if not ok:
            return None
        best = min(ok, key=lambda r: r.latency_ms)
        defaults = [r for r in pool if r.is_default]
        if not defaults or best.is_default:
            return best
        default = min(defaults, key=lambda r: r.latency_ms)
        if not default.ok:
            return default   # the default failed to measure: nothing is known to beat it
        return best if best.latency_ms * (1 + TIE_TOLERANCE) < default.latency_ms else default

    def default(self, workload: Union[str, object, None] = None,
                target: Union[str, Target, None] = None) -> Optional[TuningRecord]:
        """The fastest record of the default schedule (the empty trace) among
        :meth:`finalists` (arguments as :meth:`best`); None if it was never measured."""
        tkey = self._target_key(target)
        pool = [r for r in self.finalists(self._workload(workload, tkey), tkey) if r.is_default]
        return min(pool, key=lambda r: r.latency_ms) if pool else None

    def query_best_trace(self, workload: str, target_key: str, names: Optional[Dict[str, str]] = None,
                         func_name: Optional[str] = None) -> Optional[str]:
        """The trace JSON of :meth:`best`, for the compiler (the protocol it calls).

        Parameters
        ----------
        workload : str
            ``workload_key(module, f)`` of a unit's function (:func:`~mlc_mlir.pipeline.tasks.task_units`).
        target_key : str
            ``Target.key()`` of the compile target.
        names : dict of str to str, optional
            ``canonical_names(module, f)``: the trace's blocks are renamed to ``f`` 's
            (a record may come from another function of the same workload); without it the
            trace names the blocks of the function it was recorded on.
        func_name : str, optional
            With ``names``: the ``func_name`` of every ``get_block`` instruction (the function
            that holds the unit).

        Returns
        -------
        str or None
            ``Trace.from_json`` input; replay it with ``Schedule.from_trace`` on a module that
            holds ``f``. None if no record without error exists for this workload and target,
            or if the default schedule was measured and failed.

        Raises
        ------
        TuningError
            If a block of the trace has no counterpart in ``names``.
        """
        rec = self.best(workload, target_key)
        if rec is None or not rec.ok:
            return None
        return _trace_for_unit(rec, names, func_name)

    def reject(self, workload, target, reason: str) -> Optional[TuningRecord]:
        """Give ``workload`` back to its default schedule for a reason found outside its task
        (the whole model ran slower with the record, :mod:`.model_check`): commit a final batch
        of the default's record as :meth:`default` has it (no new measurement) and the record
        :meth:`best` chose, without latencies and with the error ``rejected: <reason>``.
        :meth:`best` then returns the default (None when the default was never measured,
        which the compiler reads the same way); a later re-measurement of the task's finalists
        decides again.

        Returns
        -------
        TuningRecord or None
            The rejected record (None when the default already schedules the workload).
        """
        tkey = self._target_key(target)
        workload = self._workload(workload, tkey)
        best, default = self.best(workload, tkey), self.default(workload, tkey)
        if best is None or best.is_default:
            return None
        now = time.time()
        batch = f"{now:.6f}"
        if default is not None:
            self.commit(dataclasses.replace(default, timestamp=now, final=batch))
        rejected = dataclasses.replace(best, latencies_ms=(), error=REJECTED + reason,
                                       timestamp=now, final=batch)
        self.commit(rejected)
        return rejected

    def rejected(self, workload, target=None) -> Optional[TuningRecord]:
        """The record :meth:`reject` rejected in the latest final batch of ``workload``, if any."""
        tkey = self._target_key(target)
        pool = self.finalists(self._workload(workload, tkey), tkey)
        return next((r for r in pool if (r.error or "").startswith(REJECTED)), None)


class RecordSet:
    """The compiler's database protocol (``query_best_trace``) over the given records, one per
    workload and target: a unit whose workload has one gets its trace, every other unit its
    default schedule. Used to compile a model with a subset of a database's choices.

    Parameters
    ----------
    records : iterable of TuningRecord
    """

    def __init__(self, records: Iterable[TuningRecord]):
        self._by_key = {(r.workload, r.target): r for r in records}

    def query_best_trace(self, workload: str, target_key: str, names: Optional[Dict[str, str]] = None,
                         func_name: Optional[str] = None) -> Optional[str]:
        """As :meth:`Database.query_best_trace`, for the given records only."""
        rec = self._by_key.get((workload, target_key))
        return None if rec is None else _trace_for_unit(rec, names, func_name)
