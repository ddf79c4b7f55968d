"""nn ops vs numpy references: matmul family, conv2d, pooling, normalization, softmax."""

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir import ops
from opcheck import build_only, run

RNG = np.random.default_rng(0)


def conv_ref(x, w, stride=(1, 1), pad=(0, 0, 0, 0), dil=(1, 1), groups=1):
    x = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad[0], pad[2]), (pad[1], pad[3])))
    n, c, h, wd = x.shape
    f, cg, kh, kw = w.shape
    oh = (h - dil[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd - dil[1] * (kw - 1) - 1) // stride[1] + 1
    out = np.zeros((n, f, oh, ow))
    for g in range(groups):
        fs, cs = slice(g * f // groups, (g + 1) * f // groups), slice(g * cg, (g + 1) * cg)
        for i in range(kh):
            for j in range(kw):
                patch = x[:, cs, i * dil[0]:i * dil[0] + stride[0] * (oh - 1) + 1:stride[0],
                          j * dil[1]:j * dil[1] + stride[1] * (ow - 1) + 1:stride[1]]
                out[:, fs] += np.einsum("nchw,fc->nfhw", patch, w[fs, :, i, j])
    return out


@pytest.mark.parametrize("m, k, n, dtype", [(4, 8, 3, "float32"), (16, 5, 7, "float64"), (3, 4, 5, "int32")])
def test_matmul(m, k, n, dtype):
    a = (RNG.standard_normal((m, k)) * 3).astype(dtype)
    b = (RNG.standard_normal((k, n)) * 3).astype(dtype)
    np.testing.assert_allclose(run(ops.matmul, a, b), a @ b, rtol=1e-5)
    np.testing.assert_allclose(run(lambda x, y: x @ y, a, b), a @ b, rtol=1e-5)


def test_batch_matmul_and_dense():
    a = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    b = RNG.standard_normal((2, 4, 5)).astype(np.float32)
    np.testing.assert_allclose(run(ops.batch_matmul, a, b), a @ b, rtol=1e-5)
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    w = RNG.standard_normal((6, 4)).astype(np.float32)
    bias = RNG.standard_normal(6).astype(np.float32)
    np.testing.assert_allclose(run(lambda t: ops.dense(t, w, bias), x), x @ w.T + bias, rtol=1e-5)
    # a weight given at run time goes through transposed-B indexing maps
    np.testing.assert_allclose(run(lambda t, u: ops.dense(t, u), x, w), x @ w.T, rtol=1e-5)


@pytest.mark.parametrize("shape, wshape, kw", [
    ((1, 3, 9, 9), (4, 3, 3, 3), dict()),
    ((2, 2, 8, 10), (3, 2, 3, 2), dict(strides=(2, 1), padding=1)),
    ((1, 4, 9, 9), (4, 2, 3, 3), dict(groups=2, dilation=2, padding=(1, 0, 2, 1))),
    ((1, 4, 6, 6), (4, 1, 3, 3), dict(groups=4, padding=(1, 1))),
])
def test_conv2d(shape, wshape, kw):
    x = RNG.standard_normal(shape).astype(np.float32)
    w = RNG.standard_normal(wshape).astype(np.float32)
    b = RNG.standard_normal(wshape[0]).astype(np.float32)
    s = kw.get("strides", (1, 1))
    p = kw.get("padding", 0)
    p = (p,) * 4 if isinstance(p, int) else (p if len(p) == 4 else (p[0], p[1], p[0], p[1]))
    d = kw.get("dilation", 1)
    ref = conv_ref(x, w, s, p, (d, d), kw.get("groups", 1)) + b[None, :, None, None]
    np.testing.assert_allclose(run(lambda t: ops.conv2d(t, w, b, **kw), x), ref, rtol=1e-4, atol=1e-4)


def test_pooling():
    x = RNG.standard_normal((2, 3, 8, 8)).astype(np.float32)
    np.testing.assert_allclose(run(lambda t: ops.max_pool2d(t, 2), x), x.reshape(2, 3, 4, 2, 4, 2).max(axis=(3, 5)))
    np.testing.assert_allclose(run(lambda t: ops.avg_pool2d(t, (2, 2)), x),
                               x.reshape(2, 3, 4, 2, 4, 2).mean(axis=(3, 5)), rtol=1e-5, atol=1e-7)
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    ref = np.stack([xp[:, :, i:i + 7:2, j:j + 7:2] for i in range(3) for j in range(3)]).max(0)
    np.testing.assert_allclose(run(lambda t: ops.max_pool2d(t, 3, strides=2, padding=1), x), ref)
    ones = np.pad(np.ones((8, 8)), 1)
    xz = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    s = np.stack([xz[:, :, i:i + 7:2, j:j + 7:2] for i in range(3) for j in range(3)]).sum(0)
    cnt = np.stack([ones[i:i + 7:2, j:j + 7:2] for i in range(3) for j in range(3)]).sum(0)
    np.testing.assert_allclose(run(lambda t: ops.avg_pool2d(t, 3, 2, 1, count_include_pad=False), x), s / cnt,
                               rtol=1e-5)
    np.testing.assert_allclose(run(lambda t: ops.avg_pool2d(t, 3, 2, 1), x), s / 9, rtol=1e-5)
    np.testing.assert_allclose(run(ops.global_avg_pool2d, x), x.mean(axis=(2, 3), keepdims=True), rtol=1e-5)


def test_norms_and_softmax():
    x = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
    g, b, m, v = (RNG.random(3).astype(np.float32) + 0.5 for _ in range(4))
    ref = (x - m[:, None, None]) / np.sqrt(v[:, None, None] + 1e-3) * g[:, None, None] + b[:, None, None]
    np.testing.assert_allclose(run(lambda t: ops.batch_norm(t, g, b, m, v, eps=1e-3), x), ref, rtol=1e-5, atol=1e-6)
    gg, bb = RNG.random((4, 5)).astype(np.float32), RNG.random((4, 5)).astype(np.float32)
    mu, var = x.mean((2, 3), keepdims=True), x.var((2, 3), keepdims=True)
    np.testing.assert_allclose(run(lambda t: ops.layer_norm(t, gg, bb, axis=(2, 3)), x),
                               (x - mu) / np.sqrt(var + 1e-5) * gg + bb, rtol=1e-4, atol=1e-5)
    for axis in (-1, 1):
        e = np.exp(x - x.max(axis, keepdims=True))
        np.testing.assert_allclose(run(lambda t: ops.softmax(t, axis=axis), x), e / e.sum(axis, keepdims=True),
                                   rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(run(lambda t: ops.log_softmax(t, axis=axis), x),
                                   np.log(e / e.sum(axis, keepdims=True)), rtol=1e-5, atol=1e-5)
    big = np.array([[1000.0, 1001.0]], np.float32)
    np.testing.assert_allclose(run(ops.softmax, big), [[1 / (1 + np.e), np.e / (1 + np.e)]], rtol=1e-5)


W = np.ones((8, 4, 3, 3), np.float32)


@pytest.mark.parametrize("build, specs, match", [
    (lambda a, b: ops.matmul(a, b), [((3, 4), "float32"), ((5, 2), "float32")],
     r"matmul: argument 'b' has shape \(5, 2\); expected \(4, N\) to match a's inner dimension 4"),
    (lambda a, b: ops.matmul(a, b), [((3, 4, 1), "float32"), ((4, 2), "float32")], "expected rank 2"),
    (lambda a: ops.dense(a, np.ones((10, 65), np.float32)), [((1, 64), "float32")],
     r"dense: argument 'weight' has shape \(10, 65\); expected \(N, 64\) to match x's last dimension 64"),
    (lambda a: ops.dense(a, np.ones((10, 64), np.float32), np.ones(9, np.float32)), [((1, 64), "float32")],
     r"dense: argument 'bias' has shape \(9,\); expected \(10,\)"),
    (lambda a: ops.conv2d(a, W), [((1, 3, 8, 8), "float32")],
     r"conv2d: argument 'weight' has shape \(8, 4, 3, 3\); expected \(F, 3, KH, KW\) for 3 input channels and groups=1"),
    (lambda a: ops.conv2d(a, W, groups=3), [((1, 4, 8, 8), "float32")], "groups=3 must divide"),
    (lambda a: ops.conv2d(a, W), [((1, 4, 2, 2), "float32")], "does not fit"),
    (lambda a: ops.max_pool2d(a, 2), [((4, 8), "float32")], "expected rank 4"),
    (lambda a: ops.batch_norm(a, *[np.ones(4, np.float32)] * 4), [((1, 3, 2, 2), "float32")],
     r"batch_norm: argument 'gamma' has shape \(4,\); expected \(3,\)"),
    (lambda a: ops.layer_norm(a, np.ones(3, np.float32), np.ones(3, np.float32), axis=0), [((3, 4), "float32")],
     "must be the trailing axes"),
    (lambda a: ops.softmax(a, axis=2), [((3, 4), "float32")], r"softmax: argument 'axis' is 2; expected an int in \[-2, 2\)"),
    (lambda a: ops.avg_pool2d(a, 2), [((1, 1, 4, 4), "int32")], "expected a float dtype"),
])
def test_nn_errors(build, specs, match):
    with pytest.raises(mlc.MlcError, match=match):
        build_only(build, *specs)
