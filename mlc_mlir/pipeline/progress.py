"""The progress line of a long :func:`mlc_mlir.compile`: which stage runs and for how long.

Nothing is shown for a compile that reaches each stage boundary in under
:data:`SHOW_AFTER_S` seconds. After that, every stage that starts updates one line on standard
error, ``mlc.compile: [8/10] lower, 6.2 s``, where standard error is a terminal (the line is
rewritten in place with ``\\r``; it ends with the total time, or is cleared on an error); elsewhere (a log file, CI) each stage
is a record of the ``mlc_mlir`` logger at level INFO. The stages' native parts (MLIR passes,
LLVM) hold the GIL, so the line changes between stages; Ctrl-C stops a compile when the running
stage returns (``KeyboardInterrupt``), and the line is cleared on every way out.

Source: the progress bars of ``torch.compile`` (``TORCH_LOGS``) and TVM's tuning logs, reduced
to one line; ``tqdm``'s ``\\r``-rewritten terminal line.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Optional, TextIO

#: Seconds after which the progress of a running compile is shown.
SHOW_AFTER_S = 2.0

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

    def _tty(self) -> bool:
        isatty = getattr(self.stream, "isatty", None)
        return bool(isatty and isatty())

    def stage(self, index: int, name: str) -> None:
        """Stage ``name`` (``index`` counted from 0) starts."""
        elapsed = time.perf_counter() - self.start
        if elapsed < self.show_after:
            return
        self.shown = True
        line = f"mlc.compile: [{index + 1}/{self.total}] {name}, {elapsed:.1f} s"
        if self._tty():
            self.stream.write("\r" + line.ljust(self._width))
            self.stream.flush()
            self._width = len(line)
        else:
            _log.info(line)

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
