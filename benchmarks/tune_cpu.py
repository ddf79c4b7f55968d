"""Tuned vs default schedules vs numpy, PyTorch eager and TVM MetaSchedule on the CPU.

One row per (workload, threads, impl) with ``ms`` (minimum over repeats; ``med_ms`` the median),
``gflops`` (FLOP/s; for softmax / layer_norm "FLOP" is the usual op count per element),
``ratio_to_numpy`` and ``ratio_to_torch`` (peer time / our time from the same run, > 1 is faster
than the peer; numpy has no conv2d, so conv rows only have the torch ratio) and ``tune_s``.

Method
------
* Every (impl, thread count) runs in its own subprocess, one after the other, never interleaved
  (OpenBLAS / OpenMP / torch thread pools spin against each other on 2 shared cores). All children
  get ``OMP_NUM_THREADS=t``; numpy (OpenBLAS) is limited with threadpoolctl, PyTorch with
  ``torch.set_num_threads(t)``, ours with ``mlc.compile(mod, threads=t)``; TVM gets
  ``llvm -mcpu=<host> -num-cores t`` (plain ``llvm`` would be generic x86-64 without FMA).
* Before timing, each impl's output is compared with a float64 numpy reference (max abs error
  relative to max |ref| <= 1e-3); a wrong or crashing impl gives a FAIL row with the reason.
* Timing: one warm-up call, then ``number`` calls per repeat with ``number`` doubled until a repeat
  lasts >= 50 ms, 7 repeats (``benchmarks/timing.py``'s method); ours calls the compiled function
  with preallocated outputs, numpy/torch call the library (results allocated per call).
* impls: ``numpy``, ``torch`` (eager, CPU build), ``default`` (``mlc.compile``'s target-derived
  default schedules), ``tuned<N>`` (``mlc.tune(trials=N)`` then ``mlc.compile(database=db)``),
  ``tvm<N>`` (MetaSchedule ``tune_tir`` with ``max_trials_global=N``, run with the Python of a
  throwaway venv ``--tvm-python``, default ``/tmp/tvmvenv/bin/python``; created with
  ``python -m venv --system-site-packages /tmp/tvmvenv && /tmp/tvmvenv/bin/pip install
  apache-tvm==0.27.0.post1 apache-tvm-ffi==0.1.14.post0 xgboost psutil cloudpickle``). Its
  ``LocalBuilder`` / ``LocalRunner`` get ``--tvm-timeout`` seconds per candidate (TVM's default
  30; on a loaded host every build exceeds it and the worker is restarted, build after build).
* Tuning records are cached in ``benchmarks/.tune_cache/<workload>-<threads>t/`` (TVM in
  ``tvm-<workload>-<threads>t/``), so re-runs resume: 256 trials continue from the 64 records.
  ``tune_s`` is the cumulative tuning wall time for that many trials (stored in
  ``tune_seconds.json`` next to the records; a cached run shows the stored time).
* The digits MLP (``mlc_mlir.cli.demo``: 64-128-10, dense+relu, dense) is trained once with
  scikit-learn and its weights cached in ``benchmarks/.tune_cache/digits_mlp.npz``; batch 360 is
  the whole test split, batch 1 its first image.
* ``matmul1000x999x1023`` is (1000 x 999) @ (999 x 1023) (M x K x N), ``matmul777x513x1029``
  (777 x 513) @ (513 x 1029); ``dense64x900x300+bias+relu`` is ``relu(x @ w.T + b)`` with x
  (64 x 900), w (300 x 900): a GEMM with small M and an N that no power-of-two tile divides.
* The table ends with the contraction targets of issue 23 checked on the run's own rows
  (:func:`target_checks`): tuned >= 0.9x numpy, the most threads no slower than one, >= 1.5x
  TVM's GFLOP/s at the same trial budget in <= 1/5 of its tuning time.

    python benchmarks/tune_cpu.py [--trials 64,256] [--threads 1,2] [--workloads ...]
        [--tune-workloads ...] [--impls numpy,torch,default,tuned,tvm] [--json] [--quick]
        [--save benchmarks/results]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import time
import traceback

import numpy as np

try:
    from mlc_mlir.ir.constants import line_aligned
except ImportError:   # the TVM venv runs this file's TVM workers: TVM copies inputs into its own buffers
    def line_aligned(value):
        return value
from timing import min_median_seconds  # benchmarks/timing.py; this folder is on sys.path

HERE = os.path.dirname(os.path.abspath(__file__))
CACHE = os.path.join(HERE, ".tune_cache")
TVM_PYTHON = "/tmp/tvmvenv/bin/python"
TOL = 1e-3

_MLP_FLOP_PER_ROW = 2 * (64 * 128 + 128 * 10)

#: name -> (input shapes, FLOP per call)
WORKLOADS = {
    "matmul512": ([(512, 512), (512, 512)], 2 * 512 ** 3),
    "matmul1024": ([(1024, 1024), (1024, 1024)], 2 * 1024 ** 3),
    "matmul2048": ([(2048, 2048), (2048, 2048)], 2 * 2048 ** 3),
    "matmul1000x999x1023": ([(1000, 999), (999, 1023)], 2 * 1000 * 999 * 1023),
    "matmul777x513x1029": ([(777, 513), (513, 1029)], 2 * 777 * 513 * 1029),
    "dense128x784x128+bias+relu": ([(128, 784), (128, 784), (128,)], 2 * 128 * 784 * 128),
    "dense64x900x300+bias+relu": ([(64, 900), (300, 900), (300,)], 2 * 64 * 900 * 300),
    "conv2d1x64x56x56k3": ([(1, 64, 56, 56), (64, 64, 3, 3)], 2 * 64 * 64 * 9 * 56 * 56),
    "conv2d1x256x14x14k3": ([(1, 256, 14, 14), (256, 256, 3, 3)], 2 * 256 * 256 * 9 * 14 * 14),
    "conv2d1x64x56x56k3s2f128": ([(1, 64, 56, 56), (128, 64, 3, 3)], 2 * 128 * 64 * 9 * 28 * 28),
    "conv2d1x64x56x56k1s2f128": ([(1, 64, 56, 56), (128, 64, 1, 1)], 2 * 128 * 64 * 28 * 28),
    "conv2d1x256x14x14k1": ([(1, 256, 14, 14), (256, 256, 1, 1)], 2 * 256 * 256 * 14 * 14),
    "softmax512x1000": ([(512, 1000)], 5 * 512 * 1000),
    "layer_norm512x768": ([(512, 768), (768,), (768,)], 8 * 512 * 768),
    "add+relu1M": ([(1 << 20,), (1 << 20,)], 2 * (1 << 20)),
    "mlp_digits_b1": ([(1, 64)], 1 * _MLP_FLOP_PER_ROW),
    "mlp_digits_b360": ([(360, 64)], 360 * _MLP_FLOP_PER_ROW),
}
#: conv2d workload -> (stride, padding); the others are 3x3, stride 1, padding 1 (the ResNet-18
#: layers: ``s2`` downsampling convolutions, ``k1`` pointwise ones).
CONV_GEOMETRY = {"conv2d1x64x56x56k3s2f128": (2, 1), "conv2d1x64x56x56k1s2f128": (2, 0),
                 "conv2d1x256x14x14k1": (1, 0)}
DEFAULT_TUNE = ("matmul1024", "dense128x784x128+bias+relu", "conv2d1x64x56x56k3")
QUICK_WORKLOADS = ("matmul1024", "dense128x784x128+bias+relu", "conv2d1x64x56x56k3",
                   "softmax512x1000", "layer_norm512x768", "mlp_digits_b360")


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------- inputs, references

def mlp_params():
    """(weights [(in, out)], biases, x_test) of the digits MLP, trained once and cached."""
    path = os.path.join(CACHE, "digits_mlp.npz")
    if not os.path.exists(path):
        from mlc_mlir.cli.demo import train_mlp
        clf, _, x_test, _, _ = train_mlp()
        os.makedirs(CACHE, exist_ok=True)
        np.savez(path, w0=clf.coefs_[0], w1=clf.coefs_[1], b0=clf.intercepts_[0],
                 b1=clf.intercepts_[1], x=x_test)
    z = np.load(path)
    f32 = lambda a: np.ascontiguousarray(a, dtype=np.float32)  # noqa: E731
    return [f32(z["w0"]), f32(z["w1"])], [f32(z["b0"]), f32(z["b1"])], f32(z["x"])


def inputs(name):
    """The arrays of workload ``name`` (the same for every implementation), each starting on a
    cache line as PyTorch's allocator places tensors and as the tuner's workers measure
    candidates (numpy's own large arrays start 16 bytes past a line)."""
    if name.startswith("mlp"):
        b = WORKLOADS[name][0][0][0]
        return [line_aligned(np.ascontiguousarray(mlp_params()[2][:b]))]
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal(s).astype(np.float32) for s in WORKLOADS[name][0]]
    if name.startswith("conv2d"):
        xs[1] *= np.float32(1.0 / np.sqrt(xs[1][0].size))
    return [line_aligned(x) for x in xs]


def numpy_fn(name, xs):
    """A numpy implementation of ``name`` (float32 or float64 by the inputs); None for conv2d.
    Also used by ``default_schedules.py``."""
    if name.startswith("matmul"):
        return lambda: xs[0] @ xs[1]
    if name.startswith("dense"):
        return lambda: np.maximum(xs[0] @ xs[1].T + xs[2], 0)
    if name.startswith("softmax"):
        def sm():
            e = np.exp(xs[0] - xs[0].max(axis=1, keepdims=True))
            return e / e.sum(axis=1, keepdims=True)
        return sm
    if name.startswith("layer_norm"):
        def ln():
            x = xs[0]
            c = x - x.mean(axis=1, keepdims=True)
            return c / np.sqrt((c * c).mean(axis=1, keepdims=True) + 1e-5) * xs[1] + xs[2]
        return ln
    if name.startswith("add+relu"):
        return lambda: np.maximum(xs[0] + xs[1], 0)
    if name.startswith("mlp"):
        ws, bs, _ = mlp_params()
        ws = [w.astype(xs[0].dtype) for w in ws]
        bs = [b.astype(xs[0].dtype) for b in bs]
        return lambda: np.maximum(xs[0] @ ws[0] + bs[0], 0) @ ws[1] + bs[1]
    return None


def reference(name, xs):
    """float64 reference output."""
    x64 = [x.astype(np.float64) for x in xs]
    fn = numpy_fn(name, x64)
    if fn is not None:
        return fn()
    from numpy.lib.stride_tricks import sliding_window_view
    s, p = CONV_GEOMETRY.get(name, (1, 1))
    k = x64[1].shape[2]
    x = np.pad(x64[0], ((0, 0), (0, 0), (p, p), (p, p)))
    win = sliding_window_view(x, (k, k), axis=(2, 3))[:, :, ::s, ::s]   # (1, C, OH, OW, k, k)
    return np.einsum("nchwij,fcij->nfhw", win, x64[1], optimize=True)


def check(name, got, ref):
    got = np.asarray(got)
    if got.shape != ref.shape:
        raise AssertionError(f"shape {got.shape}, expected {ref.shape}")
    err = float(np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-30))
    if not err <= TOL:
        raise AssertionError(f"wrong result: max relative error {err:.2e} > {TOL:g}")


time_fn = min_median_seconds  # (min, median) s per call: benchmarks/timing.py


# ----------------------------------------------------------------------------- implementations

def build_ours(name):
    import mlc_mlir as mlc
    from mlc_mlir import ops
    from mlc_mlir.cli.demo import build_mlp_module

    if name.startswith("mlp"):
        ws, bs, _ = mlp_params()
        b = WORKLOADS[name][0][0][0]
        return build_mlp_module(ws, bs, [b]), f"mlp_b{b}"
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        a = [f.arg(f"a{i}", shape=s) for i, s in enumerate(WORKLOADS[name][0])]
        if name.startswith("matmul"):
            y = ops.matmul(a[0], a[1])
        elif name.startswith("dense"):
            y = ops.relu(ops.dense(a[0], a[1], a[2]))
        elif name.startswith("softmax"):
            y = ops.softmax(a[0])
        elif name.startswith("layer_norm"):
            y = ops.layer_norm(a[0], a[1], a[2])
        elif name.startswith("add+relu"):
            y = ops.relu(ops.add(a[0], a[1]))
        else:
            st, pd = CONV_GEOMETRY.get(name, (1, 1))
            y = ops.conv2d(a[0], a[1], strides=st, padding=pd)
        f.output(y)
    return bb.finish(), "main"


def tune_seconds_file(work_dir):
    return os.path.join(work_dir, "tune_seconds.json")


def cumulative_tune(work_dir, trials, run):
    """Run ``run()`` (a tuning call resuming from ``work_dir``) and return the cumulative tuning
    seconds for ``trials`` trials; a budget tuned before returns its stored time."""
    path = tune_seconds_file(work_dir)
    done = {}
    if os.path.exists(path):
        with open(path) as fh:
            done = {int(k): v for k, v in json.load(fh).items()}
    t0 = time.perf_counter()
    result = run()
    spent = time.perf_counter() - t0
    if trials in done:
        return result, done[trials], True
    prior = max((v for k, v in done.items() if k < trials), default=0.0)
    done[trials] = prior + spent
    os.makedirs(work_dir, exist_ok=True)
    with open(path, "w") as fh:
        json.dump(done, fh)
    return result, done[trials], False


def prepare_ours(name, impl, threads):
    """(callable, output, tune_s, note) for impl default / tuned<N>."""
    import mlc_mlir as mlc

    mod, fname = build_ours(name)
    tune_s, note = None, ""
    if impl == "default":
        exe = mlc.compile(mod, threads=threads)
    else:
        trials = int(impl[len("tuned"):])
        work_dir = os.path.join(CACHE, f"{name}-{threads}t")
        db, tune_s, cached = cumulative_tune(work_dir, trials, lambda: mlc.tune(
            mod, target="cpu", trials=trials, work_dir=work_dir, threads=threads,
            progress=False))
        with open(os.path.join(work_dir, "database.jsonl")) as fh:
            records = sum(1 for line in fh if line.strip())
        note = ("cached, " if cached else "") + f"{records} records"
        exe = mlc.compile(mod, database=db, threads=threads)
    f = exe[fname]
    xs = inputs(name)
    outs = [np.empty(r.shape, np.float32) for r in f.signature.results]
    return (lambda: f(*xs, out=outs)), (lambda: f(*xs)), tune_s, note


def prepare_torch(name, threads):
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(threads)
    torch.set_grad_enabled(False)
    t = [torch.from_numpy(x) for x in inputs(name)]
    if name.startswith("mlp"):
        ws, bs, _ = mlp_params()
        w0, w1 = (torch.from_numpy(np.ascontiguousarray(w.T)) for w in ws)
        b0, b1 = (torch.from_numpy(b) for b in bs)
        fn = lambda: F.linear(F.relu(F.linear(t[0], w0, b0)), w1, b1)  # noqa: E731
    else:
        table = {
            "matmul": lambda: t[0] @ t[1],
            "dense": lambda: F.relu(F.linear(t[0], t[1], t[2])),
            "softmax": lambda: torch.softmax(t[0], 1),
            "layer_norm": lambda: F.layer_norm(t[0], (t[0].shape[1],), t[1], t[2]),
            "add+relu": lambda: F.relu(t[0] + t[1]),
            "conv2d": lambda: F.conv2d(t[0], t[1], stride=CONV_GEOMETRY.get(name, (1, 1))[0],
                                       padding=CONV_GEOMETRY.get(name, (1, 1))[1]),
        }
        fn = next(v for k, v in table.items() if name.startswith(k))
    return fn, (lambda: fn().numpy()), None, ""


def tvm_compute(name):
    """TE compute of ``name``: (args list)."""
    from tvm import te, topi

    shapes = WORKLOADS[name][0]
    if name.startswith("matmul"):
        a, b = (te.placeholder(s, "float32", f"a{i}") for i, s in enumerate(shapes))
        k = te.reduce_axis((0, shapes[0][1]), "k")
        c = te.compute((shapes[0][0], shapes[1][1]),
                       lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), "matmul")
        return [a, b, c]
    if name.startswith("dense"):
        x, w, bias = (te.placeholder(s, "float32", f"a{i}") for i, s in enumerate(shapes))
        k = te.reduce_axis((0, shapes[0][1]), "k")
        d = te.compute((shapes[0][0], shapes[1][0]),
                       lambda i, j: te.sum(x[i, k] * w[j, k], axis=k), "dense")
        y = te.compute(d.shape, lambda i, j: te.max(d[i, j] + bias[j], 0.0), "bias_relu")
        return [x, w, bias, y]
    if name.startswith("conv2d"):
        x, w = (te.placeholder(s, "float32", f"a{i}") for i, s in enumerate(shapes))
        st, pd = CONV_GEOMETRY.get(name, (1, 1))
        return [x, w, topi.nn.conv2d_nchw(x, w, st, pd, 1)]
    if name.startswith("softmax"):
        x = te.placeholder(shapes[0], "float32", "a0")
        return [x, topi.nn.softmax(x, axis=1)]
    if name.startswith("layer_norm"):
        x, g, b = (te.placeholder(s, "float32", f"a{i}") for i, s in enumerate(shapes))
        return [x, g, b, topi.nn.layer_norm(x, g, b, axis=[1], epsilon=1e-5)]
    if name.startswith("mlp"):
        ws, bs, _ = mlp_params()
        x = te.placeholder(shapes[0], "float32", "a0")
        params = [te.placeholder(p.shape, "float32", f"p{i}")
                  for i, p in enumerate([ws[0], bs[0], ws[1], bs[1]])]
        h = x
        for layer in range(2):
            w, b = params[2 * layer], params[2 * layer + 1]
            k = te.reduce_axis((0, w.shape[0]), f"k{layer}")
            d = te.compute((h.shape[0], w.shape[1]),
                           lambda i, j, h=h, w=w, k=k: te.sum(h[i, k] * w[k, j], axis=k),
                           f"dense{layer}")
            if layer == 0:
                h = te.compute(d.shape, lambda i, j, d=d, b=b: te.max(d[i, j] + b[j], 0.0), "br0")
            else:
                h = te.compute(d.shape, lambda i, j, d=d, b=b: d[i, j] + b[j], "b1")
        return [x] + params + [h]
    raise ValueError(name)


def prepare_tvm(name, impl, threads, mcpu, timeout_s=30.0):
    import tvm
    from tvm import te
    from tvm.s_tir import meta_schedule as ms

    trials = int(impl[len("tvm"):])
    target = tvm.target.Target({"kind": "llvm", "mcpu": mcpu, "num-cores": threads})
    mod = tvm.IRModule({"main": te.create_prim_func(tvm_compute(name)).with_attr(
        "global_symbol", "main")})
    work_dir = os.path.join(CACHE, f"tvm-{name}-{threads}t")
    db, tune_s, cached = cumulative_tune(work_dir, trials, lambda: ms.tune_tir(
        mod, target, work_dir, max_trials_global=trials, num_trials_per_iter=64,
        builder=ms.builder.LocalBuilder(max_workers=threads, timeout_sec=timeout_s),
        runner=ms.runner.LocalRunner(timeout_sec=timeout_s), num_tuning_cores=threads))
    sch = ms.tir_integration.compile_tir(db, mod, target)
    lib = tvm.compile(sch.mod if sch is not None else mod, target=target)
    dev = tvm.cpu()
    xs = inputs(name)
    if name.startswith("mlp"):
        ws, bs, _ = mlp_params()
        xs = xs + [ws[0], bs[0], ws[1], bs[1]]
    args = [tvm.runtime.tensor(x, dev) for x in xs]
    ref_shape = reference(name, inputs(name)).shape
    out = tvm.runtime.tensor(np.zeros(ref_shape, np.float32), dev)
    f = lib["main"]

    def run():
        f(*args, out)
    return run, (lambda: (run(), out.numpy())[1]), tune_s, "cached" if cached else ""


def worker(impl, names, threads, repeat, mcpu, tvm_timeout=30.0):
    """Emit one JSON row per workload on stdout as soon as it is measured."""
    lim = None
    if impl == "numpy":
        from threadpoolctl import threadpool_limits
        lim = threadpool_limits(limits=threads)
    for name in names:
        row = {"workload": name, "threads": threads, "impl": impl}
        try:
            xs = inputs(name)
            ref = reference(name, xs)
            if impl == "numpy":
                fn = numpy_fn(name, xs)
                if fn is None:
                    continue
                out_fn, tune_s, note = fn, None, ""
            elif impl == "torch":
                fn, out_fn, tune_s, note = prepare_torch(name, threads)
            elif impl.startswith("tvm"):
                fn, out_fn, tune_s, note = prepare_tvm(name, impl, threads, mcpu, tvm_timeout)
            else:
                fn, out_fn, tune_s, note = prepare_ours(name, impl, threads)
            check(name, out_fn(), ref)
            best, med = time_fn(fn, repeat=repeat)
            row.update(ms=best * 1e3, med_ms=med * 1e3, tune_s=tune_s, note=note)
        except Exception as e:  # noqa: BLE001 -- a FAIL row, not a crash of the whole run
            traceback.print_exc(file=sys.stderr)
            row.update(ms=None, fail=f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
                       if str(e) else type(e).__name__)
        print(json.dumps(row), flush=True)
    if lim is not None:
        lim.unregister() if hasattr(lim, "unregister") else None


# ----------------------------------------------------------------------------- driver

def run_worker(impl, names, threads, args, python=sys.executable):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    if impl == "numpy":
        env["OPENBLAS_NUM_THREADS"] = str(threads)
    cmd = [python, os.path.abspath(__file__), "--worker", impl, "--threads", str(threads),
           "--workloads", ",".join(names), "--repeat", str(args.repeat), "--mcpu", args.mcpu,
           "--tvm-timeout", str(args.tvm_timeout)]
    log(f"{impl} threads={threads}: {','.join(names)}")
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    seen = {r["workload"] for r in rows}
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["?"])[-1][:160]
        for n in names:
            if n not in seen:
                rows.append({"workload": n, "threads": threads, "impl": impl, "ms": None,
                             "fail": f"worker exit {proc.returncode}: {tail}"})
    if args.verbose or any(r.get("fail") for r in rows):
        sys.stderr.write(proc.stderr[-4000:])
    log(f"  done in {time.perf_counter() - t0:.1f} s")
    return rows


def tvm_available(python):
    if not os.path.exists(python):
        return False
    r = subprocess.run([python, "-c", "import tvm.s_tir.meta_schedule, xgboost"],
                       capture_output=True, text=True)
    return r.returncode == 0


def fmt(v, spec):
    return "-" if v is None else format(v, spec)


def table(rows, header):
    cols = ["workload", "thr", "impl", "ms", "med_ms", "GFLOP/s", "x_numpy", "x_torch", "tune_s"]
    lines = [header, ""]
    body = []
    for r in rows:
        if r.get("ms") is None:
            body.append([r["workload"], str(r["threads"]), r["impl"],
                         "FAIL" if r.get("fail") else "-", r.get("fail") or r.get("note", ""),
                         "", "", "", ""])
            continue
        tune = fmt(r.get("tune_s"), ".0f") + (f" ({r['note']})" if r.get("note") else "")
        body.append([r["workload"], str(r["threads"]), r["impl"], f"{r['ms']:.4g}",
                     f"{r['med_ms']:.4g}", f"{r['gflops']:.1f}", fmt(r.get("ratio_to_numpy"), ".2f"),
                     fmt(r.get("ratio_to_torch"), ".2f"), tune if r.get("tune_s") is not None
                     else "-"])
    widths = [max(len(c), *(len(b[i]) for b in body if not (b[3] in ("FAIL", "-") and i == 4)))
              for i, c in enumerate(cols)] if body else [len(c) for c in cols]
    lines.append("  ".join(c.ljust(w) for c, w in zip(cols, widths)))
    prev = None
    for b in body:
        if prev is not None and b[0] != prev:
            lines.append("")
        prev = b[0]
        if b[3] in ("FAIL", "-"):
            lines.append("  ".join(x.ljust(w) for x, w in zip(b[:4], widths[:4])) + "  " + b[4])
        else:
            lines.append("  ".join(x.ljust(w) for x, w in zip(b, widths)).rstrip())
    return "\n".join(lines)


def target_checks(rows):
    """Lines checking issue 23's contraction targets on the rows of one run, per tuned
    budget ``tunedN`` of each matmul / dense workload: ``x_numpy`` >= 0.9 at every thread count;
    the tuned time with the most threads <= the time with one; where a ``tvmN`` row of the same
    budget exists, GFLOP/s >= 1.5x TVM's and ``tune_s`` <= 1/5 of TVM's. Each check reads
    ``ok``, ``MISS`` or ``-`` (a row it needs is missing)."""
    ms = {(r["workload"], r["threads"], r["impl"]): r for r in rows if r.get("ms")}
    lines = []
    budgets = sorted({r["impl"] for r in rows if r["impl"].startswith("tuned")},
                     key=lambda i: int(i[5:]))
    names = list(dict.fromkeys(r["workload"] for r in rows
                               if r["workload"].startswith(("matmul", "dense"))))
    threads = sorted({r["threads"] for r in rows})

    def verdict(ok):
        return "-" if ok is None else ("ok" if ok else "MISS")

    for impl in budgets:
        tvm = "tvm" + impl[5:]
        for n in names:
            got = [ms.get((n, t, impl)) for t in threads]
            if not any(got):
                continue
            parts = []
            for t, r in zip(threads, got):
                x = r and r.get("ratio_to_numpy")
                parts.append(f"{t}t x_numpy {fmt(x, '.2f')} {verdict(None if x is None else x >= 0.9)}")
            if len(threads) > 1:
                lo, hi = got[0], got[-1]
                parts.append(f"{threads[-1]}t<= 1t {verdict(None if not (lo and hi) else hi['ms'] <= lo['ms'])}")
            for t, r in zip(threads, got):
                v = ms.get((n, t, tvm))
                if r and v:
                    speed = v["ms"] / r["ms"]
                    quick = (r["tune_s"] or 0) / v["tune_s"] if v.get("tune_s") else None
                    parts.append(f"{t}t vs {tvm} {speed:.2f}x {verdict(speed >= 1.5)}, tune time "
                                 f"{fmt(quick, '.2f')} {verdict(None if quick is None else quick <= 0.2)}")
            lines.append(f"{n} {impl}: " + "; ".join(parts))
    return lines


def main(argv=None):
    p = argparse.ArgumentParser(description="tuned / default vs numpy, PyTorch and TVM")
    p.add_argument("--workloads", default=",".join(WORKLOADS))
    p.add_argument("--tune-workloads", default=",".join(DEFAULT_TUNE),
                   help="workloads that get tuned and TVM rows ('all' for every one)")
    p.add_argument("--trials", default="64,256")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--impls", default="numpy,torch,default,tuned,tvm")
    p.add_argument("--tvm-trials", default=None, help="TVM trial budgets (default: --trials)")
    p.add_argument("--tvm-python", default=TVM_PYTHON)
    p.add_argument("--tvm-timeout", type=float, default=30.0,
                   help="seconds TVM's LocalBuilder / LocalRunner allow one candidate (TVM's "
                        "default 30; a loaded host needs more, or every build times out)")
    p.add_argument("--tvm-workloads", default=None,
                   help="workloads with TVM rows (default: those of --tune-workloads)")
    p.add_argument("--json", action="store_true", help="one JSON object per row instead of a table")
    p.add_argument("--quick", action="store_true",
                   help="6 workloads, 64 trials, 3 repeats, no TVM")
    p.add_argument("--save", metavar="DIR", help="also write DIR/tune_cpu_<date>.txt and .json")
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--verbose", action="store_true", help="show the workers' stderr")
    p.add_argument("--mcpu", default=None, help=argparse.SUPPRESS)
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    names = [n for n in args.workloads.split(",") if n]
    if args.worker:
        worker(args.worker, names, int(args.threads), args.repeat, args.mcpu, args.tvm_timeout)
        return

    from mlc_mlir.target import describe, host_target

    tgt = host_target()
    args.mcpu = args.mcpu or tgt.cpu
    if args.quick:
        names = [n for n in names if n in QUICK_WORKLOADS] if args.workloads != ",".join(
            WORKLOADS) else list(QUICK_WORKLOADS)
        args.trials, args.repeat = args.trials.split(",")[0], 3
        args.impls = args.impls.replace("tvm", "")
    bad = [n for n in names if n not in WORKLOADS]
    if bad:
        p.error(f"unknown workloads {bad}; choose from {list(WORKLOADS)}")
    tune_names = (names if args.tune_workloads == "all"
                  else [n for n in names if n in args.tune_workloads.split(",")])
    trials = [int(t) for t in args.trials.split(",") if t]
    tvm_names = tune_names if args.tvm_workloads is None else [
        n for n in tune_names if n in args.tvm_workloads.split(",")]
    tvm_trials = [int(t) for t in (args.tvm_trials or args.trials).split(",") if t]
    impls = [i for i in args.impls.split(",") if i]
    threads = [int(t) for t in args.threads.split(",")]
    have_tvm = "tvm" in impls and tvm_available(args.tvm_python)

    rows = []
    for phase in ("peers", "tuned", "tvm"):
        for t in threads:
            if phase == "peers":
                for impl in ("numpy", "torch", "default"):
                    if impl in impls:
                        rows += run_worker(impl, names, t, args)
            elif phase == "tuned" and "tuned" in impls and tune_names:
                for n in trials:
                    rows += run_worker(f"tuned{n}", tune_names, t, args)
            elif phase == "tvm" and "tvm" in impls and tvm_names:
                for n in tvm_trials:
                    if have_tvm:
                        rows += run_worker(f"tvm{n}", tvm_names, t, args, python=args.tvm_python)
                    else:
                        rows += [{"workload": w, "threads": t, "impl": f"tvm{n}", "ms": None,
                                  "note": "tvm: not installed"} for w in tvm_names]

    ms = {(r["workload"], r["threads"], r["impl"]): r["ms"] for r in rows}
    for r in rows:
        r["gflops"] = (WORKLOADS[r["workload"]][1] / (r["ms"] * 1e-3) / 1e9
                       if r.get("ms") else None)
        for peer in ("numpy", "torch"):
            other = ms.get((r["workload"], r["threads"], peer))
            r[f"ratio_to_{peer}"] = other / r["ms"] if other and r.get("ms") else None
        r.setdefault("tune_s", None)
    order = {n: i for i, n in enumerate(names)}
    rows.sort(key=lambda r: (order[r["workload"]], r["threads"]))

    stamp = datetime.datetime.now()
    header = (f"tune_cpu  {stamp:%Y-%m-%d %H:%M}  {describe(tgt)}\n"
              f"times: min (and median) of {args.repeat} repeats, each >= 50 ms of calls; "
              "x_numpy / x_torch = peer ms / this ms (same run, > 1 is faster); "
              "tune_s = cumulative tuning wall time")
    text = table(rows, header)
    checks = target_checks(rows)
    if checks:
        text += "\n\ntargets (issue 23: tuned >= 0.9x numpy, 2 threads <= 1 thread, >= 1.5x TVM " \
                "in <= 1/5 of its tuning time)\n" + "\n".join(checks)
    if args.json:
        for r in rows:
            print(json.dumps(r))
    else:
        print(text)
    if args.save:
        os.makedirs(args.save, exist_ok=True)
        base = os.path.join(args.save, f"tune_cpu_{stamp:%Y-%m-%d}")
        with open(base + ".txt", "w") as fh:
            fh.write(text + "\n")
        with open(base + ".json", "w") as fh:
            json.dump({"header": header, "command": " ".join(sys.argv), "rows": rows}, fh,
                      indent=1)
        log(f"wrote {base}.txt and {base}.json")


if __name__ == "__main__":
    main()
