"""Packing A in the Goto matmul (the matmul rule's ``pack_a`` decision: ``cache_read`` of A at
the MC block, ``KC x MR`` micro-panels) and the prefetch of the next C tile (its ``prefetch``
decision, ``mlc.prefetch_tile``): numerics vs numpy with A packed on shapes with edges in M, N
and K at 1 and 2 threads, the packed layout and the register tile's contiguous read on fixed
AVX2 and AVX-512 targets, the defaults, and the prefetches in the lowered code."""

import re

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir.schedule.cpu_recipes import PREFETCH_TILE_ATTR, prefetches_c
from mlc_mlir.schedule.default_rules import apply_default_schedule
from mlc_mlir.schedule.rules import matmul as matmul_rule
from targets import AVX2, AVX512
from test_matmul_padding import build

TOL = dict(rtol=1e-4, atol=1e-4)


def packed_operands(sch):
    """Operand indices of the ``cache_read`` s in ``sch``'s trace."""
    return sorted(i.inputs[1] for i in sch.trace.insts if i.kind == "cache_read")


@pytest.fixture
def pack_a(monkeypatch):
    """The matmul rule's default decision packs A."""
    monkeypatch.setattr(matmul_rule, "PACK_A", True)


@pytest.mark.parametrize("kind, m, k, n, threads", [
    ("matmul", 128, 64, 96, 1),     # edge rows in M only, K in one KC block
    ("matmul", 128, 64, 96, 2),
    ("matmul", 130, 37, 45, 1),     # edges in M and N, K prime (padded)
    ("matmul", 130, 37, 45, 2),
    ("matmul", 203, 67, 131, 1),    # edges in M and N, K padded to its KC blocks
    ("matmul", 101, 67, 131, 2),
    ("matmul", 250, 300, 64, 1),    # KC = 300 (blocks of 4 k steps transposed)
    ("matmul", 250, 300, 64, 2),
    ("dense", 203, 37, 96, 1),      # B packed transposed too; epilogue in its own rule
    ("dense", 301, 64, 96, 2),
])
def test_packed_a_matches_numpy(pack_a, kind, m, k, n, threads):
    """The default schedule with A packed (on the AVX2 target each shape's MC block holds
    several register tiles, so the rule offers the packing) computes numpy's result."""
    shapes = [(m, k), (k, n)] if kind == "matmul" else [(m, k), (n, k), (n,)]
    mod, xs, ref = build(kind, shapes)
    sch = mlc.Schedule(mod)
    apply_default_schedule(sch, AVX2, threads)
    assert 0 in packed_operands(sch)
    np.testing.assert_allclose(mlc.compile(sch.mod)(*xs), ref, **TOL)


@pytest.mark.parametrize("target, mr", [(AVX2, 6), (AVX512, 8)], ids=["avx2", "avx512"])
def test_packed_a_layout_on_fixed_targets(pack_a, target, mr):
    """150 x 60 x 61 on one thread: A's MC block is packed as ``(MC / MR, KC, MR)`` micro-panels
    (the last, partial one in a peeled loop), and the register tile reads MR contiguous
    elements of one k step (``vector<1 x MR>``), not MR rows of A (``vector<MR x 1>``)."""
    mod, _, _ = build("matmul", [(150, 60), (60, 61)])
    sch = mlc.Schedule(mod)
    apply_default_schedule(sch, target, 1)
    assert packed_operands(sch) == [0, 1]
    text = str(sch.mod)
    assert re.search(rf"tensor<\d+x60x{mr}xf32>", text), sorted(set(re.findall(r"tensor<[^>]*>", text)))
    assert f"vector<1x{mr}xf32>" in text and f"vector<{mr}x1xf32>" not in text


@pytest.mark.parametrize("target", [AVX2, AVX512], ids=["avx2", "avx512"])
def test_default_reads_a_in_place(target):
    """By default A is read in place (the packing is the tuner's decision)."""
    mod, _, _ = build("matmul", [(150, 60), (60, 61)])
    sch = mlc.Schedule(mod)
    apply_default_schedule(sch, target, 1)
    assert packed_operands(sch) == [1]


@pytest.mark.parametrize("target", [AVX2, AVX512], ids=["avx2", "avx512"])
def test_prefetch_default_follows_the_l2(target):
    """The next C tile is prefetched where a thread's block of C exceeds the target's L2."""
    l2 = target.l2_bytes
    assert prefetches_c(target, l2 // 256 + 1, 64) and not prefetches_c(target, l2 // 256, 64)


def test_next_c_tile_is_prefetched(tmp_path):
    """600 x 64 x 256 (C 600 KiB, above AVX2's 512 KiB L2): the default Goto nest annotates the
    register tiles' row loop with the rows to prefetch ahead; the lowered code prefetches the
    next tile's rows, and the result is numpy's."""
    mod, xs, ref = build("matmul", [(600, 64), (64, 256)])
    sch = mlc.Schedule(mod)
    apply_default_schedule(sch, AVX2, 1)
    notes = [i for i in sch.trace.insts if i.kind == "annotate" and i.inputs[1] == PREFETCH_TILE_ATTR]
    assert len(notes) == 1
    exe = mlc.compile(sch.mod, dump_ir=str(tmp_path))
    np.testing.assert_allclose(exe(*xs), ref, **TOL)
    lowered = (tmp_path / "07-lower.mlir").read_text()
    assert lowered.count("llvm.prefetch") >= 6, "one per row of the next tile"
