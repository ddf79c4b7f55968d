"""The MLC course's DenseAddFusor on MLIR: a custom graph pass that finds ``matmul`` followed by
a bias add and outlines each pair into a primitive function (``func.func`` marked
``mlc.primitive``), the unit a schedule then tiles with the epilogue fused in.

Run: python examples/04_dense_add_fusor.py
"""

import numpy as np

import mlc_mlir as mlc
from mlc_mlir import graph, ops


class FuseDenseAdd(graph.Pass):
    """``dense + bias_add`` -> one primitive function per pair. ``transform`` runs with the
    module's context and a location active (``graph.Pass`` sets them up)."""

    name = "fuse-dense-add"

    def transform(self, mod):
        for f in graph.graph_functions(mod):
            for op in graph.top_level_ops(f):
                if op.name != "linalg.matmul" or not graph.has_one_use(op):
                    continue
                (user,) = graph.users(op)
                if graph.body_ops(user) == ["arith.addf"]:
                    init = graph.producer(op.operands[2])      # the matmul's fill
                    graph.outline(mod, f, [init, op, user], name=f"fused_dense_add{len(mod.func_ops())}")
        return mod


def main():
    rng = np.random.default_rng(0)
    w0, b0 = rng.standard_normal((128, 784)).astype(np.float32), rng.standard_normal(128).astype(np.float32)
    w1, b1 = rng.standard_normal((10, 128)).astype(np.float32), rng.standard_normal(10).astype(np.float32)
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", shape=(1, 784))
        f.output(ops.dense(ops.relu(ops.dense(x, w0, b0)), w1, b1))
    mod = bb.finish()
    fused = FuseDenseAdd()(mod)
    print(fused.to_text(elide_weights=True))
    data = rng.random((1, 784), dtype=np.float32)
    ref = np.maximum(data @ w0.T + b0, 0) @ w1.T + b1
    assert sum(1 for fn in fused.func_ops() if "mlc.primitive" in fn.attributes) == 2
    np.testing.assert_allclose(mlc.compile(fused)(data), ref, rtol=1e-4, atol=1e-4)
    print("fused module gives the same logits as numpy")


if __name__ == "__main__":
    main()
