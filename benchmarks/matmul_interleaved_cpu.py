"""numpy (PyTorch eager for a convolution) vs our default schedule vs tuned databases vs decision overrides of one
``tune_cpu.py`` workload, interleaved in ONE process: on a loaded shared host the separate
subprocesses of ``tune_cpu.py`` see different loads, so their ratios can be off by 2-10x; here
every implementation is measured once per round, in turn, and keeps its best round (wall time
and process CPU time per call; at one thread the CPU time is the better measure of the code,
as it leaves out the time the process waited for a core).

Variants (after the workload, thread count and rounds), each ``label=value``:

* ``db<label>=<path of a database.jsonl>``: compiled with that tuning database (e.g.
  ``benchmarks/.tune_cache/<workload>-<t>t/database.jsonl`` of ``tune_cpu.py``);
* ``lib<label>=<path of a library>``: a library exported with ``Executable.export_library``
  (e.g. by another commit of this repository), loaded with ``runtime.library.load_library``;
* ``one<label>=``: the default schedule for one thread (a 2-thread run then compares both
  thread counts in one process);
* ``<label>=v0,v1,...``: the default schedule applied to the workload as built (no layout
  stage: for a matmul, what ``mlc.compile`` schedules) with the rules' successive categorical
  decisions overridden by these candidate values (empty: the default), e.g. ``t4x16=3`` picks
  the fourth register tile of ``register_tile_shapes``.

numpy runs under ``threadpool_limits(threads)``; run with ``OMP_NUM_THREADS=<threads>``. With
``SUSTAINED=<calls>`` in the environment, each round instead times ``calls`` back-to-back calls
of each implementation (no pause between implementations: threads stay awake, as in a model)
and the median round's mean is printed::

    OMP_NUM_THREADS=2 python benchmarks/matmul_interleaved_cpu.py matmul777x513x1029 2 4 one= \\
        dbtuned=benchmarks/.tune_cache/matmul777x513x1029-2t/database.jsonl
"""

from __future__ import annotations

import os
import statistics
import sys
import time

import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits
from timing import calls_per_repeat  # this folder is on sys.path
from tune_cpu import build_ours, check, inputs, numpy_fn, prepare_torch, reference


def peer_of(fns):
    """The peer every ratio is to: the first implementation (numpy, or PyTorch eager for a
    convolution)."""
    return next(iter(fns))


#: Seconds between two implementations' measurements (see :func:`main`).
SETTLE_S = 0.3


def measure(fn, reps: int = 5, min_s: float = 0.01):
    """``(wall, cpu)`` seconds per call of ``fn``: the minimum over ``reps`` batches of calls
    lasting at least ``min_s`` each (one warm-up call first)."""
    n = calls_per_repeat(fn, min_s)
    wall, cpu = float("inf"), float("inf")
    for _ in range(reps):
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(n):
            fn()
        wall = min(wall, (time.perf_counter() - t0) / n)
        cpu = min(cpu, (time.process_time() - c0) / n)
    return wall, cpu


def override_decisions():
    """Wrap ``sample_categorical`` so that the values of ``state["values"]`` (one per call, in
    order; ``""`` keeps the default) become the default decisions; returns ``state``."""
    from mlc_mlir.schedule import sampling

    cls = next(c for c in vars(sampling).values()
               if isinstance(c, type) and "sample_categorical" in vars(c))
    orig = cls.sample_categorical
    state = {"values": [], "i": 0}

    def sample(self, candidates, probs, decision=None, default=None):
        i = state["i"]
        state["i"] += 1
        if i < len(state["values"]) and state["values"][i] != "":
            v = int(state["values"][i])
            if v not in candidates:
                raise SystemExit(f"override {i}: {v} is not among {candidates}")
            default = list(candidates).index(v)
        return orig(self, candidates, probs, decision, default)

    cls.sample_categorical = sample
    return state


def prepare(name, threads, label, value, state):
    """A callable running variant ``label`` of ``name`` (checked against the float64
    reference first)."""
    import mlc_mlir as mlc
    from mlc_mlir.schedule.default_rules import apply_default_schedule
    from mlc_mlir.target import host_target
    from mlc_mlir.tune.database import Database

    if label.startswith("lib"):
        from mlc_mlir.runtime.library import load_library
        f = load_library(value)[build_ours(name)[1]]
        xs = inputs(name)
        check(name, f(*xs), reference(name, xs))
        outs = [np.empty(r.shape, np.float32) for r in f.signature.results]
        return lambda: f(*xs, out=outs)
    mod, fname = build_ours(name)
    state["values"], state["i"] = [], 0
    if label.startswith("db"):
        exe = mlc.compile(mod, database=Database(value), threads=threads)
    elif label == "default":   # mlc.compile's own path (a convolution's layout stage included)
        exe = mlc.compile(mod, threads=threads)
    else:
        state["values"] = value.split(",") if value else []
        sch = mlc.Schedule(mod)
        apply_default_schedule(sch, host_target(), 1 if label.startswith("one") else threads)
        if os.environ.get("SHOW"):
            print(label, sch.trace, file=sys.stderr)
        exe = mlc.compile(sch.mod)
    f = exe[fname]
    xs = inputs(name)
    check(name, f(*xs), reference(name, xs))
    outs = [np.empty(r.shape, np.float32) for r in f.signature.results]
    return lambda: f(*xs, out=outs)


def print_sustained(name, threads, rounds, calls, fns, kernel):
    """Time ``calls`` back-to-back calls of each of ``fns`` per round, in turn, and print the
    median round's mean per call (and the fastest round's) with its ratio to the peer's."""
    means = {k: [] for k in fns}
    for _ in range(rounds):
        for k, fn in fns.items():
            for _ in range(max(1, calls // 50)):   # wake the threads up
                fn()
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            means[k].append((time.perf_counter() - t0) / calls)
    med = {k: statistics.median(v) for k, v in means.items()}
    print(f"{name} t={threads} sustained {calls} calls x {rounds} rounds, load={os.getloadavg()[0]:.1f} "
          f"openblas={','.join(map(str, kernel))} "
          + " | ".join(f"{k} {med[k] * 1e3:.3f} ms ({med[peer_of(fns)] / med[k]:.2f}x; fastest round "
                       f"{min(means[k]) * 1e3:.3f} ms)" for k in fns), flush=True)


def main(argv):
    name, threads, rounds = argv[0], int(argv[1]), int(argv[2])
    state = override_decisions()
    peer = numpy_fn(name, inputs(name))   # None for a convolution: PyTorch eager then
    fns = {"numpy": peer} if peer is not None else {"torch": prepare_torch(name, threads)[0]}
    for label, value in [("default", "")] + [a.split("=", 1) for a in argv[3:]]:
        fns[label] = prepare(name, threads, label, value, state)
    sustained = int(os.environ.get("SUSTAINED", "0"))
    wall = {k: float("inf") for k in fns}
    cpu = dict(wall)
    with threadpool_limits(limits=threads):
        kernel = [i.get("architecture") for i in threadpool_info() if i.get("user_api") == "blas"]
        if sustained:
            return print_sustained(name, threads, rounds, sustained, fns, kernel)
        for _ in range(rounds):
            for k, fn in fns.items():
                # the previous implementation's idle threads first go to sleep: OpenBLAS's spin
                # for about 0.1 s after a call, libomp's for KMP_BLOCKTIME (200 ms); on 2 cores
                # they took a core from whatever ran next (the same schedule measured 0.52 ms
                # right after numpy and 0.39 ms after itself, 2 threads)
                time.sleep(SETTLE_S)
                w, c = measure(fn)
                wall[k], cpu[k] = min(wall[k], w), min(cpu[k], c)
    print(f"{name} t={threads} load={os.getloadavg()[0]:.1f} openblas={','.join(map(str, kernel))} "
          + " | ".join(f"{k} {wall[k] * 1e3:.3f} ms ({wall[peer_of(fns)] / wall[k]:.2f}x; cpu "
                       f"{cpu[k] * 1e3:.3f} ms {cpu[peer_of(fns)] / cpu[k]:.2f}x)" for k in fns), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
