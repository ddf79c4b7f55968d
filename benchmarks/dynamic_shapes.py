"""Symbolic shapes: one compile for every size vs a static compile per size vs numpy.

For each workload, the module is built once with a symbolic size ``n`` (``f.arg(shape=("n",
768))``) and compiled once with the default schedule; each size is then timed on that
executable, on a module compiled for that static size, and with numpy (1 thread:
``threads=1`` for ours, threadpoolctl for numpy's BLAS). Ratios are numpy time / ours
(> 1: ours faster). Times are the minimum over repeats (``benchmarks/timing.py``).

    python benchmarks/dynamic_shapes.py [--sizes 1,32,128,512] [--workloads dense768,softmax]
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np
from timing import best_seconds  # benchmarks/timing.py; this folder is on sys.path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import mlc_mlir as mlc  # noqa: E402
from mlc_mlir import ops  # noqa: E402

RNG = np.random.default_rng(0)
W = RNG.standard_normal((768, 768)).astype(np.float32) / 28
G = np.ones(768, np.float32)


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


#: name -> (build(f, x), numpy reference, x's shape with "n" symbolic)
WORKLOADS = {
    "dense768": (lambda f, x: ops.dense(x, W), lambda x: x @ W.T, ("n", 768)),
    "matmul768+relu": (lambda f, x: ops.relu(ops.matmul(x, W)), lambda x: np.maximum(x @ W, 0), ("n", 768)),
    "softmax_n_x768": (lambda f, x: ops.softmax(x), _softmax, ("n", 768)),
    "layer_norm_n_x768": (lambda f, x: ops.layer_norm(x, G, G),
                          lambda x: (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5) + 1,
                          ("n", 768)),
    "scores_n_x_n": (lambda f, x: ops.matmul(x, ops.transpose(x)), lambda x: x @ x.T, ("n", 64)),
}


def _compile(name, shape):
    build, _, _ = WORKLOADS[name]
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(build(f, f.arg("x", shape=shape)))
    return mlc.compile(bb.finish(), threads=1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1,7,32,128,512")
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    try:
        from threadpoolctl import threadpool_limits
        limit = threadpool_limits(1)
    except ImportError:
        limit = None
    print(f"{'workload':20s} {'n':>5s} {'dynamic ms':>11s} {'static ms':>10s} {'numpy ms':>9s} "
          f"{'np/dyn':>7s} {'np/static':>9s}")
    for name in args.workloads.split(","):
        _, ref, shape = WORKLOADS[name]
        dyn = _compile(name, shape)
        for n in sizes:
            xshape = tuple(n if d == "n" else d for d in shape)
            x = RNG.standard_normal(xshape).astype(np.float32)
            static = _compile(name, xshape)
            np.testing.assert_allclose(dyn(x), ref(x), rtol=1e-3, atol=1e-3)
            td = best_seconds(lambda: dyn(x)) * 1e3
            ts = best_seconds(lambda: static(x)) * 1e3
            tn = best_seconds(lambda: ref(x)) * 1e3
            print(f"{name:20s} {n:5d} {td:11.4f} {ts:10.4f} {tn:9.4f} {tn / td:7.2f} {tn / ts:9.2f}",
                  flush=True)
    del limit


if __name__ == "__main__":
    main()
