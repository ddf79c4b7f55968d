"""What a person sees while tuning: a ``rich`` progress bar (task, trials, best ms and GFLOP/s,
ETA), a table per task at the end (trials, the ms and GFLOP/s of the record that schedules the
task, its speedup over the compiler's default schedule: 1.00x when the default is kept) and a tuning-curve PNG (matplotlib). ``rich`` is a dependency;
``matplotlib`` comes with the extra ``mlc-mlir[tune]`` and is imported where used."""

from __future__ import annotations

import math
import os
from typing import List, Optional

from rich import console as rich_console
from rich import progress as rich_progress
from rich import table as rich_table

from .database import Database
from .task import Task


class ProgressBar:
    """A ``rich`` progress bar over the trial budget; ``enabled=False`` shows nothing.

    """

    def __init__(self, total: int, done: int, enabled: bool = True):
        self.enabled = enabled
        if not enabled:
            return
        p = rich_progress
        self._progress = p.Progress(
            p.TextColumn("[bold]{task.description}"), p.BarColumn(), p.MofNCompleteColumn(),
            p.TextColumn("best {task.fields[best]}"), p.TimeElapsedColumn(), p.TextColumn("ETA"),
            p.TimeRemainingColumn(), transient=False)
        self._id = self._progress.add_task("tuning", total=total, completed=done, best="-")

    def __enter__(self):
        if self.enabled:
            self._progress.start()
        return self

    def __exit__(self, *exc):
        if self.enabled:
            self._progress.stop()

    def update(self, task: str, done: int, best_ms: float, gflops: float) -> None:
        """Show ``done`` trials; ``task`` is the task being tuned, with its best so far."""
        if not self.enabled:
            return
        best = "-" if math.isinf(best_ms) else f"{best_ms:.4f} ms, {gflops:.2f} GFLOP/s"
        self._progress.update(self._id, completed=done, description=task, best=best)

    def log(self, text: str) -> None:
        """A line above the bar."""
        if self.enabled:
            self._progress.console.print(text, markup=False, highlight=False)


def summary_rows(tasks: List[Task], db: Database, target_key: str) -> List[dict]:
    """Per task: name, weight, trials (search records), errors, ``best_ms`` and GFLOP/s of the
    record that schedules the task (:meth:`Database.best`: a candidate only if it beats the
    default), ``default_ms`` and the speedup of the former over the latter (1.0 when the
    default is kept; 0.0 when nothing ran), ``note``: ``rejected by the model check`` when the
    whole-model check gave the task back to its default (:meth:`Database.reject`), else empty."""
    rows = []
    for t in tasks:
        recs = [r for r in db.records(t.workload, target_key) if not r.final]
        chosen = db.best(t.workload, target_key)
        default = db.default(t.workload, target_key)
        best = chosen.latency_ms if chosen is not None and chosen.ok else math.inf
        base = default.latency_ms if default is not None and default.ok else math.inf
        ok = not math.isinf(best)
        rows.append({"task": t.name, "weight": t.weight, "trials": len(recs),
                     "errors": sum(not r.ok for r in recs), "best_ms": best, "default_ms": base,
                     "gflops": t.flops / (best * 1e6) if ok else 0.0,
                     "speedup": base / best if ok and not math.isinf(base) else (1.0 if ok else 0.0),
                     "note": "rejected by the model check" if db.rejected(t.workload, target_key) else ""})
    return rows


def print_summary(tasks: List[Task], db: Database, target_key: str, enabled: bool = True) -> List[dict]:
    """Print the per-task table (with ``rich``) and return its rows."""
    rows = summary_rows(tasks, db, target_key)
    if not enabled:
        return rows
    table = rich_table.Table(title="mlc-mlir tuning")
    for col in ("task", "weight", "trials", "errors", "best ms", "GFLOP/s", "speedup over default", "note"):
        table.add_column(col, justify="left" if col in ("task", "note") else "right")
    for r in rows:
        best = "-" if math.isinf(r["best_ms"]) else f"{r['best_ms']:.4f}"
        table.add_row(r["task"], str(r["weight"]), str(r["trials"]), str(r["errors"]), best,
                      f"{r['gflops']:.2f}", f"{r['speedup']:.2f}x", r["note"])
    rich_console.Console().print(table)
    return rows


def plot_curve(tasks: List[Task], db: Database, target_key: str, path: str) -> Optional[str]:
    """Write the tuning curve (best GFLOP/s of each task over its trials) to ``path`` (PNG).

    Returns
    -------
    str or None
        ``path``, or None if matplotlib is not installed (nothing written).
    """
    try:
        import matplotlib  # the optional extra mlc-mlir[tune]

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(7, 4))
    for t in tasks:
        best, xs, ys = math.inf, [], []
        for n, r in enumerate((r for r in db.records(t.workload, target_key) if not r.final), 1):
            best = min(best, r.latency_ms)
            if not math.isinf(best):
                xs.append(n)
                ys.append(t.flops / (best * 1e6))
        ax.step(xs, ys, where="post", label=f"{t.name} (x{t.weight})")
    ax.set_xlabel("trials of the task")
    ax.set_ylabel("best GFLOP/s")
    ax.set_title("mlc-mlir tuning curve")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
