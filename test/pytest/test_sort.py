"""``ops.sort`` (a stable bitonic network) against numpy's stable argsort, and ``torch.sort`` /
``argsort`` / ``msort`` through from_torch against eager, including OpInfo's 8000-element
sample (a sort by ``k = n`` argmax rounds unrolled it into 8000 rounds of ops)."""

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir import ops
from mlc_mlir.errors import BuildError


def _stable_ref(a, axis, descending):
    """numpy's stable order with NaN largest (last ascending, first descending)."""
    nan = np.isnan(a) if np.issubdtype(a.dtype, np.floating) else np.zeros(a.shape, bool)
    key = np.where(nan, 0, -a if descending else a)
    idx = np.lexsort((key, ~nan if descending else nan), axis=axis)   # stable, the last key first
    return np.take_along_axis(a, idx, axis), idx


def _sorted(shape, dtype, axis, descending):
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(*ops.sort(f.arg("x", shape=shape, dtype=dtype), axis=axis, descending=descending))
    return mlc.compile(bb.finish())


@pytest.mark.parametrize("shape, axis", [((1,), 0), ((7,), 0), ((5, 5, 5), 0), ((3, 10), 1),
                                         ((33,), -1)])
@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "int64"])
def test_sort_matches_numpy_stable(shape, axis, descending, dtype, rng):
    a = rng.integers(-3, 4, shape).astype(dtype)   # many ties: the order of equal values counts
    if dtype == "float32" and a.size > 3:
        a.flat[[0, a.size // 2]] = np.nan
        a.flat[1] = np.inf
    got_v, got_i = _sorted(shape, dtype, axis, descending)(a)
    want_v, want_i = _stable_ref(a, axis, descending)
    np.testing.assert_array_equal(got_i, want_i)
    np.testing.assert_array_equal(got_v, want_v)


def test_sort_refuses_bad_arguments():
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", shape=(3, 4), dtype="float32")
        with pytest.raises(BuildError, match=r"sort: argument 'axis' is 2; expected an axis of x \(3, 4\)"):
            ops.sort(x, axis=2)
        with pytest.raises(BuildError, match="sort: argument 'x' is ndarray; expected a Tensor"):
            ops.sort(np.zeros(3))
        f.output(x)


torch = pytest.importorskip("torch")


class _Fn(torch.nn.Module):
    def __init__(self, f):
        super().__init__()
        self.f = f

    def forward(self, x):
        return self.f(x)


@pytest.mark.parametrize("f, shape", [
    (lambda x: torch.argsort(x), (8000,)),                         # OpInfo argsort/sort/msort sample 0
    (lambda x: torch.sort(x, -3, True), (5, 5, 5)),
    (lambda x: torch.sort(x, dim=1, stable=True), (4, 7, 3)),
    (lambda x: torch.sort(x, dim=0, descending=True, stable=True), (6, 2)),
    (lambda x: torch.msort(x), (5, 10, 5)),
])
def test_torch_sort_matches_eager(f, shape):
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(0))
    want = f(x)
    got = mlc.compile(mlc.from_torch(_Fn(f), (x,)))(x.numpy())
    want = list(want) if isinstance(want, tuple) else [want]
    got = list(got) if isinstance(got, (tuple, list)) else [got]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.asarray(g), w.numpy())
