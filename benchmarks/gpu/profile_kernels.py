"""Run each issue-27 target kernel a few times, for a profiler (Nsight Compute) to read:

    ncu --clock-control none --section SpeedOfLight --section Occupancy --section LaunchStats \
        -c 12 python benchmarks/gpu/profile_kernels.py [NAME ...]

Cases (default schedules, ``target="cuda"``, arrays kept on the GPU): ``f32_matmul`` and
``f16_matmul`` (4096 x 4096 x 4096), ``add`` (two 2**26-element f32 arrays), ``softmax`` (4096 x
4096 f32). Each is compiled, then called twice on device arrays (``Executable.on_device``), so the
profiler sees every kernel of the case. Prints one line per case with the wall time of the second
call (ms). Without a CUDA driver it prints one ``skipped`` line and exits 0.
"""

from __future__ import annotations

import sys
import time

import numpy as np

import mlc_mlir as mlc
from mlc_mlir import ops
from mlc_mlir.runtime.cuda import driver_problem
from mlc_mlir.runtime.device_array import DeviceArray


def _function(build, shapes, dtype="float32"):
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(build(*(f.arg(f"x{i}", shape=s, dtype=dtype) for i, s in enumerate(shapes))))
    return bb.finish()


CASES = {
    "f32_matmul": (ops.matmul, [(4096, 4096), (4096, 4096)], "float32"),
    "f16_matmul": (ops.matmul, [(4096, 4096), (4096, 4096)], "float16"),
    "add": (ops.add, [(1 << 26,), (1 << 26,)], "float32"),
    "softmax": (lambda x: ops.softmax(x, axis=-1), [(4096, 4096)], "float32"),
}


def main(argv=None) -> int:
    names = (argv if argv is not None else sys.argv[1:]) or list(CASES)
    problem = driver_problem()
    if problem is not None:
        print(f"profile_kernels: skipped: {problem}")
        return 0
    rng = np.random.default_rng(0)
    for name in names:
        build, shapes, dtype = CASES[name]
        exe = mlc.compile(_function(build, shapes, dtype), target="cuda")
        args = [DeviceArray.from_numpy(rng.standard_normal(s).astype(dtype)) for s in shapes]
        exe.on_device(*args)
        t0 = time.perf_counter()
        exe.on_device(*args)
        print(f"{name}: second call {(time.perf_counter() - t0) * 1e3:.3f} ms (wall, incl. launch)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
