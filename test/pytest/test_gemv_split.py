"""The GEMV rule's K split (threads take ranges of K and stream whole rows of B into partial
results laid out ``(threads, N)``, summed after: ``rfactor`` of the outer K loop realized by
``structured.split_reduction``) against numpy, every decision of its space, the cases that keep
the N split, and the ``rfactor`` errors."""

import dataclasses

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir import ops
from mlc_mlir.errors import ScheduleError
from mlc_mlir.schedule.default_rules import apply_default_schedule
from mlc_mlir.schedule.trace import SAMPLING_KINDS
from mlc_mlir.target import host_target
from mlc_mlir.tune.space_rules import default_point, default_space, generate, sampled_decisions

#: The host with 2 cores (the K split needs 2 threads; the caches are the host's).
HOST2 = dataclasses.replace(host_target(), cores=2)


def _gemv(k: int, n: int, bias: bool = False, m=1):
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        y = ops.matmul(f.arg("x", shape=(m, k)), f.arg("w", shape=(k, n)))
        f.output(ops.add(y, f.arg("b", shape=(1, n))) if bias else y)
    return bb.finish()


def _inputs(k: int, n: int, m: int = 1):
    rng = np.random.default_rng(k + n)
    return (rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32),
            rng.standard_normal((1, n), dtype=np.float32))


def _check(got, x, w, b=None):
    want = x.astype(np.float64) @ w + (0 if b is None else b)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.sqrt(w.shape[0]))


@pytest.mark.parametrize("k,n,bias,split", [
    (768, 768, True, True),      # GPT-2's attention projection
    (770, 1024, False, True),    # K / 2 = 385 rows per thread: steps of 7 rows
    (96, 2304, True, True),
    (777, 1024, True, False),    # K odd: 2 threads cannot split it evenly, the N split
    (770, 1001, False, False),   # N no multiple of the vector tile: the N split
])
def test_split_default_matches_numpy(k, n, bias, split):
    """At 2 threads the default splits K where the threads divide K, N is whole vector tiles
    and a row's accumulators fit half the L1d (the scheduled IR then expands K into (2, K / 2)
    and reduces partial results (2, 1, N)); every case matches numpy."""
    mod = _gemv(k, n, bias)
    sch = apply_default_schedule(mlc.Schedule(mod), HOST2, 2)
    rf = sch.get(sch.get_block("matmul")).rfactor
    assert (rf is not None and rf.split) == split
    text = str(sch.mod)
    assert ("tensor.expand_shape" in text and f"tensor<2x1x{n}xf32>" in text) == split
    assert "scf.forall" in text
    x, w, b = _inputs(k, n)
    exe = mlc.compile(sch.mod, target=HOST2, threads=2)
    _check(exe(x, w, b) if bias else exe(x, w), x, w, b if bias else None)


def test_split_every_decision_matches_numpy():
    """Each decision of the GEMV rule at 2 threads (threads, N or K split, chunks, rows per
    step, prefetch) at each of its values, the others at their defaults, matches numpy."""
    k, n = 770, 1024
    mod = _gemv(k, n)
    space = default_space(HOST2, 2)
    dflt = default_point(space, mod)
    order = [i for i, inst in enumerate(dflt.trace.insts) if inst.kind in SAMPLING_KINDS]
    decisions = sampled_decisions(dflt.trace)
    x, w, _ = _inputs(k, n)
    variants, splits = set(), set()
    for pos, i in enumerate(order):
        for c in range(len(dflt.trace.insts[i].attrs["candidates"])):
            forced = list(decisions)
            forced[pos] = c
            sch = generate(space, mod, 0, forced, repair=True)
            key = str(sch.mod)
            if key in variants:
                continue
            variants.add(key)
            rf = sch.get(sch.get_block("matmul")).rfactor
            splits.add(rf is not None and rf.split)
            _check(mlc.compile(sch.mod, target=HOST2, threads=2)(x, w), x, w)
    assert splits == {False, True} and len(variants) >= 4


def test_dynamic_rows_one_compile_at_one_row():
    """A matmul with a symbolic M (a prefill step's projection) keeps its dynamic rule: one
    compile runs M = 1 (a decode-shaped call) and M = 5 like numpy."""
    k, n = 96, 256
    exe = mlc.compile(_gemv(k, n, m="m"), target=HOST2, threads=2)
    for m in (1, 5):
        x, w, _ = _inputs(k, n, m)
        _check(exe(x, w), x, w)


def test_rfactor_outer_loop_errors():
    """``rfactor`` of an outer loop needs a constant extent >= 2 dividing the reduction dim;
    the factored loop may then run in parallel, the unfactored ones may not."""
    sch = mlc.Schedule(_gemv(770, 1024))
    blk = sch.get_block("matmul")
    i, j, k = sch.get_loops(blk)
    k0, k1, k2 = sch.split(k, [3, None, 7])   # 3 does not divide 770 (a partial last range)
    with pytest.raises(ScheduleError, match="expected a constant >= 2 dividing"):
        sch.rfactor(k0)
    with pytest.raises(ScheduleError, match="iterates a reduction dim"):
        sch.parallel(k0)
    sch = mlc.Schedule(_gemv(770, 1024))
    blk = sch.get_block("matmul")
    i, j, k = sch.get_loops(blk)
    k0, k1, k2 = sch.split(k, [2, None, 5])
    sch.rfactor(k0)
    sch.parallel(k0)
    with pytest.raises(ScheduleError, match="iterates a reduction dim"):
        sch.parallel(k1)
    with pytest.raises(ScheduleError, match="already factorized"):
        sch.rfactor(k0)
