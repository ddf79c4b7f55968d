"""``ops.take`` as the elementwise rule vectorizes it (``vectorize_nd_extract``): row gathers
(embeddings) read each row with contiguous vector loads, gathers along the last axis with
``vector.gather``; every case against numpy ``take`` (negative indices, 2-D indices, int32
indices, shapes the lanes do not divide, 1 and 2 threads)."""

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir import ops

CASES = [  # (x shape, indices shape, axis)
    ((1000, 128), (1, 128), 0),     # BERT's word embedding
    ((50, 37), (3, 5), 0),          # a row the lanes do not divide
    ((4, 300, 24), (7,), 1),        # the gathered axis in the middle
    ((6, 90), (11,), 1),            # along the last axis: vector.gather
    ((513,), (2, 3), 0),            # rank-1 source
]


def _compile(x_shape, idx_shape, axis, threads, dtype, table, dump=None):
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        idx = f.arg("idx", idx_shape, dtype)
        f.output(ops.take(table, idx, axis=axis))
    return mlc.compile(bb.finish(), threads=threads, dump_ir=dump)["main"]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("x_shape,idx_shape,axis", CASES)
def test_take_matches_numpy(x_shape, idx_shape, axis, threads):
    rng = np.random.default_rng(0)
    table = rng.standard_normal(x_shape).astype(np.float32)
    n = x_shape[axis]
    for dtype in ("int64", "int32"):
        fn = _compile(x_shape, idx_shape, axis, threads, dtype, table)
        idx = rng.integers(-n, n, idx_shape).astype(dtype)   # negative indices count from the end
        np.testing.assert_array_equal(fn(idx), np.take(table, idx, axis=axis))


def test_row_gather_reads_rows_as_vectors(tmp_path):
    """An embedding lookup is vectorized with contiguous row reads: the scheduled function reads
    the table with ``vector.transfer_read`` and has no ``vector.gather`` and no scalar
    ``tensor.extract`` of the table left."""
    table = np.random.default_rng(1).standard_normal((1000, 128)).astype(np.float32)
    fn = _compile((1000, 128), (1, 128), 0, 1, "int64", table, dump=str(tmp_path))
    idx = np.arange(128, dtype=np.int64)[None] * 7
    np.testing.assert_array_equal(fn(idx), table[idx])
    text = (tmp_path / "04-math.mlir").read_text()
    reads = [ln for ln in text.splitlines() if "vector.transfer_read" in ln and "1000x128xf32" in ln]
    assert reads, "the table is not read with vector transfers"
    assert "vector.gather" not in text
    assert not [ln for ln in text.splitlines() if "tensor.extract " in ln and "1000x128xf32" in ln]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("idx_shape,x_shape,axis", [(("n",), None, 0), ((2, "n"), None, 0),
                                                    ((5,), ("m", 33), 0), ((5,), (7, "m"), 1),
                                                    (("n",), ("m", 40), 0)])
def test_take_dynamic_matches_numpy(idx_shape, x_shape, axis, threads):
    """Symbolic index counts and sources (the vectorized gather with masks or a partial tile)."""
    rng = np.random.default_rng(2)
    table = rng.standard_normal((1000, 70)).astype(np.float32)
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        idx = f.arg("idx", idx_shape, "int64")
        f.output(ops.take(table if x_shape is None else f.arg("x", x_shape), idx, axis=axis))
    fn = mlc.compile(bb.finish(), threads=threads)["main"]
    x = table if x_shape is None else \
        rng.standard_normal(tuple(9 if isinstance(d, str) else d for d in x_shape)).astype(np.float32)
    idx = rng.integers(-x.shape[axis], x.shape[axis], tuple(13 if isinstance(d, str) else d for d in idx_shape))
    got = fn(idx) if x_shape is None else fn(idx, x)
    np.testing.assert_array_equal(got, np.take(x, idx, axis=axis))
