"""What keeps compile time linear in the model's size: the default schedule of a function of n
ops looks each op up a bounded number of times (the loop-nest model answers which op ends a row
chain, no ``get_block`` per candidate), and vector reads that broadcast along their innermost
dim reach LLVM as scalar loads and broadcasts, not as per-lane loops
(``pipeline.broadcast_reads``); results vs numpy."""

import collections

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir import ops
from mlc_mlir.ir.module import Module
from mlc_mlir.ir.pass_pipeline import run_pass_pipeline
from mlc_mlir.ir.walk import find_ops
from mlc_mlir.pipeline.broadcast_reads import unroll_broadcast_reads
from mlc_mlir.schedule.default_rules import apply_default_schedule
from mlc_mlir.schedule.schedule import Schedule
from mlc_mlir.target import Target

from test_pack_matmul import mmt4d_case


def _chain(n, shape=(8, 64)):
    """``y = relu(y + x)`` ``n`` times in one function (2n elementwise ops)."""
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", shape=shape, dtype="float32")
        y = x
        for _ in range(n):
            y = ops.relu(ops.add(y, x))
        f.output(y)
    return bb.finish()


@pytest.mark.parametrize("n", [3, 12])
def test_default_schedule_looks_each_op_up_once(n):
    """Every op of a 2n-op function is looked up once (by the rule loop): the elementwise rule's
    search for a row chain asks the model, and records no ``get_block`` per candidate (before:
    n(2n+1) lookups, quadratic in the function's size)."""
    sch = Schedule(_chain(n))
    apply_default_schedule(sch, Target.host(), threads=1)
    looked_up = collections.Counter(inst.inputs[0] for inst in sch.trace.insts
                                    if inst.kind == "get_block")
    assert len(sch.model.ops) == 2 * n
    assert set(looked_up) == {name for _, name in sch.model.ops}
    assert max(looked_up.values()) == 1


def test_default_schedule_of_a_long_chain_matches_numpy():
    x = np.random.default_rng(0).standard_normal((8, 64)).astype(np.float32)
    want = x
    for _ in range(12):
        want = np.maximum(want + x, 0)
    np.testing.assert_allclose(mlc.compile(_chain(12), threads=1)(x), want, rtol=1e-6, atol=1e-6)


READS = """
func.func @f(%a: memref<9x5x1x1xf32>, %b: memref<1x5x6x1xf32>, %s: memref<1x1x1xf32>,
             %oa: memref<3x4xf32>, %ob: memref<6x3xf32>, %os: memref<2x1x7xf32>, %k: index) {
  %c0 = arith.constant 0 : index
  %c2 = arith.constant 2 : index
  %p = arith.constant 0.0 : f32
  %0 = vector.transfer_read %a[%c2, %k, %c0, %c0], %p {in_bounds = [true, true],
      permutation_map = affine_map<(d0, d1, d2, d3) -> (d0, 0)>} : memref<9x5x1x1xf32>, vector<3x4xf32>
  %1 = vector.transfer_read %b[%c0, %k, %c0, %c0], %p {in_bounds = [true, true],
      permutation_map = affine_map<(d0, d1, d2, d3) -> (d2, 0)>} : memref<1x5x6x1xf32>, vector<6x3xf32>
  %2 = vector.transfer_read %s[%c0, %c0, %c0], %p {in_bounds = [true, true, true],
      permutation_map = affine_map<(d0, d1, d2) -> (0, d0, 0)>} : memref<1x1x1xf32>, vector<2x1x7xf32>
  vector.transfer_write %0, %oa[%c0, %c0] {in_bounds = [true, true]} : vector<3x4xf32>, memref<3x4xf32>
  vector.transfer_write %1, %ob[%c0, %c0] {in_bounds = [true, true]} : vector<6x3xf32>, memref<6x3xf32>
  vector.transfer_write %2, %os[%c0, %c0, %c0] {in_bounds = [true, true, true]} : vector<2x1x7xf32>, memref<2x1x7xf32>
  return
}
"""


def test_broadcast_reads_become_one_load_per_element():
    """Rows of A (3 loads), of a B panel (6 loads) and a scalar broadcast to a 3-D vector (1
    load) replace the three reads; convert-vector-to-scf then makes no per-lane loop (before: 3
    + 6 + 2 of them)."""
    mod = unroll_broadcast_reads(Module.parse(READS))
    assert not find_ops(mod, "vector.transfer_read")
    assert len(find_ops(mod, "memref.load")) == 3 + 6 + 1
    lowered = run_pass_pipeline(mod, "builtin.module(convert-vector-to-scf{full-unroll})", "test")
    assert not find_ops(lowered, "scf.for")


def test_other_reads_are_left_alone():
    text = READS.replace("(d0, d1, d2, d3) -> (d0, 0)", "(d0, d1, d2, d3) -> (d1, d0)") \
        .replace("vector<3x4xf32>", "vector<4x3xf32>").replace("memref<3x4xf32>", "memref<4x3xf32>")
    mod = unroll_broadcast_reads(Module.parse(text))
    assert len(find_ops(mod, "vector.transfer_read")) == 1


@pytest.mark.parametrize("m, k, n1, nr", [(23, 37, 2, 16), (196, 64, 1, 32)])
def test_mmt4d_tiles_with_broadcast_reads_match_numpy(m, k, n1, nr):
    """The mmt4d register tile reads A's rows and B's panel through broadcast maps: its results
    through the rewritten reads equal numpy's."""
    mod, a, b, ref = mmt4d_case(m, k, n1, nr)
    np.testing.assert_allclose(mlc.compile(mod, threads=1)(a, b), ref, rtol=1e-4, atol=1e-4)
