"""f32 matmul and dense+bias+relu on the CPU: unscheduled vs hand-written schedule vs numpy.

Each (implementation, thread count) runs in its own subprocess, never interleaved with another:
ours with ``OMP_NUM_THREADS=t``; numpy (OpenBLAS) limited to ``t`` threads with threadpoolctl and
with ``OPENBLAS_CORETYPE``/``OPENBLAS_L2_SIZE`` unset in that subprocess only. The schedule is
``mlc_mlir.schedule.cpu_recipes.schedule_matmul_goto``: split/reorder/parallel/cache_read
(packing)/compute_at/unroll/vectorize, fused bias+relu epilogue (reverse_compute_at) for dense,
with its register tile and cache blocking from ``goto_params(host_target(), ...)`` (vector
width, register count, L1d/L2 sizes of this machine).

    python benchmarks/matmul_cpu.py [--sizes 256,512,1024,2048] [--threads 1,2] [--json]

Prints min-of-repeats GFLOP/s and the ratio to numpy from the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import numpy as np
from timing import best_seconds  # benchmarks/timing.py; this folder is on sys.path

DENSE = "dense128x784x128"


def _shape_flops(shape: str):
    if shape == DENSE:
        return 2 * 128 * 784 * 128
    n = int(shape)
    return 2 * n ** 3


def _inputs(shape: str):
    rng = np.random.default_rng(0)
    if shape == DENSE:
        x = rng.standard_normal((128, 784)).astype(np.float32)
        w = rng.standard_normal((128, 784)).astype(np.float32)
        b = rng.standard_normal(128).astype(np.float32)
        return (x,), (w, b)
    n = int(shape)
    return (rng.standard_normal((n, n)).astype(np.float32),
            rng.standard_normal((n, n)).astype(np.float32)), ()


def _time(fn, flops: float) -> float:
    """GFLOP/s of ``fn`` doing ``flops`` per call."""
    return flops / best_seconds(fn) / 1e9


def worker_numpy(shapes, threads):
    from threadpoolctl import threadpool_limits

    out = []
    with threadpool_limits(limits=threads):
        for shape in shapes:
            args, consts = _inputs(shape)
            if shape == DENSE:
                (x,), (w, b) = args, consts
                y = np.empty((128, 128), np.float32)

                def fn():
                    np.matmul(x, w.T, out=y)
                    np.add(y, b, out=y)
                    np.maximum(y, 0, out=y)
            else:
                a, b = args

                def fn():
                    return a @ b
            out.append({"shape": shape, "threads": threads, "impl": "numpy",
                        "gflops": _time(fn, _shape_flops(shape))})
    return out


def build(shape: str, scheduled: bool, threads: int):
    import mlc_mlir as mlc
    from mlc_mlir import ops
    from mlc_mlir.schedule.cpu_recipes import schedule_matmul_goto
    from mlc_mlir.target import host_target

    args, consts = _inputs(shape)
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        if shape == DENSE:
            x = f.arg("x", shape=(128, 784))
            w, b = consts
            f.output(ops.relu(ops.dense(x, w, b)))
        else:
            n = int(shape)
            f.output(ops.matmul(f.arg("a", shape=(n, n)), f.arg("b", shape=(n, n))))
    mod = bb.finish()
    if scheduled:
        sch = mlc.Schedule(mod)
        epi = [sch.get_block("dense.bias_add"), sch.get_block("relu")] if shape == DENSE else []
        blk = sch.get_block("dense" if shape == DENSE else "matmul")
        schedule_matmul_goto(sch, blk, threads=threads, epilogues=epi, target=host_target())
        mod = sch.mod
    return mlc.compile(mod), args


def worker_ours(shapes, threads, impl):
    out = []
    for shape in shapes:
        if impl == "unscheduled" and shape not in (DENSE, "256", "512"):
            continue  # naive loops at 1024^3+ take seconds per call
        exe, args = build(shape, impl == "scheduled", threads)
        if shape == DENSE:
            x, = args
            w, b = _inputs(shape)[1]
            ref = np.maximum(x @ w.T + b, 0)
        else:
            ref = args[0].astype(np.float64) @ args[1]
        got = exe(*args)
        err = float(np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-30))
        if err > 1e-4:
            raise SystemExit(f"{impl} {shape}: wrong result, relative error {err}")
        f = exe["main"]
        outs = [np.empty(r.shape, np.float32) for r in f.signature.results]
        out.append({"shape": shape, "threads": threads, "impl": impl,
                    "gflops": _time(lambda: f(*args, out=outs), _shape_flops(shape))})
    return out


def run_worker(kind: str, shapes, threads: int):
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = str(threads)
    if kind == "numpy":
        env.pop("OPENBLAS_CORETYPE", None)
        env.pop("OPENBLAS_L2_SIZE", None)
    cmd = [sys.executable, __file__, "--worker", kind, "--threads", str(threads),
           "--sizes", ",".join(shapes)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"worker {kind} failed:\n{proc.stderr}")
    return json.loads(proc.stdout)


def main(argv=None):
    p = argparse.ArgumentParser(description="matmul / dense benchmark vs numpy")
    p.add_argument("--sizes", default="256,512,1024,2048")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--no-dense", action="store_true", help="skip dense+bias+relu")
    p.add_argument("--json", action="store_true", help="one JSON object per row")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    shapes = [s for s in args.sizes.split(",") if s]
    if args.worker:
        t = int(args.threads)
        rows = worker_numpy(shapes, t) if args.worker == "numpy" else worker_ours(shapes, t, args.worker)
        print(json.dumps(rows))
        return
    if not args.no_dense:
        shapes.append(DENSE)
    rows = []
    for t in (int(x) for x in args.threads.split(",")):
        for kind in ("numpy", "unscheduled", "scheduled"):
            rows += run_worker(kind, shapes, t)
    peer = {(r["shape"], r["threads"]): r["gflops"] for r in rows if r["impl"] == "numpy"}
    for r in rows:
        r["ratio_to_numpy"] = r["gflops"] / peer[(r["shape"], r["threads"])]
    if args.json:
        for r in rows:
            print(json.dumps(r))
        return
    print(f"{'shape':<18}{'threads':>8}{'impl':>13}{'GFLOP/s':>10}{'vs numpy':>10}")
    for r in sorted(rows, key=lambda r: (r["shape"] != DENSE, r["shape"] == DENSE or int(r["shape"]), r["threads"])):
        print(f"{r['shape']:<18}{r['threads']:>8}{r['impl']:>13}{r['gflops']:>10.1f}{r['ratio_to_numpy']:>9.2f}x")


if __name__ == "__main__":
    main()
