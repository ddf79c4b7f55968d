"""Reductions vs numpy over axes, keepdims, shapes and dtypes; argmax semantics (first maximum,
NaN); names; every build-time error path."""

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir import ops
from opcheck import build_only, run

RNG = np.random.default_rng(0)
OPS = ["sum", "mean", "max", "min"]
AXES = [(None, False), (None, True), (1, True), ((0, 2), False), (-1, True), ((2, -3), True), ((), False),
        ([1, 2], False)]


def run_many(builds, x):
    """Compile one module with one output per build (one compile for many cases) and run it."""
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        a = f.arg("x", shape=x.shape, dtype=x.dtype)
        f.output(*[b(a) for b in builds])
    out = mlc.compile(bb.finish())(x)
    return out if isinstance(out, (list, tuple)) else [out]


def ref(op, x, axis, keepdims):
    axis = tuple(axis) if isinstance(axis, list) else axis
    return getattr(np, op)(x, axis=axis, keepdims=keepdims)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_float_reductions_over_axes(op, dtype):
    x = RNG.standard_normal((3, 4, 5)).astype(dtype)
    got = run_many([lambda t, a=a, k=k: getattr(ops, op)(t, axis=a, keepdims=k) for a, k in AXES], x)
    for (axis, keepdims), g in zip(AXES, got):
        want = ref(op, x, axis, keepdims)
        assert np.shape(g) == np.shape(want), (axis, keepdims)
        assert g.dtype == x.dtype
        np.testing.assert_allclose(g, want, rtol=1e-5 if dtype == "float32" else 1e-12, atol=1e-6)


@pytest.mark.parametrize("op", ["sum", "max", "min"])
@pytest.mark.parametrize("dtype", ["int32", "int64", "int8"])
def test_integer_reductions_follow_numpy_dtypes(op, dtype):
    x = RNG.integers(-100, 101, (4, 6, 2)).astype(dtype)  # int8 sums overflow int8
    got = run_many([lambda t, a=a, k=k: getattr(ops, op)(t, axis=a, keepdims=k) for a, k in AXES], x)
    for (axis, keepdims), g in zip(AXES, got):
        want = ref(op, x, axis, keepdims)
        assert g.dtype == want.dtype  # sum widens int8/int16/int32 to int64, as numpy
        np.testing.assert_array_equal(g, want)


@pytest.mark.parametrize("src, dtype", [("int8", "int8"), ("int32", "float32"), ("float16", "float32"),
                                        ("float32", "float64"), ("int64", "int32")])
def test_sum_accumulator_dtype(src, dtype):
    x = RNG.integers(-100, 101, (5, 40)).astype(src)
    g, = run_many([lambda t: ops.sum(t, axis=1, dtype=dtype)], x)
    want = np.sum(x, axis=1, dtype=dtype)
    assert g.dtype == want.dtype
    np.testing.assert_allclose(g, want, rtol=1e-6)


def test_int_extremes_and_half_precision():
    i = np.array([[np.iinfo(np.int32).min] * 3, [np.iinfo(np.int32).max] * 3], np.int32)
    mx, mn = run_many([lambda t: ops.max(t, axis=1), lambda t: ops.min(t, axis=1)], i)
    np.testing.assert_array_equal(mx, i.max(1))
    np.testing.assert_array_equal(mn, i.min(1))
    h = RNG.standard_normal((4, 8)).astype(np.float16)
    s, m, a = run_many([lambda t: ops.sum(t, axis=1), lambda t: ops.max(t, axis=0), lambda t: ops.mean(t)], h)
    np.testing.assert_allclose(s, h.astype(np.float32).sum(1), rtol=1e-2, atol=1e-2)
    np.testing.assert_array_equal(m, h.max(0))
    np.testing.assert_allclose(a, h.astype(np.float32).mean(), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("shape, axis", [((), None), ((7,), 0), ((1,), None), ((2, 1, 3, 2), (1, 3)),
                                         ((2, 3, 1, 2, 2), (0, 2, 4))])
def test_shapes(shape, axis):
    x = RNG.standard_normal(shape).astype(np.float32)
    builds = [lambda t, o=o, k=k: getattr(ops, o)(t, axis=axis, keepdims=k) for o in OPS for k in (False, True)]
    got = run_many(builds, x)
    for (o, k), g in zip([(o, k) for o in OPS for k in (False, True)], got):
        want = getattr(np, o)(x, axis=axis, keepdims=k)
        assert np.shape(g) == np.shape(want), (o, k)
        np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-6)


def test_nan_propagates_through_max_and_min():
    x = np.array([[1.0, np.nan, 3.0], [1.0, 2.0, 3.0]], np.float32)
    mx, mn = run_many([lambda t: ops.max(t, axis=1), lambda t: ops.min(t, axis=1)], x)
    np.testing.assert_array_equal(mx, np.max(x, axis=1))
    np.testing.assert_array_equal(mn, np.min(x, axis=1))


# -------------------------------------------------------------------------------------- argmax
ARGMAX = [(None, False), (None, True), (0, False), (1, True), (-1, False), (2, False), (-3, True)]


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64", "int8"])
def test_argmax_matches_numpy(dtype):
    x = (RNG.standard_normal((3, 4, 5)) * 3).astype(dtype)  # ints: many ties
    got = run_many([lambda t, a=a, k=k: ops.argmax(t, axis=a, keepdims=k) for a, k in ARGMAX], x)
    for (axis, keepdims), g in zip(ARGMAX, got):
        want = np.argmax(x, axis=axis, keepdims=keepdims)
        assert g.dtype == np.int64 and g.shape == np.shape(want), (axis, keepdims)
        np.testing.assert_array_equal(g, want)


def test_argmax_first_occurrence_nan_and_extremes():
    ties = np.array([[1, 3, 3, 0], [2, 2, 2, 2], [-9, -9, -9, -8]], np.int32)
    np.testing.assert_array_equal(run(lambda t: ops.argmax(t, axis=1), ties), [1, 0, 3])
    lo = np.full((2, 3), np.iinfo(np.int64).min, np.int64)
    np.testing.assert_array_equal(run(lambda t: ops.argmax(t, axis=1), lo), [0, 0])
    f = np.array([[1.0, np.nan, 5.0, np.nan], [-np.inf, -np.inf, -np.inf, -np.inf], [np.nan, 1, 2, 3],
                  [0, 1, 2, np.nan]], np.float32)
    np.testing.assert_array_equal(run(lambda t: ops.argmax(t, axis=1), f), np.argmax(f, axis=1))
    np.testing.assert_array_equal(run(lambda t: ops.argmax(t, axis=0), f), np.argmax(f, axis=0))
    z = np.array(2.5, np.float32)
    assert run(lambda t: ops.argmax(t), z) == 0


# -------------------------------------------------------------------------------------- names
def test_names():
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        a = f.arg("x", shape=(3, 4))
        f.output(ops.sum(a, axis=1, keepdims=True), ops.sum(a, name="total"), ops.mean(a, axis=0),
                 ops.argmax(a), ops.argmax(a, axis=0, keepdims=True, name="am"))
    text = str(bb.finish())
    for n in ["sum.init", "sum", "sum.keepdims", "total", "total.init", "mean.sum", "mean", "argmax.flatten",
              "argmax.init_value", "argmax.init", "argmax", "am", "am.keepdims"]:
        assert f'mlc.name = "{n}"' in text, n
    assert "linalg.index 0" in text


# -------------------------------------------------------------------------------------- errors
@pytest.mark.parametrize("build, spec, match", [
    (lambda a: ops.sum(a, axis=3), ((3, 4), "float32"), r"sum: argument 'axis' is 3; expected an int in \[-2, 2\)"),
    (lambda a: ops.max(a, axis=(0, -3)), ((3, 4), "float32"), r"max: argument 'axis' is -3; expected an int in"),
    (lambda a: ops.min(a, axis=(0, -2)), ((3, 4), "float32"), r"min: argument 'axis' \(0, -2\) repeats an axis"),
    (lambda a: ops.sum(a, axis=1.0), ((3, 4), "float32"),
     "sum: argument 'axis' is 1.0; expected None, an int or a tuple of ints"),
    (lambda a: ops.sum(a, axis=(0, "1")), ((3, 4), "float32"), r"sum: argument 'axis' is '1'; expected an int in"),
    (lambda a: ops.sum(a, axis=0), ((), "float32"), "sum: argument 'axis' is 0; expected None or \\(\\) for a 0-d"),
    (lambda a: ops.mean(a), ((3, 4), "int32"), r"mean: argument 'x' has dtype int32; expected one of \['bfloat16'"),
    (lambda a: ops.mean(a, axis=5), ((3, 4), "float32"), r"mean: argument 'axis' is 5"),
    (lambda a: ops.max(a), ((3, 4), "bool"), "max: argument 'x' has dtype bool; expected a float or int dtype"),
    (lambda a: ops.sum((1.0, 2.0)), ((3, 4), "float32"), "sum: argument 'x' is tuple; expected a Tensor or numpy.ndarray"),
    (lambda a: ops.argmax(a, axis=(0, 1)), ((3, 4), "float32"), r"argmax: argument 'axis' is \(0, 1\); expected None or an int"),
    (lambda a: ops.argmax(a, axis=2), ((3, 4), "float32"), r"argmax: argument 'axis' is 2; expected an int in \[-2, 2\)"),
    (lambda a: ops.argmax(a, axis=0), ((), "float32"), "argmax: argument 'axis' is 0; expected None or"),
    (lambda a: ops.argmax(a), ((3,), "bool"), "argmax: argument 'x' has dtype bool"),
    (lambda a: ops.sum(ops.sum(a, name="s"), name="s"), ((3,), "float32"), "sum: op name 's' is already used"),
    (lambda a: ops.sum(a, dtype="bool"), ((3,), "int32"), "sum: argument 'dtype' is 'bool'; expected one of \\['bfloat16'"),
    (lambda a: ops.sum(a, dtype="complex64"), ((3,), "int32"), "sum: argument 'dtype' is 'complex64'; expected one of"),
])
def test_reduction_errors(build, spec, match):
    with pytest.raises(mlc.MlcError, match=match):
        build_only(build, spec)


# ------------------------------------------------------------------ blocked (exact) float sums
def _rel_to_abs_sum(got, x64, axis=None):
    """|got - exact| relative to the sum of |x| (the condition-free error of a float sum)."""
    exact = x64.sum(axis=axis)
    return float(np.max(np.abs(np.asarray(got, np.float64) - exact) / np.abs(x64).sum(axis=axis)))


@pytest.mark.parametrize("n", [10 ** 6, 10 ** 6 + 3, 10 ** 7])
def test_long_float32_sums_and_means_match_float64(n):
    """sum, mean((a - b) ** 2) and a norm over 1e6-1e7 float32 elements within 1e-6 of the
    float64 result (a single sequential accumulation is off by ~1e-4 at 1e7)."""
    rng = np.random.default_rng(n)
    a = rng.standard_normal(n, dtype=np.float32)
    b = rng.standard_normal(n, dtype=np.float32)
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x, y = f.arg("a", shape=(n,)), f.arg("b", shape=(n,))
        d = ops.subtract(x, y)
        f.output(ops.sum(ops.add(x, 2.0)), ops.mean(ops.multiply(d, d)), ops.sqrt(ops.sum(ops.multiply(x, x))))
    s, mse, norm = mlc.compile(bb.finish())(a, b)
    a64, d64 = a.astype(np.float64), a.astype(np.float64) - b.astype(np.float64)
    assert _rel_to_abs_sum(s, a64 + 2.0) < 1e-6
    assert abs(float(mse) - np.mean(d64 ** 2)) / np.mean(d64 ** 2) < 1e-6
    assert abs(float(norm) - np.sqrt(np.sum(a64 ** 2))) / np.sqrt(np.sum(a64 ** 2)) < 1e-6


@pytest.mark.parametrize("shape, axis", [((3, 70001), 1), ((5000, 3, 7), (0, 2)), ((64, 9, 100), None)])
def test_blocked_sums_over_axes_keep_numpy_shapes(shape, axis):
    """Blocked sums over one long axis (not a multiple of any block), several axes, and all;
    keepdims; float32 within 1e-6 of float64."""
    x = RNG.random(shape, dtype=np.float32)
    got = run_many([lambda t: ops.sum(t, axis=axis), lambda t: ops.mean(t, axis=axis, keepdims=True)], x)
    x64 = x.astype(np.float64)
    ax = tuple(axis) if isinstance(axis, list) else axis
    assert got[0].shape == x.sum(axis=ax).shape and got[1].shape == x.mean(axis=ax, keepdims=True).shape
    np.testing.assert_allclose(got[0], x64.sum(axis=ax), rtol=1e-6)
    np.testing.assert_allclose(got[1], x64.mean(axis=ax, keepdims=True), rtol=1e-6)


def test_blocked_sum_levels_are_short():
    """A float sum over 1e6 elements is a chain of reductions, each adding at most SUM_BLOCK
    elements per output (the reduced dim of every reduction generic, read from the IR)."""
    from mlc_mlir._mlir import ir
    from mlc_mlir.builder.reduction import SUM_BLOCK
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(ops.sum(f.arg("x", shape=(10 ** 6,)), name="s"))
    mod = bb.finish()
    reduced = []
    for op in mod.func_ops()[0].regions[0].blocks[0].operations:
        if op.operation.name == "linalg.generic":
            its = [str(a) for a in op.attributes["iterator_types"]]
            shape = ir.RankedTensorType(op.operands[0].type).shape
            reduced += [d for d, it in zip(shape, its) if "reduction" in it]
    assert len(reduced) >= 3 and max(reduced) <= SUM_BLOCK, reduced
