"""Tuning end to end on a conv net and a transformer block built with the builder: the default
design space (rule-based, target-derived) and the default search (evolutionary + XGBoost), a
few trials, then ``compile(mod, database=db)`` compared with numpy."""

import math

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir import ops

pytest.importorskip("xgboost")  # the default search's cost model (extra 'tune')


def _f32(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def _conv_ref(x, w, b, pad):
    n, c, h, wd = x.shape
    kh, kw = w.shape[2:]
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    ho, wo = h + 2 * pad - kh + 1, wd + 2 * pad - kw + 1
    out = np.zeros((n, w.shape[0], ho, wo), np.float64)
    for i in range(kh):
        for j in range(kw):
            out += np.einsum("nchw,oc->nohw", xp[:, :, i:i + ho, j:j + wo], w[:, :, i, j])
    return out + b[None, :, None, None]


def conv_net(rng):
    w1, b1 = _f32(rng, 8, 3, 3, 3, scale=0.3), _f32(rng, 8)
    w2, b2 = _f32(rng, 8, 8, 3, 3, scale=0.2), _f32(rng, 8)
    wd, bd = _f32(rng, 10, 8 * 4 * 4, scale=0.1), _f32(rng, 10)
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", (1, 3, 16, 16))
        h = ops.relu(ops.conv2d(x, w1, b1, padding=(1, 1)))
        h = ops.max_pool2d(ops.relu(ops.conv2d(h, w2, b2, padding=(1, 1))), (2, 2), (2, 2))
        h = ops.max_pool2d(h, (2, 2), (2, 2))
        f.output(ops.softmax(ops.dense(ops.flatten(h, 1), wd, bd)))

    def ref(x):
        h = np.maximum(_conv_ref(x, w1, b1, 1), 0)
        h = np.maximum(_conv_ref(h, w2, b2, 1), 0)
        for _ in range(2):
            n, c, hh, ww = h.shape
            h = h.reshape(n, c, hh // 2, 2, ww // 2, 2).max(axis=(3, 5))
        z = h.reshape(1, -1) @ wd.T + bd
        e = np.exp(z - z.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)
    return bb.finish(), ref, (1, 3, 16, 16)


def transformer_block(rng, s=16, d=32, ff=64):
    """Single-head pre-norm encoder block: x + attn(ln(x)); then + mlp(ln(.)) with gelu."""
    wq, wk, wv, wo = (_f32(rng, d, d, scale=d ** -0.5) for _ in range(4))
    w1, b1, w2, b2 = _f32(rng, ff, d, scale=d ** -0.5), _f32(rng, ff), _f32(rng, d, ff, scale=ff ** -0.5), _f32(rng, d)
    g1, be1, g2, be2 = _f32(rng, d), _f32(rng, d), _f32(rng, d), _f32(rng, d)
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", (s, d))
        h = ops.layer_norm(x, g1, be1)
        q, k, v = ops.dense(h, wq), ops.dense(h, wk), ops.dense(h, wv)
        att = ops.softmax(ops.multiply(ops.matmul(q, ops.transpose(k)), 1.0 / math.sqrt(d)))
        x1 = ops.add(x, ops.dense(ops.matmul(att, v), wo))
        h2 = ops.layer_norm(x1, g2, be2)
        f.output(ops.add(x1, ops.dense(ops.gelu(ops.dense(h2, w1, b1)), w2, b2)))

    def ln(t, g, b):
        mu, var = t.mean(-1, keepdims=True), t.var(-1, keepdims=True)
        return (t - mu) / np.sqrt(var + 1e-5) * g + b

    def ref(x):
        h = ln(x, g1, be1)
        q, k, v = h @ wq.T, h @ wk.T, h @ wv.T
        z = q @ k.T / math.sqrt(d)
        a = np.exp(z - z.max(-1, keepdims=True))
        a /= a.sum(-1, keepdims=True)
        x1 = x + (a @ v) @ wo.T
        u = ln(x1, g2, be2) @ w1.T + b1
        gelu = 0.5 * u * (1 + np.tanh(np.sqrt(2 / np.pi) * (u + 0.044715 * u ** 3)))
        return x1 + gelu @ w2.T + b2
    return bb.finish(), ref, (s, d)


@pytest.mark.parametrize("model", [conv_net, transformer_block])
def test_tune_model_then_compile_with_database(model, tmp_path, rng):
    mod, ref, shape = model(rng)
    db = mlc.tune(mod, trials=10, work_dir=str(tmp_path), progress=False, timeout_s=60)
    recs = [r for r in db.records() if not r.final]   # the search's; then the re-measured finalists
    assert len(recs) == 10
    assert any(r.ok and mlc.Trace.from_json(r.trace).insts for r in recs), \
        [r.error for r in recs][:3]  # at least one scheduled candidate measured successfully
    # no candidate of the spaces computes a wrong answer (the first is the default schedule)
    assert not [r.error for r in recs if r.error and "wrong result" in r.error]
    x = _f32(rng, *shape)
    want = ref(x.astype(np.float64))
    for exe in (mlc.compile(mod, database=db), mlc.compile(mod)):
        np.testing.assert_allclose(exe(x), want, rtol=2e-4, atol=2e-4)
