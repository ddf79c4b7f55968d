"""Whole-model A/B of the light CNNs' layout rewrites, in one process: each light ONNX model
(``compile_cpu.light_models``) compiled twice with ``mlc.compile(threads=1)``, once with the
rewrites below switched off (their ``select`` predicates answering False: the baseline) and once
as the default, timed in turn with onnxruntime (``intra_op_num_threads=1``) in the same process.

Switched off for the baseline: depthwise convolutions in NHWC
(``schedule.rules.depthwise.prefers_depthwise_nhwc``), the NCHW im2col GEMM of ragged-channel
stems (``schedule.rules.conv_strategy.prefers_nchw_im2col``) and strided poolings in NHWC
(``schedule.rules.pooling.prefers_pool_nhwc``).

Each row gives the CPU time per call (``time.process_time`` over 40 calls, the best of
``--rounds`` rounds, each round timing baseline, default and onnxruntime in turn) and the wall
time (``timing.best_seconds``). On a host shared with other jobs the wall time of a 5 ms call
depends on the scheduler's time slices; the CPU time does not.

    python benchmarks/layout_ab_cpu.py [--models shufflenet,squeezenet,inception_v2] [--rounds 5]
"""

from __future__ import annotations

import argparse
import contextlib
import time

import numpy as np
from compile_cpu import light_models  # benchmarks/, on sys.path
from timing import best_seconds

#: (module path, attribute) of the predicates the baseline sets to False
SWITCHES = (("mlc_mlir.pipeline.layout", "prefers_depthwise_nhwc"),
            ("mlc_mlir.pipeline.layout", "prefers_nchw_im2col"),
            ("mlc_mlir.schedule.rules.conv_strategy", "prefers_nchw_im2col"),
            ("mlc_mlir.pipeline.layout", "prefers_pool_nhwc"))


@contextlib.contextmanager
def baseline():
    """The :data:`SWITCHES` predicates answer False inside the block."""
    import importlib
    saved = []
    for mod, attr in SWITCHES:
        m = importlib.import_module(mod)
        saved.append((m, attr, getattr(m, attr)))
        setattr(m, attr, lambda *a: False)
    try:
        yield
    finally:
        for m, attr, v in saved:
            setattr(m, attr, v)


def _cpu_ms(fn, calls: int = 40) -> float:
    fn()
    t = time.process_time()
    for _ in range(calls):
        fn()
    return (time.process_time() - t) / calls * 1e3


def measure(path: str, rounds: int) -> dict:
    """``{impl: (cpu ms, wall ms)}`` for ``base``, ``new`` and ``ort``, plus the largest
    difference of each of ours to onnxruntime's first output."""
    import onnxruntime as ort

    import mlc_mlir as mlc
    with baseline():
        base = mlc.compile(mlc.from_onnx(path), threads=1)
    new = mlc.compile(mlc.from_onnx(path), threads=1)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feeds = {i.name: rng.standard_normal([d if isinstance(d, int) else 1 for d in i.shape]).astype(np.float32)
             for i in sess.get_inputs()}
    args = list(feeds.values())
    ref = sess.run(None, feeds)[0]
    out = {}
    for name, exe in (("base", base), ("new", new)):
        y = exe(*args)
        y = y[0] if isinstance(y, (list, tuple)) else y
        out[f"{name}_max_abs_diff"] = float(np.max(np.abs(np.asarray(y) - ref)))
    calls = {"base": lambda: base(*args), "new": lambda: new(*args), "ort": lambda: sess.run(None, feeds)}
    cpu = {k: [] for k in calls}
    wall = {k: [] for k in calls}
    for _ in range(rounds):
        for k, fn in calls.items():
            cpu[k].append(_cpu_ms(fn))
            wall[k].append(1e3 * best_seconds(fn))
    out.update({k: (min(cpu[k]), min(wall[k])) for k in calls})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="shufflenet,squeezenet,inception_v2")
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    from mlc_mlir.target import describe, host_target
    print(f"# CPU: {describe(host_target())}; one thread; baseline = the layout rewrites off")
    print(f"{'model':14s} {'base cpu ms':>11s} {'new cpu ms':>10s} {'ort cpu ms':>10s} {'base/new':>8s} "
          f"{'ort/new':>7s} {'base wall':>9s} {'new wall':>8s} {'ort wall':>8s} {'max|diff|':>9s}")
    paths = light_models()
    for name in a.models.split(","):
        r = measure(paths[name], a.rounds)
        (bc, bw), (nc, nw), (oc, ow) = r["base"], r["new"], r["ort"]
        print(f"{name:14s} {bc:11.2f} {nc:10.2f} {oc:10.2f} {bc / nc:8.2f} {oc / nc:7.2f} {bw:9.2f} {nw:8.2f} "
              f"{ow:8.2f} {max(r['base_max_abs_diff'], r['new_max_abs_diff']):9.2e}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
