"""Shape ops vs numpy (reshape, transpose/permute, flatten, concat, slice, pad, broadcast_to,
gather_elements) on several shapes and dtypes; the IR reshape emits; names; every build-time
error path."""

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir import ops
from opcheck import build_only, run

RNG = np.random.default_rng(0)
X = RNG.standard_normal((2, 3, 4)).astype(np.float32)
XI = np.arange(24, dtype=np.int32).reshape(2, 3, 4)


def run_many(builds, *inputs):
    """Compile one module with one output per build (one compile for many cases) and run it."""
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        args = [f.arg(f"a{i}", shape=x.shape, dtype=x.dtype) for i, x in enumerate(inputs)]
        f.output(*[b(*args) for b in builds])
    out = mlc.compile(bb.finish())(*inputs)
    return out if isinstance(out, (list, tuple)) else [out]


def shapes_of(n, max_rank=3):
    """Every shape with ``n`` elements and rank <= max_rank (unit dims included)."""
    out = {()} if n == 1 else set()

    def rec(rem, cur):
        if rem == 1 and cur:
            out.add(tuple(cur))
        if len(cur) < max_rank:
            for d in range(1, rem + 1):
                if rem % d == 0:
                    rec(rem // d, cur + [d])

    rec(n, [])
    return sorted(out)


# ------------------------------------------------------------------------------------ reshape
@pytest.mark.parametrize("src", shapes_of(12))
def test_reshape_between_all_shapes_of_12(src):
    x = np.arange(12, dtype=np.float32).reshape(src)
    targets = shapes_of(12)
    for dst, got in zip(targets, run_many([lambda t, d=d: ops.reshape(t, d) for d in targets], x)):
        np.testing.assert_array_equal(got, x.reshape(dst))


@pytest.mark.parametrize("shape, dtype", [((-1,), "float32"), ((3, -1), "int32"), ((-1, 2, 2), "float64"),
                                          ((1, -1, 1), "int64"), (24, "float32")])
def test_reshape_infers_minus_one_and_dtypes(shape, dtype):
    x = XI.astype(dtype)
    np.testing.assert_array_equal(run(lambda t: ops.reshape(t, shape), x), x.reshape(shape))


def test_reshape_scalars():
    assert run(lambda t: ops.reshape(t, (1, 1)), np.array(3.0, np.float32)).shape == (1, 1)
    assert run(lambda t: ops.reshape(t, ()), np.ones((1, 1), np.int32)).shape == ()
    assert run(lambda t: ops.reshape(t, (-1,)), np.array(3.0, np.float32)).shape == (1,)


@pytest.mark.parametrize("src, dst, collapses, expands", [
    ((2, 3, 4), (6, 4), 1, 0), ((2, 3, 4), (2, 12), 1, 0), ((2, 3, 4), (24,), 1, 0),
    ((6, 4), (2, 3, 4), 0, 1), ((2, 3, 4), (1, 2, 3, 4, 1), 0, 1), ((1, 6, 1), (6,), 1, 0),
    ((2, 3, 4), (4, 3, 2), 1, 1), ((2, 3, 4), (3, 8), 1, 1), ((2, 3, 4), (2, 3, 4), 0, 0),
])
def test_reshape_emits_one_op_when_it_can(src, dst, collapses, expands):
    text = str(build_only(lambda t: ops.reshape(t, dst), (src, "float32")))
    assert (text.count("tensor.collapse_shape"), text.count("tensor.expand_shape")) == (collapses, expands)


# ---------------------------------------------------------------------------- transpose/permute
@pytest.mark.parametrize("x", [X, XI.astype(np.int64), RNG.standard_normal((2, 3, 4, 5)),
                               RNG.standard_normal((3, 5)).astype(np.float32)], ids=["f32", "i64", "f64_4d", "2d"])
def test_transpose(x):
    perms = [None, tuple(range(x.ndim))[::-1], tuple(range(x.ndim)), (-1,) + tuple(range(x.ndim - 1))]
    if x.ndim >= 3:
        perms += [(0, 2, 1) + tuple(range(3, x.ndim)), (1, 2, 0) + tuple(range(3, x.ndim))]
    got = run_many([lambda t, p=p: ops.transpose(t, p) for p in perms], x)
    for p, g in zip(perms, got):
        np.testing.assert_array_equal(g, np.transpose(x, p))
    np.testing.assert_array_equal(run(lambda t: ops.permute(t, perms[-1]), x), np.transpose(x, perms[-1]))


def test_transpose_identity_and_small_ranks_emit_nothing():
    for shape in [(), (5,), (2, 3)]:
        text = str(build_only(lambda t: ops.exp(ops.transpose(t, tuple(range(t.ndim)))), (shape, "float32")))
        assert "linalg.transpose" not in text
    assert run(lambda t: ops.transpose(t), np.array(2.0, np.float32)) == 2.0
    np.testing.assert_array_equal(run(lambda t: ops.transpose(t), np.arange(3.0)), np.arange(3.0))


# ------------------------------------------------------------------------------------ flatten
def test_flatten():
    x = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
    cases = [(0, -1), (1, -1), (0, 1), (1, 2), (-2, -1), (2, 2), (3, 3)]
    got = run_many([lambda t, c=c: ops.flatten(t, *c) for c in cases], x)
    for (s, e), g in zip(cases, got):
        e = e % 4
        np.testing.assert_array_equal(g, x.reshape(x.shape[:s] + (-1,) + x.shape[e + 1:]))
    assert run(lambda t: ops.flatten(t), np.array(7, np.int32)).shape == (1,)
    np.testing.assert_array_equal(run(lambda t: ops.flatten(t), XI), XI.reshape(-1))
    text = str(build_only(lambda t: ops.flatten(t, 1), ((2, 3, 4), "float32")))
    assert 'mlc.name = "flatten"' in text


# ------------------------------------------------------------------------------------- concat
def test_concat():
    other = RNG.standard_normal((2, 5, 4)).astype(np.float32)
    const = RNG.standard_normal((2, 3, 1)).astype(np.float32)
    got = run_many([lambda a, b: ops.concat([a, b, a], axis=1), lambda a, b: ops.concat([a, a], axis=0),
                    lambda a, b: ops.concat([a, const, a], axis=-1), lambda a, b: ops.concat([a])], X, other)
    np.testing.assert_array_equal(got[0], np.concatenate([X, other, X], axis=1))
    np.testing.assert_array_equal(got[1], np.concatenate([X, X], axis=0))
    np.testing.assert_array_equal(got[2], np.concatenate([X, const, X], axis=-1))
    np.testing.assert_array_equal(got[3], X)
    v = np.arange(3, dtype=np.int64)
    np.testing.assert_array_equal(run(lambda a: ops.concat([np.array([7, 8]), a, a], axis=0), v),
                                  np.concatenate([[7, 8], v, v]))
    text = str(build_only(lambda a: ops.concat([a, np.ones((1, 2), np.float32)]), ((2, 2), "float32")))
    for n in ("concat.input1", "concat.part0", "concat"):
        assert f'mlc.name = "{n}"' in text


# -------------------------------------------------------------------------------------- slice
SLICES = [
    (dict(begin=[0, -2], end=[2, 3], strides=[1, 2], axes=[0, 2]), np.s_[0:2, :, -2:3:2]),
    (dict(begin=[1], end=[100]), np.s_[1:100]),
    (dict(begin=[-100, 1, 0], end=[100, 3, 4], strides=[1, 1, 3]), np.s_[-100:100, 1:3, 0:4:3]),
    (dict(begin=[None], end=[None], strides=[2], axes=[-1]), np.s_[:, :, ::2]),
    (dict(begin=[-1, None], end=[None, -1], axes=[1, 2]), np.s_[:, -1:, :-1]),
    (dict(begin=[0, 0, 1], end=[1, 3, 4], strides=[5, 2, 2]), np.s_[0:1:5, 0:3:2, 1:4:2]),
    (dict(begin=[], end=[]), np.s_[:]),
]


@pytest.mark.parametrize("x", [X, XI], ids=["float32", "int32"])
def test_slice(x):
    got = run_many([lambda t, kw=kw: ops.slice(t, **kw) for kw, _ in SLICES], x)
    for (kw, idx), g in zip(SLICES, got):
        np.testing.assert_array_equal(g, x[idx], err_msg=str(kw))


# ---------------------------------------------------------------------------------------- pad
PADS = [(1, 0), ((1, 2), 0), (((2, 0),), 5), (((0, 1), (2, 0), (1, 1)), -3), ((2,), 1), (0, 0),
        (((0, 0), (0, 0), (0, 3)), 7)]


@pytest.mark.parametrize("x", [X, XI, RNG.standard_normal((3, 2, 1))], ids=["float32", "int32", "float64"])
def test_pad(x):
    got = run_many([lambda t, p=p, v=v: ops.pad(t, p, v) for p, v in PADS], x)
    for (p, v), g in zip(PADS, got):
        np.testing.assert_array_equal(g, np.pad(x, p, constant_values=v), err_msg=str(p))
    v = np.arange(4.0, dtype=np.float32)
    np.testing.assert_array_equal(run(lambda t: ops.pad(t, (3, 1), 2.5), v), np.pad(v, (3, 1), constant_values=2.5))


# ------------------------------------------------------------------------------- broadcast_to
@pytest.mark.parametrize("x, shape", [(X, (5, 2, 3, 4)), (RNG.standard_normal((2, 1, 3)), (4, 2, 5, 3)),
                                      (np.arange(3, dtype=np.int32), (2, 3)), (np.array(1.5, np.float32), (2, 2)),
                                      (X, (2, 3, 4)), (np.ones((1,), np.int64) * 4, 5)])
def test_broadcast_to(x, shape):
    got = run(lambda t: ops.broadcast_to(t, shape), x)
    np.testing.assert_array_equal(got, np.broadcast_to(x, shape))


# ---------------------------------------------------------------------------- gather_elements
def _take_along_axis(x, idx, axis):
    """numpy oracle: negative indices wrap once; ``idx`` dims other than ``axis`` may be smaller
    than x's (ONNX GatherElements / torch.gather), so x is cut to them first."""
    axis %= x.ndim
    cut = tuple(slice(None) if k == axis else slice(0, e) for k, e in enumerate(idx.shape))
    return np.take_along_axis(x[cut], np.where(idx < 0, idx + x.shape[axis], idx), axis=axis)


@pytest.mark.parametrize("axis", [-3, -2, -1, 0, 1, 2])
@pytest.mark.parametrize("x, idx_dtype", [(X, np.int64), (XI, np.int32)])
def test_gather_elements(x, idx_dtype, axis):
    n = x.shape[axis]
    shapes = [tuple(6 if k == axis % 3 else d for k, d in enumerate(x.shape)),        # longer along axis
              tuple(1 if k == axis % 3 else max(1, d - 1) for k, d in enumerate(x.shape))]  # smaller elsewhere
    idxs = [RNG.integers(-n, n, s).astype(idx_dtype) for s in shapes]
    got = run_many([lambda t, i=i: ops.gather_elements(t, i, axis=axis) for i in idxs], x)
    for g, i in zip(got, idxs):
        assert g.dtype == x.dtype and g.shape == i.shape
        np.testing.assert_array_equal(g, _take_along_axis(x, i, axis))


def test_gather_elements_tensor_indices_1d_and_out_of_range_raises():
    x = np.array([10.0, 20.0, 30.0], np.float32)
    idx = np.array([2, -1, 0, -3, 1], np.int64)
    got = run(lambda t, i: ops.gather_elements(t, i), x, idx)
    np.testing.assert_array_equal(got, x[np.where(idx < 0, idx + 3, idx)])
    with pytest.raises(mlc.ExecutionError, match=r"holds 5, outside \[-3, 3\)"):
        run(lambda t, i: ops.gather_elements(t, i), x, np.array([2, -1, 0, -3, 5], np.int64))


def test_gather_elements_is_one_generic_reading_x_with_tensor_extract():
    """One gather generic, plus the elementwise range check of the indices (a check result)."""
    text = str(build_only(lambda a, i: ops.gather_elements(a, i, axis=1, name="ge"),
                          ((2, 3, 4), "float32"), ((2, 5, 4), "int32")))
    assert text.count("linalg.generic") == 2 and text.count("tensor.extract ") == 1
    assert 'mlc.name = "ge"' in text and 'mlc.name = "ge.check"' in text and "tensor<2x5x4xf32>" in text
    assert 'mlc.check = "gather_elements \'ge\': argument \'indices\' holds {value}, outside [-3, 3)' in text


# -------------------------------------------------------------------------------------- errors
@pytest.mark.parametrize("build, match", [
    (lambda a: ops.reshape(a, (5, 5)), r"reshape: cannot reshape \(2, 3, 4\) into \(5, 5\)"),
    (lambda a: ops.reshape(a, (5, -1)), r"reshape: cannot reshape \(2, 3, 4\) into \(5, -1\)"),
    (lambda a: ops.reshape(a, (0, -1)), r"reshape: cannot reshape \(2, 3, 4\) into \(0, -1\)"),
    (lambda a: ops.reshape(a, (-1, -1)), r"reshape: argument 'shape' is \(-1, -1\); expected dims >= 0 and at most one -1"),
    (lambda a: ops.reshape(a, (-2, 12)), r"reshape: argument 'shape' is \(-2, 12\)"),
    (lambda a: ops.reshape(a, "24"), r"reshape: argument 'shape' is '24'; expected a sequence of ints"),
    (lambda a: ops.reshape([1.0, 2.0, 3.0], (3,)), "reshape: argument 'x' is list; expected a Tensor or numpy.ndarray"),
    (lambda a: ops.transpose(a, (0, 0, 1)), r"transpose: argument 'perm' is \(0, 0, 1\); expected a permutation of "
                                            r"range\(3\) for x \(2, 3, 4\)"),
    (lambda a: ops.transpose(a, (0, 1)), r"transpose: argument 'perm' is \(0, 1\); expected a permutation"),
    (lambda a: ops.transpose(a, (0, 1, 3)), r"argument 'perm' is \(0, 1, 3\); expected a permutation"),
    (lambda a: ops.transpose(a, 1), r"transpose: argument 'perm' is 1; expected a sequence of ints"),
    (lambda a: ops.permute(a, None), "permute: argument 'dims' is None; expected a permutation"),
    (lambda a: ops.flatten(a, 2, 1), r"flatten: start_dim 2 comes after end_dim 1 for x \(2, 3, 4\)"),
    (lambda a: ops.flatten(a, 3), r"flatten: argument 'start_dim' is 3; expected an int in \[-3, 3\)"),
    (lambda a: ops.flatten(a, 0, -4), r"flatten: argument 'end_dim' is -4"),
    (lambda a: ops.flatten(ops.sum(a), 1), "flatten: argument 'start_dim' is 1; expected 0 or -1 for a 0-d tensor"),
    (lambda a: ops.concat([a, np.ones((2, 3, 5), np.float32)], axis=0),
     r"concat: argument 'tensors\[1\]' has shape \(2, 3, 5\); expected \(2, 3, 4\) except along axis 0"),
    (lambda a: ops.concat([a, ops.reshape(a, (6, 4))], axis=0),
     r"concat: argument 'tensors\[1\]' has shape \(6, 4\); expected \(2, 3, 4\) except along axis 0"),
    (lambda a: ops.concat([a, ops.cast(a, "int32")]), r"concat: argument 'tensors\[1\]' has dtype int32; expected float32"),
    (lambda a: ops.concat([a, [1, 2]]), r"concat: argument 'tensors\[1\]' is list; expected a Tensor or numpy"),
    (lambda a: ops.concat([a], axis=3), r"concat: argument 'axis' is 3; expected an int in \[-3, 3\)"),
    (lambda a: ops.concat([]), "concat: argument 'tensors' is \\[\\]; expected a non-empty list"),
    (lambda a: ops.concat(a), "concat: argument 'tensors' is Tensor"),
    (lambda a: ops.concat([ops.sum(a), ops.sum(a)]), r"concat: argument 'tensors\[0\]' is 0-d"),
    (lambda a: ops.slice(a, [0], [2], [-1]), "slice: argument 'strides' has -1 for axis 0; expected a positive stride"),
    (lambda a: ops.slice(a, [0], [2], [0]), "slice: argument 'strides' has 0 for axis 0"),
    (lambda a: ops.slice(a, [0, 0], [1]), "slice: begin, end, strides and axes must have equal lengths, got 2, 1, 2, 2"),
    (lambda a: ops.slice(a, [0] * 4, [1] * 4), "slice: argument 'begin' has 4 entries; expected at most 3"),
    (lambda a: ops.slice(a, [0, 0], [1, 1], axes=[1, -2]), r"slice: argument 'axes' \(1, 1\) repeats an axis"),
    (lambda a: ops.slice(a, [0], [1], axes=[3]), r"slice: argument 'axes' is 3; expected an int in \[-3, 3\)"),
    (lambda a: ops.slice(a, [0.5], [1]), "slice: argument 'begin' has 0.5 for axis 0; expected an int or None"),
    (lambda a: ops.slice(a, 0, 1), "slice: arguments 'begin' and 'end' must be sequences"),
    (lambda a: ops.pad(a, ((1, 1), (1, 1))), r"pad: argument 'pad_width' is \(\(1, 1\), \(1, 1\)\); expected \(before, "
                                             r"after\) for each of the 3 axes of x \(2, 3, 4\)"),
    (lambda a: ops.pad(a, (1, 2, 3)), r"pad: argument 'pad_width' is \(1, 2, 3\); expected \(before, after\)"),
    (lambda a: ops.pad(a, -1), "pad: argument 'pad_width' is -1; expected widths >= 0"),
    (lambda a: ops.pad(a, 1.5), "pad: argument 'pad_width' is 1.5; expected ints"),
    (lambda a: ops.pad(a, 1, constant_value="x"), "pad: argument 'constant_value' is 'x'; expected an int or float"),
    (lambda a: ops.broadcast_to(a, (3, 4)), r"broadcast_to: cannot broadcast \(2, 3, 4\) to \(3, 4\) \(x has more dims"),
    (lambda a: ops.broadcast_to(a, (2, 5, 4)), r"broadcast_to: cannot broadcast \(2, 3, 4\) to \(2, 5, 4\) "
                                               r"\(dimension -2: 3 vs 5\)"),
    (lambda a: ops.broadcast_to(a, (2, -3, 4)), r"broadcast_to: argument 'shape' is \(2, -3, 4\); expected dims >= 0"),
    (lambda a: ops.reshape(ops.reshape(a, (24,), name="r"), (4, 6), name="r"), "reshape: op name 'r' is already used"),
    (lambda a: ops.gather_elements(a, np.zeros((2, 3), np.int64)),
     r"gather_elements: argument 'indices' has shape \(2, 3\); expected rank 3 with dims <= \(2, 3, 4\) except "
     r"along axis 0"),
    (lambda a: ops.gather_elements(a, np.zeros((2, 3, 5), np.int64), axis=1),
     r"gather_elements: argument 'indices' has shape \(2, 3, 5\); expected rank 3 with dims <= \(2, 3, 4\) except "
     r"along axis 1"),
    (lambda a: ops.gather_elements(a, np.zeros((2, 3, 4), np.float32)),
     "gather_elements: argument 'indices' has dtype float32; expected one of int16, int32, int64, int8"),
    (lambda a: ops.gather_elements(a, np.zeros((2, 3, 4), np.int64), axis=3),
     r"gather_elements: argument 'axis' is 3; expected an int in \[-3, 3\)"),
    (lambda a: ops.gather_elements(ops.sum(a), np.zeros((), np.int64)),
     r"gather_elements: argument 'x' has shape \(\); expected rank >= 1"),
    (lambda a: ops.gather_elements(a, [0, 1]), "gather_elements: argument 'indices' is list; expected a Tensor"),
])
def test_shape_errors(build, match):
    with pytest.raises(mlc.MlcError, match=match):
        build_only(build, ((2, 3, 4), "float32"))
