"""Shape ops vs numpy (reshape, transpose, flatten, concat, slice, pad, broadcast_to); errors."""

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir import ops
from opcheck import build_only, run

RNG = np.random.default_rng(0)
X = RNG.standard_normal((2, 3, 4)).astype(np.float32)


@pytest.mark.parametrize("shape", [(6, 4), (-1,), (4, 3, 2), (24, 1), (2, 3, 4)])
def test_reshape(shape):
    np.testing.assert_array_equal(run(lambda t: ops.reshape(t, shape), X), X.reshape(shape))


def test_reshape_scalars():
    assert run(lambda t: ops.reshape(t, (1, 1)), np.array(3.0, np.float32)).shape == (1, 1)
    assert run(lambda t: ops.reshape(t, ()), np.ones((1, 1), np.int32)).shape == ()


@pytest.mark.parametrize("perm", [None, (0, 2, 1), (2, 0, 1), (-1, 0, 1)])
def test_transpose(perm):
    np.testing.assert_array_equal(run(lambda t: ops.transpose(t, perm), X), np.transpose(X, perm))


def test_flatten_concat_slice_pad_broadcast():
    np.testing.assert_array_equal(run(lambda t: ops.flatten(t, 1), X), X.reshape(2, -1))
    np.testing.assert_array_equal(run(lambda t: ops.flatten(t, 0, 1), X), X.reshape(6, 4))
    other = RNG.standard_normal((2, 5, 4)).astype(np.float32)
    np.testing.assert_array_equal(run(lambda a, b: ops.concat([a, b, a], axis=1), X, other),
                                  np.concatenate([X, other, X], axis=1))
    np.testing.assert_array_equal(run(lambda a: ops.concat([a, X], axis=-1), X), np.concatenate([X, X], -1))
    np.testing.assert_array_equal(run(lambda t: ops.slice(t, [0, -2], [2, 3], [1, 2], axes=[0, 2]), X),
                                  X[0:2, :, -2:3:2])
    np.testing.assert_array_equal(run(lambda t: ops.slice(t, [1], [100]), X), X[1:100])
    np.testing.assert_array_equal(run(lambda t: ops.pad(t, 1), X), np.pad(X, 1))
    np.testing.assert_array_equal(run(lambda t: ops.pad(t, ((0, 1), (2, 0), (1, 1)), -3.0), X),
                                  np.pad(X, ((0, 1), (2, 0), (1, 1)), constant_values=-3.0))
    np.testing.assert_array_equal(run(lambda t: ops.broadcast_to(t, (5, 2, 3, 4)), X), np.broadcast_to(X, (5, 2, 3, 4)))
    xi = np.arange(6, dtype=np.int64).reshape(2, 3)
    np.testing.assert_array_equal(run(lambda t: ops.transpose(ops.pad(t, (1, 0))), xi), np.pad(xi, (1, 0)).T)


@pytest.mark.parametrize("build, match", [
    (lambda a: ops.reshape(a, (5, 5)), r"reshape: cannot reshape \(2, 3, 4\) into \(5, 5\)"),
    (lambda a: ops.reshape(a, (-1, -1)), "one -1"),
    (lambda a: ops.transpose(a, (0, 0, 1)), "must be a permutation of range"),
    (lambda a: ops.flatten(a, 2, 1), "start_dim 2 comes after end_dim 1"),
    (lambda a: ops.concat([a, np.ones((2, 3, 5), np.float32)], axis=0),
     r"concat: argument 'tensors\[1\]' has shape \(2, 3, 5\); expected \(2, 3, 4\) except along axis 0"),
    (lambda a: ops.slice(a, [0], [2], [-1]), "positive strides only"),
    (lambda a: ops.slice(a, [1], [1]), "selects no element"),
    (lambda a: ops.pad(a, ((1, 1), (1, 1))), "does not give"),
    (lambda a: ops.pad(a, -1), "negative widths"),
    (lambda a: ops.broadcast_to(a, (3, 4)), r"broadcast_to: shapes \(2, 3, 4\) and \(3, 4\)|cannot broadcast"),
])
def test_shape_errors(build, match):
    with pytest.raises(mlc.BuildError, match=match):
        build_only(build, ((2, 3, 4), "float32"))
