"""The progress line of a long :func:`mlc_mlir.compile`: which stage runs and for how long.

Nothing is shown for a compile that reaches each stage boundary in under
:data:`SHOW_AFTER_S` seconds. After that, every stage that starts updates one line on standard
error, ``mlc.compile: [8/10] lower, 6.2 s``, where standard error is a terminal (the line is
rewritten in place with ``\\r``; it ends with the total time, or is cleared on an error); elsewhere (a log file, CI) each stage
is a record of the ``mlc_mlir`` logger at level INFO. MLIR's passes hold the GIL, so the line
changes between stages; LLVM (the ``jit`` stage, most of a large model's compile) runs with the
GIL released (:func:`mlc_mlir.runtime.jit_engine.create_engine`), and :meth:`CompileProgress.ticking`
keeps its line counting the seconds meanwhile (every :data:`TICK_S` s on a terminal, every
:data:`LOG_TICK_S` s in the log). Ctrl-C stops a compile when the running stage returns
(``KeyboardInterrupt``), and the line is cleared on every way out.

Source: the progress bars of ``torch.compile`` (``TORCH_LOGS``) and TVM's tuning logs, reduced
to one line; ``tqdm``'s ``\\r``-rewritten terminal line.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
import time
from typing import Iterator, Optional, TextIO

#: Seconds after which the progress of a running compile is shown.
SHOW_AFTER_S = 2.0
#: Seconds between two updates of the terminal line while a stage runs (:meth:`CompileProgress.ticking`).
TICK_S = 1.0
#: Seconds between two log records of a running stage where standard error is not a terminal.
LOG_TICK_S = 30.0

_log = logging.getLogger("mlc_mlir")


class CompileProgress:
    """Reports the stages of one compile (a context manager: the line is cleared on exit).

    Parameters
    ----------
    total : int
        The number of stages, for ``[i/total]``.
    stream : file, optional
        Where the terminal line goes (default ``sys.stderr``); a stream that is not a terminal
        gets nothing: the stages are logged at INFO instead.
    show_after : float
        Seconds from the start before anything is shown (:data:`SHOW_AFTER_S`).
    """

    def __init__(self, total: int, stream: Optional[TextIO] = None, show_after: float = SHOW_AFTER_S):
        self.total = total
        self.stream = stream if stream is not None else sys.stderr
        self.show_after = show_after
        self.start = time.perf_counter()
        self.shown = False
        self._width = 0
        self._lock = threading.Lock()

    def _tty(self) -> bool:
        isatty = getattr(self.stream, "isatty", None)
        return bool(isatty and isatty())

    def stage(self, index: int, name: str, log: bool = True) -> None:
        """Stage ``name`` (``index`` counted from 0) starts (or, from :meth:`ticking`, still
        runs; ``log=False`` then writes the terminal line only)."""
        with self._lock:
            elapsed = time.perf_counter() - self.start
            if elapsed < self.show_after:
                return
            line = f"mlc.compile: [{index + 1}/{self.total}] {name}, {elapsed:.1f} s"
            if self._tty():
                self.shown = True
                self.stream.write("\r" + line.ljust(self._width))
                self.stream.flush()
                self._width = len(line)
            elif log:
                self.shown = True
                _log.info(line)

    @contextlib.contextmanager
    def ticking(self, index: int, name: str, tick: float = TICK_S,
                log_tick: float = LOG_TICK_S) -> Iterator["CompileProgress"]:
        """Stage ``name`` (``index`` counted from 0) starts, and its line is updated every
        ``tick`` seconds (a log record every ``log_tick`` seconds) by a daemon thread until the
        block exits. Useful around native work that releases the GIL (LLVM); around work that
        holds it, the thread waits for it."""
        self.stage(index, name)
        done = threading.Event()

        def run() -> None:
            last_log = time.perf_counter()
            while not done.wait(tick):
                now = time.perf_counter()
                log = now - last_log >= log_tick
                last_log = now if log else last_log
                self.stage(index, name, log=log)

        thread = threading.Thread(target=run, name="mlc-compile-progress", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            done.set()
            thread.join()

    def __enter__(self) -> "CompileProgress":
        return self

    def __exit__(self, *exc) -> None:
        if not self.shown:
            return
        done = f"mlc.compile: done in {time.perf_counter() - self.start:.1f} s"
        if self._tty():   # the final time stays on the line; an error clears it
            self.stream.write("\r" + (done.ljust(self._width) + "\n" if exc[0] is None else
                                      " " * self._width + "\r"))
            self.stream.flush()
        elif exc[0] is None:
            _log.info(done)
