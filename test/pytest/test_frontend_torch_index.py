"""PyTorch's integer indexing through from_torch, against eager (exact): advanced indexing
(``aten.index.Tensor``) with several index tensors that broadcast, negative indices, and the
result-dim placement rule for adjacent and separated indexed dims."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import mlc_mlir as mlc  # noqa: E402
from mlc_mlir.errors import BuildError  # noqa: E402

g = torch.Generator().manual_seed(0)
X = torch.randn(3, 4, 5, 2, generator=g)


def _t(*v):
    return torch.tensor(v)


class Fn(torch.nn.Module):
    def __init__(self, f):
        super().__init__()
        self.f = f

    def forward(self, *a):
        return self.f(*a)


def _check(f, args):
    want = f(*args)
    got = np.asarray(mlc.compile(mlc.from_torch(Fn(f), args))(*[a.numpy() for a in args]))
    assert got.shape == tuple(want.shape) and got.dtype == want.numpy().dtype, (got.shape, want.shape)
    np.testing.assert_array_equal(got, want.numpy())


INDEX_CASES = {
    "leading_broadcast_negative": (lambda x, i, j: x[i, j], (X, _t([-1], [0]), _t(1, -2, 3))),
    "adjacent_after_a_slice": (lambda x, i, j: x[:, i, j], (X, _t(-1, 0), _t(1, -2))),
    "separated_dims_lead": (lambda x, i, j: x[:, i, :, j], (X, _t([-1, 0], [1, 1]), _t(1, 0))),
    "three_indices_one_scalar_like": (lambda x, i, j, k: x[i, :, j, k], (X, _t(2), _t(0, 4, -1), _t(1))),
    "one_index_2d": (lambda x, i: x[:, :, i], (X, _t([-1, 0], [2, 3]))),
    "int_source": (lambda x, i, j: x[i, j], (torch.arange(12).reshape(3, 4), _t(-1, 1), _t(0, -1))),
}


@pytest.mark.parametrize("name", sorted(INDEX_CASES))
def test_advanced_index_matches_eager(name):
    _check(*INDEX_CASES[name])


def test_bool_mask_index_refused():
    with pytest.raises(BuildError, match="aten.nonzero|unsupported op"):
        mlc.from_torch(Fn(lambda x, m: x[m]), (X[:, 0, 0, 0], _t(True, False, True)))


def _setitem(x, key, v):
    y = x.clone()
    y[key] = v
    return y


PUT_CASES = {
    "negative_rows": (lambda x, i, v: x.index_put((i,), v), (X, _t(-1, 0), torch.randn(2, 4, 5, 2, generator=g))),
    "accumulate_repeated": (lambda x, i, v: x.index_put((i,), v, accumulate=True),
                            (X, _t(-1, 2, -1), torch.randn(3, 4, 5, 2, generator=g))),
    "broadcast_indices_scalar_value": (lambda x, i, j, v: x.index_put((i, j), v),
                                       (X, _t([-1], [0]), _t(1, -2), torch.tensor(5.0))),
    "middle_dims_broadcast_values": (lambda x, i, j, v: _setitem(x, (slice(None), i, j), v),
                                     (X, _t(0, 3), _t(-1, 2), torch.randn(3, 1, 2, generator=g))),
    "separated_dims": (lambda x, i, j, v: _setitem(x, (i, slice(None), j), v),
                       (X, _t(1, 2), _t(0, -1), torch.randn(2, 4, 2, generator=g))),
    "int_tensor": (lambda x, i, v: x.index_put((i,), v, accumulate=True),
                   (torch.arange(12).reshape(3, 4), _t(-1, -1), torch.arange(8).reshape(2, 4))),
    "index_copy": (lambda x, i, v: x.index_copy(1, i, v), (X, _t(3, 0), torch.randn(3, 2, 5, 2, generator=g))),
    # a bool mask index sets the rows where it is True (OpInfo index_put sample 1), not rows 0/1
    "bool_mask_rows": (lambda x, m, v: x.index_put((m,), v),
                       (torch.randn(5, 5, generator=g), _t(True, True, False, True, False), torch.randn(5, generator=g))),
    "bool_mask_2d_accumulate": (lambda x, m, v: x.index_put((m,), v, accumulate=True),
                                (X, torch.rand(3, 4, generator=g) > 0.5, torch.randn(5, 2, generator=g))),
    "bool_mask_middle_dim": (lambda x, m, v: _setitem(x, (slice(None), m), v),
                             (X, _t(False, True, True, False), torch.randn(3, 1, 1, 2, generator=g))),
    "bool_mask_scalar_value": (lambda x, m, v: x.index_put((m,), v),
                               (torch.arange(12).reshape(3, 4), _t(True, False, True), torch.tensor(-7))),
}


@pytest.mark.parametrize("name", sorted(PUT_CASES))
def test_index_put_matches_eager(name):
    f, args = PUT_CASES[name]
    want = f(*args)
    got = np.asarray(mlc.compile(mlc.from_torch(Fn(f), args))(*[_np(a) for a in args]))
    assert got.shape == tuple(want.shape) and got.dtype == want.numpy().dtype
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-6, atol=1e-6)


def _np(a):
    """A compiled function's argument: a bool tensor as the builder's int8 mask."""
    return a.numpy().astype(np.int8) if a.dtype == torch.bool else a.numpy()


@pytest.mark.parametrize("values, match", [
    (torch.randn(2, 5), "hold 2 rows for the True positions"),
    (torch.randn(1, 4), "do not broadcast"),
])
def test_bool_mask_put_refuses_values_it_cannot_place(values, match):
    with pytest.raises(BuildError, match=r"aten.index_put.default: values \(.*\) " + match):
        mlc.from_torch(Fn(lambda x, m, v: x.index_put((m,), v)),
                       (torch.zeros(4, 5), _t(True, False, True, True), values))


def test_bool_mask_put_with_another_index_refused():
    with pytest.raises(BuildError, match="expected a bool mask index alone"):
        mlc.from_torch(Fn(lambda x, m, i, v: x.index_put((m, i), v)),
                       (torch.zeros(4, 5), _t(True, False, True, True), _t(0, 1, 2), torch.tensor(1.0)))
