"""Reductions vs numpy over axes, keepdims, dtypes; argmax semantics; errors."""

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir import ops
from opcheck import build_only, run

RNG = np.random.default_rng(0)


@pytest.mark.parametrize("op", ["sum", "mean", "max", "min"])
@pytest.mark.parametrize("axis, keepdims", [(None, False), (1, True), ((0, 2), False), (-1, True)])
def test_float_reductions(op, axis, keepdims):
    x = RNG.standard_normal((3, 4, 5)).astype(np.float32)
    got = run(lambda t: getattr(ops, op)(t, axis=axis, keepdims=keepdims), x)
    want = getattr(np, op)(x, axis=axis, keepdims=keepdims)
    assert np.shape(got) == np.shape(want)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", ["int32", "int64", "float64"])
def test_dtypes(dtype):
    x = (RNG.standard_normal((4, 6)) * 10).astype(dtype)
    np.testing.assert_allclose(run(lambda t: ops.sum(t, axis=0), x), x.sum(0), rtol=1e-12)
    np.testing.assert_allclose(run(lambda t: ops.max(t, axis=1), x), x.max(1))
    np.testing.assert_allclose(run(lambda t: ops.min(t), x), x.min())


def test_argmax():
    x = RNG.standard_normal((4, 7)).astype(np.float32)
    np.testing.assert_array_equal(run(lambda t: ops.argmax(t, axis=1), x), x.argmax(1))
    np.testing.assert_array_equal(run(lambda t: ops.argmax(t, axis=0, keepdims=True), x), x.argmax(0)[None])
    assert run(lambda t: ops.argmax(t), x) == x.argmax()
    ties = np.array([[1, 3, 3, 0], [2, 2, 2, 2]], np.int32)
    np.testing.assert_array_equal(run(lambda t: ops.argmax(t, axis=1), ties), [1, 0])  # first maximum
    nan = np.array([[1.0, np.nan, 5.0, np.nan]], np.float32)
    np.testing.assert_array_equal(run(lambda t: ops.argmax(t, axis=1), nan), np.argmax(nan, axis=1))
    assert run(lambda t: ops.argmax(t, axis=1), x).dtype == np.int64


@pytest.mark.parametrize("build, match", [
    (lambda a: ops.sum(a, axis=3), r"sum: argument 'axis' is 3; expected an int in \[-2, 2\)"),
    (lambda a: ops.sum(a, axis=(0, 0)), "repeats an axis"),
    (lambda a: ops.argmax(a, axis=(0, 1)), "must be an int or None"),
])
def test_reduction_errors(build, match):
    with pytest.raises(mlc.BuildError, match=match):
        build_only(build, ((3, 4), "float32"))
    with pytest.raises(mlc.BuildError, match="mean: argument 'x' has dtype int32"):
        build_only(lambda a: ops.mean(a), ((3, 4), "int32"))
