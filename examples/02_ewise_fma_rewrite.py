"""The MLC course's EwiseFMARewriter on MLIR: ``add(multiply(x, y), y)`` becomes one fused
multiply-add ``linalg.generic`` (``math.fma``), written as a Python rewrite pattern.

Run: python examples/02_ewise_fma_rewrite.py
"""

import numpy as np

import mlc_mlir as mlc
from mlc_mlir import graph, ops


@graph.pattern("linalg.generic")
def ewise_fma(op):
    """add(multiply(a, b), c) -> fma(a, b, c); returns None (no match) otherwise."""
    if graph.body_ops(op) != ["arith.addf"]:
        return None                                        # not an add: no match
    mul = graph.producer(op.operands[0])
    if mul is None or graph.body_ops(mul) != ["arith.mulf"] or not graph.has_one_use(mul):
        return None
    # the replacement of op's result; the driver inserts it before op, with op's location
    return graph.elementwise([mul.operands[0], mul.operands[1], op.operands[1]],
                             op.results[0].type, graph.scalar.fma, name="ewise_fma")


def main():
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", shape=(3, 4))
        y = f.arg("y", shape=(3, 4))
        f.output(ops.add(ops.multiply(x, y), y))
    mod = bb.finish()
    print("-- before --")
    print(mod)
    fused = graph.Sequential([graph.RewritePatterns([ewise_fma]), graph.DeadCodeElimination()])(mod)
    print("-- after EwiseFMA + DCE --")
    print(fused)
    rng = np.random.default_rng(0)
    xn = rng.random((3, 4), dtype=np.float32)
    yn = rng.random((3, 4), dtype=np.float32)
    got = mlc.compile(fused)(xn, yn)
    np.testing.assert_allclose(got, xn * yn + yn, rtol=1e-6)
    print("numerics match numpy:", np.abs(got - (xn * yn + yn)).max())


if __name__ == "__main__":
    main()
