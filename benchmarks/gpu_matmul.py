"""Matmul on the GPU: ours (default GPU schedule), ours tuned (the first candidates of the GPU
design space, :mod:`mlc_mlir.tune.gpu_space`: SIMT tiles, or for float16 the tensor-core
rule's decisions) and PyTorch (cuBLAS, TF32 off), same run.

    python benchmarks/gpu_matmul.py [--sizes 1024,4096] [--dtypes float32,float16]
                                    [--candidates 4] [--tiles FILE] [--json]

``--tiles FILE``: a JSON object ``{"float16": [decisions, ...], "float32": [...]}`` whose lists
replace the first candidates of that dtype (tensor-core decisions of
:func:`~mlc_mlir.schedule.rules.gpu_mma.schedule_matmul_mma`, or ``MatmulTiles`` fields).

Prints TFLOP/s (min of repeats) and the ratio to cuBLAS; every kernel is first checked against
``a @ b`` computed by PyTorch in float32 (a wrong one counts as failed). PyTorch runs first, in its own phase
(device tensors, CUDA events); ours then, on arrays kept on the GPU (``Executable.benchmark(...,
device=True)``: inputs copied once, no host copies per call; each call still creates and
synchronizes its launch stream, so the times bound our kernel time from above). Without a
CUDA driver or GPU the script prints one ``skipped`` line and exits 0.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

import mlc_mlir as mlc
from mlc_mlir import ops
from mlc_mlir.ir import dtypes
from mlc_mlir.runtime.cuda import driver_problem
from mlc_mlir.target import get_target
from mlc_mlir.schedule.rules.gpu_mma import schedule_matmul_mma
from mlc_mlir.tune.gpu_space import (MatmulTiles, matmul_tile_candidates, mma_tile_candidates,
                                     sample_gpu_matmul)

#: The resources of the GPU ``mlc.compile(..., target="cuda")`` compiles for.
ARCH = get_target("cuda").cuda_arch
ELEM_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


def _module(n: int, dtype: str):
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(ops.matmul(f.arg("a", shape=(n, n), dtype=dtype), f.arg("b", shape=(n, n), dtype=dtype)))
    return bb.finish()


def _inputs(n: int, dtype: str):
    rng = np.random.default_rng(0)
    np_dtype = dtypes.to_numpy_dtype(dtype)
    return [rng.standard_normal((n, n)).astype(np.float32).astype(np_dtype) for _ in range(2)]


def torch_seconds(n: int, dtype: str) -> float:
    """cuBLAS through ``torch.matmul`` with TF32 off: min over 7 repeats of CUDA-event timing."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    a, b = (torch.from_numpy(x.astype(np.float32)).to("cuda", getattr(torch, dtype))
            for x in _inputs(n, dtype))
    torch.matmul(a, b)
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(7):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        reps = 10
        start.record()
        for _ in range(reps):
            torch.matmul(a, b)
        end.record()
        torch.cuda.synchronize()
        best = min(best, start.elapsed_time(end) / 1e3 / reps)
    return best


#: Largest error of ours against the reference, relative to the reference's largest magnitude:
#: f32 a 4096-long sum in f32; f16/bf16 kernels accumulate in their output type (a 4096-long
#: f16 sum of normal products is off by about 2e-2, bf16 eight times that), a wrong kernel
#: (a stale or missing panel) by about 1.
TOLERANCE = {"float32": 1e-4, "float16": 0.1, "bfloat16": 0.4}


def reference(args, dtype: str) -> np.ndarray:
    """``a @ b`` in float32 on the GPU (TF32 off), the oracle of every kernel of a case."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    a, b = (torch.from_numpy(x.astype(np.float32)).to("cuda") for x in args)
    return torch.matmul(a, b).cpu().numpy()


def ours_seconds(mod, args, ref: np.ndarray, dtype: str) -> float:
    """Compile ``mod`` for CUDA, check one call against ``ref`` (``MlcError`` when off by more
    than :data:`TOLERANCE`), then time it on device arrays."""
    exe = mlc.compile(mod, target="cuda")
    got = np.asarray(exe(*args), dtype=np.float32)
    err = float(np.abs(got - ref).max() / max(float(np.abs(ref).max()), 1e-30))
    if not err <= TOLERANCE[dtype]:
        raise mlc.MlcError(f"wrong result: max error {err:.1e} of the largest magnitude")
    once = exe.benchmark(*args, number=1, repeat=1, device=True).min_ms / 1e3
    number = max(1, min(100, int(0.2 / max(once, 1e-6))))
    return exe.benchmark(*args, number=number, repeat=5, device=True).min_ms / 1e3


#: Tiles tried first (``MatmulTiles(ty, tx, ly, lx, kt, prefetch)``), before the rest of the
#: space in its order: the default without the register prefetch, the previous default (4 x 4
#: per thread, 64 x 64 blocks: four times the blocks of a 1024 matmul), a 64 x 128 block of 128
#: threads, a longer k panel, the best of the previous GPU run, 8 x 4 per thread (B read
#: without bank conflicts).
FIRST = [MatmulTiles(16, 16, 8, 8, 8, 0), MatmulTiles(16, 16, 4, 4, 8, 0),
         MatmulTiles(8, 16, 8, 8, 8, 1), MatmulTiles(16, 16, 8, 8, 16, 1),
         MatmulTiles(4, 16, 8, 8, 4, 0), MatmulTiles(8, 32, 8, 4, 8, 1)]


def candidates(n: int, dtype: str, count: int):
    """The first ``count`` valid tiles of an ``n``-cube matmul: :data:`FIRST`, then the space
    (largest register tiles first)."""
    valid = list(matmul_tile_candidates(n, n, n, ARCH, ELEM_BYTES[dtype]))
    order = [t for t in FIRST if t in valid] + [t for t in valid if t not in FIRST]
    return order[:count]


def tuned(n: int, dtype: str, args, ref, count: int, given=None):
    """Best ``(seconds, tiles)`` over :func:`candidates` (or the ``given`` decisions); a
    candidate that fails is skipped and counted."""
    best, failed = (float("inf"), None), 0
    mod = _module(n, dtype)
    mma = list(mma_tile_candidates(n, n, n, ARCH)) if dtype == "float16" else []
    # the tensor-core default is the first candidate (measured as the default): the next ones
    # and the unstaged form (the previous default)
    cands = (mma[1:count] + mma[-1:]) if mma else candidates(n, dtype, count)
    if given:
        cands = [dict(t, staged=t.get("staged", 1)) if mma else MatmulTiles(**t) for t in given]
    for tiles in cands:
        sch = mlc.Schedule(mod)
        try:
            if mma:
                schedule_matmul_mma(sch, sch.get_block("matmul"), ARCH, forced=tiles)
            else:
                sample_gpu_matmul(sch, sch.get_block("matmul"), tiles, ARCH)
            s = ours_seconds(sch.mod, args, ref, dtype)
        except mlc.MlcError as e:
            failed += 1
            print(f"  {dtype} {n} {tiles}: failed: {str(e).splitlines()[0]}", file=sys.stderr)
            continue
        print(f"  {dtype} {n} {dataclass_dict(tiles)}: {2.0 * n ** 3 / s / 1e12:.2f} TFLOP/s",
              file=sys.stderr, flush=True)
        best = min(best, (s, tiles), key=lambda x: x[0])
    return best, failed


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1024,4096")
    ap.add_argument("--dtypes", default="float32,float16")
    ap.add_argument("--candidates", type=int, default=4)
    ap.add_argument("--tiles", help="JSON file: {dtype: [decisions, ...]} tried as the candidates")
    ap.add_argument("--json", action="store_true")
    opts = ap.parse_args(argv)
    given = {}
    if opts.tiles:
        with open(opts.tiles) as f:
            given = json.load(f)
    problem = driver_problem()
    if problem is not None:
        print(f"gpu_matmul: skipped: {problem}")
        return 0
    sizes = [int(s) for s in opts.sizes.split(",")]
    kinds = opts.dtypes.split(",")
    cases = [(n, d) for d in kinds for n in sizes]
    peer = {case: torch_seconds(*case) for case in cases}      # phase 1: cuBLAS
    rows = []
    if not opts.json:   # each row as soon as it is measured (a timeout keeps the rows so far)
        print(f"{'dtype':>9} {'n':>5} {'cuBLAS':>8} {'default':>8} {'ratio':>6} {'tuned':>8} "
              f"{'ratio':>6}  tiles", flush=True)
    for n, d in cases:                                          # phase 2: ours
        flops, args = 2.0 * n ** 3, _inputs(n, d)
        t0 = time.perf_counter()
        ref = reference(args, d)
        try:
            default = ours_seconds(_module(n, d), args, ref, d)
        except mlc.MlcError as e:
            default = None
            print(f"  {d} {n}: default failed: {str(e).splitlines()[0]}", file=sys.stderr)
        (best, tiles), failed = tuned(n, d, args, ref, opts.candidates, given.get(d))
        rows.append({"n": n, "dtype": d, "cublas_tflops": flops / peer[(n, d)] / 1e12,
                     "default_tflops": flops / default / 1e12 if default else None,
                     "tuned_tflops": flops / best / 1e12 if tiles else None,
                     "tiles": dataclass_dict(tiles), "failed": failed,
                     "seconds": time.perf_counter() - t0})
        if not opts.json:
            r = rows[-1]
            c, dd, t = r["cublas_tflops"], r["default_tflops"], r["tuned_tflops"]
            print(f"{d:>9} {n:>5} {c:8.2f} {_f(dd):>8} {_f(dd and dd / c):>6} "
                  f"{_f(t):>8} {_f(t and t / c):>6}  {r['tiles']} ({failed} failed)", flush=True)
    if opts.json:
        print(json.dumps(rows, indent=1))
        return 0
    print("TFLOP/s, min of repeats; ours on arrays kept on the GPU (benchmark(device=True)), one stream per call")
    return 0


def dataclass_dict(x):
    return x if x is None or isinstance(x, dict) else vars(x)


def _f(x) -> str:
    return "-" if x is None else f"{x:.2f}"


if __name__ == "__main__":
    sys.exit(main())
