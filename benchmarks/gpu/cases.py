"""Small GPU checks, one per process (a fault on the GPU poisons the process's CUDA context):

    python benchmarks/gpu/cases.py            # every case, each in a subprocess
    python benchmarks/gpu/cases.py NAME       # one case in this process

Each case compiles for ``target="cuda"`` and prints ``CASE <name>: max abs err <e>`` against
numpy or PyTorch on the CPU: row reductions of lengths that are and are not multiples of a warp
(a warp per row at 768, a block per row at 65536), softmax,
layer norm, and PyTorch layers with bound weights (constants), alone and chained.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np


def _reduction(fn, shape, ref):
    import mlc_mlir as mlc
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(fn(f.arg("x", shape=shape)))
    x = np.random.default_rng(0).random(shape, dtype=np.float32)
    return float(np.abs(mlc.compile(bb.finish(), target="cuda")(x) - ref(x)).max())


def _torch(layers, shape):
    import torch
    import mlc_mlir as mlc
    torch.manual_seed(0)
    net = torch.nn.Sequential(*layers).eval()
    x = torch.randn(*shape)
    got = mlc.compile(mlc.from_torch(net, (x,)), target="cuda")(x.numpy())
    with torch.no_grad():
        return float(np.abs(got - net(x).numpy()).max())


def _cases():
    import torch
    from mlc_mlir import ops
    T = torch.nn

    class Mean(T.Module):
        def forward(self, x):
            return x.mean((2, 3))

    class Residual(T.Module):
        def __init__(self):
            super().__init__()
            self.conv = T.Conv2d(8, 8, 3, padding=1)

        def forward(self, x):
            return torch.relu(x + self.conv(x))

    def row(op, k, ref):
        return lambda: _reduction(lambda x: op(x, axis=1), (64, k), lambda x: ref(x, axis=1))

    ones, zeros = np.ones(256, np.float32), np.zeros(256, np.float32)
    conv = T.Conv2d(3, 8, 3, padding=1)
    img = (2, 3, 12, 12)
    return {
        "max100": row(ops.max, 100, np.max), "max96": row(ops.max, 96, np.max),
        "max256": row(ops.max, 256, np.max), "sum100": row(ops.sum, 100, np.sum),
        "sum768": row(ops.sum, 768, np.sum), "sum65536": row(ops.sum, 65536, np.sum),
        "softmax768": lambda: _reduction(
            lambda x: ops.softmax(x, axis=-1), (64, 768),
            lambda x: np.exp(x - x.max(-1, keepdims=True)) / np.exp(x - x.max(-1, keepdims=True)).sum(-1, keepdims=True)),
        "layer_norm256": lambda: _reduction(
            lambda x: ops.layer_norm(x, ones, zeros), (64, 256),
            lambda x: (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)),
        "conv": lambda: _torch([conv], img),
        "conv_bn_relu": lambda: _torch([T.Conv2d(3, 8, 3, padding=1, bias=False), T.BatchNorm2d(8),
                                        T.ReLU()], img),
        "max_pool": lambda: _torch([conv, T.MaxPool2d(3, 2, 1)], img),
        "residual": lambda: _torch([conv, Residual()], img),
        "global_mean": lambda: _torch([conv, Mean()], img),
        "linear_head": lambda: _torch([conv, Mean(), T.Linear(8, 10)], img),
        "linear": lambda: _torch([T.Flatten(), T.Linear(48, 10)], (2, 3, 4, 4)),
    }


CASES = ("max100", "max96", "max256", "sum100", "sum768", "sum65536", "softmax768", "layer_norm256", "conv", "conv_bn_relu", "max_pool",
         "residual", "global_mean", "linear_head", "linear")


def main(argv) -> int:
    if argv:
        try:
            print(f"CASE {argv[0]}: max abs err {_cases()[argv[0]]():.3g}", flush=True)
        except Exception as e:   # reported, so that the other cases still run
            print(f"CASE {argv[0]}: {type(e).__name__}: {str(e).splitlines()[0][:300]}", flush=True)
        return 0
    for name in CASES:
        try:
            out = subprocess.run([sys.executable, __file__, name], capture_output=True, text=True,
                                 timeout=120).stdout
        except subprocess.TimeoutExpired:
            out = f"CASE {name}: timed out after 120 s\n"
        lines = [ln for ln in out.splitlines() if ln.startswith("CASE")]
        print(lines[-1] if lines else f"CASE {name}: the process died (no result)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
