"""Elementwise ops vs numpy: several shapes and dtypes, broadcasting from hypothesis, errors."""

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

import mlc_mlir as mlc
from mlc_mlir import ops
from opcheck import build_only, run

RNG = np.random.default_rng(0)


def _erf(x):
    return np.vectorize(math.erf)(x.astype(np.float64))


UNARY = {
    "negative": np.negative, "exp": np.exp, "log": lambda x: np.log(np.abs(x) + 1),
    "sqrt": lambda x: np.sqrt(np.abs(x)), "rsqrt": lambda x: 1 / np.sqrt(np.abs(x) + 1),
    "tanh": np.tanh, "sigmoid": lambda x: 1 / (1 + np.exp(-x)), "relu": lambda x: np.maximum(x, 0),
}
ARG = {"log": lambda t: ops.add(ops.maximum(t, ops.negative(t)), 1.0), "sqrt": lambda t: ops.maximum(t, ops.negative(t)),
       "rsqrt": lambda t: ops.add(ops.maximum(t, ops.negative(t)), 1.0)}


@pytest.mark.parametrize("name", sorted(UNARY))
@pytest.mark.parametrize("shape, dtype", [((7,), "float32"), ((3, 5), "float64"), ((2, 3, 4), "float32")])
def test_unary_float(name, shape, dtype):
    x = RNG.standard_normal(shape).astype(dtype)
    pre = ARG.get(name, lambda t: t)
    got = run(lambda a: getattr(ops, name)(pre(a)), x)
    np.testing.assert_allclose(got, UNARY[name](x), rtol=2e-5 if dtype == "float32" else 1e-12, atol=1e-6)


@pytest.mark.parametrize("approx, ref", [("tanh", lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))),
                                         ("erf", lambda x: 0.5 * x * (1 + _erf(x / np.sqrt(2))))])
def test_gelu(approx, ref):
    x = RNG.standard_normal((4, 9)).astype(np.float32) * 3
    np.testing.assert_allclose(run(lambda a: ops.gelu(a, approximate=approx), x), ref(x), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_integer_ops(dtype):
    x = RNG.integers(-9, 9, (3, 4)).astype(dtype)
    y = RNG.integers(1, 5, (3, 4)).astype(dtype)
    np.testing.assert_array_equal(run(lambda a, b: ops.add(ops.multiply(a, b), ops.negative(b)), x, y), x * y - y)
    np.testing.assert_array_equal(run(lambda a, b: ops.divide(a, b), x, y), np.trunc(x / y).astype(dtype))
    np.testing.assert_array_equal(run(lambda a: ops.relu(a), x), np.maximum(x, 0))
    np.testing.assert_array_equal(run(lambda a: ops.clip(a, -2, 3), x), np.clip(x, -2, 3))


@pytest.mark.parametrize("src, dst", [("float32", "int32"), ("int32", "float32"), ("float32", "float64"),
                                      ("float64", "float16"), ("int64", "int32"), ("float32", "bfloat16")])
def test_cast(src, dst):
    x = (RNG.standard_normal((3, 4)) * 5).astype(src)
    got = run(lambda a: ops.cast(a, dst), x)
    want = x.astype(mlc.ir.dtypes.to_numpy_dtype(dst))
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=1e-2)


def test_bool_tensors_are_refused_before_lowering():
    x = np.arange(4, dtype=np.int32)
    with pytest.raises(mlc.PipelineError, match="tensor of i1 .* use int8"):
        run(lambda a: ops.cast(a, "bool"), x)


def test_scalars_and_numpy_constants_and_operators():
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    c = RNG.standard_normal((1, 3)).astype(np.float32)
    got = run(lambda a: (2.0 - a) * c / 4.0 + (-a), x)
    np.testing.assert_allclose(got, (2.0 - x) * c / 4.0 - x, rtol=1e-6)
    np.testing.assert_allclose(run(lambda a: ops.minimum(ops.maximum(a, c), 0.5), x),
                               np.minimum(np.maximum(x, c), 0.5), rtol=1e-6)


@settings(max_examples=15, deadline=None)
@given(shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, max_side=4),
       op=st.sampled_from(["add", "subtract", "multiply", "maximum"]))
def test_broadcasting_matches_numpy(shapes, op):
    a_shape, b_shape = shapes.input_shapes
    a = RNG.standard_normal(a_shape).astype(np.float32)
    b = RNG.standard_normal(b_shape).astype(np.float32)
    got = run(lambda x, y: getattr(ops, op)(x, y), a, b)
    np.testing.assert_allclose(got, getattr(np, op)(a, b), rtol=1e-6)
    assert got.shape == shapes.result_shape


@pytest.mark.parametrize("build, specs, match", [
    (lambda a, b: ops.add(a, b), [((2, 3), "float32"), ((4,), "float32")],
     r"add: shapes \(2, 3\) and \(4,\) are not broadcastable \(dimension -1: 3 vs 4\)"),
    (lambda a, b: ops.add(a, b), [((2, 3), "float32"), ((2, 3), "int32")],
     "add: argument 'b' has dtype int32; expected float32"),
    (lambda a: ops.exp(a), [((2,), "int32")], "exp: dtype int32 is not supported"),
    (lambda a: ops.gelu(a, approximate="fast"), [((2,), "float32")], "approximate"),
    (lambda a: ops.clip(a, 3, 1), [((2,), "float32")], "a_min=3 is greater than a_max=1"),
    (lambda a: ops.cast(a, "complex64"), [((2,), "float32")], "dtype: complex64 is not supported"),
    (lambda a: ops.relu([1, 2]), [((2,), "float32")], "relu: argument 'x' is list; expected a Tensor"),
])
def test_elementwise_errors(build, specs, match):
    with pytest.raises(mlc.MlcError, match=match):
        build_only(build, *specs)


def test_names_default_and_unique():
    mod = build_only(lambda a: ops.relu(ops.relu(ops.relu(a, name="first"))), ((2,), "float32"))
    text = str(mod)
    assert 'mlc.name = "first"' in text and 'mlc.name = "relu"' in text and 'mlc.name = "relu_1"' in text
    with pytest.raises(mlc.BuildError, match="op name 'x' is already used"):
        build_only(lambda a: ops.relu(ops.relu(a, name="x"), name="x"), ((2,), "float32"))
