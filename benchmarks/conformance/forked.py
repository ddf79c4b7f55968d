"""One conformance case in a forked child, shared by ``onnx_backend.py`` and
``torch_opinfo.py``: a compiler abort (an MLIR assertion) or a hang is one failed case, not the
end of the run."""

from __future__ import annotations

import json
import os
import signal


def run_forked(fn, timeout: int) -> tuple:
    """``fn()`` (a JSON-serializable tuple, e.g. ``(status, reason)``) run in a forked child with
    an alarm after ``timeout`` seconds; its result, or ``("fail", why)`` when the child wrote
    none: "timed out" (SIGALRM), "the process died with SIGABRT (compiler abort)", or its exit
    code."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: never returns into the caller's loop
        try:
            os.close(r)
            signal.alarm(timeout)
            os.write(w, json.dumps(fn()).encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        data = f.read()
    _, status = os.waitpid(pid, 0)
    if data:
        return tuple(json.loads(data))
    if os.WIFSIGNALED(status):
        sig = signal.Signals(os.WTERMSIG(status)).name
        return "fail", "timed out" if sig == "SIGALRM" else f"the process died with {sig} (compiler abort)"
    return "fail", f"the child exited with {os.WEXITSTATUS(status)} and no result"
