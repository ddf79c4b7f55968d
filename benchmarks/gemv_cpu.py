"""Cold-cache GEMV read bandwidth: ``x (1, K) @ W (K, N)`` (+ bias) as a decode step's linears and
LM head run it, against numpy's BLAS ``sgemv`` in the same run.

Each implementation cycles through copies of ``W`` that together exceed the last-level cache
(512 MiB), so every call reads its weights from DRAM as a decode step does; GB/s = weight bytes /
time per call. Shapes: GPT-2 124M's attention QKV / projection, MLP up / down and LM head, and an
odd one (no dim a multiple of the vector lanes). A measurement that is less sensitive to a
loaded host than whole-model tokens/s: both peers share the same contention.

    unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
    OMP_NUM_THREADS=1 python benchmarks/gemv_cpu.py --threads 1
"""

from __future__ import annotations

import argparse
import time

import numpy as np

#: (K, N, bias) of the rows.
SHAPES = ((768, 2304, True), (768, 768, True), (768, 3072, True), (3072, 768, True),
          (768, 50257, False), (777, 1001, False))


def build(k: int, n: int, bias: bool):
    """``main(x (1, K), w (K, N)[, b (1, N)]) -> x @ w [+ b]`` as an mlc Module."""
    import mlc_mlir as mlc
    from mlc_mlir import ops
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        y = ops.matmul(f.arg("x", shape=(1, k)), f.arg("w", shape=(k, n)))
        if bias:
            y = ops.add(y, f.arg("b", shape=(1, n)))
        f.output(y)
    return bb.finish()


def measure(k: int, n: int, bias: bool, threads: int) -> dict:
    """Seconds per call (best of 5 sweeps over the copies) of ours and numpy's, and our max
    relative error against numpy."""
    import mlc_mlir as mlc
    exe = mlc.compile(build(k, n, bias), threads=threads)
    rng = np.random.default_rng(0)
    copies = max(2, (512 << 20) // (k * n * 4))
    ws = [rng.standard_normal((k, n), dtype=np.float32) for _ in range(copies)]
    x = rng.standard_normal((1, k), dtype=np.float32)
    b = rng.standard_normal((1, n), dtype=np.float32)
    ours = (lambda w: exe(x, w, b)) if bias else (lambda w: exe(x, w))
    peer = (lambda w: x @ w + b) if bias else (lambda w: x @ w)
    ref = peer(ws[0])
    err = float(np.abs(ours(ws[0]) - ref).max() / np.abs(ref).max())
    best = {}
    for name, fn in (("mlc", ours), ("numpy", peer)):
        for w in ws:
            fn(w)
        sweeps = []
        for _ in range(5):
            t = time.perf_counter()
            for w in ws:
                fn(w)
            sweeps.append((time.perf_counter() - t) / copies)
        best[name] = min(sweeps)
    return {"k": k, "n": n, "bias": bias, "threads": threads, "err": err, **best}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=1, help="OpenMP threads of ours (set "
                    "OMP_NUM_THREADS to the same for numpy's BLAS)")
    args = ap.parse_args()
    from mlc_mlir.target import describe, host_target
    print(f"CPU: {describe(host_target())}")
    print(f"{'K':>6} {'N':>6} {'bias':>4} {'thr':>3} {'mlc ms':>8} {'GB/s':>6} {'numpy ms':>9} {'GB/s':>6} "
          f"{'x numpy':>8} {'rel err':>8}")
    for k, n, bias in SHAPES:
        r = measure(k, n, bias, args.threads)
        gb = k * n * 4 / 1e9
        print(f"{k:6d} {n:6d} {int(bias):4d} {args.threads:3d} {r['mlc'] * 1e3:8.3f} {gb / r['mlc']:6.1f} "
              f"{r['numpy'] * 1e3:9.3f} {gb / r['numpy']:6.1f} {r['numpy'] / r['mlc']:8.2f} {r['err']:8.1e}",
              flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
