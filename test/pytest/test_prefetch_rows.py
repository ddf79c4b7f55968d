"""``PrefetchRows``: a GEMV whose rows loop the schedule annotates prefetches, per full tile,
each cache line of the tile's columns in each of its rows that many rows ahead (clamped to the
last row), and still matches numpy; loops without the annotation get no prefetch."""

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir import ops
from mlc_mlir.schedule.rules.gemv import PREFETCH_ROWS_ATTR


def _gemv(k, n):
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(ops.matmul(f.arg("x", (1, k)), f.arg("w", (k, n))))
    return bb.finish()


@pytest.mark.parametrize("ahead", [0, 4, 8, 16])
@pytest.mark.parametrize("threads", [1, 2])
def test_annotated_rows_loop_prefetches_and_matches_numpy(tmp_path, ahead, threads):
    k, n, rows, v = 777, 1001, 7, 64            # 111 steps of 7 rows; 64-column tiles, the last partial
    sch = mlc.Schedule(_gemv(k, n))
    i, j, kk = sch.get_loops(sch.get_block("matmul"))
    j0, j1, j2, j3 = sch.split(j, [threads, None, 8 // threads, v])
    k0, k1 = sch.split(kk, [None, rows])
    sch.reorder(i, j0, j1, k0, j2, k1, j3)
    if threads > 1:
        sch.parallel(j0)
    if ahead:
        sch.annotate(k0, PREFETCH_ROWS_ATTR, ahead)
    sch.vectorize(k1)
    exe = mlc.compile(sch.mod, threads=threads, dump_ir=str(tmp_path))
    prepared = (tmp_path / "06-prepare.mlir").read_text()
    # the full 7 x 64 tiles: one prefetch per 64-byte line (16 floats) of each of the 7 rows
    assert prepared.count("memref.prefetch") == (rows * v // 16 if ahead else 0)
    if ahead:
        assert "arith.minui" in prepared             # rows past the last are clamped to it
    rng = np.random.default_rng(ahead)
    x, w = rng.standard_normal((1, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
    np.testing.assert_allclose(exe(x, w), x.astype(np.float64) @ w, rtol=1e-4, atol=1e-4 * np.sqrt(k))
