"""Small GPU checks, one per process (a fault on the GPU poisons the process's CUDA context):

    python benchmarks/gpu/cases.py            # every case, each in a subprocess
    python benchmarks/gpu/cases.py NAME       # one case in this process

Each case compiles for ``target="cuda"`` and prints ``CASE <name>: max abs err <e>`` against
numpy or PyTorch on the CPU: row reductions of lengths that are and are not multiples of a warp
(a warp per row at 768, a block per row at 65536), softmax, layer norm, and PyTorch layers with
bound weights (constants), alone and chained. The
``conv_<c>x<h>`` cases are ResNet-18 conv layers at batch 1 (3x3, padding 1; ``conv_3x224`` the
7x7 stride-2 stem) and also print the time of the default GPU schedule (the register-tiled
conv), of the conv rule's other decision (the reduction rule: one output per thread) and of
cuDNN through PyTorch (TF32 off), inputs on the GPU, ms per call, ratio = cuDNN / ours.
"""

from __future__ import annotations

import os
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


def _conv_layer(c, f, h, k, stride):
    """A ResNet-18 conv layer (module docstring): ``(max abs err, timings)``."""
    import torch
    import mlc_mlir as mlc
    from mlc_mlir import ops
    from mlc_mlir.schedule.rules import gpu_rules
    from mlc_mlir.target import Target
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from gpu_models import ours_ms, torch_ms

    bb = mlc.GraphBuilder()
    with bb.function("main") as fn:
        x, w = fn.arg("x", shape=(1, c, h, h)), fn.arg("w", shape=(f, c, k, k))
        fn.output(ops.conv2d(x, w, strides=(stride, stride), padding=(k // 2, k // 2)))
    mod = bb.finish()
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((1, c, h, h), np.float32), rng.standard_normal((f, c, k, k), np.float32)]
    tiled = mlc.compile(mod, target="cuda")
    sch = mlc.Schedule(mod)
    gpu_rules.schedule_reduction(sch, sch.get_block("conv2d"), Target.cuda().cuda_arch)
    reduction = mlc.compile(sch.mod, target="cuda")
    ref = torch.nn.functional.conv2d(*(torch.from_numpy(a).double() for a in xs), stride=stride,
                                     padding=k // 2).numpy()
    err = max(float(np.abs(e(*xs) - ref).max()) for e in (tiled, reduction))
    torch.backends.cudnn.allow_tf32 = False
    dx, dw = (torch.from_numpy(a).cuda() for a in xs)
    cudnn = torch_ms(lambda: torch.nn.functional.conv2d(dx, dw, stride=stride, padding=k // 2))
    t, r = ours_ms(tiled, xs), ours_ms(reduction, xs)
    return err, (f"; tiled {t:.4f} ms, reduction rule {r:.4f} ms, cudnn {cudnn:.4f} ms, "
                 f"ratio {cudnn / t:.2f} (reduction rule {cudnn / r:.2f})")


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
        "conv_3x224": lambda: _conv_layer(3, 64, 224, 7, 2),
        "conv_64x56": lambda: _conv_layer(64, 64, 56, 3, 1),
        "conv_256x14": lambda: _conv_layer(256, 256, 14, 3, 1),
        "conv_512x7": lambda: _conv_layer(512, 512, 7, 3, 1),
    }


CASES = ("max100", "max96", "max256", "sum100", "sum768", "sum65536", "softmax768", "layer_norm256",
         "conv", "conv_bn_relu", "max_pool", "residual", "global_mean", "linear_head", "linear",
         "conv_3x224", "conv_64x56", "conv_256x14", "conv_512x7")


def main(argv) -> int:
    if argv:
        try:
            r = _cases()[argv[0]]()
            err, note = r if isinstance(r, tuple) else (r, "")
            print(f"CASE {argv[0]}: max abs err {err:.3g}{note}", flush=True)
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
