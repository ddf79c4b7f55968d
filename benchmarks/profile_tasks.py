"""Per-task profile of a whole model: the tuning tasks of ``mlc.tune.extract_tasks`` (the
primitive functions ``graph.FuseOps`` outlines after the layout rewrites), each compiled alone
with the default schedules and timed per OpenMP thread count, with its weight (calls per
inference), GFLOP/s and the weighted total.

A task runs on random inputs with warm caches (its arguments, and the packed weights it reads,
stay in L2/L3 between calls), so the weighted total is a lower bound of the whole model; the
difference to ``benchmarks/models_cpu.py`` is what the model loses to cold caches and to the code
between tasks. Used to find which kernels to work on (TVM MetaSchedule's task-level view;
onnxruntime's per-node profile, ``SessionOptions.enable_profiling``, is the peer's).

    python benchmarks/profile_tasks.py [--model resnet18-onnx] [--threads 1,2] [--filter conv]
                                       [--json]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import tempfile

import numpy as np
from models_cpu import MODELS, export_onnx, onnx_path, torch_model  # benchmarks/, on sys.path


def load(name: str, work: str):
    """The model ``name`` (one of :data:`models_cpu.MODELS`) as an mlc Module, params bound."""
    import mlc_mlir as mlc
    if name in ("resnet18", "bert"):
        return mlc.from_torch(*torch_model(name))
    if name != "resnet50-light":
        export_onnx(work)
    return mlc.from_onnx(onnx_path(name, work))


def profile(name: str, threads, pattern: str = ""):
    """Rows ``{task, weight, mflop, ms: {threads: min ms}}`` of the tasks of ``name`` whose
    name contains ``pattern``, in the order of the tasks."""
    import mlc_mlir as mlc
    from mlc_mlir.pipeline.libraries import libomp_path
    from mlc_mlir.tune.task import extract_tasks

    with tempfile.TemporaryDirectory() as work:
        tasks = extract_tasks(load(name, work))
    omp = ctypes.CDLL(libomp_path())
    rng = np.random.default_rng(0)
    rows = []
    for t in tasks:
        if pattern not in t.name:
            continue
        fn = mlc.compile(t.module)[t.func_name]
        args = [rng.standard_normal(a.shape).astype(a.dtype) if np.dtype(a.dtype).kind == "f"
                else np.zeros(a.shape, a.dtype) for a in fn.signature.args]
        ms = {}
        for th in threads:
            omp.omp_set_num_threads(th)
            fn.benchmark(*args, number=5, repeat=1)          # threads started, caches warm
            ms[th] = fn.benchmark(*args, number=20, repeat=7).min_ms
        rows.append({"task": t.name, "weight": t.weight, "mflop": t.flops / 1e6, "ms": ms})
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="resnet18-onnx", choices=MODELS)
    ap.add_argument("--threads", default="1,2", help="comma-separated OpenMP thread counts")
    ap.add_argument("--filter", default="", help="only tasks whose name contains this")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    args = ap.parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    from mlc_mlir.target import describe, host_target
    rows = profile(args.model, threads, args.filter)
    totals = {th: sum(r["weight"] * r["ms"][th] for r in rows) for th in threads}
    if args.json:
        print(json.dumps({"model": args.model, "cpu": describe(host_target()), "tasks": rows,
                          "weighted_total_ms": totals}))
        return 0
    print(f"CPU: {describe(host_target())}")
    print(f"{'task':58s} {'calls':>5s} {'MFLOP':>8s} " + " ".join(f"{f'{th}T ms':>8s} {'GFLOP/s':>8s}" for th in threads))
    for r in rows:
        cells = " ".join(f"{r['ms'][th]:8.3f} {r['mflop'] / r['ms'][th]:8.1f}" for th in threads)
        print(f"{r['task'][:58]:58s} {r['weight']:5d} {r['mflop']:8.1f} {cells}")
    print(f"{'weighted total (ms)':58s} {'':5s} {'':8s} " + " ".join(f"{totals[th]:8.2f} {'':8s}" for th in threads))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
