"""Default schedules (``mlc_mlir.schedule.default_rules``) vs unscheduled code vs numpy (and
PyTorch when installed), one row per (workload, threads, implementation).

Each (implementation, thread count) runs in its own subprocess, one after the other, never
interleaved (OpenBLAS / OpenMP thread pools spin against each other): ours with
``OMP_NUM_THREADS=t``, numpy limited with threadpoolctl, PyTorch with ``torch.set_num_threads``.
Times are the minimum over repeats (``benchmarks/timing.py``); ratios compare GFLOP/s (or
elements/s for memory-bound ops) with the peer from the same run.

    python benchmarks/default_schedules.py [--workloads matmul512,softmax] [--threads 1,2] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import numpy as np
from timing import best_seconds  # benchmarks/timing.py; this folder is on sys.path
from tune_cpu import WORKLOADS as TUNE_WORKLOADS  # the workloads, their modules, inputs and peers
from tune_cpu import build_ours, inputs, numpy_fn, prepare_torch

#: name -> (input shapes, FLOP (or elements touched) per call): tune_cpu.py's workloads
WORKLOADS = {name: TUNE_WORKLOADS[name] for name in (
    "matmul512", "matmul1024", "dense128x784x128+bias+relu", "softmax512x1000",
    "layer_norm512x768", "add+relu1M", "conv2d1x64x56x56k3")}

#: Unscheduled code that would take seconds per call is skipped.
SLOW_UNSCHEDULED = ("matmul1024",)


def build(name):
    return build_ours(name)[0]


def worker(kind, names, threads):
    rows = []
    if kind == "numpy":
        from threadpoolctl import threadpool_limits
        with threadpool_limits(limits=threads):
            for n in names:
                fn = numpy_fn(n, inputs(n))
                if fn is not None:
                    rows.append((n, best_seconds(fn)))
        return rows
    if kind == "torch":
        for n in names:   # prepare_torch sets the thread count and disables autograd
            rows.append((n, best_seconds(prepare_torch(n, threads)[0])))
        return rows
    import mlc_mlir as mlc
    from mlc_mlir.schedule.default_rules import default_schedule
    from mlc_mlir.target import host_target

    for n in names:
        if kind == "unscheduled" and n in SLOW_UNSCHEDULED:
            continue
        mod = build(n)
        if kind == "default":
            mod = default_schedule(mod, host_target(), threads)
        exe = mlc.compile(mod)
        xs = inputs(n)
        ref = torch_ref(n, xs)
        got = exe(*xs)
        err = float(np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-30))
        if err > 1e-3:
            raise SystemExit(f"{kind} {n}: wrong result, relative error {err}")
        f = exe["main"]
        outs = [np.empty(r.shape, np.float32) for r in f.signature.results]
        rows.append((n, best_seconds(lambda: f(*xs, out=outs), repeat=7 if kind == "default" else 3)))
    return rows


def torch_ref(name, xs):
    fn = numpy_fn(name, [x.astype(np.float64) for x in xs])
    if fn is not None:
        return fn()
    from numpy.lib.stride_tricks import sliding_window_view
    x = np.pad(xs[0].astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    win = sliding_window_view(x, (3, 3), axis=(2, 3))          # (1, C, H, W, 3, 3)
    return np.einsum("nchwij,fcij->nfhw", win, xs[1].astype(np.float64))


def have_torch() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def run_worker(kind, names, threads):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    cmd = [sys.executable, __file__, "--worker", kind, "--threads", str(threads),
           "--workloads", ",".join(names)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"worker {kind} (threads={threads}) failed:\n{proc.stderr}")
    return [{"workload": n, "threads": threads, "impl": kind, "ms": s * 1e3}
            for n, s in json.loads(proc.stdout)]


def main(argv=None):
    p = argparse.ArgumentParser(description="default schedules vs unscheduled vs numpy/PyTorch")
    p.add_argument("--workloads", default=",".join(WORKLOADS))
    p.add_argument("--threads", default="1,2")
    p.add_argument("--json", action="store_true", help="one JSON object per row")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    names = [n for n in args.workloads.split(",") if n]
    if args.worker:
        print(json.dumps(worker(args.worker, names, int(args.threads))))
        return
    from mlc_mlir.target import describe, host_target

    peers = ["numpy"] + (["torch"] if have_torch() else [])
    rows = []
    for t in (int(x) for x in args.threads.split(",")):
        for kind in peers + (["unscheduled"] if t == 1 else []) + ["default"]:
            rows += run_worker(kind, names, t)
    ms = {(r["workload"], r["threads"], r["impl"]): r["ms"] for r in rows}
    for r in rows:
        r["gflops"] = WORKLOADS[r["workload"]][1] / (r["ms"] * 1e-3) / 1e9
        for peer in peers:
            other = ms.get((r["workload"], r["threads"], peer))
            r[f"vs_{peer}"] = other / r["ms"] if other else None
    if args.json:
        for r in rows:
            print(json.dumps(r))
        return
    print(describe(host_target()))
    head = f"{'workload':<28}{'threads':>8}{'impl':>13}{'ms':>10}{'GFLOP/s':>9}"
    print(head + "".join(f"{'vs ' + p:>10}" for p in peers))
    for r in sorted(rows, key=lambda r: (list(WORKLOADS).index(r["workload"]), r["threads"])):
        line = f"{r['workload']:<28}{r['threads']:>8}{r['impl']:>13}{r['ms']:>10.3f}{r['gflops']:>9.1f}"
        print(line + "".join(f"{r[f'vs_{p}']:>9.2f}x" if r[f"vs_{p}"] else f"{'-':>10}" for p in peers))
    print("vs <peer>: the peer's time / this row's time (>1: faster than the peer); "
          "softmax/layer_norm/add+relu 'GFLOP/s' count ~5/8/2 ops per element")


if __name__ == "__main__":
    main()
