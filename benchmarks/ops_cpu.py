"""Single op kinds on the CPU, as a PyTorch user brings them: ``mlc.from_torch`` + ``mlc.compile``
(default schedules) vs PyTorch eager and numpy (where numpy has the op), same run, per thread
count. Each kind runs at two sizes.

Each (kind, size, implementation, threads) measurement runs in its own subprocess, one after
the other (OpenMP thread pools of different runtimes spin against each other within one
process). Ours is checked against eager's output first (max relative error, printed). Times
are the min and median over repeats (``benchmarks/timing.py``); the ratio is eager's min time
over ours (> 1: ours is faster), and numpy's likewise.

    unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE   # numpy's own kernel choice (printed)
    python benchmarks/ops_cpu.py [--threads 1,2] [--kinds softmax,gelu,...] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys

import numpy as np
from timing import min_median_seconds  # benchmarks/timing.py; this folder is on sys.path


# --------------------------------------------------------------------------- the op kinds
def _softmax_np(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _log_softmax_np(x):
    s = x - x.max(-1, keepdims=True)
    return s - np.log(np.exp(s).sum(-1, keepdims=True))


def _layer_norm_np(x):
    m = x.mean(-1, keepdims=True)
    return (x - m) / np.sqrt(((x - m) ** 2).mean(-1, keepdims=True) + 1e-5)


def _gelu_tanh_np(a, b):
    x = a + b
    return 0.5 * x * (1 + np.tanh(0.7978845608028654 * (x + 0.044715 * x ** 3)))


def kinds():
    """``{kind: (torch module factory, [input shapes per size], numpy function or None)}``.
    Inputs are float32 standard normal; module weights are seeded."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    def fn_module(f):
        class M(nn.Module):
            def forward(self, *xs):
                return f(*xs)
        return lambda shapes: M()

    conv_relu = lambda c: nn.Sequential(nn.Conv2d(c, c, 1), nn.ReLU())  # noqa: E731
    return {
        "softmax": (fn_module(lambda x: torch.softmax(x, -1)), [[(64, 65536)], [(512, 384)]],
                    _softmax_np),
        "log_softmax": (fn_module(lambda x: torch.log_softmax(x, -1)),
                        [[(64, 65536)], [(512, 384)]], _log_softmax_np),
        "layer_norm": (lambda s: nn.LayerNorm(s[0][-1], elementwise_affine=False),
                       [[(512, 768)], [(64, 65536)]], _layer_norm_np),
        "sdpa": (fn_module(F.scaled_dot_product_attention),
                 [[(2, 4, 256, 64)] * 3, [(1, 12, 128, 64)] * 3], None),
        "gemv": (fn_module(lambda a, v: a @ v), [[(256, 65536), (65536,)], [(4096, 4096), (4096,)]],
                 lambda a, v: a @ v),
        "matmul": (fn_module(lambda a, b: a @ b), [[(512, 512), (512, 512)],
                                                   [(777, 513), (513, 1029)]], lambda a, b: a @ b),
        "conv2d": (lambda s: nn.Conv2d(s[0][1], s[0][1], 3, padding=1),
                   [[(1, 64, 56, 56)], [(1, 128, 28, 28)]], None),
        "conv_relu": (lambda s: conv_relu(s[0][1]), [[(1, 64, 56, 56)], [(1, 256, 14, 14)]], None),
        "conv_transpose2d": (lambda s: nn.ConvTranspose2d(s[0][1], s[0][1] // 2, 4, 2, 1),
                             [[(1, 64, 32, 32)], [(1, 32, 16, 16)]], None),
        "avg_pool1d": (fn_module(lambda x: F.avg_pool1d(x, 4)), [[(8, 64, 4096)], [(1, 16, 65536)]],
                       lambda x: x.reshape(*x.shape[:-1], -1, 4).mean(-1)),
        "gelu_tanh": (fn_module(lambda a, b: F.gelu(a + b, approximate="tanh")),
                      [[(700, 700)] * 2, [(4096, 1024)] * 2], _gelu_tanh_np),
        "sigmoid": (fn_module(torch.sigmoid), [[(700, 700)], [(4096, 1024)]],
                    lambda x: 1 / (1 + np.exp(-x))),
        "log1p": (fn_module(lambda x: torch.log1p(x.abs())), [[(700, 700)], [(4096, 1024)]],
                  lambda x: np.log1p(np.abs(x))),
        "mean_sq_diff": (fn_module(lambda a, b: ((a - b) ** 2).mean()),
                         [[(4096, 4096)] * 2, [(256, 256)] * 2], lambda a, b: ((a - b) ** 2).mean()),
        "row_sum": (fn_module(lambda x: x.sum(-1)), [[(1024, 4096)], [(64, 65536)]],
                    lambda x: x.sum(-1)),
        "add": (fn_module(torch.add), [[(2048, 2048)] * 2, [(256, 256)] * 2], np.add),
    }


# --------------------------------------------------------------------------- one measurement
def measure(kind: str, size: int, impl: str, threads: int) -> dict:
    """Time one implementation of one kind at one size; ours also reports its max relative
    error against eager."""
    import torch
    factory, sizes, np_fn = kinds()[kind]
    torch.manual_seed(0)
    shapes = sizes[size]
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    torch.set_num_threads(threads)
    model = factory(shapes).eval()
    ts = [torch.from_numpy(x) for x in xs]
    with torch.no_grad():
        ref = model(*ts).numpy()
    out = {"kind": kind, "shapes": shapes, "impl": impl, "threads": threads}
    if impl == "mlc":
        import mlc_mlir as mlc
        mod = mlc.from_torch(model, tuple(ts))
        if mod.params:
            mod = mod.bind_params()
        exe = mlc.compile(mod, threads=threads)
        got = np.asarray(exe(*xs))
        out["max_rel_err"] = float(np.max(np.abs(got - ref)) / max(np.max(np.abs(ref)), 1e-30))
        fn = lambda: exe(*xs)  # noqa: E731
    elif impl == "torch":
        def fn():
            with torch.no_grad():
                model(*ts)
    else:
        fn = lambda: np_fn(*xs)  # noqa: E731
    out["min_ms"], out["median_ms"] = (1e3 * t for t in min_median_seconds(fn))
    return out


def _child(kind, size, impl, threads):
    cmd = [sys.executable, os.path.abspath(__file__), "--child", kind, str(size), impl, str(threads)]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        return {"kind": kind, "impl": impl, "threads": threads,
                "error": (p.stderr.strip().splitlines() or ["exit %d" % p.returncode])[-1][:120]}
    return json.loads(p.stdout.strip().splitlines()[-1])


def _cpu() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            names = [ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")]
        return names[0] if names else platform.processor()
    except OSError:
        return platform.processor()


def _blas() -> str:
    from threadpoolctl import threadpool_info
    infos = [f"{i.get('internal_api')} {i.get('version')} {i.get('architecture')}"
             for i in threadpool_info() if i.get("user_api") == "blas"]
    return ", ".join(infos) or "unknown"


def main(argv=None):
    p = argparse.ArgumentParser(description="op kinds: mlc vs PyTorch eager and numpy")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--kinds", default=None, help="comma-separated subset (default: all)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        kind, size, impl, threads = a.child
        print(json.dumps(measure(kind, int(size), impl, int(threads))))
        return
    import torch
    table = kinds()
    names = a.kinds.split(",") if a.kinds else list(table)
    unknown = [n for n in names if n not in table]
    if unknown:
        p.error(f"unknown kinds {unknown}; expected some of {list(table)}")
    print(f"CPU: {_cpu()}; numpy BLAS: {_blas()}; torch {torch.__version__}; "
          f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}")
    print(f"{'kind':<17}{'shapes':<30}{'thr':>4}{'mlc ms':>10}{'eager ms':>10}{'numpy ms':>10}"
          f"{'x eager':>9}{'x numpy':>9}{'rel err':>10}")
    rows = []
    for name in names:
        for size in range(len(table[name][1])):
            for threads in (int(t) for t in a.threads.split(",")):
                impls = ["mlc", "torch"] + (["numpy"] if table[name][2] is not None else [])
                r = {i: _child(name, size, i, threads) for i in impls}
                rows.append(r)
                ms = {i: r[i].get("min_ms") for i in impls}
                shapes = "x".join(map(str, table[name][1][size][0]))
                if len(table[name][1][size]) > 1:
                    shapes += " ..."
                err = r["mlc"].get("error")
                if err:
                    print(f"{name:<17}{shapes:<30}{threads:>4}  mlc failed: {err}")
                    continue
                fmt = lambda v: f"{v:10.3f}" if v is not None else f"{'-':>10}"  # noqa: E731
                ratio = lambda v: f"{v / ms['mlc']:9.2f}" if v else f"{'-':>9}"  # noqa: E731
                print(f"{name:<17}{shapes:<30}{threads:>4}{fmt(ms['mlc'])}{fmt(ms['torch'])}"
                      f"{fmt(ms.get('numpy'))}{ratio(ms['torch'])}{ratio(ms.get('numpy'))}"
                      f"{r['mlc']['max_rel_err']:10.1e}", flush=True)
    if a.json:
        print(json.dumps(rows))


if __name__ == "__main__":
    main()
