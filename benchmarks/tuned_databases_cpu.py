"""Compare tuning databases on one ONNX model: compile it with the default schedules and with
each database, check every executable against the default's outputs, and time them in the same
process, in alternating rounds (min of each), at 1 and 2 OpenMP threads.

    python benchmarks/tuned_databases_cpu.py resnet18.onnx DB1.jsonl [DB2.jsonl ...]

The input is ResNet-18's example input of ``models_cpu`` (1x3x224x224). Prints, per thread count
and executable, the min ms and ``default / this`` (> 1: the database's compile is faster).
"""

from __future__ import annotations

import ctypes
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mlc_mlir as mlc  # noqa: E402
from mlc_mlir.pipeline.libraries import libomp_path  # noqa: E402
from mlc_mlir.tune.database import Database  # noqa: E402
from models_cpu import numpy_inputs  # noqa: E402
from timing import min_median_seconds  # noqa: E402

#: Alternating rounds per thread count.
ROUNDS = 5


def main(onnx_file: str, databases) -> int:
    """Compile, check and time (see the module docstring)."""
    mod = mlc.from_onnx(onnx_file)
    exes = {"default": mlc.compile(mod)}
    for path in databases:
        exes[path] = mlc.compile(mod, database=Database(path))
    xs = numpy_inputs("resnet18-onnx")
    ref = exes["default"](*xs)
    for exe in exes.values():
        np.testing.assert_allclose(exe(*xs), ref, rtol=1e-3, atol=1e-3)
    omp = ctypes.CDLL(libomp_path())
    for threads in (1, 2):
        omp.omp_set_num_threads(threads)
        ms = {k: [] for k in exes}
        for _ in range(ROUNDS):
            for k, exe in exes.items():
                ms[k].append(min_median_seconds(lambda: exe(*xs), repeat=3, min_repeat_s=0.2)[0] * 1e3)
        base = min(ms["default"])
        for k in exes:
            print(f"threads {threads}  {k:45s} min {min(ms[k]):8.2f} ms  default/this {base / min(ms[k]):.2f}x",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
