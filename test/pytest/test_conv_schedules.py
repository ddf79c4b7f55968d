"""Default conv2d schedules: ``layout_passes.ConvToNHWC`` (the per-op layout rewrite) and the NHWC
rule (``schedule.rules.conv.schedule_conv2d_nhwc``) compared with ``torch.nn.functional.conv2d``
for strides, dilations, 1x1, non-square and odd channel counts, bias + relu; the choice of
layout follows the target; traces replay and the exported transform script gives the same IR in
upstream mlir-opt; constant filters are folded."""

import dataclasses
import re

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir import graph, ops
from mlc_mlir.schedule.default_rules import apply_default_schedule
from mlc_mlir.schedule.rules.conv import (
    blocks_inside_rows, broadcasts_fit, filter_block_channels, nhwc_register_tile,
    register_tile_fits, rolled_window, whole_register_vectors,
)
import mlc_mlir.schedule.rules.conv as conv_rule
from mlc_mlir.schedule.rules.conv_strategy import (
    lean_direct_tile, prefers_im2col, prefers_nchw_im2col, prefers_nhwc,
)
from mlc_mlir.target import Target, host_target
from mlc_mlir.pipeline import layout_passes
from mlc_mlir.pipeline.compile import run_stages
from mlc_mlir.pipeline.options import CompileOptions
from mlc_mlir.schedule.cpu_recipes import packed_b_panel
import targets
from targets import AVX2
from mlir_opt_replay import applied_in_mlir_opt

torch = pytest.importorskip("torch")
F = torch.nn.functional

#: AVX-512 registers with the AVX2 target's caches
AVX512 = dataclasses.replace(AVX2, features=("avx512f", "avx2", "fma"), vector_bits=512, vector_registers=32)
#: Tiny caches: the small test convolutions still get threads.
SMALL = dataclasses.replace(host_target(), l1d_bytes=1 << 10, l2_bytes=8 << 10, cores=2)
#: Caches below every test convolution's filter panel (1 KiB L1d, 4 KiB L2): the input channels
#: are blocked (filter_block_channels) with AVX2's 8-channel and AVX-512's 16-channel tiles alike
#: (SMALL's 8 KiB L2 holds the panels of 8-channel tiles of a few input channels).
BLOCKED = dataclasses.replace(SMALL, l2_bytes=4 << 10)


def with_caches(target, like):
    """``target`` with the caches and cores of ``like``."""
    return dataclasses.replace(target, l1d_bytes=like.l1d_bytes, l2_bytes=like.l2_bytes, cores=like.cores)


def host_and_fixed(like):
    """The host's ``like`` (compiled and run) and the fixed AVX2 and AVX-512 targets with its
    caches (their schedules only built as IR): the schedule decisions of either kind of CPU."""
    return [like] + [with_caches(t, like) for t in (targets.AVX2, targets.AVX512)]

#: name -> (x shape, w shape, conv2d kwargs, bias + relu)
CASES = {
    "k3_pad1": ((1, 5, 12, 12), (16, 5, 3, 3), dict(padding=1), False),
    "stride2": ((1, 8, 13, 13), (8, 8, 3, 3), dict(stride=2, padding=1), False),
    "dilation2": ((2, 3, 11, 11), (16, 3, 3, 3), dict(dilation=2, padding=2), False),
    "k1x1": ((1, 24, 7, 7), (32, 24, 1, 1), dict(), False),
    "non_square": ((1, 6, 9, 20), (8, 6, 3, 5), dict(padding=(1, 2)), False),
    "odd_f_nchw": ((1, 7, 10, 10), (6, 7, 3, 3), dict(padding=1), False),
    "bias_relu": ((1, 4, 10, 16), (16, 4, 3, 3), dict(padding=1), True),
    "stride2_1x1_bias": ((1, 16, 14, 14), (24, 16, 1, 1), dict(stride=2), True),
    # a ResNet stem over a small map: 7x7 stride 2, 3 input channels, bias + relu (a chain of
    # two epilogues per register tile)
    "stem7x7_s2": ((1, 3, 40, 40), (64, 3, 7, 7), dict(stride=2, padding=3), True),
}


def build(name):
    xs, ws, kw, epi = CASES[name]
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x, w = f.arg("x", shape=xs), f.arg("w", shape=ws)
        b = f.arg("b", shape=(ws[0],)) if epi else None
        y = ops.conv2d(x, w, b, strides=kw.get("stride", 1), padding=kw.get("padding", 0),
                       dilation=kw.get("dilation", 1))
        f.output(ops.relu(y) if epi else y)
    return bb.finish()


def inputs_and_ref(name):
    xs, ws, kw, epi = CASES[name]
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(xs).astype(np.float32), rng.standard_normal(ws).astype(np.float32)]
    if epi:
        args.append(rng.standard_normal(ws[0]).astype(np.float32))
    t = [torch.from_numpy(a) for a in args]
    ref = F.conv2d(t[0], t[1], t[2] if epi else None, **kw)
    return args, (F.relu(ref) if epi else ref).numpy()


def nhwc_schedule(mod, target):
    """What ``mlc.compile`` does: the layout rewrite for ``target``, then the default rules."""
    def select(*shapes_dtype):
        return prefers_nhwc(target, *shapes_dtype)
    payload = layout_passes.ConvToNHWC(select)(mod)
    sch = mlc.Schedule(payload)
    apply_default_schedule(sch, target)
    return payload, sch


@pytest.mark.parametrize("name", list(CASES))
def test_conv_default_schedule_matches_torch(name):
    args, ref = inputs_and_ref(name)
    payload, sch = nhwc_schedule(build(name), SMALL)
    nhwc = "linalg.conv_2d_nhwc_hwcf" in str(payload)
    f, lanes = CASES[name][1][0], SMALL.vector_lanes(32)
    assert nhwc == (f % lanes == 0 or f > lanes)
    got = mlc.compile(sch.mod)(*args)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)
    replayed = mlc.Schedule.from_trace(payload, mlc.Trace.from_json(sch.trace.as_json()))
    assert str(replayed.mod) == str(sch.mod)


def test_channel_blocked_conv_fuses_its_epilogue_per_output_channel_block():
    """With input-channel blocks (BLOCKED's 1 KiB L1d and 4 KiB L2) the epilogue runs per
    output-channel block (reverse_compute_at f0) and each thread zeroes its own block
    (decompose_reduction at c0): no serial fill of the whole output, on the host and the fixed
    AVX2 and AVX-512 targets; a trace that packs the filter (several output-channel blocks:
    AVX2's 8-channel tiles of 16 channels) has the pack in its script, where the epilogue is
    fused; numerics as torch (the host's schedule, and each schedule that packs)."""
    args, ref = inputs_and_ref("bias_relu")
    for tgt in host_and_fixed(BLOCKED):
        payload, sch = nhwc_schedule(build("bias_relu"), tgt)
        blk = sch.get(sch.get_block("conv2d"))
        c_loops = [i for i, lp in enumerate(blk.loops) if lp.dim == 6]   # dims n oh ow f kh kw c
        assert len(c_loops) == 2, (tgt.vector_bits, [(lp.dim, lp.extent) for lp in blk.loops])
        rows = next(i for i, lp in enumerate(blk.loops) if lp.dim == 1 and lp.kind != "parallel")
        assert c_loops[0] < rows   # c0 above the (per-thread) rows
        kinds = [i.kind for i in sch.trace.insts]
        assert kinds.count("reverse_compute_at") == 2 and "decompose_reduction" in kinds
        text = str(sch.mod)
        assert "linalg.fill" not in text.split("scf.forall")[0].split("conv2d.x_pad")[-1]
        packs = "cache_read" in kinds
        assert packs == (tgt.vector_bits == 256), tgt.vector_bits
        assert ("transform.structured.pad" in str(sch.trace.as_transform_script())) == packs
        if tgt is BLOCKED or packs:
            np.testing.assert_allclose(mlc.compile(sch.mod)(*args), ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ["bias_relu"])
def test_compile_default_path(name):
    """``mlc.compile`` applies the layout rewrite and the NHWC rule by itself (threads 1, 2)."""
    args, ref = inputs_and_ref(name)
    for threads in (1, 2):
        np.testing.assert_allclose(mlc.compile(build(name), threads=threads)(*args), ref,
                                   rtol=1e-4, atol=1e-4)


def test_nhwc_rule_loop_nest_and_mlir_opt(tmp_path):
    payload, sch = nhwc_schedule(build("k3_pad1"), SMALL)
    blk = sch.get(sch.get_block("conv2d"))
    kinds = [(blk.dims[lp.dim].name, lp.kind, lp.extent) for lp in blk.loops]
    wr, fr = nhwc_register_tile(SMALL, 12, 16)
    # n, f0 (one block of 16 here), c0, oh (split over 2 threads), ow0, c1, kh, kw (unrolled),
    # [ow1 x f1] vectorized
    assert ("j", "parallel", 2) in kinds and kinds[-1] == ("l", "vectorized", fr)
    assert kinds[-2] == ("k", "vectorized", wr) and [lp.unroll for lp in blk.loops].count(0) == 2
    assert applied_in_mlir_opt(payload, sch, tmp_path) == str(sch.mod).strip()


def test_layout_and_tile_follow_the_target():
    # (WR, FR) by loads per FMA: 8 x 8 for stride 1 over 56 columns, 4 x 16 for stride 2
    assert nhwc_register_tile(AVX2, 56, 64) == (8, 8) and nhwc_register_tile(AVX2, 14, 256) == (7, 8)
    assert nhwc_register_tile(AVX512, 56, 64) == (8, 32)
    # the 7x7 stride-2 stem over 112 columns: 8 x 8 reuses its 21 broadcasts across the taps
    # only by spilling them (broadcasts_fit), 4 x 8 (reusing them) has 4 FMA chains; among the
    # tiles within half the registers whose width divides 112: 4 x 16
    assert not broadcasts_fit(AVX2, 8, 1, stride=2) and broadcasts_fit(AVX2, 8, 1)
    assert nhwc_register_tile(AVX2, 112, 64, kw=7, stride=2, edges=False, wide=False) == (4, 16)
    assert nhwc_register_tile(AVX2, 28, 128, stride=2, edges=False, wide=False) == (4, 16)
    # wide tiles: 12 accumulators + 2 filter vectors + 1 broadcast fit AVX2's 16 registers, 14
    # (7 x 16) or 3 x 32's 4 filter vectors do not; their window row stays rolled
    assert register_tile_fits(AVX2, 6, 2) and rolled_window(AVX2, 6, 2) and not rolled_window(AVX2, 4, 2)
    assert not register_tile_fits(AVX2, 7, 2) and not register_tile_fits(AVX2, 3, 4)
    assert not register_tile_fits(AVX2, 6, 2, wide=False)
    # with them and edge tiles: 6 x 16 (a 4-column edge) for the stem and stride 2 over 28
    # (fewer loads per FMA); the stride-1 3x3 tiles that reuse their broadcasts stay, as does
    # AVX-512's stem tile (16 accumulators reusing theirs); a prime width gets a full tile
    # and an edge instead of one column
    assert nhwc_register_tile(AVX2, 112, 64, kw=7, stride=2) == (6, 16)
    assert nhwc_register_tile(AVX2, 28, 128, stride=2) == (6, 16)
    assert nhwc_register_tile(AVX512, 112, 64, kw=7, stride=2) == (7, 32)
    assert nhwc_register_tile(AVX2, 28, 128) == (7, 8)
    assert nhwc_register_tile(AVX2, 13, 64, edges=False, wide=False) == (1, 64)
    assert nhwc_register_tile(AVX2, 13, 64) == (8, 8)
    # k = 3 or 6 vectors (vector<24xf32>, vector<48xf32>) spill their accumulators: ZFNet-512's
    # stem (96 channels over 109 columns) 1 x 48 in the measured space, 6 x 16 with an edge;
    # ShuffleNet's (24 channels over 112) 4 x 24 with any k, 8 x 8 (a wide tile of one vector,
    # 14 x 8, has no filter reuse to gain)
    assert [k for k in range(1, 9) if whole_register_vectors(k)] == [1, 2, 4, 8]
    assert nhwc_register_tile(AVX2, 109, 96, kw=7, stride=2, edges=False, wide=False, pow2=False) == (1, 48)
    assert nhwc_register_tile(AVX2, 109, 96, kw=7, stride=2) == (6, 16)
    assert nhwc_register_tile(AVX2, 112, 24, stride=2, pow2=False) == (4, 24)
    assert nhwc_register_tile(AVX2, 112, 24, stride=2) == (8, 8)
    assert nhwc_register_tile(AVX512, 112, 48, stride=2) == (10, 16)
    # a 3x3 filter panel of 8 output channels: 64 channels fit a 32 KiB L1d, 256 (73 KiB) a
    # quarter of the 512 KiB L2; 512 channels of 16 (295 KiB) are blocked to half the L1d
    assert filter_block_channels(AVX2, 9, 64, 8) == 64 and filter_block_channels(AVX2, 9, 256, 8) == 256
    assert filter_block_channels(AVX2, 9, 512, 16) == 16
    assert filter_block_channels(dataclasses.replace(AVX2, l2_bytes=256 << 10), 9, 256, 8) == 32
    assert filter_block_channels(dataclasses.replace(AVX2, l1d_bytes=48 << 10, l2_bytes=0), 9, 256, 8) == 64
    assert prefers_nhwc(AVX2, (1, 3, 8, 8), (8, 3, 3, 3), (1, 8, 6, 6), "float32")
    assert not prefers_nhwc(AVX512, (1, 3, 8, 8), (8, 3, 3, 3), (1, 8, 6, 6), "float32")
    assert not prefers_nhwc(AVX2, (1, 3, 8, 8), (8, 3, 3, 3), (1, 8, 6, 6), "int32")
    # 24 channels: more than one AVX-512 vector, no whole number of them -> NHWC, then the GEMM;
    # one image over a large map stays NCHW for the GEMM W x cols (prefers_nchw_im2col)
    assert prefers_nhwc(AVX512, (2, 3, 226, 226), (24, 3, 3, 3), (2, 24, 112, 112), "float32")
    assert not prefers_nhwc(AVX512, (1, 3, 226, 226), (24, 3, 3, 3), (1, 24, 112, 112), "float32")
    assert prefers_nchw_im2col(AVX512, (1, 3, 226, 226), (24, 3, 3, 3), (1, 24, 112, 112), "float32")
    assert prefers_im2col(AVX512, (1, 226, 226, 3), (3, 3, 3, 24), (1, 112, 112, 24), "float32")
    assert not prefers_im2col(AVX512, (1, 226, 226, 3), (3, 3, 3, 32), (1, 112, 112, 32), "float32")


#: (input width, stride, output channels, window, bias + relu) of edge-tile cases: output
#: widths 112, 7, 13 and 55, none a multiple of the 6-column tile that test_edge_tiles forces
EDGE_CASES = {
    "w112_s1": (112, 1, 16, 3, True),
    "w112_s2": (224, 2, 16, 3, True),
    "w7_s1": (7, 1, 32, 3, False),
    "w7_s2": (14, 2, 16, 3, True),
    "w13_s1": (13, 1, 16, 3, True),
    "w13_s2": (25, 2, 32, 3, False),
    "w55_s1": (55, 1, 16, 3, True),
    "w55_s2": (109, 2, 16, 3, True),
    "stem_w112": (223, 2, 64, 7, True),
}


@pytest.mark.parametrize("name", list(EDGE_CASES))
def test_edge_tiles_match_torch(name, monkeypatch):
    """Row tiles that do not divide the output width (``nhwc_register_tile`` forced to 6
    columns): the edge tile's loop iteration is peeled (``transform.loop.peel``) with the
    epilogue and the init fused in the row tile, both tiles vectorized static (with BLOCKED's
    input-channel blocks the epilogue and the init sit outside the row loop, whole along it);
    numerics as torch, on the host target (compiled) and the fixed AVX2 and AVX-512 ones
    (schedules built)."""
    iw, stride, f, k, epi = EDGE_CASES[name]
    xs, ws = (1, 3, 4, iw), (f, 3, k, k)
    kw = dict(stride=stride, padding=k // 2)
    bb = mlc.GraphBuilder()
    with bb.function("main") as fn:
        x, w = fn.arg("x", shape=xs), fn.arg("w", shape=ws)
        b = fn.arg("b", shape=(f,)) if epi else None
        y = ops.conv2d(x, w, b, strides=stride, padding=k // 2)
        fn.output(ops.relu(y) if epi else y)
    mod = bb.finish()
    rng = np.random.default_rng(2)
    args = [rng.standard_normal(s).astype(np.float32) for s in (xs, ws) + (((f,),) if epi else ())]
    t = [torch.from_numpy(a) for a in args]
    ref = F.conv2d(t[0], t[1], t[2] if epi else None, **kw)
    ref = (F.relu(ref) if epi else ref).numpy()
    ow = ref.shape[3]
    assert ow % 6
    real = conv_rule.nhwc_register_tile
    monkeypatch.setattr(conv_rule, "nhwc_register_tile", lambda *a, **k: (6, real(*a, **k)[1]))
    for tgt in host_and_fixed(SMALL) + [BLOCKED]:
        payload, sch = nhwc_schedule(mod, tgt)
        blk = sch.get(sch.get_block("conv2d"))
        rows = [lp.extent for lp in blk.loops if blk.dims[lp.dim].name == "k"]
        assert rows == [-(-ow // 6), 6], rows
        assert "transform.loop.peel" in str(sch.transform_script())
        if tgt is SMALL or tgt is BLOCKED:
            np.testing.assert_allclose(mlc.compile(sch.mod)(*args), ref, rtol=1e-4, atol=1e-4)


def test_constant_filter_is_folded(tmp_path):
    rng = np.random.default_rng(1)
    # 16 output channels fill whole vectors on AVX2 and AVX-512 (prefers_nhwc on any host)
    w = rng.standard_normal((16, 4, 3, 3)).astype(np.float32)
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(ops.conv2d(f.arg("x", shape=(1, 4, 9, 9)), w, padding=1))
    mod = bb.finish()
    with_t = layout_passes.ConvToNHWC()(mod)
    assert "conv2d.w_hwcf" in str(with_t)
    folded = graph.FoldConstant(mlc.compile)(with_t)
    text = str(folded)
    assert text.count("linalg.transpose") == 2 and "conv2d.w_hwcf.folded" in text
    x = rng.standard_normal((1, 4, 9, 9)).astype(np.float32)
    ref = F.conv2d(torch.from_numpy(x), torch.from_numpy(w), padding=1).numpy()
    exe = mlc.compile(mod, target=SMALL, threads=2, dump_ir=str(tmp_path))
    np.testing.assert_allclose(exe(x), ref, rtol=1e-4, atol=1e-4)
    # mlc.compile folds it too: no filter transpose runs per call (a 9x9 output runs as im2col +
    # GEMM, layout_passes.ConvToIm2col), on the host and the fixed AVX2 and AVX-512 targets
    assert_filter_folded((tmp_path / "03-schedule.mlir").read_text(), SMALL)
    for tgt in host_and_fixed(SMALL)[1:]:
        _, scheduled = run_stages(mod, CompileOptions(target=tgt, threads=2), until="schedule")
        assert_filter_folded(str(scheduled), tgt)


def assert_filter_folded(scheduled, target):
    """The im2col GEMM (81 x 16 x 36) of test_constant_filter_is_folded reads a folded constant:
    the packed panels of its B where ``packed_b_panel`` packs them (for a ``linalg.mmt4d``: 16
    output channels are one AVX2 panel of 2 x 8, half an AVX-512 one), a 4-D view, expand_shape, of
    the constant; else the 2-D B as a view, collapse_shape, of the folded HWCF filter; no
    transpose of the filter is left."""
    assert 'mlc.name = "conv2d.w_hwcf"}' not in scheduled and 'mlc.name = "conv2d.w_packed"}' not in scheduled
    if packed_b_panel(target, 81, 16, 36, "float32", 2):
        assert "conv2d.w_packed.folded" in scheduled and "conv2d.w_gemm" not in scheduled, target.vector_bits
        assert re.search(r'expand_shape %cst\w* \[\[0\], \[1\], \[2, 3\]\] .*{mlc.name = "conv2d.w_packed_4d"}', scheduled)
    else:
        assert "conv2d.w_hwcf.folded" in scheduled and "conv2d.w_packed" not in scheduled, target.vector_bits
        assert re.search(r'collapse_shape %\w+ \[\[0, 1, 2\], \[3\]\] {mlc.name = "conv2d.w_gemm"}', scheduled)


def test_epilogue_moves_to_nhwc_and_fuses():
    """Bias add and relu run in NHWC before the transpose back, fused into the row tiles."""
    args, ref = inputs_and_ref("bias_relu")
    payload, sch = nhwc_schedule(build("bias_relu"), host_target())
    text = str(payload)
    assert text.index('"relu"') < text.index('"conv2d.to_nchw"')
    assert [i.kind for i in sch.trace.insts].count("reverse_compute_at") == 2
    np.testing.assert_allclose(mlc.compile(sch.mod)(*args), ref, rtol=1e-4, atol=1e-4)
    replayed = mlc.Schedule.from_trace(payload, mlc.Trace.from_json(sch.trace.as_json()))
    assert str(replayed.mod) == str(sch.mod)


@pytest.mark.parametrize("stride, dilation, accumulate", [(1, 1, False), (2, 1, False), (1, 2, True)])
def test_conv_to_im2col_matches_torch(stride, dilation, accumulate):
    """layout_passes.ConvToIm2col: an im2col generic + linalg.matmul, numerically the convolution, for
    strides, dilations and an accumulating init (not a zero fill)."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((1, 11, 11, 16)).astype(np.float32)
    w = rng.standard_normal((3, 3, 16, 24)).astype(np.float32)
    oh = (11 - dilation * 2 - 1) // stride + 1
    b = rng.standard_normal((1, oh, oh, 24)).astype(np.float32)
    init = "%b" if accumulate else "%f"
    text = f"""
    func.func @main(%x: tensor<1x11x11x16xf32>, %w: tensor<3x3x16x24xf32>, %b: tensor<1x{oh}x{oh}x24xf32>) -> tensor<1x{oh}x{oh}x24xf32> {{
      %e = tensor.empty() : tensor<1x{oh}x{oh}x24xf32>
      %z = arith.constant 0.0 : f32
      %f = linalg.fill {{mlc.name = "c.init"}} ins(%z : f32) outs(%e : tensor<1x{oh}x{oh}x24xf32>) -> tensor<1x{oh}x{oh}x24xf32>
      %r = linalg.conv_2d_nhwc_hwcf {{mlc.name = "c", dilations = dense<{dilation}> : tensor<2xi64>, strides = dense<{stride}> : tensor<2xi64>}} ins(%x, %w : tensor<1x11x11x16xf32>, tensor<3x3x16x24xf32>) outs({init} : tensor<1x{oh}x{oh}x24xf32>) -> tensor<1x{oh}x{oh}x24xf32>
      return %r : tensor<1x{oh}x{oh}x24xf32>
    }}"""
    out = layout_passes.ConvToIm2col()(mlc.Module.parse(text))
    ir_text = str(out)
    assert "linalg.conv_2d" not in ir_text and "linalg.matmul" in ir_text and "c.im2col" in ir_text
    ref = F.conv2d(torch.from_numpy(x.transpose(0, 3, 1, 2)), torch.from_numpy(w.transpose(3, 2, 0, 1)),
                   stride=stride, dilation=dilation).numpy().transpose(0, 2, 3, 1)
    ref = ref + b if accumulate else ref
    for threads in (1, 2):
        np.testing.assert_allclose(mlc.compile(out, threads=threads)(x, w, b), ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("h, w, accumulate", [(9, 13, False), (28, 28, False), (5, 7, True)])
def test_pointwise_conv_to_im2col_reads_its_input_in_place(h, w, accumulate):
    """A 1x1 stride-1 convolution becomes a GEMM on its input collapsed to (N*H*W, C) (no
    im2col copy), numerically the convolution (numpy einsum), on odd sizes, 1 and 2 threads,
    with a fill and with an accumulating init; a stride-2 1x1 keeps its strided copy."""
    rng = np.random.default_rng(3)
    c, f = 19, 48
    x = rng.standard_normal((2, h, w, c)).astype(np.float32)
    k = rng.standard_normal((1, 1, c, f)).astype(np.float32)
    b = rng.standard_normal((2, h, w, f)).astype(np.float32)
    init = "%b" if accumulate else "%f"
    text = f"""
    func.func @main(%x: tensor<2x{h}x{w}x{c}xf32>, %w: tensor<1x1x{c}x{f}xf32>, %b: tensor<2x{h}x{w}x{f}xf32>) -> tensor<2x{h}x{w}x{f}xf32> {{
      %e = tensor.empty() : tensor<2x{h}x{w}x{f}xf32>
      %z = arith.constant 0.0 : f32
      %f = linalg.fill {{mlc.name = "c.init"}} ins(%z : f32) outs(%e : tensor<2x{h}x{w}x{f}xf32>) -> tensor<2x{h}x{w}x{f}xf32>
      %r = linalg.conv_2d_nhwc_hwcf {{mlc.name = "c", dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>}} ins(%x, %w : tensor<2x{h}x{w}x{c}xf32>, tensor<1x1x{c}x{f}xf32>) outs({init} : tensor<2x{h}x{w}x{f}xf32>) -> tensor<2x{h}x{w}x{f}xf32>
      return %r : tensor<2x{h}x{w}x{f}xf32>
    }}"""
    out = layout_passes.ConvToIm2col()(mlc.Module.parse(text))
    ir_text = str(out)
    assert "linalg.matmul" in ir_text and "linalg.generic" not in ir_text and "c.im2col_2d" in ir_text
    ref = np.einsum("nhwc,cf->nhwf", x, k[0, 0]) + (b if accumulate else 0)
    for threads in (1, 2):
        np.testing.assert_allclose(mlc.compile(out, threads=threads)(x, k, b), ref, rtol=1e-4, atol=1e-4)
    strided = layout_passes.ConvToIm2col()(mlc.Module.parse(
        text.replace("strides = dense<1>", "strides = dense<2>").replace(f"x{h}x{w}x{f}", f"x{(h + 1) // 2}x{(w + 1) // 2}x{f}")))
    assert "c.im2col" in str(strided) and "linalg.generic" in str(strided)


def test_pointwise_gemm_choice_follows_the_register_tiles():
    """1x1 convolutions go to the GEMM where the direct kernel's row tile (a divisor of OW) is
    shorter than the GEMM's MR: 28 columns on AVX-512 (4 < 8), not 56 (8 = 8, 16 accumulators);
    a tie goes to the GEMM where the direct tile is lean (at most FMAS_IN_FLIGHT accumulators: 4 x 16
    on AVX2, 28 and 56 columns); a 3x3 window over 28 x 28 keeps the direct kernel on AVX-512
    (7 x 32, 14 accumulators) and goes to the GEMM on AVX2 (7 x 8), not over 56 x 56."""
    assert prefers_im2col(AVX512, (1, 28, 28, 128), (1, 1, 128, 512), (1, 28, 28, 512), "float32")
    assert prefers_im2col(AVX512, (1, 56, 56, 256), (1, 1, 256, 512), (1, 28, 28, 512), "float32")
    assert not prefers_im2col(AVX512, (1, 56, 56, 64), (1, 1, 64, 256), (1, 56, 56, 256), "float32")
    assert not prefers_im2col(AVX512, (1, 30, 30, 128), (3, 3, 128, 128), (1, 28, 28, 128), "float32")
    assert not prefers_im2col(AVX512, (1, 28, 28, 128), (1, 1, 128, 512), (1, 28, 28, 512), "int32")
    assert prefers_im2col(AVX2, (1, 28, 28, 128), (1, 1, 128, 512), (1, 28, 28, 512), "float32")
    assert prefers_im2col(AVX2, (1, 56, 56, 64), (1, 1, 64, 256), (1, 56, 56, 256), "float32")
    assert prefers_im2col(AVX2, (1, 30, 30, 128), (3, 3, 128, 128), (1, 28, 28, 128), "float32")
    assert prefers_im2col(AVX2, (1, 58, 58, 128), (3, 3, 128, 128), (1, 28, 28, 128), "float32")
    assert not prefers_im2col(AVX2, (1, 58, 58, 64), (3, 3, 64, 64), (1, 56, 56, 64), "float32")
    # the 7x7 stem's 3 input channels: no GEMM
    assert not prefers_im2col(AVX2, (1, 230, 230, 3), (7, 7, 3, 64), (1, 112, 112, 64), "float32")
    assert lean_direct_tile(AVX2, (1, 30, 30, 128), (3, 3, 128, 128), (1, 28, 28, 128), "float32")
    assert not lean_direct_tile(AVX512, (1, 30, 30, 128), (3, 3, 128, 128), (1, 28, 28, 128), "float32")
    assert not lean_direct_tile(AVX2, (1, 30, 30, 128), (3, 3, 128, 128), (1, 28, 28, 128), "int32")


def test_prefers_im2col_small_output_maps_on_cpu_only():
    assert prefers_im2col(AVX2, (1, 9, 9, 512), (3, 3, 512, 512), (1, 7, 7, 512), "float32")
    assert prefers_im2col(AVX2, (1, 16, 16, 256), (3, 3, 256, 256), (1, 14, 14, 256), "float32")
    assert not prefers_im2col(AVX2, (1, 58, 58, 64), (3, 3, 64, 64), (1, 56, 56, 64), "float32")
    assert not prefers_im2col(AVX2, (1, 9, 9, 8), (3, 3, 8, 8), (1, 7, 7, 8), "int32")
    gpu = Target("cuda", cpu="generic", arch="sm_90")
    assert not prefers_im2col(gpu, (1, 9, 9, 512), (3, 3, 512, 512), (1, 7, 7, 512), "float32")


#: odd-sized NHWC convolutions with even output rows (both thread axes apply on SMALL):
#: (x shape, w shape, conv2d kwargs); outputs 14 x 9 (stride 1) and 10 x 8 (stride 2)
AXIS_CASES = {
    "s1_14x9": ((1, 5, 14, 9), (32, 5, 3, 3), dict(padding=1)),
    "s2_10x8": ((1, 3, 20, 15), (64, 3, 3, 3), dict(stride=2, padding=1)),
}


@pytest.mark.parametrize("name", list(AXIS_CASES))
def test_nhwc_thread_axis_samples_match_torch(name):
    """The NHWC rule's thread decomposition (``_parallel_axis``): samples split the
    output-channel blocks or the output rows (hoisted above the blocks) over the threads; both
    compile and match torch (bias + relu fused) at 1 and 2 threads."""
    from mlc_mlir.tune.space_rules import default_space, generate
    xs, ws, kw = AXIS_CASES[name]
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x, w, b = f.arg("x", shape=xs), f.arg("w", shape=ws), f.arg("b", shape=(ws[0],))
        f.output(ops.relu(ops.conv2d(x, w, b, strides=kw.get("stride", 1), padding=kw["padding"])))
    payload = layout_passes.ConvToNHWC(lambda *a: prefers_nhwc(SMALL, *a))(bb.finish())
    rng = np.random.default_rng(1)
    args = [rng.standard_normal(s).astype(np.float32) for s in (xs, ws, (ws[0],))]
    ref = F.relu(F.conv2d(*(torch.from_numpy(a) for a in args), **kw)).numpy()
    axes = {}
    for seed in range(24):
        sch = generate(default_space(SMALL), payload, seed)
        blk = sch.get(sch.get_block("conv2d"))
        par = [lp for lp in blk.loops if lp.kind == "parallel" and lp.extent > 1]
        if len(par) != 1 or blk.dims[par[0].dim].name in axes:
            continue
        # the parallel loop is outermost (after n) whichever axis it splits
        assert blk.loops.index(par[0]) == 1
        axes[blk.dims[par[0].dim].name] = sch
    assert len(axes) == 2, f"both thread axes sampled, got {sorted(axes)}"
    for sch in axes.values():
        for threads in (1, 2):
            got = mlc.compile(sch.mod, threads=threads)(*args)
            np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


def test_activation_read_by_two_im2col_convolutions_matches_torch():
    """A relu read by two strided 1x1 convolutions that become im2col + GEMM (ResNet-50's
    downsampling block): the im2col copies read no row value (nothing upstream reduces),
    so FuseOps keeps each in the group of its own GEMM (joined into one group with
    the relu, the first GEMM sat between its members and the outlined call did not verify)."""
    rng = np.random.default_rng(5)
    w0, w1, w2 = (rng.standard_normal((f, 32, 1, 1)).astype(np.float32) * 0.2 for f in (32, 64, 32))
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", shape=(1, 32, 14, 14))
        y = ops.relu(ops.conv2d(x, w0))
        f.output(ops.conv2d(y, w1, strides=(2, 2)), ops.conv2d(y, w2, strides=(2, 2)))
    x = rng.standard_normal((1, 32, 14, 14)).astype(np.float32)
    got = mlc.compile(bb.finish(), threads=1)(x)
    t = F.relu(F.conv2d(torch.from_numpy(x), torch.from_numpy(w0)))
    for g, w in zip(got, (w1, w2)):
        np.testing.assert_allclose(g, F.conv2d(t, torch.from_numpy(w), stride=2).numpy(), rtol=1e-4, atol=1e-4)


def test_bottleneck_pointwise_gemms_match_torch():
    """A ResNet bottleneck at 28 x 28 with constant filters (1x1 -> 3x3 -> 1x1 + residual add,
    relu; a stride-2 1x1 projection): the 1x1 convolutions take the GEMM path where
    :func:`prefers_im2col` picks it for the host (packed weights, epilogues after the GEMM),
    numerically the convolutions, on 1 and 2 threads."""
    rng = np.random.default_rng(4)
    w1 = rng.standard_normal((32, 64, 1, 1)).astype(np.float32) * 0.1
    w2 = rng.standard_normal((32, 32, 3, 3)).astype(np.float32) * 0.1
    w3 = rng.standard_normal((64, 32, 1, 1)).astype(np.float32) * 0.1
    wp = rng.standard_normal((64, 64, 1, 1)).astype(np.float32) * 0.1
    b1, b3 = (rng.standard_normal(n).astype(np.float32) for n in (32, 64))
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", shape=(1, 64, 56, 56))
        p = ops.conv2d(x, wp, strides=2)
        y = ops.relu(ops.conv2d(p, w1, b1))
        y = ops.relu(ops.conv2d(y, w2, padding=1))
        f.output(ops.relu(ops.add(ops.conv2d(y, w3, b3), p)))
    mod = bb.finish()
    xn = rng.standard_normal((1, 64, 56, 56)).astype(np.float32)
    t = {k: torch.from_numpy(v) for k, v in dict(x=xn, w1=w1, w2=w2, w3=w3, wp=wp, b1=b1, b3=b3).items()}
    p = F.conv2d(t["x"], t["wp"], stride=2)
    y = F.relu(F.conv2d(F.relu(F.conv2d(p, t["w1"], t["b1"])), t["w2"], padding=1))
    ref = F.relu(F.conv2d(y, t["w3"], t["b3"]) + p).numpy()
    for threads in (1, 2):
        np.testing.assert_allclose(mlc.compile(mod, threads=threads)(xn), ref, rtol=1e-4, atol=1e-4)


#: L1d too small for any filter panel, L2 large enough for every panel below: the input channels
#: stay whole (filter_block_channels' L2 branch)
L2_PANELS = dataclasses.replace(AVX2, l1d_bytes=1 << 10, l2_bytes=1 << 20, cores=2)

#: NHWC convolutions whose outputs go back to NCHW with widths the lanes do not divide:
#: (x shape, w shape, conv2d kwargs, bias + relu)
UNBLOCKED_CASES = {
    "odd_c_20x20_bias_relu": ((1, 7, 20, 20), (16, 7, 3, 3), dict(padding=1), True),
    "stride2_odd_c_12x12": ((1, 9, 23, 23), (32, 9, 3, 3), dict(stride=2, padding=1), True),
    "c16_28x28": ((1, 16, 28, 28), (32, 16, 3, 3), dict(padding=1), False),
    "pad2_odd_w": ((1, 5, 9, 13), (16, 5, 3, 3), dict(padding=2), False),
}


@pytest.mark.parametrize("name", list(UNBLOCKED_CASES))
@pytest.mark.parametrize("target", ["l2_panels", "blocked"])
def test_channel_blocking_follows_the_caches_and_matches_torch(name, target):
    """The NHWC rule with its input channels whole (a filter panel over the L1d but within a
    quarter of the L2: epilogue and init per row tile) and blocked (BLOCKED's 4 KiB L2), odd input
    channel counts, stride 2, padding 1 and 2, bias + relu, at 1 and 2 threads, against torch;
    the transposes back to NCHW (widths 20, 12, 28, 11 that 16 lanes do not divide) are
    vectorized tiles where a power of two of at least a quarter of the lanes divides the width.
    The loop nests are checked on the host and the fixed AVX2 and AVX-512 targets with the same
    caches, the numerics on the host."""
    xs, ws, kw, epi = UNBLOCKED_CASES[name]
    host = L2_PANELS if target == "l2_panels" else BLOCKED
    rng = np.random.default_rng(3)
    args = [rng.standard_normal(s).astype(np.float32) for s in (xs, ws) + (((ws[0],),) if epi else ())]
    t = [torch.from_numpy(a) for a in args]
    ref = F.conv2d(t[0], t[1], t[2] if epi else None, **kw)
    ref = (F.relu(ref) if epi else ref).numpy()
    for tgt in host_and_fixed(host):
        bb = mlc.GraphBuilder()
        with bb.function("main") as f:
            x, w = f.arg("x", shape=xs), f.arg("w", shape=ws)
            y = ops.conv2d(x, w, f.arg("b", shape=(ws[0],)) if epi else None,
                           strides=kw.get("stride", 1), padding=kw["padding"])
            f.output(ops.relu(y) if epi else y)
        payload, sch = nhwc_schedule(bb.finish(), tgt)
        assert "linalg.conv_2d_nhwc_hwcf" in str(payload)
        blk = sch.get(sch.get_block("conv2d"))
        c_loops = [lp.extent for lp in blk.loops if lp.dim == 6]   # dims n oh ow f kh kw c
        assert len(c_loops) == (1 if target == "l2_panels" else 2), (tgt.vector_bits, c_loops)
        lanes, ow = tgt.vector_lanes(32), ref.shape[-1]
        tile = next((v for v in (lanes, lanes // 2, lanes // 4) if v >= 2 and ow % v == 0), None)
        back = sch.get(sch.get_block("conv2d.to_nchw"))
        vec = [lp.extent for lp in back.loops if lp.kind == "vectorized"]
        assert (vec[-1:] or [None]) == [tile], (tgt.vector_bits, vec, tile)
        if tgt is host:
            for threads in (1, 2):
                np.testing.assert_allclose(mlc.compile(sch.mod, threads=threads)(*args), ref,
                                           rtol=1e-4, atol=1e-4)


#: An L2 smaller than one output-channel block's pass over a 24x24x32 map, larger than the
#: whole 1x1 filter plus one output row: blocks_inside_rows holds
ROWS_OUTER = dataclasses.replace(AVX2, l1d_bytes=48 << 10, l2_bytes=64 << 10, cores=2)


def test_blocks_inside_rows_follows_the_l2():
    """ResNet-50's 56x56 1x1 64 -> 256 convolution (32-channel blocks): the map and a block's
    output stripe (1.2 MiB) exceed a 1 MiB L2, not a 2 MiB one; a filter over the L2 keeps the
    blocks outside; one block (F = FR) has nothing to reorder."""
    ext = (1, 56, 56, 256, 1, 1, 64)
    assert blocks_inside_rows(dataclasses.replace(AVX512, l2_bytes=1 << 20), ext, 1, 1, 32)
    assert not blocks_inside_rows(dataclasses.replace(AVX512, l2_bytes=2 << 20), ext, 1, 1, 32)
    # 64-channel blocks: the map and the output stripe (1.6 MiB) fit a 2 MiB L2; with the
    # residual an epilogue adds (its stripe read beside the output's, 2.4 MiB) they do not
    two_mib = dataclasses.replace(AVX512, l2_bytes=2 << 20)
    assert not blocks_inside_rows(two_mib, ext, 1, 1, 64)
    assert blocks_inside_rows(two_mib, ext, 1, 1, 64, epilogue_reads=1)
    big = (1, 56, 56, 512, 3, 3, 512)   # a 9 MiB filter
    assert not blocks_inside_rows(dataclasses.replace(AVX512, l2_bytes=1 << 20), big, 1, 1, 32)
    assert not blocks_inside_rows(dataclasses.replace(AVX512, l2_bytes=1 << 20), ext[:3] + (32,) + ext[4:], 1, 1, 32)


def residual_pointwise_conv():
    """A 1x1 convolution 32 -> 64 over 24x24 with bias, residual add and relu: the module, its
    inputs and torch's result."""
    xs, ws, rs = (1, 32, 24, 24), (64, 32, 1, 1), (1, 64, 24, 24)
    rng = np.random.default_rng(5)
    args = [rng.standard_normal(s).astype(np.float32) for s in (xs, ws, (64,), rs)]
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        y = ops.conv2d(f.arg("x", shape=xs), f.arg("w", shape=ws), f.arg("b", shape=(64,)))
        f.output(ops.relu(ops.add(y, f.arg("r", shape=rs))))
    t = [torch.from_numpy(a) for a in args]
    return bb.finish(), args, F.relu(F.conv2d(t[0], t[1], t[2]) + t[3]).numpy()


@pytest.mark.parametrize("target", ["rows_outer", "l2_panels"])
def test_blocks_inside_rows_matches_torch(target):
    """:func:`residual_pointwise_conv`: with ROWS_OUTER the output rows run outside the
    output-channel blocks (``n oh f0``), with L2_PANELS's 1 MiB L2 the blocks stay outside
    (``n f0 oh``); both at 1 and 2 threads against torch."""
    tgt = ROWS_OUTER if target == "rows_outer" else L2_PANELS
    mod, args, ref = residual_pointwise_conv()
    payload, sch = nhwc_schedule(mod, tgt)
    blk = sch.get(sch.get_block("conv2d"))
    first = {d: next(i for i, lp in enumerate(blk.loops) if lp.dim == d) for d in (1, 3)}   # oh, f
    assert (first[1] < first[3]) == (target == "rows_outer"), [(lp.dim, lp.extent) for lp in blk.loops]
    for threads in (1, 2):
        np.testing.assert_allclose(mlc.compile(sch.mod, threads=threads)(*args), ref, rtol=1e-4, atol=1e-4)


def test_packed_filter_panel_and_tile_buffer_with_fused_epilogues(tmp_path):
    """:func:`residual_pointwise_conv` with L2_PANELS (output-channel blocks outside the rows,
    the bias fused per row tile, the init decomposed into the tile): the trace's ``cache_read``
    of the filter at ``f0`` is applied (a packed ``1 x 1 x C x FR`` panel, moved out of the
    epilogue's loops by loop-invariant code motion), and the tile accumulates in a buffer of
    its register tile, not in a slice of an output-block-sized one; upstream mlir-opt applies
    the exported script to the same IR; torch's result at 1 and 2 threads."""
    mod, args, ref = residual_pointwise_conv()
    payload, sch = nhwc_schedule(mod, L2_PANELS)
    blk = sch.get(sch.get_block("conv2d"))
    wr, fr = (lp.extent for lp in blk.loops if lp.kind == "vectorized")
    assert "cache_read" in [i.kind for i in sch.trace.insts]
    script = str(sch.trace.as_transform_script())
    assert "transform.structured.pad" in script and "transform.apply_licm" in script
    empties = set(re.findall(r"tensor.empty\(\) : tensor<([0-9x]+)xf32>", str(sch.mod)))
    assert f"1x1x32x{fr}" in empties and f"1x1x{wr}x{fr}" in empties, empties
    assert f"1x24x24x{fr}" not in empties, empties
    assert applied_in_mlir_opt(payload, sch, tmp_path) == str(sch.mod).strip()
    for threads in (1, 2):
        np.testing.assert_allclose(mlc.compile(sch.mod, threads=threads)(*args), ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("threads", [1, 2])
def test_ragged_output_channels_run_as_im2col_gemm(threads, tmp_path):
    """20 output channels (no whole number of AVX2 or AVX-512 vectors, more than one) over a
    17x17 map: NHWC, then im2col + GEMM (prefers_nhwc, prefers_im2col); numerics as torch."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((1, 3, 34, 34)).astype(np.float32)
    w = rng.standard_normal((20, 3, 3, 3)).astype(np.float32)
    b = rng.standard_normal(20).astype(np.float32)
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(ops.relu(ops.conv2d(f.arg("x", shape=(1, 3, 34, 34)), w, b, strides=2, padding=1)))
    got = mlc.compile(bb.finish(), threads=threads, dump_ir=str(tmp_path))(x)
    ref = F.relu(F.conv2d(torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b), stride=2, padding=1))
    np.testing.assert_allclose(got, ref.numpy(), rtol=1e-4, atol=1e-4)
    layout = (tmp_path / "01-layout.mlir").read_text()
    assert "linalg.matmul" in layout and "linalg.conv_2d" not in layout
