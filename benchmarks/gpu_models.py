"""Models and elementwise bandwidth on the GPU: ours (``target="cuda"``, default GPU schedules)
against PyTorch eager on the same GPU, same run.

    python benchmarks/gpu_models.py [--models resnet18,bert] [--elementwise-mib 256]
                                    [--rows softmax,layer_norm] [--row-shapes 8192x768,4096x4096]

* Elementwise: ``a + b`` over float32 vectors of ``--elementwise-mib`` MiB each (three streams:
  two reads, one write), ours (default schedule, and the same at one vector lane) against
  PyTorch's ``add`` and a device-to-device copy (two streams) on the same device buffers, in
  GB/s counting bytes read plus written, from the device time (CUPTI through
  ``torch.profiler``) and from the synchronized wall clock; ratio = ours / copy.
* Rows: ``softmax`` / ``layer_norm`` over the last dim of each ``--row-shapes`` float32 matrix
  (BERT's row ops; 768: a warp per row, 4096: a block per row) against ``torch.softmax`` /
  ``F.layer_norm`` on the same GPU, both in GB/s
  counting one read and one write of the matrix (the least any implementation moves; ours
  runs several kernels, each a pass over the rows); ratio = ours / torch.
  The same ops with the shared-memory tree instead of warp shuffles (the rule's other
  decision) are timed too ("tree").
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
from mlc_mlir.schedule.default_rules import apply_default_schedule
from mlc_mlir.schedule.gpu_reduction import WARP_SHUFFLE
from mlc_mlir.schedule.rules.gpu_rules import vector_lanes
from mlc_mlir.target import Target, get_target
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


def device_us(fn, reps: int = 20) -> float:
    """Device time of ``fn`` per call (us): the summed durations of the kernels and copies it
    runs, as CUPTI records them (``torch.profiler``, CUDA activity), over ``reps`` calls after a
    warm-up. The same measure for our kernels (launched by MLIR's CUDA runtime) and PyTorch's:
    launch latency, stream setup and host synchronization are left out of both.

    Raises
    ------
    RuntimeError
        If the profiler recorded no device activity.
    """
    import torch
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    spans = [e.time_range.elapsed_us() for e in prof.events()
             if e.device_type == torch.autograd.DeviceType.CUDA]
    if not spans:
        raise RuntimeError("torch.profiler recorded no CUDA kernel or copy")
    return sum(spans) / reps


def synced_ms(fn, reps: int = 20, repeat: int = 5) -> float:
    """Wall-clock ms per call of ``fn`` followed by a device synchronization (min over
    ``repeat`` rounds): what a caller waits for, launch and synchronization included."""
    import torch

    fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
            torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t0) * 1e3 / reps)
    return best


def _one_lane(mod, op: str):
    """The default CUDA schedule of ``mod`` with the vector width decision of ``op`` at one
    lane (the scalar kernel: one element per thread), for comparison in the same run."""
    target = get_target("cuda")
    probe = mlc.Schedule(mod)
    info = probe.get(probe.get_block(op)).info
    lanes = vector_lanes(target.cuda_arch, info, len(info.dims) - 1)
    sch = mlc.Schedule(mod)
    apply_default_schedule(sch, target)
    (i,) = [i for i, inst in enumerate(sch.trace.insts)
            if inst.kind == "sample_categorical" and inst.attrs["candidates"] == lanes]
    return mlc.Schedule.from_trace(mod, sch.trace, decisions={i: lanes.index(1)}).mod


def elementwise(mib: int) -> dict:
    """``a + b`` over float32 vectors of ``mib`` MiB: ours (default schedule: vector lanes;
    and the same schedule at one lane) against PyTorch's ``torch.add(a, b, out=c)`` and
    device-to-device copy ``dst.copy_(src)``, all on the same device buffers (PyTorch views ours
    through ``__cuda_array_interface__``). Bandwidth in GB/s counts bytes read plus written the
    same way for all: ``3 * 4 * n`` for an add, ``2 * 4 * n`` for the copy; from the device
    time per call (:func:`device_us`) and from the synchronized wall clock
    (:func:`synced_ms`)."""
    import torch

    n = mib * (1 << 20) // 4
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(ops.add(f.arg("a", shape=(n,)), f.arg("b", shape=(n,))))
    mod = bb.finish()
    exes = {"ours": mlc.compile(mod, target="cuda"),
            "ours 1 lane": mlc.compile(_one_lane(mod, "add"), target="cuda")}
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
    da, db, dc = DeviceArray.from_numpy(a), DeviceArray.from_numpy(b), DeviceArray.empty((n,), np.float32)
    ta, tb, tc = (torch.as_tensor(x, device="cuda") for x in (da, db, dc))
    err = {}
    runs = {}
    for name, exe in exes.items():
        exe.on_device(da, db, out=dc)
        err[name] = float(np.abs(dc.numpy() - (a + b)).max())
        runs[name] = (lambda e=exe: e.on_device(da, db, out=dc), 3)
    runs["torch add"] = (lambda: torch.add(ta, tb, out=tc), 3)
    runs["torch copy"] = (lambda: tc.copy_(ta), 2)
    out = {"n": n, "max_abs_err": err}
    for name, (fn, streams) in runs.items():
        out[name] = {"synced_gbs": streams * 4 * n / synced_ms(fn) / 1e6}
        try:
            out[name]["device_gbs"] = streams * 4 * n / device_us(fn) / 1e3
        except RuntimeError as e:   # no CUPTI: the line says so, the wall clock still counts
            out["profiler_error"] = str(e)
    return out


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


def tree_schedule(mod: mlc.Module) -> mlc.Module:
    """``mod`` with the default CUDA schedules, each cooperative reduction's combine switched
    to the shared-memory tree (the ``mlc.warp_shuffle = 0`` decision)."""
    sch = mlc.Schedule(mod)
    apply_default_schedule(sch, Target.cuda())
    for blk in sch.model.blocks:
        if WARP_SHUFFLE in blk.annotations:
            sch.annotate(sch.get_block(blk.name, func_name=blk.func), WARP_SHUFFLE, 0)
    return sch.mod


def row_op(name: str, rows: int, k: int) -> dict:
    """``softmax`` / ``layer_norm`` over rows of ``k`` (ours, default schedules: warp-shuffle
    combines; and with the shared-memory tree) vs torch on the GPU; GB/s counting one read and
    one write of the ``rows x k`` float32 matrix."""
    import torch
    import torch.nn.functional as F

    rng = np.random.default_rng(0)
    x = rng.standard_normal((rows, k)).astype(np.float32)
    gamma, beta = (rng.standard_normal(k).astype(np.float32) for _ in range(2))
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        a = f.arg("x", shape=(rows, k))
        f.output(ops.softmax(a, axis=-1) if name == "softmax" else ops.layer_norm(a, gamma, beta))
    mod = bb.finish()
    t0 = time.perf_counter()
    exe = mlc.compile(mod, target="cuda")
    compile_s = time.perf_counter() - t0
    tree = mlc.compile(tree_schedule(mod), target="cuda")
    dx = torch.from_numpy(x).cuda()
    dg, db = torch.from_numpy(gamma).cuda(), torch.from_numpy(beta).cuda()
    ref = (lambda: torch.softmax(dx, -1)) if name == "softmax" else \
        (lambda: F.layer_norm(dx, (k,), dg, db))
    want = ref().cpu().numpy()
    err = float(max(np.abs(exe(x) - want).max(), np.abs(tree(x) - want).max()))
    nbytes = 2 * 4 * rows * k
    return {"ours_gbs": nbytes / ours_ms(exe, (x,)) / 1e6, "torch_gbs": nbytes / torch_ms(ref) / 1e6,
            "tree_gbs": nbytes / ours_ms(tree, (x,)) / 1e6, "max_abs_err": err, "compile_s": compile_s}


def _report(items, run, line) -> None:
    """Print ``label: line(run(*args))`` for each ``(label, args)`` of ``items``; a compile
    failure prints ``label: failed: ...`` and the next item runs."""
    for label, args in items:
        try:
            r = run(*args)
        except mlc.MlcError as e:
            print(f"{label}: failed: {str(e).splitlines()[0]}", flush=True)
            continue
        print(f"{label}: {line(r)}", flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="resnet18,bert")
    ap.add_argument("--elementwise-mib", type=int, default=256)
    ap.add_argument("--rows", default="softmax,layer_norm")
    ap.add_argument("--row-shapes", default="8192x768,4096x4096")
    opts = ap.parse_args(argv)
    problem = driver_problem()
    if problem is not None:
        print(f"gpu_models: skipped: {problem}")
        return 0
    import torch

    print(f"device: {torch.cuda.get_device_name()}")
    if opts.elementwise_mib:
        r = elementwise(opts.elementwise_mib)
        names = ["ours", "ours 1 lane", "torch add", "torch copy"]
        for measure, label in (("device_gbs", "device time"), ("synced_gbs", "synchronized wall clock")):
            if any(measure not in r[k] for k in names):
                print(f"elementwise add ({label}): not measured: {r.get('profiler_error')}")
                continue
            cols = ", ".join(f"{k} {r[k][measure]:.0f}" for k in names)
            print(f"elementwise add, {r['n']} float32, GB/s read+written ({label}): {cols}; "
                  f"ratio ours/copy {r['ours'][measure] / r['torch copy'][measure]:.2f}, "
                  f"ours/torch add {r['ours'][measure] / r['torch add'][measure]:.2f}", flush=True)
        print(f"elementwise max abs err: {r['max_abs_err']}", flush=True)
    _report([(name, (name,)) for name in opts.models.split(",") if name], model,
            lambda r: f"device: ours {r['ours_ms']:.3f} ms, torch eager {r['torch_ms']:.3f} ms, "
                      f"ratio {r['torch_ms'] / r['ours_ms']:.2f}; host: ours {r['ours_host_ms']:.3f} ms, "
                      f"torch {r['torch_host_ms']:.3f} ms, ratio {r['torch_host_ms'] / r['ours_host_ms']:.2f}; "
                      f"max rel err {r['max_rel_err']:.1e}, compile {r['compile_s']:.1f} s")
    shapes = [tuple(int(v) for v in sh.split("x")) for sh in opts.row_shapes.split(",") if sh]
    _report([(f"{n} {rows}x{k} float32", (n, rows, k)) for n in opts.rows.split(",") if n
             for rows, k in shapes], row_op,
            lambda r: f"ours {r['ours_gbs']:.0f} GB/s, torch {r['torch_gbs']:.0f} GB/s, ratio "
                      f"{r['ours_gbs'] / r['torch_gbs']:.2f}; shared-memory tree {r['tree_gbs']:.0f} "
                      f"GB/s (max abs err {r['max_abs_err']:.1e}, compile {r['compile_s']:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
