"""Does ``mlc.tune`` leave anything in the caller's process that slows the model it tuned?

One process: compile a model of ``models_cpu.py`` (default schedules, ``threads=T``), time it, run
``mlc.tune(threads=T)``, print what the tuner could have left behind (Python threads, child
processes, CPU affinity, libomp's blocktime and thread count, idle CPU use over 3 s), then time the
executable compiled before tuning, a default compiled after it and the tuned one, in turn.

``--fifo`` times with every thread of the process at ``SCHED_FIFO`` priority 1 (Linux, root): on a
host shared with other work the timings are then stable, and the other processes wait while it
times (a few seconds per line). Without it, timings on a loaded host mean little.

usage: python benchmarks/tune_process_state.py [--model bert] [--trials 60] [--threads 2] [--fifo]
"""

import argparse
import contextlib
import ctypes
import os
import resource
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models_cpu  # noqa: E402
from timing import min_median_seconds  # noqa: E402

import mlc_mlir as mlc  # noqa: E402
from mlc_mlir.pipeline.libraries import libomp_path  # noqa: E402


@contextlib.contextmanager
def fifo(enabled: bool):
    """Every thread of this process at SCHED_FIFO 1 inside the block (threads created inside inherit it)."""
    if not enabled:
        yield
        return
    for tid in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError):
            os.sched_setscheduler(int(tid), os.SCHED_FIFO, os.sched_param(1))
    try:
        yield
    finally:
        for tid in os.listdir("/proc/self/task"):
            with contextlib.suppress(OSError):
                os.sched_setscheduler(int(tid), os.SCHED_OTHER, os.sched_param(0))


def state(omp) -> str:
    """What of a tuner could outlive it: threads, children, affinity, libomp state, idle CPU."""
    kids = set()
    for tid in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError), open(f"/proc/self/task/{tid}/children") as f:
            kids |= set(f.read().split())
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    time.sleep(3)
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    idle_ms = (r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime) * 1e3
    return (f"python threads {sorted(t.name for t in threading.enumerate())}, OS threads "
            f"{len(os.listdir('/proc/self/task'))}, children {sorted(kids)}, affinity "
            f"{sorted(os.sched_getaffinity(0))}, libomp blocktime {omp.kmp_get_blocktime()} ms, "
            f"omp max threads {omp.omp_get_max_threads()}, idle CPU over 3 s {idle_ms:.1f} ms")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="bert", choices=["bert", "resnet18"])
    ap.add_argument("--trials", type=int, default=60)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--fifo", action="store_true", help="time at SCHED_FIFO priority 1 (see above)")
    args = ap.parse_args()
    t = args.threads
    model, targs = models_cpu.torch_model(args.model)
    mod = mlc.from_torch(model, targs)
    xs = models_cpu.numpy_inputs(args.model)
    omp = ctypes.CDLL(libomp_path())
    omp.omp_set_num_threads(t)

    def timed(label, exe):
        with fifo(args.fifo):
            r = [min_median_seconds(lambda: exe(*xs), repeat=3, min_repeat_s=0.1)[0] * 1e3 for _ in range(3)]
        print(f"  {label:38s} min {min(r):8.3f} ms  {[round(x, 3) for x in r]}", flush=True)

    before = mlc.compile(mod, threads=t)
    before(*xs)
    print(f"before tune: {state(omp)}")
    timed("default, before tune", before)
    db = mlc.tune(mod, trials=args.trials, work_dir=tempfile.mkdtemp(prefix="tune-state-"),
                  threads=t, progress=False)
    print(f"after tune:  {state(omp)}")
    tuned = mlc.compile(mod, database=db, threads=t)
    after = mlc.compile(mod, threads=t)
    tuned(*xs), after(*xs)
    for _ in range(2):
        timed("same executable, after tune", before)
        timed("default compiled after tune", after)
        timed("tuned", tuned)
    return 0


if __name__ == "__main__":
    sys.exit(main())
