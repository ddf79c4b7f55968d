"""Compile time of whole models with the default schedules: the light ONNX models of the onnx
wheel (``onnx/backend/test/data/light``: DenseNet-121, Inception v1/v2, ResNet-50, ShuffleNet,
SqueezeNet, VGG-19, ZFNet-512, AlexNet) and the ResNet-18 of ``models_cpu.py``.

Each model runs in its own process (fresh memory, fresh LLVM): ``mlc.from_onnx`` then
``mlc.compile(threads=1)``; the row prints the wall seconds and the CPU seconds of the process
(``timing.cpu_seconds``: LLVM runs in the calling thread, so its time is counted), next to the
peer's preparation time (onnxruntime ``InferenceSession`` with all graph optimizations), one
call of each (ms, the best repeat of ``timing.best_seconds``) and the largest difference
between their outputs.

    python benchmarks/compile_cpu.py [--models densenet121,resnet18] [--timeout 900] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import models_cpu  # benchmarks/models_cpu.py; this folder is on sys.path
import numpy as np
from timing import best_seconds, cpu_seconds  # benchmarks/timing.py

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: torch-defined models of models_cpu.py that are exported to ONNX here (name -> models_cpu name)
EXPORTED = {"resnet18": "resnet18-onnx"}


def measure_one(name: str, path: str) -> dict:
    """One model in this process: import + compile (wall / CPU s), onnxruntime's session (s),
    one call of each (ms) and the max |ours - onnxruntime| over the first output."""
    import onnxruntime as ort

    import mlc_mlir as mlc

    w0, c0 = time.perf_counter(), cpu_seconds()
    mod = mlc.from_onnx(path)
    exe = mlc.compile(mod, threads=1)
    wall, cpu = time.perf_counter() - w0, cpu_seconds() - c0
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    t0 = time.perf_counter()
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    ort_s = time.perf_counter() - t0
    rng = np.random.default_rng(0)
    feeds = {i.name: rng.standard_normal([d if isinstance(d, int) else 1 for d in i.shape])
             .astype(np.float32) for i in sess.get_inputs()}
    args = list(feeds.values())
    ours = exe(*args)
    ours = ours[0] if isinstance(ours, (list, tuple)) else ours
    ref = sess.run(None, feeds)[0]
    return {"model": name, "compile_wall_s": wall, "compile_cpu_s": cpu, "ort_session_s": ort_s,
            "mlc_ms": 1e3 * best_seconds(lambda: exe(*args)),
            "ort_ms": 1e3 * best_seconds(lambda: sess.run(None, feeds)),
            "max_abs_diff": float(np.max(np.abs(np.asarray(ours) - ref)))}


def _path_of(name: str, work: str) -> str:
    if name in EXPORTED:
        models_cpu.export_onnx(work)
        return models_cpu.onnx_path(EXPORTED[name], work)
    return models_cpu.light_models()[name]


def main() -> None:
    """Parse the arguments and print one row per model (each measured in a child process)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="", help="comma-separated (default: every light model "
                    "and resnet18)")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per model")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--path", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        print("RESULT " + json.dumps(measure_one(a.one, a.path)))
        return
    from mlc_mlir.target import describe, host_target
    names = [m for m in a.models.split(",") if m] or [*models_cpu.light_models(), *EXPORTED]
    print(f"# CPU: {describe(host_target())}; mlc.compile(threads=1), one process per model; "
          f"onnxruntime intra_op_num_threads=1")
    print(f"{'model':<14}{'compile wall s':>15}{'compile CPU s':>15}{'ort session s':>15}"
          f"{'mlc ms':>10}{'ort ms':>10}{'max |diff|':>12}")
    with tempfile.TemporaryDirectory() as work:
        for name in names:
            cmd = [sys.executable, os.path.abspath(__file__), "--one", name,
                   "--path", _path_of(name, work)]
            try:
                p = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout)
            except subprocess.TimeoutExpired:
                print(f"{name:<14} timed out after {a.timeout:.0f} s")
                continue
            lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
            if not lines:
                tail = (p.stderr.strip().splitlines() or ["no output"])[-1]
                print(f"{name:<14} failed (rc {p.returncode}): {tail}")
                continue
            r = json.loads(lines[-1][len("RESULT "):])
            print(f"{name:<14}{r['compile_wall_s']:>15.1f}{r['compile_cpu_s']:>15.1f}"
                  f"{r['ort_session_s']:>15.2f}{r['mlc_ms']:>10.2f}{r['ort_ms']:>10.2f}"
                  f"{r['max_abs_diff']:>12.2e}")
            if a.json:
                print("# " + json.dumps(r))


if __name__ == "__main__":
    main()
