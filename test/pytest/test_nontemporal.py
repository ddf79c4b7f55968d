"""Elementwise blocks that stream past the last-level cache: non-temporal stores where the output
is cache-line aligned, half-line vectors, and cache-line aligned result arrays.

Oracle: numpy. The target is the host's with a 1 MiB L3, so that moderate sizes take the
streaming path (the decision is the target's, not the machine's)."""

from __future__ import annotations

import dataclasses
import glob
import os

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir import ops
from mlc_mlir.runtime.memref import ALIGNED_RESULT_BYTES, RESULT_ALIGNMENT, empty_result
from mlc_mlir.target import host_target

pytestmark = pytest.mark.skipif(host_target().vector_bits < 256, reason="x86 with AVX needed")


def _small_llc():
    return dataclasses.replace(host_target(), l3_bytes=1 << 20, l2_bytes=1 << 19)


def _add(shape_a, shape_b, fn=None):
    g = mlc.GraphBuilder()
    with g.function("main") as f:
        a = f.arg("a", shape_a, "float32")
        b = f.arg("b", shape_b, "float32")
        y = ops.add(a, b)
        f.output(fn(y) if fn else y)
    return g.finish()


def _inputs(*shapes, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(np.float32) for s in shapes]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape_a,shape_b,streams", [
    ((1024, 1024), (1024, 1024), True),      # whole half-line tiles
    ((257, 1000), (257, 1000), True),        # odd rows
    ((129, 1003), (129, 1003), False),       # rows the lanes do not divide: a peeled last tile
    ((515, 768), (768,), True),              # row broadcast
    ((600, 1), (1, 700), False),             # outer-product broadcast: 700 = 87 x 8 + 4
    ((600, 1), (1, 704), True),
    ((3, 200, 640), (3, 200, 640), True),    # rank 3
])
def test_streaming_add_matches_numpy(shape_a, shape_b, streams, threads, tmp_path):
    mod = _add(shape_a, shape_b)
    exe = mlc.compile(mod, target=_small_llc(), threads=threads, dump_ir=str(tmp_path))
    a, b = _inputs(shape_a, shape_b)
    want = a + b
    np.testing.assert_array_equal(exe(a, b), want)
    # an unaligned out array takes the ordinary stores of the same loop
    out = np.empty(want.size + 1, np.float32)[1:].reshape(want.shape)
    assert out.ctypes.data % RESULT_ALIGNMENT != 0
    exe(a, b, out=out)
    np.testing.assert_array_equal(out, want)
    with open(glob.glob(os.path.join(str(tmp_path), "09-llvm.ll"))[0]) as f:
        assert ("!nontemporal" in f.read()) == streams


def test_fused_chain_streams_and_matches_numpy():
    mod = _add((700, 1024), (700, 1024), fn=ops.sigmoid)
    exe = mlc.compile(mod, target=_small_llc(), threads=2)
    a, b = _inputs((700, 1024), (700, 1024))
    np.testing.assert_allclose(exe(a, b), 1 / (1 + np.exp(-(a + b))), rtol=2e-6, atol=1e-6)


def test_small_block_keeps_ordinary_stores(tmp_path):
    """A block far below the target's last-level cache stays in the caches for its consumer."""
    exe = mlc.compile(_add((64, 64), (64, 64)), threads=1, dump_ir=str(tmp_path))
    a, b = _inputs((64, 64), (64, 64))
    np.testing.assert_array_equal(exe(a, b), a + b)
    with open(os.path.join(str(tmp_path), "09-llvm.ll")) as f:
        assert "!nontemporal" not in f.read()


def test_live_results_are_distinct_arrays():
    """Each call returns a new array: a result the caller holds is never written by a later call."""
    shape = (1024, 1536)           # 6 MiB: an aligned result
    exe = mlc.compile(_add(shape, shape), target=_small_llc(), threads=2)
    a, b = _inputs(shape, shape)
    c, d = _inputs(shape, shape, seed=1)
    r1 = exe(a, b)
    r2 = exe(c, d)
    assert not np.shares_memory(r1, r2)
    np.testing.assert_array_equal(r1, a + b)
    np.testing.assert_array_equal(r2, c + d)
    for r in (r1, r2):
        assert r.ctypes.data % RESULT_ALIGNMENT == 0
        assert r.flags.c_contiguous and r.flags.writeable
    del r1
    r3 = exe(a, b)                 # may reuse r1's freed memory, never r2's
    assert not np.shares_memory(r3, r2)
    np.testing.assert_array_equal(r2, c + d)
    np.testing.assert_array_equal(r3, a + b)


def test_out_aliasing_an_input_is_correct():
    shape = (512, 2048)
    exe = mlc.compile(_add(shape, shape), target=_small_llc(), threads=1)
    a, b = _inputs(shape, shape)
    want = a + b
    exe(a, b, out=a)
    np.testing.assert_array_equal(a, want)


@pytest.mark.parametrize("shape,dtype", [((ALIGNED_RESULT_BYTES // 4,), np.float32),
                                         ((7, 3, ALIGNED_RESULT_BYTES // 8 + 5), np.float64),
                                         ((100, 3), np.float32), ((0, 5), np.int8)])
def test_empty_result_shape_dtype_alignment(shape, dtype):
    r = empty_result(shape, np.dtype(dtype))
    assert r.shape == shape and r.dtype == dtype and r.flags.c_contiguous and r.flags.writeable
    if r.nbytes >= ALIGNED_RESULT_BYTES:
        assert r.ctypes.data % RESULT_ALIGNMENT == 0
    r[...] = 1
    assert r.sum() == r.size
