"""Winograd against direct convolutions, per ResNet-18 3x3 stride-1 layer (batch 1, float32,
bias + relu): ``mlc.compile(..., winograd=False)`` (the direct / im2col convolution),
``mlc.compile(..., winograd=True)`` (``layout_passes.ConvToWinograd`` where ``winograd_tile`` picks it; the
default, ``winograd=None``, takes F(2x2, 3x3) only) and
PyTorch eager (oneDNN), timed in the same run; ratio = PyTorch ms / ours; relative error
(max abs / max) against a float64 PyTorch convolution.

    python benchmarks/winograd_cpu.py [--threads 1] [--repeat 7]
"""

from __future__ import annotations

import argparse
import os
import timeit

import numpy as np

#: (C = F, H = W) of ResNet-18's stride-1 3x3 layers.
LAYERS = [(64, 56), (128, 28), (256, 14), (512, 7)]


def build(c: int, hw: int):
    """``relu(conv2d(x, w, b, padding=1))`` with random weights as params, and its inputs."""
    import mlc_mlir as mlc
    from mlc_mlir import ops
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, c, hw, hw)).astype(np.float32)
    w = (rng.standard_normal((c, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32)
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        xa = f.arg("x", shape=x.shape)
        f.output(ops.relu(ops.conv2d(xa, f.param("w", w), f.param("b", b), strides=1, padding=1)))
    return bb.finish().bind_params(), x, w, b


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeat", type=int, default=7)
    a = p.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(a.threads)
    import torch
    import mlc_mlir as mlc
    from mlc_mlir.schedule.rules.conv_strategy import winograd_tile
    from mlc_mlir.target import describe, host_target
    torch.set_num_threads(a.threads)
    F = torch.nn.functional
    target = host_target()
    print(f"CPU: {describe(target)}; {a.threads} thread(s)")
    print(f"{'layer':18s} {'m':>2s} {'direct ms':>10s} {'ours ms':>8s} {'torch ms':>9s} "
          f"{'torch/ours':>10s} {'err direct':>10s} {'err ours':>9s}")
    for c, hw in LAYERS:
        mod, x, w, b = build(c, hw)
        m = winograd_tile(target, (1, hw + 2, hw + 2, c), (3, 3, c, c), (1, hw, hw, c), "float32")
        t = [torch.from_numpy(v) for v in (x, w, b)]
        ref = F.relu(F.conv2d(*(v.double() for v in t), padding=1)).numpy()
        row = []
        for wino in (False, True):
            fn = mlc.compile(mod, winograd=wino)["main"]
            err = np.abs(fn(x) - ref).max() / np.abs(ref).max()
            fn.benchmark(x, number=5, repeat=1)
            row.append((fn.benchmark(x, number=20, repeat=a.repeat).min_ms, err))
        with torch.no_grad():
            tms = min(timeit.repeat(lambda: F.relu(F.conv2d(t[0], t[1], t[2], padding=1)),
                                    number=20, repeat=a.repeat)) / 20 * 1e3
        print(f"{c}x{hw}x{hw}->{c:<6d} {m:2d} {row[0][0]:10.3f} {row[1][0]:8.3f} {tms:9.3f} "
              f"{tms / row[1][0]:9.2f}x {row[0][1]:10.1e} {row[1][1]:9.1e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
