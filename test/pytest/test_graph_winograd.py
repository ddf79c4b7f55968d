"""``layout_passes.ConvToWinograd`` (Winograd F(m x m, 3 x 3)) checked against PyTorch's direct
convolution: the transform matrices compute a 1-D correlation exactly, rewritten convolutions
(m = 2 and 4, exact and extended tile grids, batch 2, bias + relu and residual epilogues folded
into the output transform, a run-time filter) match ``torch.nn.functional.conv2d``; the default
rule picks the tile from the shapes; ``mlc.compile`` folds constant filters' transforms and
writes the output transform into the next convolution's padded buffer (no ``memrefCopy``); its
default F(2x2, 3x3) keeps each output's dependence on its 3x3 window (NaN, inf, 1e30 inputs)."""

import os

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir.errors import PipelineError
from mlc_mlir import ops
from mlc_mlir.pipeline.layout_passes.conv_winograd import WINOGRAD_MATRICES, winograd_applies
from mlc_mlir.pipeline.layout import layout_rewrites
from mlc_mlir.pipeline.options import CompileOptions
from mlc_mlir.ir.module import CONV_DIRECT
from mlc_mlir.schedule.rules.conv_strategy import WINDOW_LOCAL_TILES, conv_algorithms, winograd_tile
from mlc_mlir.target import Target, host_target
from mlc_mlir.pipeline import layout_passes
from targets import AVX2, AVX512

torch = pytest.importorskip("torch")
F = torch.nn.functional


@pytest.mark.parametrize("m", [2, 4])
def test_matrices_compute_a_correlation(m):
    """``A^T [(G g) . (B^T d)]`` is the valid correlation of ``d`` (m + 2) with ``g`` (3)."""
    bt, g, at = WINOGRAD_MATRICES[m]
    rng = np.random.default_rng(m)
    for _ in range(5):
        d, k = rng.standard_normal(m + 2), rng.standard_normal(3)
        want = np.correlate(d, k, mode="valid")
        np.testing.assert_allclose(at @ ((g @ k) * (bt @ d)), want, rtol=1e-12, atol=1e-12)


def _conv_module(xs, ws, bias, relu, residual=False, const_w=True, seed=0):
    """``conv(x) [+ b] [relu]``; with ``residual``, ``relu(conv(y0) + b + y0)`` where
    ``y0 = relu(conv0(x))`` (a ResNet block: the skip input is NHWC like the conv after the
    layout rewrite). Returns ``(module, args, float64 reference)``."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(xs).astype(np.float32)
    w = (rng.standard_normal(ws) / np.sqrt(9 * ws[1])).astype(np.float32)
    w0 = (rng.standard_normal((ws[1], ws[1], 3, 3)) / np.sqrt(9 * ws[1])).astype(np.float32)
    b = rng.standard_normal(ws[0]).astype(np.float32) if bias else None
    t = {k: torch.from_numpy(v).double() for k, v in dict(x=x, w=w, w0=w0).items()}
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        xa = f.arg("x", shape=xs)
        src, ref = xa, t["x"]
        if residual:
            src = ops.relu(ops.conv2d(xa, f.param("w0", w0), strides=1, padding=1))
            ref = F.relu(F.conv2d(t["x"], t["w0"], padding=1))
        wa = f.param("w", w) if const_w else f.arg("w", shape=ws)
        y = ops.conv2d(src, wa, f.param("b", b) if bias else None, strides=1, padding=1)
        out = F.conv2d(ref, t["w"], None if b is None else torch.from_numpy(b).double(), padding=1)
        if residual:
            y, out = ops.add(y, src), out + ref
        f.output(ops.relu(y) if relu else y)
    out = (F.relu(out) if relu else out).numpy()
    return bb.finish().bind_params(), ([x] if const_w else [x, w]), out


CASES = {   # name -> (x shape, w shape, bias, relu, residual, m)
    "m4_exact": ((1, 8, 16, 16), (16, 8, 3, 3), False, False, False, 4),
    "m4_extended": ((1, 16, 10, 14), (16, 16, 3, 3), True, True, False, 4),
    "m2_batch2": ((2, 5, 12, 8), (32, 5, 3, 3), True, False, False, 2),
    "m2_residual": ((1, 16, 8, 8), (16, 16, 3, 3), True, True, True, 2),
    "m4_residual": ((1, 16, 8, 8), (16, 16, 3, 3), True, True, True, 4),
    "m2_49rows": ((1, 16, 14, 14), (32, 16, 3, 3), True, True, False, 2),   # 49 GEMM rows, padded on AVX2
}


def _winograd(mod, m):
    return layout_passes.ConvToWinograd(lambda *shapes_dtype: m)(layout_passes.PropagateTransposes()(layout_passes.ConvToNHWC()(mod)))


@pytest.mark.parametrize("name", list(CASES))
def test_rewritten_conv_matches_torch(name):
    xs, ws, bias, relu, residual, m = CASES[name]
    mod, args, ref = _conv_module(xs, ws, bias, relu, residual)
    out = _winograd(mod, m)
    text = str(out)
    assert "linalg.conv_2d" not in text and "linalg.batch_matmul" in text
    assert text.count("winograd_output\"") == (2 if residual else 1)
    if bias or relu:   # the epilogue chain runs in the output transform
        assert "bias_add" not in text and "relu\"" not in text.split("winograd_output\"")[-1]
    got = mlc.compile(out)(*args)
    err = np.abs(got - ref).max() / np.abs(ref).max()
    assert err < (2e-5 if m == 4 else 2e-6), err


def test_runtime_filter_is_transformed_by_a_generic():
    """A filter that is a function argument is transformed in the compiled function."""
    mod, args, ref = _conv_module((1, 8, 8, 8), (16, 8, 3, 3), True, True, const_w=False)
    out = _winograd(mod, 4)
    assert "winograd_filter\"" in str(out)
    got = mlc.compile(out)(*args)
    assert np.abs(got - ref).max() / np.abs(ref).max() < 2e-5


def test_strided_and_dilated_convs_are_left_alone():
    assert winograd_applies((1, 10, 10, 8), (3, 3, 8, 8), (1, 8, 8, 8), [1, 1], [1, 1])
    assert not winograd_applies((1, 17, 17, 8), (3, 3, 8, 8), (1, 8, 8, 8), [2, 2], [1, 1])
    assert not winograd_applies((1, 12, 12, 8), (3, 3, 8, 8), (1, 8, 8, 8), [1, 1], [2, 2])
    assert not winograd_applies((1, 10, 10, 8), (5, 5, 8, 8), (1, 6, 6, 8), [1, 1], [1, 1])
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", shape=(1, 8, 17, 17))
        f.output(ops.conv2d(x, f.arg("w", shape=(16, 8, 3, 3)), strides=2, padding=1))
    out = _winograd(bb.finish(), 4)
    assert "linalg.conv_2d_nhwc_hwcf" in str(out) and "batch_matmul" not in str(out)


@pytest.mark.parametrize("target", [AVX2, AVX512], ids=["avx2", "avx512"])
def test_tile_choice_follows_the_saving(target):
    """ResNet-18's stride-1 3x3 layers: F(4x4) down to 14 x 14 maps (16 GEMM rows once
    extended), none at 7 x 7 (F(2x2) saves only 1.7x there); a GEMM needs two register tiles
    of rows. The default compile (``winograd=None``) takes F(2x2) on the same layers, True
    F(4x4), False none (direct: 56 x 56 is above the im2col bound), on AVX2 and AVX-512."""
    def tile(hw, c, n=1):
        return winograd_tile(target, (n, hw + 2, hw + 2, c), (3, 3, c, c), (n, hw, hw, c), "float32")
    assert [tile(56, 64), tile(28, 128), tile(14, 256), tile(7, 512)] == [4, 4, 4, 0]
    # 12 x 12: F(4x4) has 9 rows, two register tiles of AVX2's MR = 4, not of AVX-512's MR = 8
    assert tile(12, 16) == (4 if target is AVX2 else 2) and tile(4, 16) == 0
    # the default compile's window-local F(2x2): the same layers (2.25x fewer multiply-adds)
    local = [winograd_tile(target, (1, hw + 2, hw + 2, c), (3, 3, c, c), (1, hw, hw, c), "float32",
                           WINDOW_LOCAL_TILES) for hw, c in ((56, 64), (28, 128), (14, 256), (7, 512), (12, 16))]
    assert local == [2, 2, 2, 0, 2]
    shapes = ((1, 58, 58, 64), (3, 3, 64, 64), (1, 56, 56, 64), "float32")
    assert [conv_algorithms(target, *shapes, True, w)[1] for w in (None, True, False)] == [2, 4, CONV_DIRECT]
    assert winograd_tile(target, (1, 58, 58, 64), (3, 3, 64, 64), (1, 56, 56, 64), "float16") == 0
    assert winograd_tile(Target.cuda(), (1, 58, 58, 64), (3, 3, 64, 64), (1, 56, 56, 64), "float32") == 0


def test_compile_folds_constant_filter_transforms():
    """``mlc.compile``'s layout rewrites: the constant filter's transform is a folded constant
    (computed in float64), no filter transform is left to run."""
    mod, args, ref = _conv_module((1, 64, 56, 56), (64, 64, 3, 3), True, True)
    out = layout_rewrites(mod, AVX512, ["main"], CompileOptions(AVX512, winograd=True))
    text = str(out)
    assert "winograd_filter.folded" in text and "winograd_filter\"" not in text
    assert "linalg.batch_matmul" in text


@pytest.mark.parametrize("wino", [True, None])
def test_output_is_written_into_the_next_padded_input(tmp_path, wino):
    """Two Winograd convolutions in a row (``winograd=True``: F(4x4); the default: F(2x2)):
    the first's output transform writes into the second's zero-padded input through an expanded
    slice (``prepare_passes.WriteReshapedIntoSlices``), so no ``memrefCopy`` is left; the input
    transform unit computes a ``4x4xTxTxC`` (or ``6x6x...``) tensor that the batch matmul reads
    as ``16x(T*T)xC``: the reshape moves into its callers (``prepare_passes.SinkReturnedReshapes``),
    so the unit writes its result buffer, the out-param, and no ``memcpy`` of it is left (two
    were, without the pass); numerics match PyTorch."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 64, 16, 16)).astype(np.float32)
    w1, w2 = [(rng.standard_normal((64, 64, 3, 3)) / 24).astype(np.float32) for _ in range(2)]
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        y = ops.relu(ops.conv2d(f.arg("x", shape=x.shape), f.param("w1", w1), strides=1, padding=1))
        f.output(ops.relu(ops.conv2d(y, f.param("w2", w2), strides=1, padding=1)))
    mod = bb.finish().bind_params()
    if winograd_tile(host_target(), (1, 18, 18, 64), (3, 3, 64, 64), (1, 16, 16, 64), "float32",
                     (4, 2) if wino else WINDOW_LOCAL_TILES) == 0:
        pytest.skip("the default rule keeps these convolutions direct on this target")
    exe = mlc.compile(mod, winograd=wino, dump_ir=str(tmp_path))
    assert open(os.path.join(tmp_path, "03-schedule.mlir")).read().count("winograd_output_4d") == 2
    ll = open(os.path.join(tmp_path, "09-llvm.ll")).read()
    assert "memrefCopy" not in ll and "llvm.memcpy" not in ll
    t = torch.from_numpy
    ref = F.relu(F.conv2d(F.relu(F.conv2d(t(x), t(w1), padding=1)), t(w2), padding=1)).numpy()
    assert np.abs(exe(x) - ref).max() / np.abs(ref).max() < 2e-5


def test_bad_tile_from_select_is_an_error():
    mod, _, _ = _conv_module((1, 8, 8, 8), (16, 8, 3, 3), False, False)
    with pytest.raises(PipelineError, match=r"select returned m=3 for conv2d; expected 0, 2 or 4"):
        layout_passes.ConvToWinograd(lambda *shapes_dtype: 3)(layout_passes.ConvToNHWC()(mod))


NHWC_CONV = """
#id = affine_map<(n, h, w, f) -> (n, h, w, f)>
func.func @main(%x: tensor<1x10x10x16xf32>, %w: tensor<3x3x16x16xf32>)
    -> (tensor<1x8x8x16xf32>, tensor<1x8x8x16xf32>) {
  %c = arith.constant 0.5 : f32
  %e = tensor.empty() : tensor<1x8x8x16xf32>
  %init = linalg.fill {mlc.name = "conv.init"} ins(%c : f32) outs(%e : tensor<1x8x8x16xf32>) -> tensor<1x8x8x16xf32>
  %y = linalg.conv_2d_nhwc_hwcf {mlc.name = "conv", dilations = dense<1> : tensor<2xi64>,
         strides = dense<1> : tensor<2xi64>}
       ins(%x, %w : tensor<1x10x10x16xf32>, tensor<3x3x16x16xf32>) outs(%init : tensor<1x8x8x16xf32>) -> tensor<1x8x8x16xf32>
  %e2 = tensor.empty() : tensor<1x8x8x16xf32>
  %r = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
       ins(%y : tensor<1x8x8x16xf32>) outs(%e2 : tensor<1x8x8x16xf32>) attrs = {mlc.name = "relu"} {
  ^bb0(%a: f32, %o: f32):
    %z = arith.constant 0.0 : f32
    %m = arith.maximumf %a, %z : f32
    linalg.yield %m : f32
  } -> tensor<1x8x8x16xf32>
  return %r, %y : tensor<1x8x8x16xf32>, tensor<1x8x8x16xf32>
}
"""


@pytest.mark.parametrize("m", [2, 4])
def test_nonzero_init_and_shared_output(m):
    """An output initialized to 0.5 starts the transformed sums at 0.5; a convolution result
    with two users (a relu and the function result) keeps the relu as its own op."""
    out = layout_passes.ConvToWinograd(lambda *shapes_dtype: m)(mlc.Module.parse(NHWC_CONV))
    text = str(out)
    assert "linalg.conv_2d" not in text and "mlc.name = \"relu\"" in text
    rng = np.random.default_rng(7)
    x = rng.standard_normal((1, 10, 10, 16)).astype(np.float32)
    w = rng.standard_normal((3, 3, 16, 16)).astype(np.float32) / 12
    y = 0.5 + F.conv2d(torch.from_numpy(x).permute(0, 3, 1, 2).double(),
                       torch.from_numpy(w).permute(3, 2, 0, 1).double()).permute(0, 2, 3, 1).numpy()
    relu, got = mlc.compile(out)(x, w)
    np.testing.assert_allclose(got, y, rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(relu, np.maximum(y, 0), rtol=2e-5, atol=2e-5)


def test_default_takes_window_local_winograd_only(tmp_path):
    """``mlc.compile``'s default rewrites a 28 x 28 3x3 convolution into F(2x2, 3x3) (16
    transformed points; F(4x4), 36 points, is opt-in), whose error against float64 is below
    the direct loops' (``winograd=False``); a value other than a bool or None is refused."""
    mod, args, ref = _conv_module((1, 64, 28, 28), (64, 64, 3, 3), True, True)
    errs = {}
    for wino in (None, False, True):
        exe = mlc.compile(mod, winograd=wino, dump_ir=str(tmp_path / str(wino)))
        laid = (tmp_path / str(wino) / "01-layout.mlir").read_text()
        points = {None: "tensor<16x64x64xf32>", False: None, True: "tensor<36x64x64xf32>"}[wino]
        assert ("winograd" in laid) == (points is not None) and (points is None or points in laid)
        errs[wino] = np.abs(exe(*args) - ref).max() / np.abs(ref).max()
    assert errs[None] <= errs[False] < 5e-6 and errs[True] < 2e-5, errs
    with pytest.raises(PipelineError, match="winograd='no'; expected a bool or None"):
        mlc.compile(mod, winograd="no")


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf, 1e30])
@pytest.mark.parametrize("wino", [None, False])
def test_default_compile_keeps_a_convolutions_non_finite_and_extreme_semantics(value, wino):
    """One NaN / inf / 1e30 input pixel of a 3x3 conv (1, 32, 28, 28) -> 64 under the default
    options (F(2x2, 3x3)) and with ``winograd=False`` (direct): non-finite outputs appear exactly
    where PyTorch has them (the 3x3 windows that read the pixel: 9 x 64 outputs), NaN wherever
    PyTorch has NaN (F(2x2) may turn PyTorch's +-inf into NaN: its transforms add the pixel
    with both signs; the direct loops keep the sign), and the outputs that do not read it keep
    a convolution's rounding error (F(4x4), opt-in, would spread NaN to whole tiles and add
    ~1e23 to them)."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((1, 32, 28, 28)).astype(np.float32)
    w = rng.standard_normal((64, 32, 3, 3)).astype(np.float32)
    x[0, 5, 10, 10] = value
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(ops.conv2d(f.arg("x", shape=x.shape), w, padding=1))
    got = mlc.compile(bb.finish(), winograd=wino)(x)
    t = torch.from_numpy
    ref = F.conv2d(t(x), t(w), padding=1).numpy()
    assert (np.isfinite(got) == np.isfinite(ref)).all()
    assert np.isnan(got)[np.isnan(ref)].all()
    if wino is False:
        for pred in (np.isnan, np.isposinf, np.isneginf):
            assert (pred(got) == pred(ref)).all(), pred.__name__
    assert np.isfinite(ref).sum() < ref.size or value == 1e30
    far = np.ones(ref.shape, bool)
    far[:, :, 9:12, 9:12] = False            # the outputs whose window reads the pixel
    assert np.abs(got[far] - ref[far]).max() < 1e-3

