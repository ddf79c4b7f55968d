"""Row reductions over arguments at every alignment: the streamed reduction loops start their
loads at a vector-aligned address read at run time (``AlignStreamedReductions``); the results
must not depend on where numpy put the data. Oracle: numpy in float64."""

import os

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir import ops
from mlc_mlir.target import host_target

RNG = np.random.default_rng(7)


def at_offset(shape, floats: int, dtype=np.float32) -> np.ndarray:
    """A C-contiguous array whose data starts ``floats`` elements past a 64-byte boundary."""
    n = int(np.prod(shape))
    buf = np.empty(n + 64, dtype)
    start = (-(buf.ctypes.data // buf.itemsize)) % (64 // buf.itemsize) + floats
    a = buf[start:start + n].reshape(shape)
    a[...] = RNG.standard_normal(shape)
    assert a.ctypes.data % 64 == (floats * buf.itemsize) % 64
    return a


def compile_rows(shape, build, threads, n_inputs=1):
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        xs = [f.arg(f"x{i}", shape=shape) for i in range(n_inputs)]
        f.output(*build(*xs))
    return mlc.compile(bb.finish(), threads=threads)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape", [(6, 4096), (5, 65536), (3, 5000), (7, 1031), (4, 2048 + 64)])
def test_row_sums_and_max_at_every_offset(shape, threads):
    """sum, mean and max over the last axis of rows at 0..15 floats off a 64-byte boundary,
    long rows (blocked sums), odd lengths (no vector tile divides them)."""
    exe = compile_rows(shape, lambda x: [ops.sum(x, axis=-1), ops.mean(x, axis=-1), ops.max(x, axis=-1)], threads)
    for off in (0, 1, 3, 4, 8, 13, 15):
        x = at_offset(shape, off)
        s, m, mx = exe(x)
        x64 = x.astype(np.float64)
        scale = np.abs(x64).sum(axis=-1)
        assert np.max(np.abs(s - x64.sum(axis=-1)) / scale) < 1e-6, off
        assert np.max(np.abs(m - x64.mean(axis=-1)) / (scale / shape[-1])) < 1e-6, off
        np.testing.assert_array_equal(mx, x.max(axis=-1))


@pytest.mark.parametrize("threads", [1, 2])
def test_two_inputs_at_different_offsets(threads):
    """mean((a - b) ** 2) over rows whose two inputs are misaligned differently (the loop is
    peeled to the first one's alignment; the other's loads stay unaligned)."""
    shape = (9, 8192)

    def build(a, b):
        d = ops.subtract(a, b)
        return [ops.mean(ops.multiply(d, d), axis=-1)]

    exe = compile_rows(shape, build, threads, n_inputs=2)
    for oa, ob in [(0, 0), (1, 0), (4, 9), (15, 3)]:
        a, b = at_offset(shape, oa), at_offset(shape, ob)
        got = exe(a, b)
        want = ((a.astype(np.float64) - b) ** 2).mean(axis=-1)
        np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("threads", [1, 2])
def test_softmax_and_layer_norm_rows_at_offsets(threads):
    """softmax and layer_norm over long rows of a misaligned input."""
    shape = (4, 16384)
    exe = compile_rows(shape, lambda x: [ops.softmax(x, axis=-1), ops.layer_norm(x, None, None, axis=-1)], threads)
    for off in (0, 1, 4, 11):
        x = at_offset(shape, off)
        sm, ln = exe(x)
        x64 = x.astype(np.float64)
        e = np.exp(x64 - x64.max(axis=-1, keepdims=True))
        np.testing.assert_allclose(sm, e / e.sum(axis=-1, keepdims=True), rtol=1e-5, atol=1e-12)
        mu, var = x64.mean(axis=-1, keepdims=True), x64.var(axis=-1, keepdims=True)
        np.testing.assert_allclose(ln, (x64 - mu) / np.sqrt(var + 1e-5), rtol=1e-4, atol=1e-5)


def test_long_row_loops_are_peeled_and_short_ones_are_not(tmp_path):
    """The rewrite reads the argument's address in the row sum over 4096 elements (64 steps of
    a 64-lane tile on AVX-512, 16 and more on narrower targets) and leaves a 384-element row
    alone (too few steps to pay for the two masked ones)."""
    target = host_target()
    if target.vector_bits <= 128:
        pytest.skip("the rewrite targets vectors wider than 128 bits")
    for shape, peeled in [((8, 4096), True), ((8, 384), False)]:
        bb = mlc.GraphBuilder()
        with bb.function("main") as f:
            f.output(ops.sum(f.arg("x", shape=shape), axis=-1))
        d = tmp_path / f"d{shape[1]}"
        d.mkdir()
        mlc.compile(bb.finish(), dump_ir=str(d))
        text = (d / "06-prepare.mlir").read_text()
        assert ("memref.extract_aligned_pointer_as_index" in text) == peeled, shape
        assert os.path.exists(d / "07-lower.mlir")


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("n, k", [(24, 8192), (7, 4160), (5, 1031)])
def test_matrix_vector_rows_at_offsets(n, k, threads):
    """``W @ v`` (W row-major (N, K), ``dense`` at M = 1: one dot product per row) with W and v
    misaligned differently; K a multiple of the vector tile, not a power of two, and prime."""
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        w, v = f.arg("w", shape=(n, k)), f.arg("v", shape=(k,))
        f.output(ops.reshape(ops.dense(ops.reshape(v, (1, k)), w), (n,)))
    exe = mlc.compile(bb.finish(), threads=threads)
    for ow, ov in [(0, 0), (4, 0), (1, 7), (13, 13)]:
        w, v = at_offset((n, k), ow), at_offset((k,), ov)
        want = w.astype(np.float64) @ v.astype(np.float64)
        scale = np.abs(w.astype(np.float64)) @ np.abs(v.astype(np.float64))
        assert np.max(np.abs(exe(w, v) - want) / scale) < 1e-6, (ow, ov)


def test_softmax_sums_its_exponentials_in_the_loop_that_writes_them(tmp_path):
    """FuseRowLoops: softmax's row sum is accumulated in the loop that computes the
    exponentials (one loop over the row fewer after the prepare stage); the result matches
    numpy."""
    shape = (3, 16384)
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(ops.softmax(f.arg("x", shape=shape), axis=-1))
    exe = mlc.compile(bb.finish(), threads=1, dump_ir=str(tmp_path))
    row_loops = [(tmp_path / name).read_text().count("scf.for ")
                 for name in ("05-library.mlir", "06-prepare.mlir")]
    assert row_loops[1] == row_loops[0] - 1, row_loops
    x = at_offset(shape, 5)
    e = np.exp(x.astype(np.float64) - x.max(axis=-1, keepdims=True))
    np.testing.assert_allclose(exe(x), e / e.sum(axis=-1, keepdims=True), rtol=1e-5, atol=1e-12)
