"""Hypothesis fuzz: random graphs drawn from the whole op inventory, optionally run through random
graph-pass orders, compiled and compared with numpy (the independent oracle).

Each graph is a chain of steps on a 2-D float32 value (after an optional 4-D NCHW prologue of
conv2d / pooling / batch_norm); every step has a numpy twin, so the expected result is computed
alongside the graph. The budget is fixed (``max_examples``) to fit CI; a failure that hypothesis
finds is kept below as an explicit regression test.
"""

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mlc_mlir as mlc
from mlc_mlir import graph, ops

_erf = np.vectorize(math.erf, otypes=[np.float64])


def _softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


# Unary steps: (name, builder fn, numpy fn); inputs are kept in a range where each is well defined.
UNARY = [
    ("relu", ops.relu, lambda x: np.maximum(x, 0)),
    ("negative", ops.negative, np.negative),
    ("tanh", ops.tanh, np.tanh),
    ("sigmoid", ops.sigmoid, lambda x: 1 / (1 + np.exp(-x))),
    ("exp", lambda t: ops.exp(ops.clip(t, -4.0, 4.0)), lambda x: np.exp(np.clip(x, -4, 4))),
    ("log", lambda t: ops.log(ops.add(ops.multiply(t, t), 1.0)), lambda x: np.log(x * x + 1)),
    ("sqrt", lambda t: ops.sqrt(ops.multiply(t, t)), lambda x: np.sqrt(x * x)),
    ("rsqrt", lambda t: ops.rsqrt(ops.add(ops.multiply(t, t), 1.0)), lambda x: 1 / np.sqrt(x * x + 1)),
    ("gelu", ops.gelu, _gelu_tanh),
    ("clip", lambda t: ops.clip(t, -0.5, 0.75), lambda x: np.clip(x, -0.5, 0.75)),
    ("softmax", ops.softmax, _softmax),
    ("log_softmax", ops.log_softmax, lambda x: np.log(_softmax(x))),
    ("cast_f64", lambda t: ops.cast(ops.cast(t, "float64"), "float32"), lambda x: x),
]

BINARY = [
    ("add", ops.add, np.add),
    ("subtract", ops.subtract, np.subtract),
    ("multiply", ops.multiply, np.multiply),
    ("divide", lambda a, b: ops.divide(a, b * b + 1 if isinstance(b, float) else ops.add(ops.multiply(b, b), 1.0)),
     lambda a, b: a / (b * b + 1)),
    ("maximum", ops.maximum, np.maximum),
    ("minimum", ops.minimum, np.minimum),
]


@st.composite
def graphs(draw):
    """A random program: (input shapes, list of steps); each step is a tuple the builder below
    interprets for both the graph and numpy."""
    conv = draw(st.booleans())
    m, n = draw(st.sampled_from([1, 2, 3])), draw(st.sampled_from([4, 6, 8]))
    steps = []
    if conv:
        c, hw = draw(st.sampled_from([1, 2, 3])), draw(st.sampled_from([5, 6, 8]))
        in_shape = (m, c, hw, hw)
        for _ in range(draw(st.integers(1, 3))):
            steps.append(draw(st.sampled_from(["conv2d", "max_pool2d", "avg_pool2d", "batch_norm",
                                               "relu4", "global_avg_pool2d"])))
        steps.append("flatten")
    else:
        in_shape = (m, n)
    for _ in range(draw(st.integers(1, 5))):
        kind = draw(st.sampled_from(["unary", "binary", "dense", "matmul", "reduce", "shape",
                                     "layer_norm", "concat"]))
        if kind == "unary":
            steps.append(("unary", draw(st.integers(0, len(UNARY) - 1))))
        elif kind == "binary":
            steps.append(("binary", draw(st.integers(0, len(BINARY) - 1)),
                          draw(st.sampled_from(["self", "row", "const", "scalar", "col"]))))
        elif kind in ("dense", "matmul"):
            steps.append((kind, draw(st.sampled_from([3, 4, 8]))))
        elif kind == "reduce":
            steps.append(("reduce", draw(st.sampled_from(["sum", "mean", "max", "min"])),
                          draw(st.sampled_from([0, 1]))))
        elif kind == "shape":
            steps.append(("shape", draw(st.sampled_from(["transpose", "reshape", "slice", "pad",
                                                         "broadcast"]))))
        else:
            steps.append((kind,))
    seed = draw(st.integers(0, 2 ** 16))
    passes = draw(st.sampled_from([(), ("fuse",), ("fold", "fuse"), ("canonicalize", "cse", "fuse"),
                                   ("fuse", "dce")]))
    return in_shape, steps, seed, passes


def build(in_shape, steps, seed):
    """The module for ``steps`` and its numpy twin's output on a random input."""
    rng = np.random.default_rng(seed)
    xv = rng.standard_normal(in_shape).astype(np.float32)
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        t = f.arg("x", shape=in_shape, dtype="float32")
        r = xv.astype(np.float64)
        for step in steps:
            t, r = _apply(step, t, r, rng)
        f.output(t)
    return bb.finish(), xv, r


def _const(rng, shape):
    return rng.standard_normal(shape).astype(np.float32)


def _apply(step, t, r, rng):  # noqa: C901 - one case per step kind, explicitly
    if step == "conv2d":
        cin = r.shape[1]
        cout = int(rng.integers(1, 4))
        w, b = _const(rng, (cout, cin, 3, 3)), _const(rng, (cout,))
        y = ops.conv2d(t, w, b, padding=(1, 1))
        n, _, h, wd = r.shape
        rp = np.pad(r, ((0, 0), (0, 0), (1, 1), (1, 1)))
        out = np.zeros((n, cout, h, wd))
        for i in range(3):
            for j in range(3):
                out += np.einsum("nchw,oc->nohw", rp[:, :, i:i + h, j:j + wd], w[:, :, i, j])
        return y, out + b[None, :, None, None]
    if step in ("max_pool2d", "avg_pool2d"):
        if r.shape[2] < 2:
            return t, r
        n, c, h, w = r.shape
        ho, wo = h // 2, w // 2
        win = r[:, :, :ho * 2, :wo * 2].reshape(n, c, ho, 2, wo, 2)
        if step == "max_pool2d":
            return ops.max_pool2d(t, (2, 2), (2, 2)), win.max(axis=(3, 5))
        return ops.avg_pool2d(t, (2, 2), (2, 2)), win.mean(axis=(3, 5))
    if step == "batch_norm":
        c = r.shape[1]
        g, b, mu = _const(rng, (c,)), _const(rng, (c,)), _const(rng, (c,))
        var = (np.abs(_const(rng, (c,))) + 0.5).astype(np.float32)
        y = ops.batch_norm(t, g, b, mu, var)
        s = lambda v: v[None, :, None, None]  # noqa: E731
        return y, (r - s(mu)) / np.sqrt(s(var) + 1e-5) * s(g) + s(b)
    if step == "relu4":
        return ops.relu(t), np.maximum(r, 0)
    if step == "global_avg_pool2d":
        return ops.global_avg_pool2d(t), r.mean(axis=(2, 3), keepdims=True)
    if step == "flatten":
        return ops.flatten(t, 1), r.reshape(r.shape[0], -1)
    kind = step[0]
    if kind == "unary":
        _, fn, ref = UNARY[step[1]]
        return fn(t), ref(r)
    if kind == "binary":
        _, fn, ref = BINARY[step[1]]
        other = step[2]
        if other == "self":
            return fn(t, t), ref(r, r)
        if other == "scalar":
            return fn(t, 0.5), ref(r, 0.5)
        shape = {"row": (r.shape[1],), "col": (r.shape[0], 1), "const": r.shape}[other]
        c = _const(rng, shape)
        return fn(t, c), ref(r, c.astype(np.float64))
    if kind == "dense":
        w, b = _const(rng, (step[1], r.shape[1])), _const(rng, (step[1],))
        return ops.dense(t, w, b), r @ w.T.astype(np.float64) + b
    if kind == "matmul":
        w = _const(rng, (r.shape[1], step[1]))
        return ops.matmul(t, w), r @ w.astype(np.float64)
    if kind == "reduce":
        name, axis = step[1], step[2]
        return getattr(ops, name)(t, axis=axis, keepdims=True), \
            getattr(np, {"sum": "sum", "mean": "mean", "max": "max", "min": "min"}[name])(r, axis=axis, keepdims=True)
    if kind == "layer_norm":
        n = r.shape[1]
        g, b = _const(rng, (n,)), _const(rng, (n,))
        mu, var = r.mean(-1, keepdims=True), r.var(-1, keepdims=True)
        return ops.layer_norm(t, g, b), (r - mu) / np.sqrt(var + 1e-5) * g + b
    if kind == "concat":
        return ops.concat([t, t], axis=1), np.concatenate([r, r], axis=1)
    if kind == "shape":
        what = step[1]
        if what == "transpose":
            return ops.transpose(t), r.T
        if what == "reshape":
            return ops.reshape(t, (r.shape[1], r.shape[0])), r.reshape(r.shape[1], r.shape[0])
        if what == "slice":
            e = max(1, r.shape[1] - 1)
            return ops.slice(t, [0, 0], [r.shape[0], e]), r[:, :e]
        if what == "pad":
            return ops.pad(t, [(0, 1), (1, 0)], 0.25), np.pad(r, [(0, 1), (1, 0)], constant_values=0.25)
        if what == "broadcast":
            if r.shape[0] != 1:
                return t, r
            return ops.broadcast_to(t, (2, r.shape[1])), np.broadcast_to(r, (2, r.shape[1]))
    raise AssertionError(f"unknown step {step!r}")


def _passes(names):
    table = {"fuse": graph.FuseOps(), "fold": graph.FoldConstant(mlc.compile),
             "dce": graph.DeadCodeElimination(), "canonicalize": "canonicalize", "cse": "cse"}
    return graph.Sequential([table[n] for n in names])


def check(in_shape, steps, seed, passes=()):
    mod, xv, ref = build(in_shape, steps, seed)
    if passes:
        mod = _passes(passes)(mod)
    got = mlc.compile(mod)(xv)
    assert got.shape == ref.shape, (got.shape, ref.shape)
    scale = max(1.0, float(np.abs(ref).max()))
    np.testing.assert_allclose(got, ref, rtol=2e-4, atol=2e-4 * scale)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs())
def test_random_graphs_match_numpy(program):
    check(*program)


# Regression cases: each a program hypothesis (or a reviewer) once found failing.
@pytest.mark.parametrize("program", [
    ((2, 6), [("binary", 0, "self"), ("shape", "transpose"), ("layer_norm",)], 0, ("canonicalize", "cse", "fuse")),
    ((1, 2, 5, 5), ["conv2d", "max_pool2d", "flatten", ("dense", 3), ("unary", 10)], 1, ("fold", "fuse")),
    ((3, 4), [("reduce", "mean", 1), ("binary", 3, "col"), ("concat",), ("shape", "pad")], 2, ("fuse", "dce")),
])
def test_regressions(program):
    check(*program)
