"""The layout stage's NHWC rewrites for light CNNs, through ``mlc.compile``'s default schedule,
compared with PyTorch: depthwise convolutions as ``linalg.depthwise_conv_2d_nhwc_hwc``
(``DepthwiseToNHWC`` + the ``depthwise_nhwc`` rule), one-image NCHW convolutions with ragged
output channels as the NCHW im2col GEMM (``ConvToIm2col(select_nchw=...)``) and strided poolings
in NHWC (``PoolToNHWC``)."""

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir import ops
from mlc_mlir.target import host_target
from mlc_mlir.pipeline.layout_passes import DepthwiseToNHWC
from mlc_mlir.schedule.rules.conv_strategy import prefers_nchw_im2col, prefers_nhwc
from mlc_mlir.schedule.rules.depthwise import channel_vector, depthwise_register_tile
from mlc_mlir.schedule.rules.pooling import prefers_pool_nhwc
from targets import AVX2, AVX512

torch = pytest.importorskip("torch")
F = torch.nn.functional


def _conv(x_shape, w_shape, groups, stride, padding, dilation=1):
    """``relu(conv2d(x, w, b))`` with constant ``w``/``b``; returns the module, ``w`` and ``b``."""
    rng = np.random.default_rng(sum(x_shape) + sum(w_shape))
    w = rng.standard_normal(w_shape).astype(np.float32)
    b = rng.standard_normal(w_shape[0]).astype(np.float32)
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", x_shape, "float32")
        f.output(ops.relu(ops.conv2d(x, w, b, strides=stride, padding=padding, dilation=dilation,
                                     groups=groups)))
    return bb.finish(), w, b


DEPTHWISE = {
    # x shape, kernel, stride, padding, dilation
    "c136_k3": ((1, 136, 14, 14), 3, 1, 1, 1),       # 8-lane channel vectors on AVX-512
    "c13_odd_stride2": ((2, 13, 9, 11), 3, 2, 1, 1),
    "c32_k5_dilated": ((1, 32, 12, 10), 5, 1, 2, 2),
    "c48_k3_stride2_nopad": ((1, 48, 15, 15), 3, 2, 0, 1),
}


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("name", sorted(DEPTHWISE))
def test_depthwise_matches_torch(name, threads, tmp_path):
    xs, k, s, p, d = DEPTHWISE[name]
    mod, w, b = _conv(xs, (xs[1], 1, k, k), xs[1], s, p, d)
    x = np.random.default_rng(7).standard_normal(xs).astype(np.float32)
    got = np.asarray(mlc.compile(mod, threads=threads, dump_ir=str(tmp_path))(x))
    want = F.relu(F.conv2d(torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b), stride=s,
                           padding=p, dilation=d, groups=xs[1])).numpy()
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    layout = (tmp_path / "01-layout.mlir").read_text()
    assert "linalg.depthwise_conv_2d_nhwc_hwc" in layout and "linalg.conv_2d_ngchw_gfchw" not in layout


def test_accumulating_depthwise():
    """An init that is not a fill (an argument) is transposed and accumulated into."""
    text = """
    func.func @main(%x: tensor<1x6x1x7x6xf32>, %w: tensor<6x1x1x3x3xf32>, %acc: tensor<1x6x1x5x4xf32>)
        -> tensor<1x6x1x5x4xf32> {
      %y = linalg.conv_2d_ngchw_gfchw {mlc.name = "acc", dilations = dense<1> : tensor<2xi64>,
                                       strides = dense<1> : tensor<2xi64>}
            ins(%x, %w : tensor<1x6x1x7x6xf32>, tensor<6x1x1x3x3xf32>) outs(%acc : tensor<1x6x1x5x4xf32>)
            -> tensor<1x6x1x5x4xf32>
      return %y : tensor<1x6x1x5x4xf32>
    }"""
    mod = DepthwiseToNHWC()(mlc.Module.parse(text))
    assert "linalg.conv_2d_ngchw_gfchw" not in mod.to_text()
    rng = np.random.default_rng(5)
    x, w, acc = (rng.standard_normal(s).astype(np.float32) for s in [(1, 6, 1, 7, 6), (6, 1, 1, 3, 3),
                                                                      (1, 6, 1, 5, 4)])
    got = np.asarray(mlc.compile(mod, threads=1)(x, w, acc))
    want = F.conv2d(torch.from_numpy(x.reshape(1, 6, 7, 6)), torch.from_numpy(w.reshape(6, 1, 3, 3)),
                    groups=6).numpy().reshape(1, 6, 1, 5, 4) + acc
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_depthwise_register_tile():
    assert channel_vector(AVX512, 136, 32) == 8 and channel_vector(AVX512, 272, 32) == 16
    assert channel_vector(AVX2, 13, 32) == 1
    wr, cr = depthwise_register_tile(AVX512, 28, 136, 3, 1, 1)
    assert 28 % wr == 0 and 136 % cr == 0 and cr % 8 == 0 and wr * (cr // 8) <= 16
    # wider rows load fewer input and filter vectors per FMA: the widest divisor within 16
    assert wr == 14
    assert depthwise_register_tile(AVX512, 7, 544, 3, 1, 1) == (7, 32)


def test_nchw_im2col_stem(tmp_path):
    """A 3 -> 24 channel stride-2 stem (24 is no whole number of AVX-512 vectors) stays NCHW as
    the GEMM ``W x cols``; with 16 channels it goes NHWC."""
    xs, ws = (1, 3, 64, 64), (24, 3, 3, 3)
    assert prefers_nchw_im2col(AVX512, (1, 3, 66, 66), ws, (1, 24, 32, 32), "float32")
    assert not prefers_nhwc(AVX512, (1, 3, 66, 66), ws, (1, 24, 32, 32), "float32")
    assert not prefers_nchw_im2col(AVX512, (1, 3, 66, 66), (16, 3, 3, 3), (1, 16, 32, 32), "float32")
    assert not prefers_nchw_im2col(AVX512, (2, 3, 66, 66), ws, (2, 24, 32, 32), "float32")
    assert not prefers_nchw_im2col(AVX512, (1, 3, 18, 18), ws, (1, 24, 8, 8), "float32")   # small map
    mod, w, b = _conv(xs, ws, 1, 2, 1)
    x = np.random.default_rng(3).standard_normal(xs).astype(np.float32)
    exe = mlc.compile(mod, threads=1, dump_ir=str(tmp_path))
    got = np.asarray(exe(x))
    want = F.relu(F.conv2d(torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b), stride=2,
                           padding=1)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    layout = (tmp_path / "01-layout.mlir").read_text()
    host = host_target()
    if prefers_nchw_im2col(host, (1, 3, 66, 66), ws, (1, 24, 32, 32), "float32"):
        assert "linalg.matmul" in layout and "linalg.conv_2d" not in layout and "x_nhwc" not in layout


POOLS = {
    # kind, x shape, kernel, stride, padding
    "max_k3_s2_pad": ("max", (1, 24, 33, 31), 3, 2, 1),
    "max_k2_s2_c13": ("max", (2, 13, 10, 12), 2, 2, 0),
    "avg_k3_s2_pad": ("avg", (1, 40, 15, 15), 3, 2, 1),
}


@pytest.mark.parametrize("name", sorted(POOLS))
def test_strided_pool_matches_torch(name, tmp_path):
    kind, xs, k, s, p = POOLS[name]
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", xs, "float32")
        f.output(ops.relu(ops.max_pool2d(x, k, s, p) if kind == "max" else ops.avg_pool2d(x, k, s, p)))
    x = np.random.default_rng(11).standard_normal(xs).astype(np.float32)
    got = np.asarray(mlc.compile(bb.finish(), threads=1, dump_ir=str(tmp_path))(x))
    tx = torch.from_numpy(x)
    want = F.relu(F.max_pool2d(tx, k, s, p) if kind == "max" else F.avg_pool2d(tx, k, s, p)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    layout = (tmp_path / "01-layout.mlir").read_text()
    if prefers_pool_nhwc(host_target(), (xs[0], xs[1], xs[2] + 2 * p, xs[3] + 2 * p), (k, k),
                         want.shape, "float32"):
        assert "linalg.pooling_nhwc" in layout and "linalg.pooling_nchw" not in layout


def test_prefers_pool_nhwc():
    assert prefers_pool_nhwc(AVX512, (1, 24, 114, 114), (3, 3), (1, 24, 56, 56), "float32")
    assert not prefers_pool_nhwc(AVX512, (1, 24, 58, 58), (3, 3), (1, 24, 56, 56), "float32")   # stride 1
    assert not prefers_pool_nhwc(AVX512, (1, 8, 114, 114), (3, 3), (1, 8, 56, 56), "float32")   # < 1 vector
    assert prefers_pool_nhwc(AVX2, (1, 8, 114, 114), (3, 3), (1, 8, 56, 56), "float32")
    assert not prefers_pool_nhwc(AVX512, (8, 64, 1, 4096), (1, 4), (8, 64, 1, 1024), "float32")   # 1-D window
