"""nn ops vs numpy references (matmul family, conv2d, pooling, normalization, softmax) on several
shapes and dtypes; op names; every build-time error path."""

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir import ops
from opcheck import build_only, run

RNG = np.random.default_rng(0)
TOL = {"float32": dict(rtol=1e-4, atol=1e-4), "float64": dict(rtol=1e-10, atol=1e-10),
       "float16": dict(rtol=1e-2, atol=1e-2), "int32": dict(rtol=0, atol=0)}


def data(shape, dtype, scale=1.0):
    if np.dtype(dtype).kind == "i":
        return RNG.integers(-4, 5, shape).astype(dtype)
    return (RNG.standard_normal(shape) * scale).astype(dtype)


def pad4(p):
    p = (p,) * 4 if isinstance(p, int) else tuple(p)
    return p if len(p) == 4 else (p[0], p[1], p[0], p[1])


def windows(x, k, s, p, d, value):
    """The pooling/conv windows of NCHW ``x`` padded with ``value``: a list over (i, j) kernel
    offsets of (N, C, OH, OW) arrays."""
    top, left, bottom, right = pad4(p)
    xp = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)), constant_values=value)
    oh = (xp.shape[2] - d[0] * (k[0] - 1) - 1) // s[0] + 1
    ow = (xp.shape[3] - d[1] * (k[1] - 1) - 1) // s[1] + 1
    return [xp[:, :, i * d[0]:i * d[0] + s[0] * (oh - 1) + 1:s[0], j * d[1]:j * d[1] + s[1] * (ow - 1) + 1:s[1]]
            for i in range(k[0]) for j in range(k[1])]


def conv_ref(x, w, strides=(1, 1), padding=0, dilation=(1, 1), groups=1):
    acc = np.int64 if x.dtype.kind == "i" else np.float64
    f, cg, kh, kw = w.shape
    wins = windows(x.astype(acc), (kh, kw), strides, padding, dilation, 0)
    out = np.zeros(wins[0].shape[:1] + (f,) + wins[0].shape[2:], acc)
    fg = f // groups
    for g in range(groups):
        for idx, win in enumerate(wins):
            i, j = divmod(idx, kw)
            out[:, g * fg:(g + 1) * fg] += np.einsum("nchw,fc->nfhw", win[:, g * cg:(g + 1) * cg],
                                                     w[g * fg:(g + 1) * fg, :, i, j].astype(acc))
    return out


def two(v):
    return (v, v) if isinstance(v, int) else tuple(v)


# ------------------------------------------------------------------------------- matmul family
@pytest.mark.parametrize("m, k, n, dtype", [(4, 8, 3, "float32"), (16, 5, 7, "float64"), (3, 4, 5, "int32"),
                                            (1, 1, 1, "float32")])
def test_matmul(m, k, n, dtype):
    a, b = data((m, k), dtype, 3), data((k, n), dtype, 3)
    np.testing.assert_allclose(run(ops.matmul, a, b), a @ b, **TOL[dtype])
    np.testing.assert_allclose(run(lambda x, y: x @ y, a, b), a @ b, **TOL[dtype])


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32"])
def test_batch_matmul_and_dense(dtype):
    a, b = data((2, 3, 4), dtype), data((2, 4, 5), dtype)
    np.testing.assert_allclose(run(ops.batch_matmul, a, b), a @ b, **TOL[dtype])
    x, w, bias = data((3, 4), dtype), data((6, 4), dtype), data(6, dtype)
    np.testing.assert_allclose(run(lambda t: ops.dense(t, w, bias), x), x @ w.T + bias, **TOL[dtype])
    # a weight given at run time goes through transposed-B indexing maps
    np.testing.assert_allclose(run(lambda t, u: ops.dense(t, u), x, w), x @ w.T, **TOL[dtype])


# ------------------------------------------------------------------------------------- conv2d
CONV_CASES = [
    ((1, 3, 9, 9), (4, 3, 3, 3), dict()),
    ((2, 2, 8, 10), (3, 2, 3, 2), dict(strides=(2, 1), padding=1)),
    ((1, 4, 9, 9), (4, 2, 3, 3), dict(groups=2, dilation=2, padding=(1, 0, 2, 1))),
    ((1, 4, 6, 6), (4, 1, 3, 3), dict(groups=4, padding=(1, 1))),                  # depthwise
    ((2, 6, 7, 5), (9, 2, 1, 1), dict(groups=3, strides=2)),                       # grouped 1x1
    ((1, 1, 5, 5), (2, 1, 5, 5), dict()),                                          # kernel = input
    ((1, 2, 6, 7), (3, 2, 2, 3), dict(dilation=(2, 1), strides=(1, 3), padding=(0, 2))),
]


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32"])
@pytest.mark.parametrize("shape, wshape, kw", CONV_CASES)
def test_conv2d(shape, wshape, kw, dtype):
    x, w, b = data(shape, dtype), data(wshape, dtype), data(wshape[0], dtype)
    ref = conv_ref(x, w, two(kw.get("strides", 1)), kw.get("padding", 0), two(kw.get("dilation", 1)),
                   kw.get("groups", 1))
    got = run(lambda t: ops.conv2d(t, w, b, **kw), x)
    assert got.dtype == x.dtype and got.shape == ref.shape
    np.testing.assert_allclose(got, ref + b[None, :, None, None], **TOL[dtype])


@pytest.mark.parametrize("shape, wshape, kw", [CONV_CASES[1], CONV_CASES[2]])
def test_conv2d_weight_and_bias_at_run_time(shape, wshape, kw):
    x, w, b = data(shape, "float32"), data(wshape, "float32"), data(wshape[0], "float32")
    ref = conv_ref(x, w, two(kw.get("strides", 1)), kw.get("padding", 0), two(kw.get("dilation", 1)),
                   kw.get("groups", 1)) + b[None, :, None, None]
    np.testing.assert_allclose(run(lambda t, u, v: ops.conv2d(t, u, v, **kw), x, w, b), ref, **TOL["float32"])
    np.testing.assert_allclose(run(lambda t, u: ops.conv2d(t, u, **kw), x, w), ref - b[None, :, None, None],
                               **TOL["float32"])


# ------------------------------------------------------------------------- transposed conv
CONV_T_CASES = [
    ((1, 4, 5, 5), (4, 3, 3, 3), dict()),
    ((2, 4, 5, 6), (4, 2, 3, 3), dict(strides=2, padding=1, output_padding=1)),
    ((1, 6, 7, 7), (6, 2, 3, 2), dict(strides=(2, 3), padding=(1, 0), dilation=2, groups=3)),
    ((1, 2, 4, 4), (2, 5, 4, 4), dict(padding=3)),                  # padding > k - 1: cropped
    ((2, 3, 4, 5), (3, 2, 1, 2), dict(strides=3)),                  # kernel < stride: bias-only rows
    ((1, 2, 5, 4), (2, 3, 3, 3), dict(strides=(4, 2), dilation=(2, 3), padding=(2, 1),
                                      output_padding=(1, 2))),     # gcd(dilation, stride) > 1
    ((1, 4, 3, 3), (4, 1, 5, 5), dict(strides=2, padding=4, groups=4)),   # phases reading no input
]


@pytest.mark.parametrize("shape, wshape, kw", CONV_T_CASES)
def test_conv_transpose2d_matches_torch(shape, wshape, kw):
    torch = pytest.importorskip("torch")
    g = kw.get("groups", 1)
    x, w, b = data(shape, "float32"), data(wshape, "float32"), data(wshape[1] * g, "float32")
    tk = {"stride": kw.get("strides", 1), **{k: v for k, v in kw.items() if k != "strides"}}
    ref = torch.nn.functional.conv_transpose2d(torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b),
                                               **tk).numpy()
    got = run(lambda t, u: ops.conv_transpose2d(t, u, b, **kw), x, w)
    assert got.shape == ref.shape
    np.testing.assert_allclose(got, ref, **TOL["float32"])


def test_conv_transpose2d_errors():
    with pytest.raises(mlc.BuildError, match=r"conv_transpose2d: argument 'weight' has shape \(3, 2, 3, 3\); "
                                             r"expected \(4, F/groups, KH, KW\)"):
        build_only(lambda t: ops.conv_transpose2d(t, np.zeros((3, 2, 3, 3), np.float32)), ((1, 4, 5, 5), "float32"))
    with pytest.raises(mlc.BuildError, match="argument 'groups' is 3"):
        build_only(lambda t: ops.conv_transpose2d(t, np.zeros((4, 2, 3, 3), np.float32), groups=3),
                   ((1, 4, 5, 5), "float32"))


# ------------------------------------------------------------------------------------ pooling
POOL_CASES = [
    ((2, 3, 8, 8), dict(kernel_size=2)),
    ((1, 2, 7, 5), dict(kernel_size=3, strides=2, padding=1)),
    ((1, 2, 6, 7), dict(kernel_size=(2, 3), strides=(1, 2), padding=(1, 0, 0, 1))),
    ((1, 1, 9, 9), dict(kernel_size=2, strides=1, dilation=2)),
    ((2, 2, 5, 6), dict(kernel_size=(3, 2), strides=(2, 1), padding=(1, 0))),
]


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "float16"])
@pytest.mark.parametrize("shape, kw", POOL_CASES)
def test_max_pool2d(shape, kw, dtype):
    x = data(shape, dtype)
    lowest = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
    k = two(kw["kernel_size"])
    ref = np.max(windows(x, k, two(kw.get("strides", k)), kw.get("padding", 0), two(kw.get("dilation", 1)),
                         lowest), axis=0)
    got = run(lambda t: ops.max_pool2d(t, **kw), x)
    assert got.dtype == x.dtype
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("count_include_pad", [True, False])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape, kw", [c for c in POOL_CASES if "dilation" not in c[1]])
def test_avg_pool2d(shape, kw, dtype, count_include_pad):
    x = data(shape, dtype)
    k = two(kw["kernel_size"])
    geo = (k, two(kw.get("strides", k)), kw.get("padding", 0), (1, 1))
    total = np.sum(windows(x.astype(np.float64), *geo, 0), axis=0)
    count = np.sum(windows(np.ones_like(x, np.float64), *geo, 0), axis=0) if not count_include_pad else k[0] * k[1]
    got = run(lambda t: ops.avg_pool2d(t, count_include_pad=count_include_pad, **kw), x)
    np.testing.assert_allclose(got, total / count, **TOL[dtype])


@pytest.mark.parametrize("shape, dtype", [((2, 3, 4, 5), "float32"), ((1, 8, 1, 1), "float32"),
                                          ((2, 2, 3, 3), "float64")])
def test_global_avg_pool2d(shape, dtype):
    x = data(shape, dtype)
    ref = x.mean(axis=(2, 3), keepdims=True)
    # twice in one function: each call gets its own name
    got = run(lambda t: ops.global_avg_pool2d(ops.global_avg_pool2d(t) + t), x)
    np.testing.assert_allclose(got, (ref + x).mean(axis=(2, 3), keepdims=True), **TOL[dtype])
    np.testing.assert_allclose(run(ops.global_avg_pool2d, x), ref, **TOL[dtype])


# ------------------------------------------------------------------------------ normalization
@pytest.mark.parametrize("shape, axis, dtype", [((2, 3, 4, 5), 1, "float32"), ((4, 6), -1, "float32"),
                                                ((2, 5, 3), 1, "float64"), ((7,), 0, "float32")])
def test_batch_norm(shape, axis, dtype):
    x = data(shape, dtype)
    c = shape[axis]
    g, b, m = data(c, dtype), data(c, dtype), data(c, dtype)
    v = (RNG.random(c) + 0.5).astype(dtype)
    bshape = [1] * len(shape)
    bshape[axis] = c

    def ref(eps):
        return ((x - m.reshape(bshape)) / np.sqrt(v.reshape(bshape) + eps) * g.reshape(bshape)
                + b.reshape(bshape))

    np.testing.assert_allclose(run(lambda t: ops.batch_norm(t, g, b, m, v, eps=1e-3, axis=axis), x), ref(1e-3),
                               **TOL[dtype])
    # parameters passed at run time; default eps
    got = run(lambda t, *p: ops.batch_norm(t, *p, axis=axis), x, g, b, m, v)
    np.testing.assert_allclose(got, ref(1e-5), **TOL[dtype])


def ln_ref(x, axes, g, b, eps):
    mu, var = x.mean(axes, keepdims=True), x.var(axes, keepdims=True)
    y = (x - mu) / np.sqrt(var + eps)
    return y * (1 if g is None else g) + (0 if b is None else b)


@pytest.mark.parametrize("shape, axis, dtype", [((3, 8), -1, "float32"), ((2, 3, 4, 5), (2, 3), "float32"),
                                                ((2, 3, 4), (-2, -1), "float64"), ((6,), 0, "float32")])
def test_layer_norm(shape, axis, dtype):
    x = data(shape, dtype, 3) + 1
    axes = (axis,) if isinstance(axis, int) else axis
    nshape = tuple(shape[a] for a in axes)
    g, b = data(nshape, dtype), data(nshape, dtype)
    np.testing.assert_allclose(run(lambda t: ops.layer_norm(t, g, b, axis=axis), x), ln_ref(x, axes, g, b, 1e-5),
                               **TOL[dtype])
    np.testing.assert_allclose(run(lambda t, u: ops.layer_norm(t, u, None, axis=axis, eps=0.1), x, g),
                               ln_ref(x, axes, g, None, 0.1), **TOL[dtype])
    np.testing.assert_allclose(run(lambda t: ops.layer_norm(t, None, None, axis=axis), x),
                               ln_ref(x, axes, None, None, 1e-5), **TOL[dtype])


# ------------------------------------------------------------------------------------ softmax
def softmax_ref(x, axis):
    x = x.astype(np.float64)
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


@pytest.mark.parametrize("shape, axis, dtype", [((7,), -1, "float32"), ((3, 5), 0, "float32"),
                                                ((2, 3, 4), 1, "float32"), ((2, 3, 4), -1, "float64")])
def test_softmax_and_log_softmax(shape, axis, dtype):
    x = data(shape, dtype, 3)
    ref = softmax_ref(x, axis)
    np.testing.assert_allclose(run(lambda t: ops.softmax(t, axis=axis), x), ref, **TOL[dtype])
    np.testing.assert_allclose(run(lambda t: ops.log_softmax(t, axis=axis), x), np.log(ref), **TOL[dtype])


def test_softmax_is_numerically_stable():
    big = np.array([[1000.0, 1001.0], [-1000.0, -1001.0]], np.float32)
    np.testing.assert_allclose(run(ops.softmax, big), softmax_ref(big, -1), rtol=1e-5)
    np.testing.assert_allclose(run(ops.log_softmax, big), np.log(softmax_ref(big, -1)), rtol=1e-5)


# -------------------------------------------------------------------------------------- names
def _names(mod):
    """mlc.name of every top-level op of main, and the ops without one."""
    fn = mod.get_function("main")
    named, unnamed = [], []
    for o in fn.regions[0].blocks[0].operations:
        o = o.operation
        if "mlc.name" in o.attributes:
            named.append(o.attributes["mlc.name"].value)
        elif o.name not in ("tensor.empty", "arith.constant", "func.return"):
            unnamed.append(o.name)
    return named, unnamed


def test_every_emitted_op_is_named():
    w = data((4, 2, 3, 3), "float32")

    def net(x):
        y = ops.conv2d(x, data((4, 4, 3, 3), "float32"), np.ones(4, np.float32), padding=1, name="stem")
        y = ops.conv2d(y, w, groups=2, padding=(1, 1, 0, 0))
        y = ops.conv2d(y, w, groups=2, padding=1)
        y = ops.batch_norm(y, *(np.ones(4, np.float32),) * 4)
        y = ops.max_pool2d(y, 2, padding=1)
        y = ops.avg_pool2d(y, 2, 1, padding=1, count_include_pad=False)
        y = ops.layer_norm(y, np.ones(y.shape[-1], np.float32), np.zeros(y.shape[-1], np.float32))
        return ops.log_softmax(ops.softmax(ops.global_avg_pool2d(y), axis=1), axis=1)

    mod = build_only(net, ((1, 4, 6, 6), "float32"))
    named, unnamed = _names(mod)
    assert unnamed == []
    assert len(named) == len(set(named))
    for n in ["stem", "stem.pad", "stem.init", "stem.weight", "stem.bias", "stem.bias_add", "conv2d",
              "conv2d.expand_x", "conv2d.expand_w", "conv2d.collapse", "conv2d_1", "conv2d_1.weight",
              "batch_norm", "batch_norm.gamma", "batch_norm.moving_var", "max_pool2d", "max_pool2d.pad",
              "avg_pool2d.sum", "avg_pool2d.count", "avg_pool2d", "layer_norm", "layer_norm.mean.sum",
              "layer_norm.gamma", "global_avg_pool2d", "global_avg_pool2d.sum", "softmax.max", "softmax",
              "log_softmax.log", "log_softmax"]:
        assert n in named, n
    exe = mlc.compile(mod)  # and it lowers with the CPU pipeline
    assert exe(data((1, 4, 6, 6), "float32")).shape == (1, 4, 1, 1)


# -------------------------------------------------------------------------------------- errors
W = np.ones((8, 4, 3, 3), np.float32)
ONES3 = np.ones(3, np.float32)
F32_4D = [((1, 4, 8, 8), "float32")]


@pytest.mark.parametrize("build, specs, match", [
    # matmul family
    (lambda a, b: ops.matmul(a, b), [((3, 4), "float32"), ((5, 2), "float32")],
     r"matmul: argument 'b' has shape \(5, 2\); expected \(4, N\) to match a's inner dimension 4"),
    (lambda a, b: ops.matmul(a, b), [((3, 4, 1), "float32"), ((4, 2), "float32")], "expected rank 2"),
    (lambda a, b: ops.matmul(a, b), [((3, 4), "float32"), ((4, 2), "int32")],
     "matmul: argument 'b' has dtype int32; expected float32"),
    (lambda a, b: ops.batch_matmul(a, b), [((2, 3, 4), "float32"), ((3, 4, 5), "float32")],
     r"batch_matmul: argument 'b' has shape \(3, 4, 5\); expected \(2, 4, N\)"),
    (lambda a: ops.dense(a, np.ones((10, 65), np.float32)), [((1, 64), "float32")],
     r"dense: argument 'weight' has shape \(10, 65\); expected \(N, 64\) to match x's last dimension 64"),
    (lambda a: ops.dense(a, np.ones((10, 64), np.float32), np.ones(9, np.float32)), [((1, 64), "float32")],
     r"dense: argument 'bias' has shape \(9,\); expected \(10,\)"),
    # conv2d
    (lambda a: ops.conv2d(a, np.ones((8, 4, 3, 3), np.float32)), [((1, 3, 8, 8), "float32")],
     r"conv2d: argument 'weight' has shape \(8, 4, 3, 3\); expected \(F, 3, KH, KW\) for 3 input channels "
     r"and groups=1"),
    (lambda a: ops.conv2d(a, W, groups=2), F32_4D,
     r"conv2d: argument 'weight' has shape \(8, 4, 3, 3\); expected \(F, 2, KH, KW\) for 4 input channels "
     r"and groups=2"),
    (lambda a: ops.conv2d(a, np.ones((6, 1, 3, 3), np.float32), groups=4), F32_4D,
     r"expected F a multiple of groups=4"),
    (lambda a: ops.conv2d(a, W, groups=3), F32_4D,
     r"conv2d: argument 'groups' is 3; expected a divisor of the 4 input channels of x \(1, 4, 8, 8\)"),
    (lambda a: ops.conv2d(a, W, groups=0), F32_4D, r"conv2d: argument 'groups' is 0; expected an int >= 1"),
    (lambda a: ops.conv2d(a, W, groups=1.5), F32_4D, r"argument 'groups' is 1.5; expected an int >= 1"),
    (lambda a: ops.conv2d(a, np.ones((8, 4, 3), np.float32)), F32_4D,
     r"conv2d: argument 'weight' has shape \(8, 4, 3\); expected rank 4 \(F, C/groups, KH, KW\)"),
    (lambda a: ops.conv2d(a, [[1.0]]), F32_4D, "conv2d: argument 'weight' is list; expected a Tensor or numpy"),
    (lambda a, w: ops.conv2d(a, w), F32_4D + [((8, 4, 3, 3), "float64")],
     "conv2d: argument 'weight' has dtype float64; expected float32"),
    (lambda a: ops.conv2d(a, W, np.ones(4, np.float32)), F32_4D,
     r"conv2d: argument 'bias' has shape \(4,\); expected \(8,\) for 8 filters"),
    (lambda a: ops.conv2d(a, W), [((1, 4, 8), "float32")],
     r"conv2d: argument 'x' has shape \(1, 4, 8\); expected rank 4 \(N, C, H, W\)"),
    (lambda a: ops.conv2d(1.0, a), [((8, 4, 3, 3), "float32")],
     "conv2d: argument 'x' is float; expected a Tensor or numpy.ndarray"),
    (lambda a: ops.conv2d(a, W), [((1, 4, 2, 2), "float32")],
     r"conv2d: the height window spans 3 \(kernel 3, dilation 1\); expected at most the padded input height 2"),
    (lambda a: ops.conv2d(a, W, dilation=(1, 4)), F32_4D, r"the width window spans 9 .* width 8"),
    (lambda a: ops.conv2d(a, W, strides=0), F32_4D, r"conv2d: argument 'strides' is 0; expected an int or 2 ints >= 1"),
    (lambda a: ops.conv2d(a, W, strides=(1, 2, 3)), F32_4D, r"argument 'strides' is \(1, 2, 3\); expected an int or 2"),
    (lambda a: ops.conv2d(a, W, dilation="2"), F32_4D, r"argument 'dilation' is '2'; expected an int or 2 ints"),
    (lambda a: ops.conv2d(a, W, padding=-1), F32_4D,
     r"argument 'padding' is -1; expected an int, \(ph, pw\) or \(top, left, bottom, right\), each >= 0"),
    (lambda a: ops.conv2d(a, W, padding="1"), F32_4D, r"conv2d: argument 'padding' is '1'; expected an int, \(ph"),
    (lambda a: ops.conv2d(a, W, padding=(1, 2, 3)), F32_4D,
     r"argument 'padding' is \(1, 2, 3\); expected an int, \(ph, pw\) or \(top, left, bottom, right\)"),
    (lambda a: ops.conv2d(a, W, name="c") + ops.conv2d(a, W, name="c"), F32_4D,
     "conv2d: op name 'c' is already used in function 'main'"),
    (lambda a: ops.conv2d(a, np.ones((8, 4, 3, 3), bool)), [((1, 4, 8, 8), "bool")],
     "conv2d: argument 'x' has dtype bool; expected a float or int dtype"),
    # pooling
    (lambda a: ops.max_pool2d(a, 2), [((4, 8), "float32")], r"max_pool2d: argument 'x' has shape \(4, 8\); expected rank 4"),
    (lambda a: ops.max_pool2d(a, 0), F32_4D, r"max_pool2d: argument 'kernel_size' is 0; expected an int or 2 ints >= 1"),
    (lambda a: ops.max_pool2d(a, 2, strides=(0, 1)), F32_4D, r"argument 'strides' is \(0, 1\)"),
    (lambda a: ops.max_pool2d(a, 2, dilation=0), F32_4D, r"argument 'dilation' is 0"),
    (lambda a: ops.max_pool2d(a, 9), F32_4D, r"max_pool2d: the height window spans 9"),
    (lambda a: ops.max_pool2d(a, 2, padding=(1, -1)), F32_4D, r"max_pool2d: argument 'padding' is \(1, -1\)"),
    (lambda a: ops.max_pool2d(a, 2), [((1, 1, 4, 4), "bool")], "max_pool2d: argument 'x' has dtype bool"),
    (lambda a: ops.avg_pool2d(a, 2), [((1, 1, 4, 4), "int32")],
     r"avg_pool2d: argument 'x' has dtype int32; expected one of \['bfloat16', 'float16', 'float32', 'float64'\]"),
    (lambda a: ops.avg_pool2d(a, 2, padding=2, count_include_pad=False), F32_4D,
     r"avg_pool2d: argument 'padding' is 2; some windows hold only padding"),
    (lambda a: ops.global_avg_pool2d(a), [((2, 3), "float32")],
     r"global_avg_pool2d: argument 'x' has shape \(2, 3\); expected rank 4 \(N, C, H, W\)"),
    (lambda a: ops.global_avg_pool2d(a), [((1, 2, 3, 3), "int32")], "global_avg_pool2d: argument 'x' has dtype int32"),
    # normalization
    (lambda a: ops.batch_norm(a, *[np.ones(4, np.float32)] * 4), [((1, 3, 2, 2), "float32")],
     r"batch_norm: argument 'gamma' has shape \(4,\); expected \(3,\) for axis 1 of x \(1, 3, 2, 2\)"),
    (lambda a: ops.batch_norm(a, ONES3, ONES3, ONES3, np.ones((3, 1), np.float32)), [((1, 3, 2, 2), "float32")],
     r"batch_norm: argument 'moving_var' has shape \(3, 1\); expected \(3,\)"),
    (lambda a, g: ops.batch_norm(a, g, ONES3, ONES3, ONES3), [((1, 3, 2, 2), "float32"), ((3,), "int32")],
     "batch_norm: argument 'gamma' has dtype int32; expected float32"),
    (lambda a: ops.batch_norm(a, *[ONES3] * 4, axis=4), [((1, 3, 2, 2), "float32")],
     r"batch_norm: argument 'axis' is 4; expected an int in \[-4, 4\)"),
    (lambda a: ops.batch_norm(a, *[ONES3] * 4), [((1, 3, 2, 2), "int32")], "batch_norm: argument 'x' has dtype int32"),
    (lambda a: ops.layer_norm(a, ONES3, ONES3, axis=0), [((3, 4), "float32")],
     r"layer_norm: argument 'axis' is 0; expected the trailing axes of x \(3, 4\)"),
    (lambda a: ops.layer_norm(a, None, None, axis=(0, 2)), [((3, 4, 5), "float32")],
     r"layer_norm: argument 'axis' is \(0, 2\); expected the trailing axes"),
    (lambda a: ops.layer_norm(a, None, None, axis=()), [((3, 4), "float32")],
     r"layer_norm: argument 'axis' is \(\); expected the trailing axes"),
    (lambda a: ops.layer_norm(a, ONES3, None), [((3, 4), "float32")],
     r"layer_norm: argument 'gamma' has shape \(3,\); expected \(4,\), the normalized shape of x \(3, 4\)"),
    (lambda a: ops.layer_norm(a, None, np.ones((4, 1), np.float32)), [((3, 4), "float32")],
     r"layer_norm: argument 'beta' has shape \(4, 1\); expected \(4,\)"),
    (lambda a: ops.layer_norm(a, None, None), [((3, 4), "int64")], "layer_norm: argument 'x' has dtype int64"),
    # softmax
    (lambda a: ops.softmax(a, axis=2), [((3, 4), "float32")],
     r"softmax: argument 'axis' is 2; expected an int in \[-2, 2\)"),
    (lambda a: ops.softmax(a, axis=1.0), [((3, 4), "float32")], r"softmax: argument 'axis' is 1.0"),
    (lambda a: ops.softmax(a), [((3, 4), "int32")], "softmax: argument 'x' has dtype int32; expected one of"),
    (lambda a: ops.log_softmax(a, axis=-3), [((3, 4), "float32")],
     r"log_softmax: argument 'axis' is -3; expected an int in \[-2, 2\)"),
    (lambda a: ops.log_softmax(a), [((3, 4), "int32")], "log_softmax: argument 'x' has dtype int32"),
    (lambda a: ops.softmax([1.0, 2.0]), [((3, 4), "float32")],
     "softmax: argument 'x' is list; expected a Tensor or numpy.ndarray"),
])
def test_nn_errors(build, specs, match):
    with pytest.raises(mlc.MlcError, match=match):
        build_only(build, *specs)
