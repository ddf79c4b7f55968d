"""Edge tiles of the default matmul schedule (rules.matmul.schedule_edge_tiles): matmuls whose
M or N no register tile divides are computed in place with partial tiles, without padded copies
of A, B or C; numerics vs numpy on odd and prime shapes at 1 and 2 threads, on the host target
and on AVX2."""

import re

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir.schedule.default_rules import apply_default_schedule
from mlc_mlir.schedule.rules import matmul as matmul_rules
from mlc_mlir.target import host_target, missing_host_features
from targets import AVX2
from test_matmul_padding import build as build_op

TOL = dict(rtol=1e-4, atol=1e-4)


def build(shapes, dense=False):
    """(module, inputs, float64 numpy reference) of ``A @ B`` (or ``relu(A @ W.T + b)``)."""
    return build_op("dense" if dense else "matmul", shapes)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("m, k, n", [(97, 60, 61), (101, 67, 131), (13, 7, 1), (2, 3, 5),
                                     (31, 1, 37), (777, 13, 1029), (17, 5, 1023)])
def test_matmul_edge_tiles_match_numpy(m, k, n, threads):
    mod, xs, ref = build([(m, k), (k, n)])
    np.testing.assert_allclose(mlc.compile(mod, threads=threads)(*xs), ref, **TOL)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("m, k, n", [(64, 90, 300), (37, 50, 23)])
def test_dense_edge_tiles_match_numpy(m, k, n, threads):
    mod, xs, ref = build([(m, k), (n, k), (n,)], dense=True)
    np.testing.assert_allclose(mlc.compile(mod, threads=threads)(*xs), ref, **TOL)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("m, k, n", [(64, 450, 300), (37, 50, 23)])
def test_dense_edge_tile_decision_packs_the_partial_panel_zero_filled(m, k, n, threads, monkeypatch):
    """The other decision for a dense whose transposed B ends in a partial panel
    (``DENSE_EDGE_TILES``): no padded copy of B (no ``pad_einsum``); B's last panel is
    packed zero-filled in 8 x 8 transposed blocks read straight from B (masked past its last
    row), and the result is numpy's."""
    monkeypatch.setattr(matmul_rules, "DENSE_EDGE_TILES", True)
    mod, xs, ref = build([(m, k), (n, k), (n,)], dense=True)
    sch = mlc.Schedule(mod)
    apply_default_schedule(sch, AVX2, threads)
    assert "pad_einsum" not in [i.kind for i in sch.trace.insts]
    text = str(sch.mod)
    assert f"tensor<{-(-n // 16) * 16}x{k}xf32>" not in text   # no B rounded up to NR
    assert re.search(r"vector.create_mask .*vector<8x8xi1>", text)
    if not missing_host_features(AVX2.features):
        np.testing.assert_allclose(mlc.compile(sch.mod, target=AVX2)(*xs), ref, **TOL)


@pytest.mark.parametrize("dense", [False, True])
@pytest.mark.parametrize("m, k, n", [(37, 50, 301), (97, 60, 517)])
def test_edge_tiles_split_over_n_match_numpy(m, k, n, dense, monkeypatch):
    """The other thread split of :func:`schedule_edge_tiles` (``EDGE_SPLIT_N``): two threads
    take chunks of whole panels of N (the last one shorter, ending in the partial panel), C is
    zeroed in chunks of the panel width (masked past the thread's last column), and the result
    is numpy's."""
    monkeypatch.setattr(matmul_rules, "EDGE_SPLIT_N", True)
    monkeypatch.setattr(matmul_rules, "DENSE_EDGE_TILES", True)
    shapes = [(m, k), (n, k), (n,)] if dense else [(m, k), (k, n)]
    mod, xs, ref = build(shapes, dense=dense)
    sch = mlc.Schedule(mod)
    apply_default_schedule(sch, AVX2, 2)
    assert "pad_einsum" not in [i.kind for i in sch.trace.insts]
    dims = {lp.dim for b in sch.model.blocks if len(b.dims) == 3 for lp in b.loops if lp.kind == "parallel"}
    assert dims == {1}   # the threads split N
    if not missing_host_features(AVX2.features):
        np.testing.assert_allclose(mlc.compile(sch.mod, target=AVX2)(*xs), ref, **TOL)


@pytest.mark.parametrize("target", [AVX2, host_target()], ids=["avx2", "host"])
@pytest.mark.parametrize("threads", [1, 2])
def test_edge_tiles_make_no_padded_copy(target, threads):
    """97 x 60 x 61: neither M nor N is a multiple of a register tile; the scheduled IR pads no
    whole operand (A, B or C) and the result is numpy's."""
    mod, xs, ref = build([(97, 60), (60, 61)])
    sch = mlc.Schedule(mod)
    apply_default_schedule(sch, target, threads)
    kinds = [i.kind for i in sch.trace.insts]
    assert "pad_einsum" not in kinds
    text = str(sch.mod)
    pads = re.findall(r"tensor\.pad .*?: (tensor<[0-9x?]+xf32>) to", text, re.S)
    whole = {"tensor<97x60xf32>", "tensor<60x61xf32>", "tensor<97x61xf32>"}
    assert not whole & set(pads), pads
    assert "tensor<104x" not in text and "tensor<112x" not in text   # no A rounded up to MR
    np.testing.assert_allclose(mlc.compile(sch.mod)(*xs), ref, **TOL)


@pytest.mark.parametrize("mr", [6, 5])
def test_peeled_mmt4d_edge_tile_matches_numpy(mr, monkeypatch):
    """A packed GEMM (``linalg.mmt4d``: a 1x1 convolution over a 7 x 7 map, 49 rows) in the Goto
    nest with a register tile of ``mr`` rows that does not divide 49
    (``goto_loop_nest``'s partial tiles): the edge tile's loop iteration is peeled and each
    copy's unit tile vectorized in its own k loop (``transform.foreach``); numerics as numpy."""
    import mlc_mlir.schedule.default_rules as rules
    from mlc_mlir import ops
    from mlc_mlir.schedule.cpu_recipes import goto_loop_nest
    rng = np.random.default_rng(3)
    w = rng.standard_normal((64, 96, 1, 1)).astype(np.float32)
    x = rng.standard_normal((1, 96, 7, 7)).astype(np.float32)
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(ops.relu(ops.conv2d(f.arg("x", shape=x.shape), w)))
    seen = []

    def edge(sch, block, ctx):
        m, panels, k, _, nr, _ = (d.extent for d in sch.get(block).dims)
        seen.append(m)
        goto_loop_nest(sch, block, 1, False, mr, nr, -(-m // mr), panels, k, False, 4)
    monkeypatch.setitem(rules.RULES, "mmt4d", edge)
    got = mlc.compile(bb.finish(), threads=1)(x)
    assert seen == [49]
    ref = np.maximum(np.einsum("nchw,fc->nfhw", x.astype(np.float64), w[:, :, 0, 0].astype(np.float64)), 0)
    np.testing.assert_allclose(got, ref, **TOL)
