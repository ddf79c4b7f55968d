"""CPU time (not wall time) per call of the default-compiled f32 matmul at 1 and 2 threads.

On a host shared with other jobs, wall times of a 2-thread run mostly measure the scheduler; the
process's user + system CPU time per call (``getrusage``) measures the work the schedule does,
and a 2-thread schedule whose CPU time is twice the 1-thread one duplicates work per thread
(each thread padding or packing all of an operand). Run with ``OMP_WAIT_POLICY=passive
KMP_BLOCKTIME=0`` so that threads waiting at a barrier sleep instead of spinning (spinning
would count as CPU time). Calls of the 1- and 2-thread executables alternate, best of rounds.

    OMP_WAIT_POLICY=passive KMP_BLOCKTIME=0 python benchmarks/matmul_cpu_time.py 777 513 1029
"""

from __future__ import annotations

import argparse
import resource
import time

import numpy as np

import mlc_mlir as mlc
from mlc_mlir import ops


def cpu_seconds() -> float:
    """User + system CPU time of this process (all its threads), s."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("m", type=int)
    ap.add_argument("k", type=int)
    ap.add_argument("n", type=int)
    ap.add_argument("--calls", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        a, b = f.arg("a", (args.m, args.k)), f.arg("b", (args.k, args.n))
        f.output(ops.matmul(a, b))
    mod = bb.finish()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((args.m, args.k)).astype(np.float32)
    y = rng.standard_normal((args.k, args.n)).astype(np.float32)
    exes = {t: mlc.compile(mod, threads=t)["main"] for t in (1, 2)}
    for t, fn in exes.items():
        np.testing.assert_allclose(fn(x, y), x @ y, rtol=1e-3, atol=1e-2)
    best = {t: (float("inf"), float("inf")) for t in exes}
    for _ in range(args.rounds):
        for t, fn in exes.items():
            c0, w0 = cpu_seconds(), time.perf_counter()
            for _ in range(args.calls):
                fn(x, y)
            cpu, wall = (cpu_seconds() - c0) / args.calls, (time.perf_counter() - w0) / args.calls
            best[t] = (min(best[t][0], cpu), min(best[t][1], wall))
    print(f"matmul {args.m}x{args.k}x{args.n}: " + "; ".join(
        f"{t} thread(s) cpu {c * 1e3:.2f} ms wall {w * 1e3:.2f} ms" for t, (c, w) in best.items()))


if __name__ == "__main__":
    main()
