"""A/B of the ``lower`` stage's loop-nest outlining (:mod:`mlc_mlir.pipeline.outline_nests`):
each model compiled twice in one process, with the outlining and without it (the stage's
after-bufferization hook replaced by the non-temporal stores alone), then timed in turn at 1 and
2 OpenMP threads; prints compile CPU seconds, the outputs' max difference and the best ms of
each over ``rounds`` interleaved rounds.

Usage: ``python benchmarks/outline_nests_ab.py resnet18,resnet50-light,bert 4`` (models of
``models_cpu.py``; rounds, default 4).
"""

import ctypes
import importlib
import os
import sys
import time

import numpy as np

import models_cpu as mc
import mlc_mlir as mlc
from mlc_mlir.pipeline.libraries import libomp_path
from timing import min_median_seconds

cp = importlib.import_module("mlc_mlir.pipeline.compile")   # the package re-exports compile()


def main() -> None:
    omp = ctypes.CDLL(libomp_path())
    outlined = cp._nests_of_buffers
    names = sys.argv[1].split(",")
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 4
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
        for k in ("outline", "no-outline"):
            cp._nests_of_buffers = outlined if k == "outline" else cp.nontemporal_stores
            t = time.process_time()
            exes[k] = mlc.compile(mod)
            cpu_s[k] = time.process_time() - t
        cp._nests_of_buffers = outlined
        outs = [np.asarray(o[0] if isinstance(o, (list, tuple)) else o) for o in (exes[k](*xs) for k in exes)]
        print(f"{name}: compile CPU s outline {cpu_s['outline']:.1f} no-outline {cpu_s['no-outline']:.1f}; "
              f"max|diff| {np.max(np.abs(outs[0] - outs[1])):.2e}", flush=True)
        for th in (1, 2):
            omp.omp_set_num_threads(th)
            best = {k: float("inf") for k in exes}
            for _ in range(rounds):
                for k, exe in exes.items():
                    best[k] = min(best[k], min_median_seconds(lambda: exe(*xs), repeat=3, min_repeat_s=0.2)[0])
            print(f"  {th} thr: outline {best['outline'] * 1e3:.3f} ms, no-outline {best['no-outline'] * 1e3:.3f} ms, "
                  f"no/with {best['no-outline'] / best['outline']:.3f}", flush=True)


if __name__ == "__main__":
    main()
