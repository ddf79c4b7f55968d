"""``layout_passes.PropagateTransposes``: after ``layout_passes.ConvToNHWC``, a ResNet-style block (conv, batch
norm, relu, max pool, conv, residual add, global average pool) keeps no activation transpose
but the input's; the rewritten graph, compiled with the default schedules, matches PyTorch;
each rule (cancel, elementwise, pad, pooling, reduction) on its own."""

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir import ops
from mlc_mlir.pipeline import layout_passes

torch = pytest.importorskip("torch")
F = torch.nn.functional


def _block(rng, pool_kind="max"):
    """x (1, 8, 16, 16) -> conv3x3 -> bn -> relu -> pool 3x3/2 -> conv3x3 -> + -> relu -> mean."""
    w1 = rng.standard_normal((8, 8, 3, 3)).astype(np.float32) * 0.2
    w2 = rng.standard_normal((8, 8, 3, 3)).astype(np.float32) * 0.2
    gamma, beta = rng.random(8).astype(np.float32) + 0.5, rng.standard_normal(8).astype(np.float32)
    mu, var = rng.standard_normal(8).astype(np.float32) * 0.1, rng.random(8).astype(np.float32) + 0.5
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", shape=(1, 8, 16, 16))
        y = ops.relu(ops.batch_norm(ops.conv2d(x, w1, padding=1), gamma, beta, mu, var))
        if pool_kind == "max":
            p = ops.max_pool2d(y, 3, strides=2, padding=1)
        else:
            p = ops.avg_pool2d(y, 3, strides=2, padding=1)
        z = ops.relu(ops.add(ops.conv2d(p, w2, padding=1), p))
        f.output(ops.mean(z, axis=(2, 3)))

    def ref(xn):
        t = torch.from_numpy(xn)
        y = F.relu(F.batch_norm(F.conv2d(t, torch.from_numpy(w1), padding=1), torch.from_numpy(mu),
                                torch.from_numpy(var), torch.from_numpy(gamma), torch.from_numpy(beta)))
        if pool_kind == "max":
            p = F.max_pool2d(y, 3, 2, 1)
        else:
            p = F.avg_pool2d(y, 3, 2, 1, count_include_pad=True)
        z = F.relu(F.conv2d(p, torch.from_numpy(w2), padding=1) + p)
        return z.mean(dim=(2, 3)).numpy()
    return bb.finish(), ref


def _transposes(mod):
    return [line for line in str(mod).splitlines() if "linalg.transpose" in line]


@pytest.mark.parametrize("pool_kind", ["max", "avg"])
def test_resnet_block_stays_nhwc_and_matches_torch(pool_kind):
    rng = np.random.default_rng(0)
    mod, ref = _block(rng, pool_kind)
    per_op = layout_passes.ConvToNHWC()(mod)
    assert len(_transposes(per_op)) == 6    # x, w and back, per convolution
    prop = layout_passes.PropagateTransposes()(per_op)
    left = _transposes(prop)
    # the input's and the two filters' transposes remain; no activation goes back to NCHW
    assert len(left) == 3 and not any("to_nchw" in t or ".layout" in t for t in left), left
    text = str(prop)
    assert "pooling_nhwc" in text and "pooling_nchw" not in text
    xn = rng.standard_normal((1, 8, 16, 16)).astype(np.float32)
    for m in (prop, mod):   # mlc.compile runs both passes on the NCHW graph too
        np.testing.assert_allclose(mlc.compile(m)(xn), ref(xn), rtol=1e-4, atol=1e-4)


def test_cancel_keeps_a_transpose_with_other_users():
    """transpose(transpose(x)) cancels; the inner transpose stays while something else reads it."""
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", shape=(2, 3, 4))
        t = ops.transpose(x, (2, 0, 1))
        back = ops.transpose(t, (1, 2, 0))
        f.output(ops.add(back, x), ops.exp(t))
    out = layout_passes.PropagateTransposes()(bb.finish())
    assert len(_transposes(out)) == 1
    xn = np.random.default_rng(1).standard_normal((2, 3, 4)).astype(np.float32)
    a, b = mlc.compile(out)(xn)
    np.testing.assert_allclose(a, 2 * xn, rtol=1e-6)
    np.testing.assert_allclose(b, np.exp(xn.transpose(2, 0, 1)), rtol=1e-6)


def test_elementwise_with_broadcast_operand_and_pad_sink():
    """add(transpose(x), bias) runs in x's layout (bias map renumbered); a pad of the result
    moves before the transpose with its low/high permuted."""
    rng = np.random.default_rng(2)
    bias = rng.standard_normal(5).astype(np.float32)
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", shape=(1, 4, 6, 5))                       # NHWC
        t = ops.transpose(x, (0, 3, 1, 2))                        # NCHW (1, 5, 4, 6)
        y = ops.add(t, ops.reshape(ops.constant(bias), (5, 1, 1)))
        f.output(ops.pad(ops.relu(y), [(0, 0), (0, 0), (1, 2), (3, 0)], 0.5))
    prop = layout_passes.PropagateTransposes()(bb.finish())
    text = str(prop)
    assert text.index("tensor.pad") < text.index("linalg.transpose")
    assert "low[0, 1, 3, 0] high[0, 2, 0, 0]" in text
    xn = rng.standard_normal((1, 4, 6, 5)).astype(np.float32)
    want = np.pad(np.maximum(xn.transpose(0, 3, 1, 2) + bias.reshape(5, 1, 1), 0),
                  [(0, 0), (0, 0), (1, 2), (3, 0)], constant_values=0.5)
    np.testing.assert_allclose(mlc.compile(prop)(xn), want, rtol=1e-6)


def test_reduction_reads_through_the_transpose():
    """sum(transpose(x), axis=1) reads x with a composed indexing map: no transpose is left."""
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", shape=(3, 4, 5))
        f.output(ops.sum(ops.transpose(x, (2, 0, 1)), axis=1))   # (5, 4)
    prop = layout_passes.PropagateTransposes()(bb.finish())
    assert not _transposes(prop)
    xn = np.random.default_rng(3).standard_normal((3, 4, 5)).astype(np.float32)
    np.testing.assert_allclose(mlc.compile(prop)(xn), xn.transpose(2, 0, 1).sum(axis=1), rtol=1e-5)


def test_cancel_only_leaves_other_ops_and_compile_drops_the_pair(tmp_path):
    """``sink=False`` cancels the attention-style pair ``transpose(transpose(x, [2, 0, 1, 3]),
    [1, 2, 0, 3])`` and leaves ``add(transpose(y), bias)`` as it is; ``mlc.compile`` of a graph
    without convolutions drops the pair in its layout stage; results match numpy at 1 and 2
    threads."""
    rng = np.random.default_rng(4)
    bias = rng.standard_normal(3).astype(np.float32)
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", shape=(1, 2, 5, 3))
        y = f.arg("y", shape=(3, 7))
        merged = ops.transpose(ops.transpose(ops.transpose(x, (2, 0, 1, 3)), (1, 2, 0, 3)), (0, 2, 1, 3))
        f.output(ops.exp(merged), ops.add(ops.transpose(y, (1, 0)), ops.constant(bias)))
    mod = bb.finish()
    out = layout_passes.PropagateTransposes(sink=False)(mod)
    assert len(_transposes(mod)) == 4 and len(_transposes(out)) == 2
    text = str(out)
    assert text.index("permutation = [1, 0]") < text.index("arith.addf")   # not sunk
    xn = rng.standard_normal((1, 2, 5, 3)).astype(np.float32)
    yn = rng.standard_normal((3, 7)).astype(np.float32)
    exe = mlc.compile(mod, dump_ir=str(tmp_path))
    layout = (tmp_path / "01-layout.mlir").read_text()
    assert layout.count("linalg.transpose ins") == 2
    for threads in (1, 2):
        a, b = mlc.compile(mod, threads=threads)(xn, yn)
        np.testing.assert_allclose(a, np.exp(xn.transpose(0, 2, 1, 3)), rtol=1e-6)
        np.testing.assert_allclose(b, yn.T + bias, rtol=1e-6)
    a, _ = exe(xn, yn)
    np.testing.assert_allclose(a, np.exp(xn.transpose(0, 2, 1, 3)), rtol=1e-6)
