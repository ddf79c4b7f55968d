"""Run time of the compile-time cuts, in one process: each model is compiled twice with the
default schedules (``mlc.compile(threads=1)``), once as before the cut (private functions that
differ only in integer constants compiled each on its own) and once as now
(:func:`mlc_mlir.pipeline.constant_variants.merge_constant_variants`: one function, the
constants passed as arguments); the two executables are then called
in turns on the same input (``--rounds`` rounds, the best call of each kept), so a loaded host
slows both alike. A call is timed in CPU seconds of the calling thread (``time.thread_time``;
``threads=1`` runs in it): on a host whose cores other processes share, wall-clock calls of
60-200 ms were preempted so often that the best of 60 differed by 40% between two identical
executables. Prints the compile CPU seconds of each, the best call (ms) of each, their
ratio (now / before), the largest difference between their outputs and the number of
functions merged away.
(The earlier cuts measured with this script, identical outlined nests merged and LLVM's
``-dag-maps-huge-region``, are in ``benchmarks/results/compile_cpu_2026-11-27_znver3_compile-time.txt``.)

    python benchmarks/compile_time_ab.py [--models inception_v1,densenet121,resnet18] [--rounds 30]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import models_cpu  # benchmarks/models_cpu.py; this folder is on sys.path
import numpy as np
from timing import cpu_seconds  # benchmarks/timing.py

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _compile(mod, before: bool):
    """``mlc.compile(mod, threads=1)`` as before the cut (``before``) or as now; CPU s too."""
    import mlc_mlir as mlc

    compile_module = sys.modules["mlc_mlir.pipeline.compile"]
    merge = compile_module.merge_constant_variants
    merged: list = []
    compile_module.merge_constant_variants = \
        (lambda module: {}) if before else (lambda module: merged.append(merge(module)) or merged[-1])
    try:
        c0 = cpu_seconds()
        exe = mlc.compile(mod, threads=1)
        return exe, cpu_seconds() - c0, sum(len(m) for m in merged)
    finally:
        compile_module.merge_constant_variants = merge


def measure(name: str, path: str, rounds: int) -> str:
    """One row: compile CPU s before/now, best call ms before/now, ratio, max |diff|."""
    import mlc_mlir as mlc

    mod = mlc.from_onnx(path)
    before, cpu_before, _ = _compile(mod, True)
    now, cpu_now, merged = _compile(mod, False)
    sig = mod.signature(mod.function_names(public_only=True)[0])
    x = np.random.default_rng(0).standard_normal(sig.args[0].shape).astype(np.float32)
    diff = float(np.max(np.abs(np.asarray(before(x)) - np.asarray(now(x)))))
    best = [float("inf"), float("inf")]
    for _ in range(rounds):
        for i, exe in enumerate((before, now)):
            t0 = time.thread_time()
            exe(x)
            best[i] = min(best[i], time.thread_time() - t0)
    return (f"{name:<14}{cpu_before:>12.1f}{cpu_now:>12.1f}{1e3 * best[0]:>12.2f}{1e3 * best[1]:>12.2f}"
            f"{best[1] / best[0]:>8.3f}{diff:>12.2e}{merged:>8d}")


def main() -> None:
    """Parse the arguments and print one row per model (all in this process)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="inception_v1,densenet121,resnet18")
    ap.add_argument("--rounds", type=int, default=30)
    a = ap.parse_args()
    from mlc_mlir.target import describe, host_target
    print(f"# CPU: {describe(host_target())}; mlc.compile(threads=1), both executables in one "
          "process, called in turns; call = thread CPU ms")
    print(f"{'model':<14}{'before CPU s':>12}{'now CPU s':>12}{'before ms':>12}{'now ms':>12}"
          f"{'ratio':>8}{'max |diff|':>12}{'merged':>8}")
    with tempfile.TemporaryDirectory() as work:
        for name in a.models.split(","):
            if name == "resnet18":
                models_cpu.export_onnx(work)
                path = models_cpu.onnx_path("resnet18-onnx", work)
            else:
                path = models_cpu.light_models()[name]
            print(measure(name, path, a.rounds), flush=True)


if __name__ == "__main__":
    main()
