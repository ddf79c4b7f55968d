"""Compile-time packing of constant matmul weights (``layout_passes.PackMatmulWeights`` -> ``linalg.mmt4d``)
and the mmt4d default rule: which matmuls are packed, numerics vs numpy through ``mlc.compile``
(padded M, 1 and 2 threads), the trace of the mmt4d recipe replays, and the packed weight stays
one folded constant."""

import dataclasses
import re

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir import ops
from mlc_mlir.errors import ScheduleError
from mlc_mlir.graph import fold_constant
from mlc_mlir.pipeline.layout import layout_rewrites
from mlc_mlir.pipeline.options import CompileOptions
from mlc_mlir.schedule.cpu_recipes import goto_padding, packed_b_panel, register_rows, schedule_mmt4d_goto
from mlc_mlir.schedule.default_rules import apply_default_schedule, classify
from mlc_mlir.schedule.rules.matmul import padded_row_tiles
from mlc_mlir.tune.space_rules import default_space, generate, sampled_decisions
from mlc_mlir.schedule.loop_nest import analyze_module
from mlc_mlir.pipeline import layout_passes
from targets import AVX2, AVX512

TOL = dict(rtol=1e-4, atol=1e-4)


def matmul_module(m, k, n, epilogue=None, weight_arg=False, seed=0):
    """(module, x, w) of ``x (m, k) @ w (k, n)``; ``w`` a constant unless ``weight_arg``."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((k, n)).astype(np.float32)
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        a = f.arg("x", shape=(m, k))
        b = f.arg("w", shape=(k, n)) if weight_arg else w
        y = ops.matmul(a, b)
        f.output(epilogue(y) if epilogue else y)
    return bb.finish(), x, w


def pack(mod, nr=16):
    return layout_passes.PackMatmulWeights(lambda m, n, k, dtype: nr)(mod)


def test_packs_a_constant_weight_into_panels():
    mod, x, w = matmul_module(8, 24, 32)
    text = str(pack(mod))
    assert "linalg.matmul" not in text and "linalg.mmt4d" in text
    assert "permutation = [1, 0, 2]" in text          # (K, N1, NR) -> (N1, K, NR)
    assert "tensor<2x24x16x1xf32>" in text and "tensor<8x2x1x16xf32>" in text


@pytest.mark.parametrize("case", ["epilogue", "weight_arg", "nr_not_dividing", "declined"])
def test_leaves_matmuls_it_cannot_pack(case):
    mod, _, _ = matmul_module(8, 24, 40 if case == "nr_not_dividing" else 32,
                              epilogue=ops.relu if case == "epilogue" else None,
                              weight_arg=case == "weight_arg")
    out = str(pack(mod, 0 if case == "declined" else 16))
    assert "linalg.matmul" in out and "linalg.mmt4d" not in out


def test_packed_b_panel_decisions():
    assert packed_b_panel(AVX2, 49, 512, 4608, "float32") == 16
    assert packed_b_panel(AVX2, 4, 512, 4608, "float32") == 0      # M <= MR: a GEMV-like product
    assert packed_b_panel(AVX2, 49, 40, 4608, "float32") == 0      # N not a multiple of NR
    assert packed_b_panel(AVX2, 49, 512, 53, "float32") == 0       # K would be padded
    assert packed_b_panel(AVX2, 49, 512, 64, "int32") == 0


def test_layout_rewrites_fold_the_packed_weight_into_one_constant(monkeypatch):
    mod, _, w = matmul_module(49, 64, 32)
    calls = []
    monkeypatch.setattr(fold_constant, "_DEFAULT_EVALUATOR", [calls.append])
    out = str(layout_rewrites(mod, AVX2, ["main"], CompileOptions(AVX2)))
    assert not calls                           # data movement: folded with numpy, never compiled
    assert "linalg.transpose" not in out and "w_packed.folded" in out
    # the trailing unit dim stays a view (expand_shape) of the folded 3-d constant
    assert "w_packed_4d" in out and "tensor<2x64x16xf32>" in out


@pytest.mark.parametrize("m, k, n, threads", [(49, 96, 64, 1), (49, 96, 64, 2), (37, 128, 256, 2),
                                              (64, 40, 32, 2)])
def test_compiled_packed_matmul_matches_numpy(m, k, n, threads):
    mod, x, w = matmul_module(m, k, n)
    sched = layout_rewrites(mod, AVX2, ["main"], CompileOptions(AVX2))
    assert "linalg.mmt4d" in str(sched)
    exe = mlc.compile(sched, threads=threads)
    np.testing.assert_allclose(exe(x), x.astype(np.float64) @ w, **TOL)
    # the host's compile packs or not by its own target: same numbers either way
    np.testing.assert_allclose(mlc.compile(mod, threads=threads)(x), x.astype(np.float64) @ w, **TOL)


MMT4D = """
func.func @main(%a: tensor<{m}x{k}x{m0}x1xf32>, %b: tensor<{n1}x{k}x{nr}x1xf32>) -> tensor<{m}x{n1}x{m0}x{nr}xf32> {{
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<{m}x{n1}x{m0}x{nr}xf32>
  %c = linalg.fill {{mlc.name = "C.init"}} ins(%z : f32) outs(%e : tensor<{m}x{n1}x{m0}x{nr}xf32>) -> tensor<{m}x{n1}x{m0}x{nr}xf32>
  %r = linalg.mmt4d {{mlc.name = "C"}} ins(%a, %b : tensor<{m}x{k}x{m0}x1xf32>, tensor<{n1}x{k}x{nr}x1xf32>) outs(%c : tensor<{m}x{n1}x{m0}x{nr}xf32>) -> tensor<{m}x{n1}x{m0}x{nr}xf32>
  return %r : tensor<{m}x{n1}x{m0}x{nr}xf32>
}}"""


def mmt4d_case(m, k, n1, nr, m0=1, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k, m0, 1)).astype(np.float32)
    b = rng.standard_normal((n1, k, nr, 1)).astype(np.float32)
    ref = np.einsum("mkx,nky->mnxy", a[..., 0].astype(np.float64), b[..., 0])
    return mlc.Module.parse(MMT4D.format(m=m, k=k, n1=n1, nr=nr, m0=m0)), a, b, ref


@pytest.mark.parametrize("m, threads", [(37, 2), (37, 1), (48, 2)])
def test_mmt4d_default_rule_pads_m_and_replays(m, threads):
    mod, a, b, ref = mmt4d_case(m, 256, 4, 16)   # 110 KiB of operands: worth 2 threads
    sch = mlc.Schedule(mod)
    apply_default_schedule(sch, AVX2, threads)
    kinds = [i.kind for i in sch.trace.insts]
    # N = 64 > M: the threads split N, so M needs whole 4-row (or 3-row) register tiles only
    assert ("pad_einsum" in kinds) == (m % 4 != 0 and m % 3 != 0)
    assert "vectorize" in kinds and ("parallel" in kinds) == (threads > 1)
    np.testing.assert_allclose(mlc.compile(sch.mod)(a, b), ref, **TOL)
    replayed = mlc.Schedule.from_trace(mod, mlc.Trace.from_json(sch.trace.as_json()))
    assert str(replayed.mod) == str(sch.mod)


def test_register_rows_trades_a_smaller_tile_for_padding():
    # at least 3/4 of the accumulators of the full tile: 7 of 8 rows on AVX-512, 3 of 4 on AVX2
    assert [register_rows(r, 8) for r in (49, 196, 64, 36, 13, 5)] == [7, 7, 8, 6, 0, 0]
    assert [register_rows(r, 4) for r in (49, 48, 27, 2)] == [0, 4, 3, 0]
    # ResNet-18's 49-row im2col GEMM: a 7 x 32 tile on AVX-512 (no padded copy of A or C),
    # padded to 52 rows for the 4 x 16 AVX2 tile
    assert goto_padding(AVX512, 49, 512, 4608)[0] == 1 and goto_padding(AVX2, 49, 512, 4608)[0] == 4


@pytest.mark.parametrize("m", [49, 21])
def test_mmt4d_default_rule_uses_a_seven_row_tile_on_avx512(m):
    mod, a, b, ref = mmt4d_case(m, 256, 4, 32)
    sch = mlc.Schedule(mod)
    apply_default_schedule(sch, AVX512, 2)
    kinds = [i.kind for i in sch.trace.insts]
    assert "pad_einsum" not in kinds and "parallel" in kinds
    tile = [lp.extent for lp in sch.get(sch.get_block("C")).loops if lp.kind == "vectorized"]
    assert tile == [7, 1, 32, 1]    # (MR, m0, NR, k0)
    np.testing.assert_allclose(mlc.compile(sch.mod)(a, b), ref, **TOL)


@pytest.mark.parametrize("threads", [1, 2])
def test_mmt4d_default_rule_pads_49_rows_for_a_five_row_tile_on_avx2(threads):
    """Goto's 4 x 16 AVX2 tile pads 49 rows to 52; the 5 x 16 tile (10 accumulators) pads to 50
    (padded_row_tiles), a sampled decision that replays; 37 rows keep Goto's tile (40 rows
    either way)."""
    assert padded_row_tiles(AVX2, 49, 64, 256, threads, 32, 16) == ([4, 5, 6], 5)
    assert padded_row_tiles(AVX2, 37, 64, 256, threads, 32, 16)[1] == 4
    assert padded_row_tiles(AVX2, 3136, 64, 256, threads, 32, 16) == ([4], 4)
    mod, a, b, ref = mmt4d_case(49, 256, 4, 16)
    sch = mlc.Schedule(mod)
    apply_default_schedule(sch, AVX2, threads)
    assert sch.get(sch.get_block("C")).dims[0].extent == 50   # padded rows
    tile = [lp.extent for lp in sch.get(sch.get_block("C")).loops if lp.kind == "vectorized"]
    assert tile == [5, 1, 16, 1]    # (MR, m0, NR, k0)
    np.testing.assert_allclose(mlc.compile(sch.mod)(a, b), ref, **TOL)
    replayed = mlc.Schedule.from_trace(mod, mlc.Trace.from_json(sch.trace.as_json()))
    assert str(replayed.mod) == str(sch.mod)


@pytest.mark.parametrize("k, per_tile", [(256, True), (1024, False)])
def test_mmt4d_zeroes_each_register_tile_when_k_is_one_block(k, per_tile):
    """With K in one KC block (256 on AVX-512's 48 KiB L1d and 32-wide panels) the init runs
    right above the k loop of each MR x NR register tile (no pass zeroing C before the k
    loops); with several KC blocks it stays above them (each thread's rows of C)."""
    mod, a, b, ref = mmt4d_case(49, k, 4, 32)
    sch = mlc.Schedule(mod)
    apply_default_schedule(sch, AVX512, 2)
    blk = sch.get(sch.get_block("C"))
    pos = next(i for i, lp in enumerate(blk.loops) if lp.id == blk.decomposed_at)
    inside = [(blk.dims[lp.dim].kind, lp.kind) for lp in blk.loops[pos:]]
    # per tile: inside the init only the tile's k loop and its vectorized MR x NR tile
    assert (inside[0] == ("reduction", "serial") and {kd for _, kd in inside[1:]} == {"vectorized"}) == per_tile
    np.testing.assert_allclose(mlc.compile(sch.mod)(a, b), ref, **TOL)


def test_mmt4d_rule_samples_match_numpy():
    """The mmt4d rule samples the matmul's Goto decisions (threads, MR, cache blocks, KC,
    k-unroll) on the packed panels; its samples compile and match numpy (tiny caches: several
    blocks to choose from)."""
    mod, a, b, ref = mmt4d_case(48, 256, 8, 16)
    target = dataclasses.replace(AVX2, l1d_bytes=4 << 10, l2_bytes=32 << 10)
    space = default_space(target)
    seen = set()
    for seed in range(4):
        sch = generate(space, mod, seed)
        seen.add(str(sampled_decisions(sch.trace)))
        np.testing.assert_allclose(mlc.compile(sch.mod)(a, b), ref, **TOL)
    assert len(seen) > 1


def test_mmt4d_recipe_splits_the_panels_over_threads():
    mod, a, b, ref = mmt4d_case(8, 32, 8, 16)    # N = 128 > M: threads over the panels
    sch = mlc.Schedule(mod)
    schedule_mmt4d_goto(sch, sch.get_block("C"), threads=2, target=AVX2)
    assert "parallel" in [i.kind for i in sch.trace.insts]
    np.testing.assert_allclose(mlc.compile(sch.mod)(a, b), ref, **TOL)
    other = mlc.Schedule(mod)
    with pytest.raises(ScheduleError, match="3 threads do not divide the 8 panels"):
        schedule_mmt4d_goto(other, other.get_block("C"), threads=3, split_n=True, target=AVX2)


def test_mmt4d_with_m0_tiles_is_not_the_packed_matmul_kind():
    mod, a, b, ref = mmt4d_case(6, 16, 2, 8, m0=4)
    infos = [i for i in analyze_module(mod).values() if i.op_name == "linalg.mmt4d"]
    assert [classify(i) for i in infos] == ["other"]
    with pytest.raises(ScheduleError, match="m0=1"):
        sch = mlc.Schedule(mod)
        schedule_mmt4d_goto(sch, sch.get_block("C"), target=AVX2)
    np.testing.assert_allclose(mlc.compile(mod)(a, b), ref, **TOL)


def test_packed_1x1_conv_reads_panel_rows_as_vectors(tmp_path):
    """A 1x1 convolution with a constant filter is packed (mmt4d) and its register tiles are
    vectorized without their unit dims: the LLVM IR has fewer ``extractelement`` than FMAs
    (a 4-D tile with a ``(NR, 1)`` B operand was lowered to one extract/insert pair per
    element per k step: about 35 ``extractelement`` per FMA), and the result matches numpy."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 64, 28, 28)).astype(np.float32)
    w = rng.standard_normal((64, 64, 1, 1)).astype(np.float32)
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(ops.conv2d(f.arg("x", shape=x.shape), w))
    exe = mlc.compile(bb.finish(), threads=1, dump_ir=str(tmp_path))
    np.testing.assert_allclose(exe(x), np.einsum("nchw,fc->nfhw", x, w[:, :, 0, 0]), **TOL)
    assert "linalg.mmt4d" in (tmp_path / "01-layout.mlir").read_text()
    llvm = (tmp_path / "09-llvm.ll").read_text()
    fmas = len(re.findall(r"@llvm\.fmuladd|@llvm\.fma\.|fmul contract", llvm))
    assert fmas > 0
    assert len(re.findall(r"\bextractelement\b", llvm)) < fmas
