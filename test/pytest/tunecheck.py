"""Shared pieces of the tuner's failure tests (``test_tune_isolation``, ``test_tune_reference``):
a matmul module and a tiny stochastic space that can plant a fault annotation
(``mlc_mlir.tune.worker.FAULT_KEY``) on a candidate."""

import mlc_mlir as mlc
from mlc_mlir import ops
from mlc_mlir.tune.worker import FAULT_KEY


def matmul(n):
    """A graph module ``main(a: (n, n), b: (n, n)) -> a @ b`` (float32)."""
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(ops.matmul(f.arg("a", (n, n)), f.arg("b", (n, n))))
    return bb.finish()


def space(sch, fault=None):
    """Split i and j of the matmul by ``sample_perfect_tile``; ``fault`` (e.g. ``"segv"``,
    ``"wrong"``) is annotated on the block for the worker's test hook."""
    blk = sch.get_block("matmul")
    i, j, k = sch.get_loops(blk)
    sch.split(i, sch.sample_perfect_tile(i, 2, 16))
    sch.split(j, sch.sample_perfect_tile(j, 2, 16))
    if fault:
        sch.annotate(blk, FAULT_KEY, fault)
