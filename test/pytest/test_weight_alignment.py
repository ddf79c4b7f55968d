"""The weights the compiler computes start on a cache line (``ir.constants.line_aligned``): the
JIT links those buffers in place (``pipeline.jit_weights``), and a weight at 16 bytes past a
page (numpy's large arrays) split every 64-byte row of a packed panel over two cache lines.
Checked on misaligned inputs: the copy is aligned and equal, an aligned array is not copied,
and a model built from a misaligned weight (packed at compile time) matches numpy through the
JIT, the packed weight it links aligned."""

import sys

import numpy as np

import mlc_mlir as mlc
from mlc_mlir import ops
from mlc_mlir.ir.constants import CACHE_LINE_ALIGN, line_aligned
from mlc_mlir.pipeline import jit_weights
from targets import AVX2


def misaligned(shape, seed=0):
    """A float32 array of ``shape`` starting 4 bytes past a cache line."""
    n = int(np.prod(shape))
    raw = np.empty(n + 32, np.float32)
    start = (-raw.ctypes.data % CACHE_LINE_ALIGN) // 4 + 1
    out = raw[start:start + n].reshape(shape)
    out[...] = np.random.default_rng(seed).standard_normal(shape)
    assert out.ctypes.data % CACHE_LINE_ALIGN == 4
    return out


def test_line_aligned_copies_only_a_misaligned_array():
    w = misaligned((33, 17))
    a = line_aligned(w)
    assert a.ctypes.data % CACHE_LINE_ALIGN == 0 and a.dtype == w.dtype and a.shape == w.shape
    np.testing.assert_array_equal(a, w)
    assert line_aligned(a) is a
    t = line_aligned(w.T)                                   # a transposed view: copied contiguous
    assert t.flags.c_contiguous and t.ctypes.data % CACHE_LINE_ALIGN == 0
    np.testing.assert_array_equal(t, w.T)
    splat = np.broadcast_to(np.float32(2), (1024, 1024))   # ConstantOfShape: never materialized
    assert line_aligned(splat) is splat


def test_packed_weights_are_linked_aligned_and_match_numpy(monkeypatch):
    linked = []
    real = jit_weights.link_weights

    def spy(lowered):
        out, symbols, arrays = real(lowered)
        linked.extend(arrays)
        return out, symbols, arrays

    # compile() calls the name its module imported
    monkeypatch.setattr(sys.modules["mlc_mlir.pipeline.compile"], "link_weights", spy)
    x = np.random.default_rng(1).standard_normal((8, 256)).astype(np.float32)
    # numpy's own copies of these sizes start 16 or 48 bytes past a cache line
    for n in (96, 160, 208, 272, 400):
        w = misaligned((256, n), seed=n)
        bb = mlc.GraphBuilder()
        with bb.function("main") as f:
            f.output(ops.matmul(f.arg("x", shape=(8, 256)), w))   # B packed into (n / 16, 256, 16) panels
        got = mlc.compile(bb.finish(), target=AVX2, threads=1)(x)   # whether B is packed depends on the CPU
        np.testing.assert_allclose(got, x @ w, rtol=1e-4, atol=1e-4)
    packed = [a for a in linked if a.ndim == 3]
    assert len(packed) == 5 and all(a.ctypes.data % CACHE_LINE_ALIGN == 0 for a in packed)
