"""A/B of the ``lower`` stage's loop-nest outlining (:mod:`mlc_mlir.pipeline.outline_nests`,
``CompileOptions.outline_nests``): each model compiled once per setting in one process, then
timed in turn at 1 and 2 OpenMP threads; prints compile CPU seconds, whether the outputs are the
same bits and the best ms of each over ``rounds`` interleaved rounds.

Usage: ``python benchmarks/outline_nests_ab.py resnet18,resnet50-light,bert 4 auto,always``
(models of ``models_cpu.py``; rounds, default 4; two or more settings, default
``always,never``).
"""

import ctypes
import os
import sys
import time

import numpy as np

import models_cpu as mc
import mlc_mlir as mlc
from mlc_mlir.pipeline.libraries import libomp_path
from timing import min_median_seconds


def main() -> None:
    omp = ctypes.CDLL(libomp_path())
    names = sys.argv[1].split(",")
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    settings = sys.argv[3].split(",") if len(sys.argv) > 3 else ["always", "never"]
    work = os.path.join("/tmp", "outline_nests_ab")
    os.makedirs(work, exist_ok=True)
    for name in names:
        if name in ("resnet18", "bert"):
            model, args = mc.torch_model(name)
            mod = mlc.from_torch(model, args)
        else:
            mod = mlc.from_onnx(mc.onnx_path(name, work))
        xs = mc.numpy_inputs(name)
        exes, cpu_s = {}, {}
        for k in settings:
            t = time.process_time()
            exes[k] = mlc.compile(mod, outline_nests=k)
            cpu_s[k] = time.process_time() - t
        outs = [np.asarray(o[0] if isinstance(o, (list, tuple)) else o) for o in (exes[k](*xs) for k in exes)]
        same = all(o.tobytes() == outs[0].tobytes() for o in outs)
        print(f"{name}: compile CPU s " + ", ".join(f"{k} {cpu_s[k]:.1f}" for k in settings)
              + f"; outputs {'bit-identical' if same else 'DIFFER'}", flush=True)
        a, b = settings[0], settings[1]
        for th in (1, 2):
            omp.omp_set_num_threads(th)
            best = {k: float("inf") for k in exes}
            for _ in range(rounds):
                for k, exe in exes.items():
                    best[k] = min(best[k], min_median_seconds(lambda: exe(*xs), repeat=3, min_repeat_s=0.2)[0])
            print(f"  {th} thr: " + ", ".join(f"{k} {best[k] * 1e3:.3f} ms" for k in settings)
                  + f", {b}/{a} {best[b] / best[a]:.3f}", flush=True)


if __name__ == "__main__":
    main()
