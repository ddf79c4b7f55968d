"""Decisions of the matmul rule that follow the target's register file and caches: the default
register tile has more accumulators than FMAs in flight (6 x 16 on AVX2's 16 registers, Goto's
8 x 32 on AVX-512's 32), Goto's tile where the taller one would leave many edge rows; the N
block of a prime panel count; the init of a packed matmul in one K block. Each schedule is
compiled and compared with numpy."""

import dataclasses

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir import ops
from mlc_mlir.schedule.cpu_recipes import FMAS_IN_FLIGHT, goto_params, register_tile_shapes
from mlc_mlir.schedule.default_rules import apply_default_schedule
from mlc_mlir.schedule.rules.matmul import default_tile
from targets import AVX2, AVX512

TOL = dict(rtol=1e-4, atol=1e-4)


def _sampled(sch):
    """``[(candidates, chosen value)]`` of the trace's categorical samples, in order."""
    return [(i.attrs["candidates"], i.attrs["candidates"][sch.trace.decisions[n]])
            for n, i in enumerate(sch.trace.insts) if i.kind == "sample_categorical"]


def _vectorized(sch, name):
    blk = sch.get(sch.get_block(name))
    return [lp.extent for lp in blk.loops if lp.kind == "vectorized"]


def test_default_tile_follows_the_register_file():
    """16 vector registers: Goto's half-register 4 x 16 has 8 accumulators (the FMAs in
    flight), so the default is the full-register 6 x 16 (12), Goto's tile stays a candidate;
    32 registers: Goto's 8 x 32 (16 accumulators) stays the default and the candidates are
    unchanged. A 512-bit target with 16 registers gets a 6 x 32 tile: the rule reads the
    register count, not the ISA."""
    avx2, avx512 = register_tile_shapes(AVX2, 32), register_tile_shapes(AVX512, 32)
    assert avx2[0] == (6, 16) and (4, 16) in avx2 and len(set(avx2)) == len(avx2)
    assert avx512 == [(8, 32), (14, 32), (11, 32), (6, 64), (5, 64)]
    assert register_tile_shapes(dataclasses.replace(AVX512, vector_registers=16), 32)[0] == (6, 32)
    for t in (AVX2, AVX512):
        lanes = t.vector_lanes(32)
        for mr, nr in register_tile_shapes(t, 32):   # within the register budget
            assert mr * nr // lanes + nr // lanes + 1 <= t.vector_registers
        mr, nr = register_tile_shapes(t, 32)[0]
        assert mr * nr // lanes > FMAS_IN_FLIGHT
    g = goto_params(AVX2, 1024, 1024, 1024)   # Goto's blocking itself is unchanged
    assert (g.mr, g.nr, g.kc) == (4, 16, 512)


@pytest.mark.parametrize("m, threads, tile", [(1024, 1, (6, 16)), (777, 1, (6, 16)), (128, 1, (6, 16)),
                                              (64, 1, (4, 16)), (32, 2, (4, 16)), (60, 2, (6, 16)),
                                              (66, 1, (6, 16))])
def test_default_tile_leaves_few_edge_rows(m, threads, tile):
    """The taller tile is the default unless its edge rows (one-row tiles) are at least 1/16
    of a thread's rows where Goto's tile divides them; AVX-512's default is Goto's tile."""
    shapes = register_tile_shapes(AVX2, 32)
    assert shapes[default_tile(AVX2, 32, shapes, m, threads)] == tile
    shapes = register_tile_shapes(AVX512, 32)
    assert default_tile(AVX512, 32, shapes, m, threads) == 0


def _matmul(m, k, n):
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(ops.matmul(f.arg("a", shape=(m, k)), f.arg("b", shape=(k, n))))
    return bb.finish()


@pytest.mark.parametrize("m, k, n, tile", [(104, 72, 48, [6, 16]), (100, 72, 48, [5, 16]), (64, 40, 48, [4, 16])])
def test_avx2_default_tiles_match_numpy(m, k, n, tile):
    """On AVX2 the default schedule vectorizes the chosen tile (6 x 16 with 2 edge rows on 104
    rows; 5 x 16 on 100, which it divides; 4 x 16 on 64) and matches numpy."""
    mod = _matmul(m, k, n)
    sch = mlc.Schedule(mod)
    apply_default_schedule(sch, AVX2, 1)
    assert _vectorized(sch, "matmul") == tile
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    np.testing.assert_allclose(mlc.compile(sch.mod)(a, b), a.astype(np.float64) @ b, **TOL)


def test_prime_panel_count_takes_every_panel_as_its_n_block():
    """A dense whose padded N is 19 panels of 16 (300 -> 304): the N block's default is all 19
    panels (nearest Goto's 16 in ratio), not 1 (the largest divisor up to 16, with which the
    packed B panel was not transposed and the tile gathered B); the result matches numpy."""
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x, w, b = f.arg("x", shape=(8, 24)), f.arg("w", shape=(300, 24)), f.arg("b", shape=(300,))
        f.output(ops.relu(ops.dense(x, w, b)))
    mod = bb.finish()
    sch = mlc.Schedule(mod)
    apply_default_schedule(sch, AVX2, 1)
    assert ([1, 19], 19) in _sampled(sch)
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal(s).astype(np.float32) for s in ((8, 24), (300, 24), (300,))]
    ref = np.maximum(xs[0].astype(np.float64) @ xs[1].T + xs[2], 0)
    np.testing.assert_allclose(mlc.compile(sch.mod)(*xs), ref, **TOL)


def test_packed_matmul_in_one_k_block_keeps_the_init_out_of_the_tile():
    """K = 128 fits one KC block and B is packed (256 rows): the init is not decomposed into
    the register tile's k loop (there the packing was redone element by element for every
    tile); the result matches numpy."""
    mod = _matmul(256, 128, 128)
    sch = mlc.Schedule(mod)
    apply_default_schedule(sch, AVX2, 1)
    insts = sch.trace.insts
    kinds = [i.kind for i in insts]
    assert "cache_read" in kinds
    unrolled = {i.inputs[0].name for i in insts if i.kind == "unroll"}
    assert unrolled and not any(i.inputs[1].name in unrolled for i in insts
                                if i.kind == "decompose_reduction")
    rng = np.random.default_rng(2)
    a = rng.standard_normal((256, 128)).astype(np.float32)
    b = rng.standard_normal((128, 128)).astype(np.float32)
    np.testing.assert_allclose(mlc.compile(sch.mod)(a, b), a.astype(np.float64) @ b, **TOL)
