"""Graph passes on real model shapes: kernels and intermediate bytes before/after fusion, and
latency of unfused vs fused vs fused+scheduled vs OpenBLAS-dispatched vs numpy (and PyTorch
eager if installed), all measured in this run.

    python benchmarks/graph_passes.py [--models mlp1,mlp128,cnn] [--json]

Each implementation is timed in its own phase (never interleaved with another), min of 7
repeats of >= 50 ms.
"""

from __future__ import annotations

import argparse
import json

import numpy as np

import mlc_mlir as mlc
from mlc_mlir import graph, ops
from mlc_mlir.graph.fuse_ops import PRIMITIVE_ATTR
from timing import best_seconds  # benchmarks/timing.py; this folder is on sys.path


def _time(fn) -> float:
    """Milliseconds per call."""
    return best_seconds(fn) * 1e3


def mlp(batch, rng):
    p = [rng.standard_normal((128, 784)).astype(np.float32) * 0.05, rng.standard_normal(128).astype(np.float32),
         rng.standard_normal((10, 128)).astype(np.float32) * 0.1, rng.standard_normal(10).astype(np.float32)]
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", shape=(batch, 784))
        f.output(ops.dense(ops.relu(ops.dense(x, p[0], p[1])), p[2], p[3]))

    def ref(x):
        return np.maximum(x @ p[0].T + p[1], 0) @ p[2].T + p[3]
    return bb.finish(), [rng.random((batch, 784), dtype=np.float32)], ref, p


def cnn(rng):
    """conv(3x3, 1->8) - batch_norm - relu - max_pool(2) - flatten - dense(10), batch 1, 28x28."""
    w = rng.standard_normal((8, 1, 3, 3)).astype(np.float32) * 0.3
    g, b, m, v = (rng.random(8).astype(np.float32) + 0.5 for _ in range(4))
    wd = rng.standard_normal((10, 8 * 13 * 13)).astype(np.float32) * 0.05
    bd = rng.standard_normal(10).astype(np.float32)
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", shape=(1, 1, 28, 28))
        h = ops.relu(ops.batch_norm(ops.conv2d(x, w), g, b, m, v))
        h = ops.flatten(ops.max_pool2d(h, (2, 2)), start_dim=1)
        f.output(ops.dense(h, wd, bd))

    def ref(x):
        out = np.zeros((1, 8, 26, 26), np.float32)
        for kh in range(3):
            for kw in range(3):
                out += np.einsum("nchw,fc->nfhw", x[:, :, kh:kh + 26, kw:kw + 26], w[:, :, kh, kw])
        out = (out - m[None, :, None, None]) / np.sqrt(v[None, :, None, None] + 1e-5) * g[None, :, None, None] \
            + b[None, :, None, None]
        out = np.maximum(out, 0).reshape(1, 8, 13, 2, 13, 2).max(axis=(3, 5))
        return out.reshape(1, -1) @ wd.T + bd
    return bb.finish(), [rng.random((1, 1, 28, 28), dtype=np.float32)], ref, None


def kernels_and_bytes(mod) -> tuple:
    """(top-level loop nests run per call: linalg ops other than fills and scheduled scf loops;
    bytes of tensors the graph function materializes between them)."""
    kernels, inter = 0, 0
    for f in mod.func_ops():
        if f.is_external:
            continue
        graph_fn = PRIMITIVE_ATTR not in f.attributes
        for o in f.regions[0].blocks[0].operations:
            op = o.operation
            if op.name in ("scf.for", "scf.forall"):
                kernels += 1                            # a scheduled loop nest
            if op.name.startswith("linalg.") and op.name != "linalg.fill":
                kernels += 1
                res = op.results[0]
                consumers = [u.owner.operation.name for u in res.uses]
                if graph_fn and any(c != "func.return" for c in consumers):
                    inter += int(np.prod(res.type.shape)) * 4
            if op.name == "func.call" and graph_fn:
                for r in op.results:
                    if any(u.owner.operation.name != "func.return" for u in r.uses):
                        inter += int(np.prod(r.type.shape)) * 4
    return kernels, inter


def schedule_primitives(mod):
    from mlc_mlir.schedule.cpu_recipes import schedule_matmul_goto

    sch = mlc.Schedule(mod)
    for f in mod.func_ops():
        if PRIMITIVE_ATTR not in f.attributes:
            continue
        for o in f.regions[0].blocks[0].operations:
            if o.operation.name == "linalg.matmul":
                name = o.operation.attributes["mlc.name"].value
                epi = [o2.operation.attributes["mlc.name"].value for o2 in f.regions[0].blocks[0].operations
                       if o2.operation.name == "linalg.generic"]
                schedule_matmul_goto(sch, sch.get_block(name, func_name=f.sym_name.value), threads=1,
                                     epilogues=[sch.get_block(e, func_name=f.sym_name.value) for e in epi])
    return sch.mod


def run(name, build, rng, rows):
    mod, inputs, ref, p = build(rng)
    want = ref(*inputs)
    fused = graph.Sequential([graph.FoldConstant(), graph.FuseOps(), graph.DeadCodeElimination()])(mod)
    variants = {"unfused": mod, "fused": fused}
    try:
        variants["fused+scheduled"] = schedule_primitives(fused)
    except mlc.MlcError as e:
        print(f"{name}: scheduling skipped: {e}")
    variants["openblas"] = graph.DispatchLibrary({"matmul": "openblas.sgemm", "dense": "openblas.sgemm"})(mod) \
        if name.startswith("mlp") else None
    results = {}
    for label, m in variants.items():
        if m is None:
            continue
        exe = mlc.compile(m)
        got = exe(*inputs)
        np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-3)
        k, b = kernels_and_bytes(m)
        f = exe["main"]
        outs = [np.empty(r.shape, np.float32) for r in f.signature.results]
        results[label] = (k, b, _time(lambda: f(*inputs, out=outs)))
    results["numpy"] = (None, None, _time(lambda: ref(*inputs)))
    try:
        import torch

        tin = [torch.from_numpy(x) for x in inputs]
        if p is not None:
            tp = [torch.from_numpy(a) for a in p]
            results["torch eager"] = (None, None, _time(lambda: torch.nn.functional.linear(
                torch.relu(torch.nn.functional.linear(tin[0], tp[0], tp[1])), tp[2], tp[3])))
    except ImportError:
        pass
    for label, (k, b, ms) in results.items():
        rows.append({"model": name, "impl": label, "kernels": k, "intermediate_bytes": b, "ms": ms,
                     "speedup_vs_numpy": results["numpy"][2] / ms})


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="mlp1,mlp128,cnn")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    builders = {"mlp1": lambda r: mlp(1, r), "mlp128": lambda r: mlp(128, r), "cnn": cnn}
    rows = []
    for name in args.models.split(","):
        run(name, builders[name], np.random.default_rng(0), rows)
    if args.json:
        for r in rows:
            print(json.dumps(r))
        return
    print(f"{'model':<8}{'impl':>17}{'kernels':>9}{'interm. KB':>12}{'ms':>10}{'numpy/ours':>12}")
    for r in rows:
        k = "" if r["kernels"] is None else r["kernels"]
        b = "" if r["intermediate_bytes"] is None else f"{r['intermediate_bytes'] / 1024:.1f}"
        print(f"{r['model']:<8}{r['impl']:>17}{k:>9}{b:>12}{r['ms']:>10.4f}{r['speedup_vs_numpy']:>11.2f}x")


if __name__ == "__main__":
    main()
