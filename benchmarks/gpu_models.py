"""Models and elementwise bandwidth on the GPU: ours (``target="cuda"``, default GPU schedules)
against PyTorch eager on the same GPU, same run.

    python benchmarks/gpu_models.py [--models resnet18,bert] [--elementwise-mib 256]

* Elementwise: ``a + b`` over float32 vectors of ``--elementwise-mib`` MiB each (three streams:
  two reads, one write) against a device-to-device copy through PyTorch (two streams), both in
  GB/s counting bytes read plus written; ratio = ours / copy.
* Models: the ResNet-18 and 2-layer BERT of ``models_cpu.py`` imported with ``mlc.from_torch``
  (parameters bound as constants: uploaded to the GPU once, when the code is loaded), compiled
  for CUDA, checked against PyTorch on the GPU (max relative error over a numpy call and a
  device call) and timed two ways: inputs kept on the GPU (``device``: ours with
  ``benchmark(device=True)``, PyTorch eager with CUDA events) and numpy in, numpy out
  (``host``: the copies to and from the GPU included, PyTorch as ``net(x.cuda()).cpu()``).
  Ratio = torch ms / ours ms (> 1: ours faster).

Times are the minimum over repeats (ms). Without a CUDA driver or GPU the script prints one
``skipped`` line and exits 0.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import mlc_mlir as mlc
from mlc_mlir import ops
from mlc_mlir.runtime import DeviceArray
from mlc_mlir.runtime.cuda import driver_problem
from models_cpu import torch_model  # benchmarks/ is on sys.path when run as a script


def torch_ms(fn, repeat: int = 7, reps: int = 20) -> float:
    """Min over ``repeat`` of CUDA-event timings of ``reps`` calls of ``fn`` (ms per call)."""
    import torch

    fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        torch.cuda.synchronize()
        best = min(best, start.elapsed_time(end) / reps)
    return best


def ours_ms(exe, args, device: bool = True) -> float:
    """Ours per call (ms): on inputs kept on the GPU (``Executable.benchmark(device=True)``) or
    on numpy arrays (copies in and out included)."""
    once = exe.benchmark(*args, number=1, repeat=1, device=device).min_ms
    number = max(1, min(50, int(200 / max(once, 1e-3))))
    return exe.benchmark(*args, number=number, repeat=5, device=device).min_ms


def wall_ms(fn, repeat: int = 5, reps: int = 10) -> float:
    """Min over ``repeat`` of the host wall time of ``reps`` calls of ``fn`` (ms per call)."""
    fn()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        best = min(best, (time.perf_counter() - t0) * 1e3 / reps)
    return best


def elementwise(mib: int) -> dict:
    """``a + b`` (ours) vs a device-to-device copy (torch), GB/s counting reads and writes."""
    import torch

    n = mib * (1 << 20) // 4
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(ops.add(f.arg("a", shape=(n,)), f.arg("b", shape=(n,))))
    exe = mlc.compile(bb.finish(), target="cuda")
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
    err = float(np.abs(exe(a, b) - (a + b)).max())
    ms = ours_ms(exe, (a, b))
    src = torch.from_numpy(a).cuda()
    dst = torch.empty_like(src)
    copy = torch_ms(lambda: dst.copy_(src))
    return {"n": n, "max_abs_err": err, "ours_gbs": 3 * 4 * n / ms / 1e6,
            "copy_gbs": 2 * 4 * n / copy / 1e6}


def model(name: str) -> dict:
    """Import, compile for CUDA, check against torch on the GPU, time both."""
    import torch

    net, args = torch_model(name)
    t0 = time.perf_counter()
    exe = mlc.compile(mlc.from_torch(net, args), target="cuda")
    compile_s = time.perf_counter() - t0
    xs = [t.numpy() for t in args]
    got = [exe(*xs), exe.on_device(*[DeviceArray.from_numpy(x) for x in xs]).numpy()]
    net = net.cuda()
    dargs = [t.cuda() for t in args]
    with torch.no_grad():
        want = net(*dargs).float().cpu().numpy()
    rel = max(float(np.abs(g - want).max() / max(np.abs(want).max(), 1e-30)) for g in got)

    def eager():
        with torch.no_grad():
            net(*dargs)

    def eager_host():
        with torch.no_grad():
            net(*[t.cuda() for t in args]).cpu()
    return {"model": name, "compile_s": compile_s, "max_rel_err": rel, "ours_ms": ours_ms(exe, xs),
            "torch_ms": torch_ms(eager), "ours_host_ms": ours_ms(exe, xs, device=False),
            "torch_host_ms": wall_ms(eager_host)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="resnet18,bert")
    ap.add_argument("--elementwise-mib", type=int, default=256)
    opts = ap.parse_args(argv)
    problem = driver_problem()
    if problem is not None:
        print(f"gpu_models: skipped: {problem}")
        return 0
    import torch

    print(f"device: {torch.cuda.get_device_name()}")
    if opts.elementwise_mib:
        r = elementwise(opts.elementwise_mib)
        print(f"elementwise add, {r['n']} float32: ours {r['ours_gbs']:.0f} GB/s, "
              f"copy {r['copy_gbs']:.0f} GB/s, ratio {r['ours_gbs'] / r['copy_gbs']:.2f} "
              f"(max abs err {r['max_abs_err']:.1e})", flush=True)
    for name in [m for m in opts.models.split(",") if m]:
        try:
            r = model(name)
        except mlc.MlcError as e:
            print(f"{name}: failed: {str(e).splitlines()[0]}", flush=True)
            continue
        print(f"{name}: device: ours {r['ours_ms']:.3f} ms, torch eager {r['torch_ms']:.3f} ms, "
              f"ratio {r['torch_ms'] / r['ours_ms']:.2f}; host: ours {r['ours_host_ms']:.3f} ms, "
              f"torch {r['torch_host_ms']:.3f} ms, ratio {r['torch_host_ms'] / r['ours_host_ms']:.2f}; "
              f"max rel err {r['max_rel_err']:.1e}, compile {r['compile_s']:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
