"""The small BERT of ``models_cpu.py``: tuned vs default compile (and the default without the
constant-bias simplification of ``FuseAttention``), per thread count, timed in one process in
interleaved rounds (a loaded host: only same-process ratios mean anything); prints the attention
task's measurements (default knobs vs the best candidate) from the tuning database.

    python benchmarks/bert_tuned_interleaved.py [--trials 160] [--threads 1,2] [--rounds 10]
"""

from __future__ import annotations

import argparse
import ctypes
import os
import tempfile
import time
from unittest import mock

from models_cpu import bert, numpy_inputs  # benchmarks/, on sys.path
from timing import min_median_seconds


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=160)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=10)
    args = ap.parse_args()
    import mlc_mlir as mlc
    from mlc_mlir.pipeline.layout_passes import fuse_attention
    from mlc_mlir.pipeline.libraries import libomp_path
    from mlc_mlir.schedule.rules.attention_knobs import decided_knobs
    from mlc_mlir.target import describe, host_target
    from mlc_mlir.tune.attention_task import extract_attention_tasks

    print("#", describe(host_target()), "| load average", os.getloadavg())
    mod = mlc.from_torch(*bert())
    xs = numpy_inputs("bert")
    omp = ctypes.CDLL(libomp_path())
    work = tempfile.mkdtemp(prefix="bert-tune-")
    for t in (int(x) for x in args.threads.split(",")):
        omp.omp_set_num_threads(t)
        t0 = time.perf_counter()
        db = mlc.tune(mod, trials=args.trials, work_dir=os.path.join(work, f"{t}t"), threads=t, progress=False)
        print(f"# threads {t}: tuning {time.perf_counter() - t0:.0f} s, "
              f"{len([r for r in db.records() if not r.final])} trials, load {os.getloadavg()[0]:.1f}")
        tkey = host_target().key()
        for a in extract_attention_tasks(mod, host_target()):
            best, default = db.best(a.task.workload, tkey), db.default(a.task.workload, tkey)
            knobs = decided_knobs(mlc.Trace.from_json(best.trace)) if best else None
            print(f"#   attention task: default {a.default.as_tuple()} {default.latency_ms:.4f} ms, best "
                  f"{knobs.as_tuple() if knobs else 'default'} {best.latency_ms:.4f} ms "
                  f"({len(a.candidates)} candidates; knobs = key block, row vectors, prefetch, threads, exp degree, transpose)")
        exes = {"tuned": mlc.compile(mod, database=db, threads=t), "default": mlc.compile(mod, threads=t)}
        with mock.patch.object(fuse_attention, "_constant_bias", lambda bias, m, label: bias):
            exes["default-whole-bias"] = mlc.compile(mod, threads=t)
        ref = exes["default"](*xs)
        for name, exe in exes.items():
            assert abs(exe(*xs) - ref).max() < 1e-4, name
        times = {n: [] for n in exes}
        for _ in range(args.rounds):
            for n, exe in exes.items():
                times[n].append(min_median_seconds(lambda: exe(*xs), repeat=3, min_repeat_s=0.1)[0])
        base = min(times["default"])
        for n in exes:
            print(f"threads {t}  {n:20s} min {min(times[n]) * 1e3:.4f} ms   default/this "
                  f"{base / min(times[n]):.3f}x")
        print(f"# load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
