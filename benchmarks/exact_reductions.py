"""Accuracy of long float32 reductions against float64, with numpy and PyTorch (same run).

For each length: ``sum(x)``, ``mean((a - b) ** 2)``, ``sqrt(sum(x * x))`` and the biased variance
(``mean((x - mean(x)) ** 2)``) of standard-normal float32 vectors, computed by mlc (blocked
sums, ``mlc_mlir.builder.reduction``), numpy and PyTorch in float32; the error is relative to
the float64 result (for the sum: relative to ``sum(|x|)``, since the sum itself cancels).

    python benchmarks/exact_reductions.py --sizes 1e6,1e7,1e8
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def _mlc_fn(n: int):
    import mlc_mlir as mlc
    from mlc_mlir import ops

    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        a, b = f.arg("a", shape=(n,)), f.arg("b", shape=(n,))
        d = ops.subtract(a, b)
        c = ops.subtract(a, ops.mean(a))
        f.output(ops.sum(a), ops.mean(ops.multiply(d, d)), ops.sqrt(ops.sum(ops.multiply(a, a))),
                 ops.mean(ops.multiply(c, c)))
    return mlc.compile(bb.finish())


def _errors(vals, a64, b64):
    exact = [a64.sum(), np.mean((a64 - b64) ** 2), np.sqrt(np.sum(a64 ** 2)), a64.var()]
    scale = [np.abs(a64).sum(), exact[1], exact[2], exact[3]]
    return [abs(float(v) - e) / s for v, e, s in zip(vals, exact, scale)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="1e6,1e7,1e8")
    args = p.parse_args()
    import torch

    print("relative error vs float64: sum (of |x|), mse, l2 norm, var; time of one mlc call")
    print(f"{'n':>11} {'impl':>6} {'sum':>9} {'mse':>9} {'norm':>9} {'var':>9} {'ms':>8}")
    for n in (int(float(s)) for s in args.sizes.split(",")):
        rng = np.random.default_rng(0)
        a = rng.standard_normal(n, dtype=np.float32)
        b = rng.standard_normal(n, dtype=np.float32)
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        fn = _mlc_fn(n)
        fn(a, b)
        t = time.perf_counter()
        got = fn(a, b)
        ms = (time.perf_counter() - t) * 1e3
        ta, tb = torch.from_numpy(a), torch.from_numpy(b)
        rows = {
            "mlc": got,
            "numpy": [a.sum(), np.mean((a - b) ** 2), np.sqrt(np.sum(a * a)), a.var()],
            "torch": [ta.sum(), ((ta - tb) ** 2).mean(), ta.norm(), ta.var(unbiased=False)],
        }
        for impl, vals in rows.items():
            errs = _errors(vals, a64, b64)
            tail = f"{ms:8.1f}" if impl == "mlc" else ""
            print(f"{n:>11} {impl:>6} " + " ".join(f"{e:9.1e}" for e in errs) + f" {tail}")


if __name__ == "__main__":
    main()
