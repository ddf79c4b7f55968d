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
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_gelu(approx, ref, dtype):
    x = RNG.standard_normal((4, 9)).astype(dtype) * 3
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
                                      ("float64", "float16"), ("int64", "int32"), ("float32", "bfloat16"),
                                      ("int32", "int8"), ("int8", "int64"), ("float16", "float32"),
                                      ("bfloat16", "float32"), ("float64", "int64"), ("int16", "float64")])
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


BINARY = ["add", "subtract", "multiply", "divide", "maximum", "minimum"]


def _int_ref(op, a, b):
    if op == "divide":  # arith.divsi truncates toward zero (C semantics), numpy's // floors
        return (np.sign(a) * np.sign(b) * (np.abs(a) // np.abs(b))).astype(a.dtype)
    return getattr(np, op)(a, b)


@settings(max_examples=15, deadline=None)
@given(shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=4, max_side=4),
       op=st.sampled_from(BINARY), dtype=st.sampled_from(["float32", "float64"]))
def test_broadcasting_matches_numpy(shapes, op, dtype):
    a_shape, b_shape = shapes.input_shapes
    a = np.asarray(RNG.standard_normal(a_shape), dtype)
    b = np.asarray(RNG.standard_normal(b_shape) + 3, dtype)
    got = run(lambda x, y: getattr(ops, op)(x, y), a, b)
    assert got.shape == shapes.result_shape and got.dtype == a.dtype
    np.testing.assert_allclose(got, getattr(np, op)(a, b), rtol=1e-6)


@settings(max_examples=15, deadline=None)
@given(shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, max_side=4),
       op=st.sampled_from(BINARY), dtype=st.sampled_from(["int32", "int64"]))
def test_integer_broadcasting_matches_numpy(shapes, op, dtype):
    a_shape, b_shape = shapes.input_shapes
    a = np.asarray(RNG.integers(-20, 20, a_shape), dtype)
    b = np.asarray(RNG.choice([-3, -2, -1, 1, 2, 5], b_shape), dtype)
    got = run(lambda x, y: getattr(ops, op)(x, y), a, b)
    assert got.shape == shapes.result_shape and got.dtype == a.dtype
    np.testing.assert_array_equal(got, _int_ref(op, a, b))


@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_binary_with_scalars_and_constants_on_either_side(dtype):
    x = (RNG.standard_normal((2, 3)) * 4 + 10).astype(dtype)
    c = (RNG.standard_normal((3,)) * 4 + 10).astype(dtype)
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        t = f.arg("x", shape=x.shape, dtype=dtype)
        f.output(*[getattr(ops, op)(t, 3) for op in BINARY], *[getattr(ops, op)(3, t) for op in BINARY],
                 *[getattr(ops, op)(c, t) for op in BINARY])
    got = mlc.compile(bb.finish())(x)
    ref = _int_ref if dtype == "int32" else (lambda op, a, b: getattr(np, op)(a, b))
    three = np.array(3, dtype)
    want = ([ref(op, x, three) for op in BINARY] + [ref(op, np.broadcast_to(three, x.shape), x) for op in BINARY]
            + [ref(op, np.broadcast_to(c, x.shape), x) for op in BINARY])
    for op, g, w in zip(BINARY * 3, got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6, err_msg=op)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision(dtype):
    npd = mlc.ir.dtypes.to_numpy_dtype(dtype)
    x = RNG.standard_normal((3, 4)).astype(npd)
    y = RNG.standard_normal((4,)).astype(npd)
    got = run(lambda a, b: ops.relu(ops.add(ops.multiply(a, b), a)), x, y)
    assert got.dtype == npd
    want = np.maximum(x.astype(np.float32) * y.astype(np.float32) + x.astype(np.float32), 0)
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_clip_float(dtype):
    x = RNG.standard_normal((5, 3)).astype(dtype)
    np.testing.assert_allclose(run(lambda a: ops.clip(a, -0.5, 0.25), x), np.clip(x, -0.5, 0.25))


@pytest.mark.parametrize("fmod, ref", [(False, np.mod), (True, np.fmod)])
@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64"])
def test_mod_integer_signs_zero_divisor_and_int_min(fmod, ref, dtype):
    lo = np.iinfo(dtype).min
    a = np.array([-4, 7, 5, 4, -7, 8, 0, 3, lo, lo, 5, -9], dtype)
    b = np.array([2, -3, 8, -2, 3, 5, 3, 0, -1, 7, -1, -4], dtype)
    with np.errstate(divide="ignore"):  # numpy: x % 0 == 0 with a warning; ours never traps
        want = ref(a, b)
    np.testing.assert_array_equal(run(lambda x, y: ops.mod(x, y, fmod=fmod), a, b), want)


@settings(max_examples=10, deadline=None)
@given(shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, max_side=4),
       fmod=st.booleans(), dtype=st.sampled_from(["int32", "int64", "float32", "float64"]))
def test_mod_broadcasting_matches_numpy(shapes, fmod, dtype):
    a_shape, b_shape = shapes.input_shapes
    a = np.asarray(RNG.integers(-50, 50, a_shape) * (1.25 if "float" in dtype else 1), dtype)
    b = np.asarray(RNG.choice([-7, -3, -1, 2, 5], b_shape) * (0.75 if "float" in dtype else 1), dtype)
    got = run(lambda x, y: ops.mod(x, y, fmod=fmod), a, b)
    assert got.shape == shapes.result_shape and got.dtype == a.dtype
    np.testing.assert_array_equal(got, (np.fmod if fmod else np.mod)(a, b))


@pytest.mark.parametrize("fmod, ref", [(False, np.mod), (True, np.fmod)])
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_mod_float_edge_cases_keep_numpy_signs_and_nans(fmod, ref, dtype):
    inf, nan = np.inf, np.nan  # the ONNX Mod edge cases (signed zeros, infinities, NaN)
    a = np.array([0.0, -0.0, 0.0, -0.0, -3.0, 3.0, -1.0, 1.0, inf, -inf, 1.0, 1.0, nan, 1.0, -4.3, 7.2, 8.0],
                 dtype)
    b = np.array([-2.0, 2.0, 2.0, -2.0, inf, inf, -inf, -inf, 2.0, 2.0, 0.0, -0.0, 2.0, nan, 2.1, -3.4, 5.0],
                 dtype)
    with np.errstate(divide="ignore", invalid="ignore"):
        want = ref(a, b)
    got = run(lambda x, y: ops.mod(x, y, fmod=fmod), a, b)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


def test_mod_scalars_constants_and_bfloat16():
    x = np.arange(-6, 6, dtype=np.int32).reshape(3, 4)
    c = np.array([4, -4, 3, -3], np.int32)
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        t = f.arg("x", shape=x.shape, dtype="int32")
        f.output(ops.mod(t, 5), ops.mod(7, t + 7), ops.mod(c, ops.add(t, 9), fmod=True))
    got = mlc.compile(bb.finish())(x)
    for g, w in zip(got, [np.mod(x, 5), np.mod(7, x + 7), np.fmod(c, x + 9)]):
        np.testing.assert_array_equal(g, w)
    npd = mlc.ir.dtypes.to_numpy_dtype("bfloat16")
    a, b = np.array([-4.5, 7.25, 5.0], npd), np.array([2.0, -3.0, -0.5], npd)
    got = run(lambda x, y: ops.mod(x, y), a, b)
    np.testing.assert_array_equal(got.astype(np.float32), np.mod(a.astype(np.float32), b.astype(np.float32)))


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
    (lambda a: ops.add(a, [1.0, 2.0]), [((2,), "float32")],
     "add: argument 'b' is list; expected a Tensor or numpy.ndarray"),
    (lambda a: ops.add(1.0, 2.0), [((2,), "float32")], "add: at least one of 'a', 'b' must be a Tensor"),
    (lambda a: ops.multiply(a, np.ones(3, np.float32)), [((2,), "float32")],
     r"multiply: shapes \(2,\) and \(3,\) are not broadcastable"),
    (lambda a: ops.divide(a, np.ones(2, np.complex64)), [((2,), "float32")], "dtype: complex64 is not supported"),
    (lambda a: ops.sqrt(a), [((2,), "int64")], "sqrt: dtype int64 is not supported"),
    (lambda a: ops.gelu([1.0, 2.0]), [((2,), "float32")], "gelu: argument 'x' is list; expected a Tensor or numpy.ndarray"),
    (lambda a: ops.clip(a, np.ones(2), 1), [((2,), "float32")], "clip: argument 'a_min' is .*; expected a Python scalar"),
    (lambda a: ops.cast([1.0], "int32"), [((2,), "float32")], "cast: argument 'x' is list; expected a Tensor or numpy.ndarray"),
    (lambda a: ops.negative("a"), [((2,), "float32")], "negative: argument 'x' is str; expected a Tensor"),
    (lambda a: ops.mod(a, 2.0, fmod=1), [((2,), "float32")], "mod: argument 'fmod' is 1; expected a bool"),
    (lambda a, b: ops.mod(a, b), [((2, 3), "int32"), ((4,), "int32")],
     r"mod: shapes \(2, 3\) and \(4,\) are not broadcastable \(dimension -1: 3 vs 4\)"),
    (lambda a, b: ops.mod(a, b), [((2,), "int32"), ((2,), "int64")], "mod: argument 'b' has dtype int64; expected int32"),
    (lambda a: ops.mod(a, np.ones(2, np.bool_)), [((2,), "bool")], "mod: dtype bool is not supported"),
    (lambda a: ops.mod(a, 1000), [((2,), "int8")], "mod: argument 'b' is 1000; expected a value representable in int8"),
])
def test_elementwise_errors(build, specs, match):
    with pytest.raises(mlc.MlcError, match=match):
        build_only(build, *specs)


def test_tensors_of_another_or_a_finished_function():
    bb = mlc.GraphBuilder()
    with bb.function("f") as f:
        a = f.arg("a", shape=(2,))
        f.output(ops.relu(a))
    with bb.function("g") as g:
        b = g.arg("b", shape=(2,))
        with pytest.raises(mlc.BuildError, match="add: arguments come from different functions"):
            ops.add(a, b)
        g.output(b)
    with pytest.raises(mlc.BuildError, match="exp: function 'g' is finished"):
        ops.exp(b)


def test_names_default_and_unique():
    mod = build_only(lambda a: ops.relu(ops.relu(ops.relu(a, name="first"))), ((2,), "float32"))
    text = str(mod)
    assert 'mlc.name = "first"' in text and 'mlc.name = "relu"' in text and 'mlc.name = "relu_1"' in text
    with pytest.raises(mlc.BuildError, match="op name 'x' is already used"):
        build_only(lambda a: ops.relu(ops.relu(a, name="x"), name="x"), ((2,), "float32"))
