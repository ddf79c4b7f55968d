"""Grouped convolutions (``groups > 1``, not depthwise) through ``mlc.compile``'s default
schedule: the layout stage's ``GroupedConvToBatchMatmul`` turns them into a per-group im2col and
a ``linalg.batch_matmul``; results compared with PyTorch's ``F.conv2d``."""

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir import ops
from mlc_mlir.pipeline.layout_passes import GroupedConvToBatchMatmul
from mlc_mlir.schedule.rules.conv_strategy import prefers_grouped_gemm
from targets import AVX512

torch = pytest.importorskip("torch")
F = torch.nn.functional


def _grouped_conv(x_shape, w_shape, groups, stride, padding, dilation=1, bias=True):
    """Module computing ``relu(conv2d(x, w, b))`` with constant ``w``/``b``; returns it with
    ``w`` and ``b``."""
    rng = np.random.default_rng(sum(x_shape) + sum(w_shape) + groups)
    w = rng.standard_normal(w_shape).astype(np.float32)
    b = rng.standard_normal(w_shape[0]).astype(np.float32) if bias else None
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", x_shape, "float32")
        f.output(ops.relu(ops.conv2d(x, w, b, strides=stride, padding=padding, dilation=dilation,
                                     groups=groups)))
    return bb.finish(), w, b


CASES = {
    # x shape, w shape, groups, stride, padding, dilation
    "pointwise_g4": ((1, 20, 7, 9), (12, 5, 1, 1), 4, 1, 0, 1),
    "pointwise_g3_odd": ((1, 9, 5, 7), (15, 3, 1, 1), 3, 1, 0, 1),
    "pointwise_g2_stride2": ((1, 6, 9, 11), (8, 3, 1, 1), 2, 2, 0, 1),
    "pointwise_g2_batch2": ((2, 6, 6, 5), (4, 3, 1, 1), 2, 1, 0, 1),
    "k3_g3_stride2_pad": ((1, 9, 11, 13), (6, 3, 3, 3), 3, 2, 1, 1),
    "k3_g2_pad_dilation": ((1, 4, 10, 10), (6, 2, 3, 3), 2, 1, 2, 2),
    "k3_g4_batch2": ((2, 8, 8, 7), (12, 2, 3, 3), 4, 1, 1, 1),
    "k5x3_g3_odd": ((1, 15, 9, 8), (9, 5, 5, 3), 3, (2, 1), (2, 1), 1),
}


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("name", sorted(CASES))
def test_grouped_conv_matches_torch(name, threads, tmp_path):
    xs, ws, g, s, p, d = CASES[name]
    mod, w, b = _grouped_conv(xs, ws, g, s, p, d)
    x = np.random.default_rng(7).standard_normal(xs).astype(np.float32)
    exe = mlc.compile(mod, threads=threads, dump_ir=str(tmp_path))
    got = np.asarray(exe(x))
    want = F.relu(F.conv2d(torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b), stride=s,
                           padding=p, dilation=d, groups=g)).numpy()
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    layout = (tmp_path / "01-layout.mlir").read_text()
    assert "linalg.batch_matmul" in layout and "linalg.conv_2d_ngchw_gfchw" not in layout


def test_depthwise_is_no_batch_matmul(tmp_path):
    """Depthwise convolutions go to DepthwiseToNHWC (test_depthwise_nhwc.py), not the GEMM."""
    mod, w, _ = _grouped_conv((1, 8, 9, 9), (8, 1, 3, 3), 8, 1, 1, bias=False)
    x = np.random.default_rng(3).standard_normal((1, 8, 9, 9)).astype(np.float32)
    got = np.asarray(mlc.compile(mod, threads=1, dump_ir=str(tmp_path))(x))
    want = F.relu(F.conv2d(torch.from_numpy(x), torch.from_numpy(w), padding=1, groups=8)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    layout = (tmp_path / "01-layout.mlir").read_text()
    assert "linalg.depthwise_conv_2d_nhwc_hwc" in layout and "linalg.batch_matmul" not in layout


def test_prefers_grouped_gemm():
    # (N, G, C, H, W), (G, F, C, KH, KW), (N, G, F, OH, OW) per group
    assert prefers_grouped_gemm(AVX512, (1, 4, 68, 14, 14), (4, 68, 68, 1, 1), (1, 4, 68, 14, 14), "float32")
    assert not prefers_grouped_gemm(AVX512, (1, 32, 1, 9, 9), (32, 1, 1, 3, 3), (1, 32, 1, 7, 7), "float32")
    assert not prefers_grouped_gemm(AVX512, (1, 8, 1, 9, 9), (8, 4, 1, 3, 3), (1, 8, 4, 7, 7), "float32")
    assert not prefers_grouped_gemm(AVX512, (1, 4, 8, 9, 9), (4, 8, 8, 3, 3), (1, 4, 8, 7, 7), "int32")
    # fewer output pixels than one vector of 16 float32 lanes
    assert not prefers_grouped_gemm(AVX512, (1, 4, 8, 3, 3), (4, 8, 8, 1, 1), (1, 4, 8, 3, 3), "float32")


def test_accumulating_batched_grouped_conv():
    """An init that is not a fill (here an argument) is accumulated into, through the
    transposes of the two-image form."""
    text = """
    func.func @main(%x: tensor<2x2x3x5x4xf32>, %w: tensor<2x4x3x3x3xf32>, %acc: tensor<2x2x4x3x2xf32>)
        -> tensor<2x2x4x3x2xf32> {
      %y = linalg.conv_2d_ngchw_gfchw {mlc.name = "acc", dilations = dense<1> : tensor<2xi64>,
                                       strides = dense<1> : tensor<2xi64>}
            ins(%x, %w : tensor<2x2x3x5x4xf32>, tensor<2x4x3x3x3xf32>) outs(%acc : tensor<2x2x4x3x2xf32>)
            -> tensor<2x2x4x3x2xf32>
      return %y : tensor<2x2x4x3x2xf32>
    }"""
    mod = GroupedConvToBatchMatmul()(mlc.Module.parse(text))
    assert "linalg.conv_2d_ngchw_gfchw" not in mod.to_text()
    rng = np.random.default_rng(5)
    x, w, acc = (rng.standard_normal(s).astype(np.float32) for s in [(2, 2, 3, 5, 4), (2, 4, 3, 3, 3),
                                                                      (2, 2, 4, 3, 2)])
    got = np.asarray(mlc.compile(mod, threads=1)(x, w, acc))
    want = F.conv2d(torch.from_numpy(x.reshape(2, 6, 5, 4)), torch.from_numpy(w.reshape(8, 3, 3, 3)),
                    groups=2).numpy().reshape(2, 2, 4, 3, 2) + acc
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
