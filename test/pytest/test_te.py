"""Tensor expressions (``mlc.te``): te.compute emitted as one linalg.generic, checked vs numpy."""

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir import ops, te


def _generics(mod, name):
    return [op for op in mod.get_function("main").regions[0].blocks[0].operations
            if "mlc.name" in op.attributes and op.attributes["mlc.name"].value == name]


def test_te_matmul_placeholders_match_numpy_and_schedule(rng):
    # the seed's te.compute matmul, through te.create_function (TVM create_prim_func)
    M, K, N = 8, 16, 12
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    bb = mlc.GraphBuilder()
    te.create_function(bb, "main", [A, B, C])
    mod = bb.finish()
    (op,) = _generics(mod, "C")
    assert op.operation.name == "linalg.generic"
    assert [str(a) for a in op.attributes["iterator_types"]] == [
        "#linalg.iterator_type<parallel>", "#linalg.iterator_type<parallel>", "#linalg.iterator_type<reduction>"]
    assert [a.name for a in mod.signature("main").args] == ["A", "B"]
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    np.testing.assert_allclose(mlc.compile(mod)(a, b), a @ b, rtol=1e-5, atol=1e-5)
    # a block like any other: the schedule finds it by name
    sch = mlc.Schedule(mod)
    i, j, kk = sch.get_loops(sch.get_block("C"))
    sch.split(j, [None, 4])
    np.testing.assert_allclose(mlc.compile(sch.mod)(a, b), a @ b, rtol=1e-5, atol=1e-5)


def test_te_window_sum_on_builder_tensors_matches_numpy(rng):
    H, W, R = 10, 9, 3
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", (H, W))
        di, dj = te.reduce_axis(R, "di"), te.reduce_axis(R, "dj")
        y = te.compute((H - R + 1, W - R + 1), lambda i, j: te.sum(x[i + di, j + dj], axis=[di, dj]),
                       name="win")
        assert isinstance(y, mlc.Tensor)  # eager: composes with builder ops
        f.output(ops.relu(y - 4.0))
    mod = bb.finish()
    xv = rng.random((H, W)).astype(np.float32)
    ref = np.lib.stride_tricks.sliding_window_view(xv, (R, R)).sum(axis=(2, 3))
    np.testing.assert_allclose(mlc.compile(mod)(xv), np.maximum(ref - 4, 0), rtol=1e-5, atol=1e-5)


def test_te_strided_max_offset_axis_select_and_math(rng):
    # y[i] = max_{k in [1, 3)} x[2*i + k]; z[i] = exp(y) if y > 0.5 else -y; w[i] = i * 3 (int64)
    n = 5
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", (2 * n + 2,))
        k = te.reduce_axis((1, 3), "k")
        y = te.compute((n,), lambda i: te.max(x[2 * i + k], axis=k), name="y")
        z = te.compute((n,), lambda i: te.if_then_else(y[i] > 0.5, te.exp(y[i]), -y[i]), name="z")
        lo = te.compute((n,), lambda i: te.min(y[i], 0.75) + te.max(y[i] / 2, 0.1), name="lo")
        w = te.compute((n,), lambda i: i * 3 - 1, name="w")  # reads no tensor: lazy until emitted
        f.output(z, lo, te.emit(f, w))
    xv = rng.random(2 * n + 2).astype(np.float32)
    yr = np.array([xv[2 * i + 1:2 * i + 3].max() for i in range(n)], np.float32)
    z, lo, w = mlc.compile(bb.finish())(xv)
    np.testing.assert_allclose(z, np.where(yr > 0.5, np.exp(yr), -yr), rtol=1e-6)
    np.testing.assert_allclose(lo, np.minimum(yr, 0.75) + np.maximum(yr / 2, 0.1), rtol=1e-6)
    assert w.dtype == np.int64
    np.testing.assert_array_equal(w, np.arange(n) * 3 - 1)


def test_te_lazy_chain_with_binds_and_int_division(rng):
    A = te.placeholder((6,), dtype="int32", name="A")
    B = te.compute((6,), lambda i: A[i] / 2 + A[5 - i], name="B")
    C = te.compute((3,), lambda i: B[2 * i] * B[2 * i + 1], name="C")
    assert isinstance(C, te.ComputeTensor)
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", (6,), "int32")
        f.output(te.emit(f, C, binds={A: x}))
    xv = np.array([-7, 5, 0, 9, 2, -3], np.int32)
    b = (np.trunc(xv / 2).astype(np.int32) + xv[::-1])
    np.testing.assert_array_equal(mlc.compile(bb.finish())(xv), b[0::2] * b[1::2])


@pytest.mark.parametrize("build, msg", [
    (lambda x: te.compute((4, 4), lambda i, j: x[i * j, j], name="c"),
     r"te: index \(i \* j\) is not affine"),
    (lambda x: te.compute((4, 4), lambda i, j: x[i + 1, j], name="c"),
     r"te.compute 'c': index 0 of 'Tensor' spans \[1, 4\]; expected within \[0, 4\)"),
    (lambda x: te.compute((4,), lambda i: te.sum(x[i, te.reduce_axis(4)], axis=te.reduce_axis(4)) + 1, name="c"),
     "a te.sum/max/min must be the whole body"),
    (lambda x: te.compute((4,), lambda i: x[i, te.reduce_axis(4, "r")], name="c"),
     "variable 'r' is not an axis of this compute"),
    (lambda x: te.compute((4,), lambda i: x[i, 0] + te.placeholder((4,), "int32", "p")[i], name="c"),
     "have dtypes float32 and int32"),
    (lambda x: te.reduce_axis((3, 3)), r"reduce_axis: argument 'dom' is \(3, 3\)"),
    (lambda x: te.sum(te.placeholder((4,), name="p")[0], axis=3),
     "te.sum: argument 'axis' is 3; expected te.reduce_axis"),
    (lambda x: x[1:2], "use ops.slice"),
])
def test_te_errors(build, msg):
    bb = mlc.GraphBuilder()
    with pytest.raises(mlc.BuildError, match=msg):
        with bb.function("main") as f:
            build(f.arg("x", (4, 4)))
