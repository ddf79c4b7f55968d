"""The small BERT of ``models_cpu.py``: tuned vs default compile (and the default without the
constant-bias simplification of ``FuseAttention``), per thread count, timed in one process in
interleaved rounds (a loaded host: only same-process ratios mean anything); checks every
executable against PyTorch (transformers' BertModel); prints the attention task's measurements
(default knobs vs the best candidate) and, per task of the tuning database, the default's and the
best record's latency with the bound they give the model (the weighted sum of the defaults over
that of the bests: what tuning can reach if each task keeps its own time in the model).

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
    import torch
    net, example = bert()
    mod = mlc.from_torch(net, example)
    xs = numpy_inputs("bert")
    with torch.no_grad():
        want = net(torch.from_numpy(xs[0])).numpy()
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
        print_task_bound(mod, db, [a.task for a in extract_attention_tasks(mod, host_target())])
        exes = {"tuned": mlc.compile(mod, database=db, threads=t), "default": mlc.compile(mod, threads=t)}
        with mock.patch.object(fuse_attention, "_constant_bias", lambda bias, m, label: bias):
            exes["default-whole-bias"] = mlc.compile(mod, threads=t)
        for name, exe in exes.items():
            err = float(abs(exe(*xs) - want).max())
            assert err < 1e-4, f"{name}: max |ours - torch| {err}"
        times = {n: [] for n in exes}
        for _ in range(args.rounds):
            for n, exe in exes.items():
                times[n].append(min_median_seconds(lambda: exe(*xs), repeat=3, min_repeat_s=0.1)[0])
        base = min(times["default"])
        for n in exes:
            print(f"threads {t}  {n:20s} min {min(times[n]) * 1e3:.4f} ms   default/this "
                  f"{base / min(times[n]):.3f}x")
        print(f"# load average after: {os.getloadavg()}")


def print_task_bound(mod, db, attention_tasks) -> None:
    """Per task with records (the attention tasks, then ``mlc.tune.extract_tasks`` with ``db``'s
    layouts): the default's and the best record's latency (the tuner's own measurements), calls
    per inference and share of the weighted default; then the weighted totals and their ratio
    (the bound)."""
    from mlc_mlir.target import host_target
    from mlc_mlir.tune import extract_tasks

    tkey = host_target().key()
    rows = []
    for t in attention_tasks + extract_tasks(mod, host_target(), database=db):
        default, best = db.default(t.workload, tkey), db.best(t.workload, tkey)
        if default is not None and best is not None:
            rows.append((t.name[:48], t.weight, default.latency_ms, best.latency_ms))
    total_default = sum(w * d for _, w, d, _ in rows)
    total_best = sum(w * b for _, w, _, b in rows)
    for name, w, d, b in rows:
        print(f"#   {name:48s} x{w}  default {d:.4f} ms  best {b:.4f} ms  {d / b:.3f}x  "
              f"share {100 * w * d / total_default:4.1f}%")
    print(f"#   weighted tasks: default {total_default:.4f} ms, best {total_best:.4f} ms, "
          f"bound {total_default / total_best:.3f}x")


if __name__ == "__main__":
    main()
