"""The MLC course's DenseAddFusor on MLIR: a custom graph pass that finds ``matmul`` followed by
a bias add and outlines each pair into a primitive function (``func.func`` marked
``mlc.primitive``), the unit a schedule then tiles with the epilogue fused in.

Run: python examples/04_dense_add_fusor.py
"""

import numpy as np

import mlc_mlir as mlc
from mlc_mlir import graph, ops
from mlc_mlir._mlir import ir


class FuseDenseAdd(graph.Pass):
    """``dense + bias_add`` -> one primitive function per pair."""

    name = "fuse-dense-add"

    def transform(self, mod):
        with mod.context, ir.Location.unknown():
            for f in mod.func_ops():
                if "mlc.primitive" in f.attributes:
                    continue
                for op in [o.operation for o in f.regions[0].blocks[0].operations]:
                    if op.name != "linalg.matmul" or len(list(op.results[0].uses)) != 1:
                        continue
                    user = next(iter(op.results[0].uses)).owner.operation
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
    np.testing.assert_allclose(mlc.compile(fused)(data), mlc.compile(mod)(data), rtol=1e-5)
    print("fused module gives the same logits")


if __name__ == "__main__":
    main()
