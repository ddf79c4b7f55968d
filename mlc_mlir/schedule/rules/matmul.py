"""Rules for contractions: ``linalg.matmul`` (matmul, dense) by multi-level tiling in the Goto
structure, ``linalg.mmt4d`` on a pre-packed B (``layout_passes.PackMatmulWeights``) with the same loop
nest, and ``linalg.batch_matmul`` with a register-tiled batch loop; matmul and batch_matmul with
elementwise epilogues (bias add, relu) fused into their tiles. Each rule samples its knobs
(threads, register tile, cache blocks, packing, k-unroll) from candidates derived from the
target's registers and caches, with the Goto/BLIS values of
:func:`~mlc_mlir.schedule.cpu_recipes.goto_params` as default decisions. Source: Goto & van de
Geijn (TOMS 2008); TVM MetaSchedule ``MultiLevelTiling``; TVM's x86 ``dense_pack``/
``batch_matmul`` schedules; oneDNN's post-op fusion."""

from __future__ import annotations

import dataclasses
import math
from typing import Dict, List, Optional, Tuple

from ...target import Target
from ..cpu_recipes import (
    FMAS_IN_FLIGHT, PACK_A, UNROLL_K, batch_matmul_padding, goto_loop_nest, goto_padding, goto_params,
    packs_b, prefetches_c,
    register_tile_shapes, split_tile, thread_splits, tile_width,
)
from ..schedule import Schedule
from ..state import BlockRV
from .common import (
    TILE_VECTORS, RuleContext, block_size, categorical, element_bits, largest_divisor, mark_avx2_transposes,
    near_divisors, perfect_tile, rule_block, thread_candidates, worth_threads,
)
from .epilogue import claim_epilogues
from .gemv import UNROLL_FACTORS, schedule_gemv

#: The default decision for a ``dense`` whose transposed B ends in a partial register-tile
#: panel: N padded to whole panels (each thread pads and packs its own columns) rather than
#: edge tiles (threads over M, each packing all of B, the last panel zero-filled); the tuner
#: samples both. Dense 64 x 900 -> 300, one process, interleaved (2-core AMD EPYC Zen 3):
#: one thread 0.484 ms padded, 0.503 ms edge tiles; two threads 0.340 / 0.372 ms.
DENSE_EDGE_TILES = False

#: The default decision of :func:`schedule_edge_tiles` where the threads can split either M or
#: N (N > M): M, each thread packing all of B. Split over N, each packs its own columns, but
#: every panel of C is computed through a padded tile (the threads' chunks of N are dynamic,
#: so the partial panel is not peeled). Sustained calls, one process, 2 threads (2-core AMD
#: EPYC Zen 3): 777 x 513 x 1029 5.91 ms over M, 6.16 ms over N (numpy 5.45); dense
#: 64 x 900 -> 300 with edge tiles 0.386 ms over N (N padded instead: 0.383 ms).
EDGE_SPLIT_N = False


def register_tile_bounds(target: Target, bits: int) -> Dict[str, int]:
    """Bounds of the register tile and cache blocks derived from the target.

    * ``mr``: rows of the MR x NR tile, at most half the vector registers (each row holds at
      least one accumulator vector; the other half is left for B vectors and A broadcasts).
    * ``nr``: columns, at most 4 vectors (``4 * lanes``).
    * ``kc``: the K block, at most ``L1d / (lanes * bytes)`` (a one-vector-wide B micro-panel
      fits L1d).

    Returns
    -------
    dict
        ``{"mr": int, "nr": int, "kc": int}``, each >= 1.
    """
    lanes = target.vector_lanes(bits)
    nbytes = max(1, bits // 8)
    l1 = target.l1d_bytes or (32 << 10)
    return {"mr": max(1, target.vector_registers // 2), "nr": 4 * lanes,
            "kc": max(lanes, l1 // (lanes * nbytes))}


def matmul_register_tiles(target: Target, bits: int, mt: int, n: int,
                          tile: Optional[Tuple[int, int]] = None) -> Dict[int, List[int]]:
    """Register tiles ``{NR: [MR, ...]}`` of a matmul with ``mt`` rows per thread and ``n``
    columns, derived from the target's vector lanes and registers.

    ``NR`` is 1, 2 or 4 vectors (dividing ``n``; a power of two:
    :func:`~mlc_mlir.schedule.cpu_recipes.tile_width`); ``MR`` divides ``mt`` with the ``MR * NR / lanes``
    accumulators, the ``NR / lanes`` B vectors and one A broadcast within the vector registers
    (the register budget), and at least ``vector_registers / 4`` accumulators (enough
    independent FMAs to hide their latency): 6 x 16 on AVX2, 14 x 32 and 6 x 64 on AVX-512
    among them. Goto's tile (:func:`~mlc_mlir.schedule.cpu_recipes.goto_params`, shrunk to
    divisors; ``tile`` in its place when given) is always included, so tiny or odd extents
    still have one tile.
    """
    lanes = target.vector_lanes(bits)
    regs = target.vector_registers
    p = goto_params(target, max(mt, 1), n, 1, 1, bits, tile)
    out: Dict[int, List[int]] = {}
    for v in TILE_VECTORS:
        nr = v * lanes
        if n % nr or nr != tile_width(nr, nr):   # a power of two: see tile_width
            continue
        mrs = [d for d in range(1, mt + 1) if mt % d == 0 and regs // 4 <= d * v <= regs - v - 1]
        if mrs:
            out[nr] = mrs
    dnr, dmr = tile_width(n, p.nr), largest_divisor(mt, p.mr)
    out[dnr] = sorted(set(out.get(dnr, [])) | {dmr})
    return dict(sorted(out.items()))


def panel_block(sch: Schedule, panels: int, center: int):
    """A sampled N block of ``panels`` register-tile panels around Goto's ``NC / NR``
    (``center``): the candidates of :func:`~.common.block_size`, the default the one nearest
    ``center`` in ratio (ties to the smaller) rather than the largest divisor up to it. A
    panel count with no divisor near below the center (19 panels, center 16: the largest is 1)
    would otherwise pack B one panel at a time, and where the M block covers every row of a
    thread, no loop is left between the packing and its ``compute_at`` loop, so a ``dense``
    B stored ``(N, K)`` is not packed transposed and the register tile gathers it (dense
    64 x 900 -> 300, one thread of a loaded 2-core Zen 3: 2.77 ms with 1 panel, 1.68 ms with
    19, numpy 1.32 ms). The packed KC x NC block may then exceed Goto's L2 budget by less than
    the factor it would fall short of it: BLIS keeps that block in L3 (Low et al., TOMS 2016)."""
    center = max(1, center)
    cands = near_divisors(panels, center)
    return categorical(sch, cands, min(cands, key=lambda c: (abs(math.log(c / center)), c)))


def unroll_factor(sch: Schedule, k: int, default: int) -> int:
    """A sampled unroll factor of a k loop of ``k`` iterations: :data:`UNROLL_FACTORS` that
    divide it and ``default`` (the largest divisor of ``k`` up to Goto's ``UNROLL_K``).
    Structural: ``unroll`` records its factor as a constant, so another decision is applied
    by running the rule again."""
    d = largest_divisor(k, default)
    return int(categorical(sch, sorted({u for u in UNROLL_FACTORS if k % u == 0} | {d}), d))


def pad_or_fuse_epilogues(sch: Schedule, block: BlockRV, ctx: RuleContext, padding) -> List[BlockRV]:
    """Pad the contraction (``pad_einsum`` with the multiples ``padding``) when a multiple is
    above 1, leaving its epilogue to the elementwise rule (it reads the unpadded result);
    else claim its elementwise epilogue chain (:func:`~.epilogue.claim_epilogues`).

    Returns
    -------
    list of BlockRV
        The epilogues to fuse into the contraction's tiles (empty when padded).
    """
    if all(p == 1 for p in padding):
        return claim_epilogues(sch, sch.get(block), ctx)
    sch.pad_einsum(block, list(padding))
    return []


def schedule_matmul(sch: Schedule, block: BlockRV, ctx: RuleContext) -> None:
    """``linalg.matmul`` (``matmul``; ``dense`` is a matmul with a transposed B map): multi-level
    tiling in the Goto structure (:func:`~mlc_mlir.schedule.cpu_recipes.goto_loop_nest`, loops
    ``i0 (parallel) j0 k0 i1 j1 i2 k1 (unrolled) i3 j2 (vectorized MR x NR)``) with the
    elementwise epilogue chain fused at the NC block. Decisions, in order: the register tile
    the extents are padded for (:func:`~mlc_mlir.schedule.cpu_recipes.register_tile_shapes`:
    by default Goto's where it has more accumulators than FMAs in flight (8 x 32 on AVX-512),
    else the full-register tile (6 x 16 on AVX2), or another such as 4 x 16 or 2 x 32 on AVX2,
    14 x 32 or 6 x 64 on AVX-512; structural); the threads, register tile and cache blocks of
    :func:`goto_decisions` (defaults derived from the padded tile); pack B (``cache_read`` at ``k0``)
    or not (structural; default :func:`~mlc_mlir.schedule.cpu_recipes.packs_b`); pack A into
    ``KC x MR`` micro-panels at ``i1`` or read it in place (structural; default in place, see
    :func:`~mlc_mlir.schedule.cpu_recipes.goto_loop_nest`; not sampled with a fused epilogue,
    a padded matmul or one register tile per MC block); the unroll factor of ``k1``
    (:func:`unroll_factor`, structural); prefetch the next tile of C or not (structural;
    default :func:`~mlc_mlir.schedule.cpu_recipes.prefetches_c`); the fused epilogue on each
    register tile or each NC block (:func:`epilogue_at_tile`, default the NC block).

    Where :func:`~mlc_mlir.schedule.cpu_recipes.goto_padding` would pad M or N to multiples of
    the sampled register tile (MR x NR) or the threads, the matmul gets edge tiles instead
    (:func:`schedule_edge_tiles`: partial tiles, no padded copies); for a ``dense`` whose
    transposed B would end in a partial panel that is a decision (structural, default
    :data:`DENSE_EDGE_TILES`: N padded); a K that has no good KC is padded
    (``pad_einsum``). A padded matmul or one with edge tiles leaves its epilogue to the
    elementwise rule.

    A matmul with M == 1 whose B is (K, N) is a GEMV: :func:`~.gemv.schedule_gemv`.

    Shapes: A (M, K) (or transposed), B (K, N) or (N, K), C (M, N); dtypes float16/32/64, int32.

    Raises ``ScheduleError`` for a block of other than 3 dims (:func:`~.common.rule_block`).
    """
    blk, (m, n, k) = rule_block(sch, block, "matmul", "ijk")
    bits = element_bits(blk)
    threads = ctx.threads if worth_threads(ctx, blk) else 1
    if m == 1 and schedule_gemv(sch, block, ctx, threads):
        return
    shapes = register_tile_shapes(ctx.target, bits)
    tile = shapes[int(categorical(sch, list(range(len(shapes))), default_tile(ctx.target, bits, shapes, m, threads)))]
    padding = goto_padding(ctx.target, m, n, k, threads, bits, tile)
    b_transposed = blk.info.operand_dims[1][-1:] == (2,)   # B stored (N, K): dense
    edge = padding[0] > 1 or padding[1] > 1
    if edge and b_transposed and n % tile[1]:
        # a dense whose transposed B ends in a partial panel: edge tiles or N padded
        edge = bool(int(categorical(sch, [0, 1], int(DENSE_EDGE_TILES))))
    if edge:
        schedule_edge_tiles(sch, block, ctx, threads, bits, tile, padding[2])
        return
    padding = (padding[0], split_n_padding(sch, m, n, threads, padding[1]), padding[2])
    epi = pad_or_fuse_epilogues(sch, block, ctx, padding)
    m, n, k = (d.extent for d in blk.dims)
    d = goto_decisions(sch, ctx, m, n, k, threads, bits, tile=tile)
    mt = m if d.split_n else m // d.threads
    pack = categorical(sch, [0, 1], int(packs_b(mt, int(d.mr), int(d.nr), b_transposed)))
    # A packed or read in place; not with a fused epilogue (the packing is not hoisted there),
    # for a padded matmul (its A is a padded copy already) nor for one register tile per MC
    # block (nothing to pack into micro-panels)
    pack_a = 0 if epi or sch.get(block).padding is not None or int(d.mc_tiles) == 1 else \
        categorical(sch, [0, 1], int(PACK_A))
    unroll = unroll_factor(sch, int(d.kc), UNROLL_K)
    nt = n // int(d.threads) if d.split_n else n
    # the next C tile prefetched or not (where an MC block holds several register tiles)
    prefetch = 0 if int(d.mc_tiles) == 1 else \
        categorical(sch, [0, 1], int(prefetches_c(ctx.target, mt, nt, bits)))
    at_tile = epilogue_at_tile(sch, epi, int(d.kc) == k and not int(pack), 0)
    goto_loop_nest(sch, block, d.threads, d.split_n, d.mr, d.nr, d.mc_tiles, d.nc_tiles, d.kc,
                   bool(int(pack)), unroll, epi, pack_a=bool(int(pack_a)), prefetch_c=bool(int(prefetch)),
                   epilogue_at_tile=at_tile)
    if b_transposed and int(pack):   # B's panels packed as (K, NR) in 8 x 8 transposes
        mark_avx2_transposes(sch, block, ctx.target, bits)


def split_n_padding(sch: Schedule, m: int, n: int, threads: int, multiple: int) -> int:
    """The multiple a padded N (``multiple``: the register tile's NR) is padded to: NR, or
    ``threads * NR`` so that the threads split N into whole panels (structural, sampled where
    ``threads > 1``, N is padded and ``N > M``: Goto's thread split, see
    :func:`~mlc_mlir.schedule.cpu_recipes.thread_splits`; default the N split). Split over M,
    every thread packs all of B after a serial padded copy of it; split over N, each thread
    pads and packs its own columns, at the cost of at most ``threads - 1`` more panels of
    zeros. Dense 64 x 900 -> 300 on two threads (2-core AMD EPYC Zen 3, one process,
    interleaved; 304 columns over M against 320 over N): 0.409 -> 0.309, 0.434 -> 0.361,
    0.426 -> 0.278 ms (numpy 0.25-0.27 ms). Source: Goto & van de Geijn's partitioning of
    the packed B among threads; BLIS's ``jc`` loop parallelism (Smith et al., IPDPS 2014)."""
    if threads < 2 or multiple < 2 or n <= m:
        return multiple
    return int(categorical(sch, [multiple, threads * multiple], threads * multiple))


def default_tile(target: Target, bits: int, shapes: List[Tuple[int, int]], m: int, threads: int) -> int:
    """Index in ``shapes`` (:func:`~mlc_mlir.schedule.cpu_recipes.register_tile_shapes`) of
    the default register tile of a matmul of ``m`` rows on ``threads`` threads: the first
    (the full-register tile where Goto's has no more accumulators than FMAs in flight: 6 x 16
    on AVX2), unless its rows leave an edge of at least ``1 / (2 * FMAS_IN_FLIGHT)`` of a
    thread's rows that Goto's tile would not leave: edge rows run as one-row tiles, bound by
    the FMA latency (about ``FMAS_IN_FLIGHT / 2`` times a full tile's time per row), so on
    few rows they cost more than the taller tile saves (a 32 x 40 -> 48 dense on 2 threads:
    16 rows per thread, 4 x 16 tiles, epilogue fused; 1024 rows: 6 x 16 with 4 edge rows)."""
    goto = goto_params(target, 1, 1, 1, 1, bits)
    mr = shapes[0][0]
    rows = m // threads if m >= threads * mr else m
    edge = rows % mr
    if (goto.mr, goto.nr) in shapes and edge and rows % goto.mr == 0 \
            and 2 * FMAS_IN_FLIGHT * edge >= rows:
        return shapes.index((goto.mr, goto.nr))
    return 0


def schedule_edge_tiles(sch: Schedule, block: BlockRV, ctx: RuleContext, threads: int, bits: int,
                        tile: Tuple[int, int], pad_k: int) -> None:
    """The Goto nest of an ``(M, N, K)`` matmul whose M or N no register tile divides: full
    ``MR x NR`` tiles (``tile``) and partial edge tiles, instead of copies of A, B and C padded
    to multiples of the tile. Threads split M into chunks of whole register tiles, or N
    (N > M) into chunks of whole panels (the last thread's chunk shorter; their count sampled,
    default the most that each get some; M or N where both can be split: structural, default
    :data:`EDGE_SPLIT_N`; N where only N can: a few rows, many columns); MC and NC blocks
    are sampled divisors of a chunk's register tiles and panels (:func:`~.common.block_size`),
    KC a divisor of K (K padded to ``pad_k`` first, as
    :func:`~mlc_mlir.schedule.cpu_recipes.goto_padding` asks), B packed by default where
    :func:`~mlc_mlir.schedule.cpu_recipes.packs_b` says so or N ends in a partial panel
    (B read in place with a row stride that is no multiple of the vector: 64 x 900 x 301,
    one thread, 0.35 ms against 0.16 ms with a padded copy), A packed or not (default in
    place, as in :func:`schedule_matmul`), k unrolled (:func:`unroll_factor`), the next C tile
    prefetched or not (default :func:`~mlc_mlir.schedule.cpu_recipes.prefetches_c`).
    The transform script peels the loops over partial tiles: B's last panel is zero-filled
    in its packed copy, C's edge rows are computed one row at a time in place, C's edge
    columns through a one-panel padded tile (split over N, the threads' chunks are dynamic
    and not peeled: every panel of C goes through that tile, and C is zeroed in masked chunks
    of NR). The elementwise epilogues keep their own rule.

    777 x 513 x 1029 (one thread, loaded 2-core AMD EPYC Zen 5, AVX-512) runs as fast as
    with padded copies on one thread (3.6 ms both), and the copies, which run before and
    after the threads' loop, are gone. Source: BLIS's edge handling in the packed panels
    (Van Zee & van de Geijn, TOMS 2015); TVM's imperfect ``split`` with peeled remainders
    (``transform.loop.peel``).
    """
    if pad_k > 1:
        sch.pad_einsum(block, [1, 1, pad_k])
    blk = sch.get(block)
    m, n, k = (d.extent for d in blk.dims)
    p = goto_params(ctx.target, m, n, k, threads, bits, tile)
    mr, nr = p.mr, p.nr
    tiles = -(-m // mr)

    panels = -(-n // nr)

    def covers(t, count, size, extent):   # t chunks of ceil(count / t) tiles: each gets some
        return t == 1 or (count >= t and -(-extent // (-(-count // t) * size)) == t)
    def splits(t):   # (over M, over N): N only where it has more columns than M has rows
        return covers(t, tiles, mr, m), n > m and covers(t, panels, nr, n)
    tcands = [t for t in range(1, threads + 1) if any(splits(t))]
    t = int(categorical(sch, tcands, tcands[-1])) if len(tcands) > 1 else 1
    by_m, by_n = splits(t)
    split_n = t > 1 and by_n and (not by_m or bool(int(categorical(sch, [1, 0], int(EDGE_SPLIT_N)))))
    per = tiles if split_n else -(-tiles // t)
    mc_tiles = block_size(sch, per, p.mc // mr)
    per_n = -(-panels // t) if split_n else panels
    nc_tiles = panel_block(sch, per_n, p.nc // nr)
    kc = block_size(sch, k, p.kc)
    b_transposed = blk.info.operand_dims[1][-1:] == (2,)
    # B is packed when its panels are partial: the packed panels are aligned and whole
    packed = packs_b(min(m, per * mr), mr, nr, b_transposed) or n % nr != 0
    pack = categorical(sch, [0, 1], int(packed))
    # A packed or read in place (not for one register tile per MC block: no micro-panels)
    pack_a = 0 if int(mc_tiles) == 1 else categorical(sch, [0, 1], int(PACK_A))
    unroll = unroll_factor(sch, int(kc), UNROLL_K)
    prefetch = 0 if int(mc_tiles) == 1 else \
        categorical(sch, [0, 1], int(prefetches_c(ctx.target, min(m, per * mr), min(n, per_n * nr), bits)))
    goto_loop_nest(sch, block, t, split_n, mr, nr, mc_tiles, nc_tiles, kc, bool(int(pack)), unroll,
                   per_thread=(per_n * nr if split_n else per * mr) if t > 1 else None,
                   pack_a=bool(int(pack_a)), prefetch_c=bool(int(prefetch)))
    if b_transposed and int(pack):   # B's panels packed as (K, NR) in 8 x 8 transposes
        mark_avx2_transposes(sch, block, ctx.target, bits)


@dataclasses.dataclass(frozen=True)
class GotoDecisions:
    """Sampled sizes of :func:`~mlc_mlir.schedule.cpu_recipes.goto_loop_nest` (ints or
    ``ExprRV`` s): threads, whether they split N, the ``MR x NR`` register tile, register
    tiles per M block, panels per N block, and KC."""

    threads: int
    split_n: bool
    mr: int
    nr: int
    mc_tiles: int
    nc_tiles: int
    kc: int


def goto_decisions(sch: Schedule, ctx: RuleContext, m: int, n: int, k: int, threads: int,
                   bits: int, panel: int = 0, tile: Optional[Tuple[int, int]] = None) -> GotoDecisions:
    """Sample the Goto nest of an ``(M, N, K)`` contraction with at most ``threads`` threads,
    the defaults from :func:`~mlc_mlir.schedule.cpu_recipes.goto_params`, in order:

    * ``t`` = threads (:func:`~mlc_mlir.schedule.cpu_recipes.thread_splits`: M divisible with
      at least Goto's MR rows per thread, or N > M divisible into ``t * NR`` columns; default
      the most); where both splits are possible, whether they split N (the default) or M
      (structural);
    * ``NR`` (unless ``panel``: an mmt4d's packed panel width) then ``MR``: the register tile
      (:func:`matmul_register_tiles`; the default MR is Goto's, or the row count nearest it
      among the tiles of a sampled NR);
    * ``MC / MR``, ``NC / NR`` and ``KC``: cache blocks around Goto's MC, NC and KC
      (cache-derived; :func:`~.common.block_size`).

    ``tile`` replaces Goto's register tile (``goto_params(..., tile=...)``) as the default.
    """
    p = goto_params(ctx.target, m, n, k, threads, bits, tile)
    def nr0(t):
        return panel or split_tile(m, n, t, p.mr, p.nr)
    # thread counts that split M or N (goto_params' rule: its choice is the largest)
    tcands = [t for t in range(1, threads + 1) if t == 1 or any(thread_splits(m, n, t, p.mr, nr0(t)))]
    t = categorical(sch, tcands, p.threads) if len(tcands) > 1 else 1
    splits_m, splits_n = thread_splits(m, n, t, p.mr, nr0(t)) if t > 1 else (False, False)
    split_n = splits_n and (not splits_m or bool(int(categorical(sch, [1, 0], 1))))
    mt, nt = (m, n // t) if split_n else (m // t, n)
    tiles = matmul_register_tiles(ctx.target, bits, mt, panel or nt, tile)
    nr = panel or categorical(sch, list(tiles), tile_width(nt, p.nr))
    # Goto's MR, or the tile nearest it for a sampled NR whose tiles do not include it
    dmr = largest_divisor(mt, p.mr)
    rows = tiles.get(int(nr)) or [dmr]
    mr = categorical(sch, rows, min(rows, key=lambda r: (abs(r - dmr), r)))
    return GotoDecisions(t, split_n, mr, nr, block_size(sch, mt // mr, p.mc // mr),
                         panel_block(sch, nt // nr, p.nc // nr), block_size(sch, k, p.kc))


def epilogue_at_tile(sch: Schedule, epilogues, one_kc_block: bool, default: int) -> bool:
    """Where a Goto nest runs its fused epilogue (structural decision): on each ``MR x NR``
    register tile right after its k loop (1: C zeroed and summed in registers, stored once by
    the epilogue), or on each ``M / threads x NC`` block of C after the block's k loops (0: C
    stored, then read back from L1/L2). Sampled where K is one KC block (``one_kc_block``: the
    tile's sums are final after its k loop). Defaults: the register tile for a packed GEMM
    (light ResNet-50's 1x1 convolutions with their batch norm, residual add and relu:
    ``benchmarks/results/models_cpu_2026-11-27_znver3_session24.txt``), the NC block for a
    matmul (not measured better; the tuner samples both).
    Source: oneDNN post-ops and onnxruntime's NCHWc kernels (epilogue on the accumulators),
    TVM ``reverse_compute_at`` at the innermost tile."""
    if not epilogues or not one_kc_block:
        return False
    return bool(int(categorical(sch, [0, 1], default)))


def padded_row_tiles(target: Target, m: int, n: int, k: int, threads: int, bits: int,
                     nr: int) -> Tuple[List[int], int]:
    """``(candidates, default)`` of the register tile's rows that a padded ``(M, N, K)``
    contraction with ``NR``-wide tiles pads its M for (:func:`schedule_mmt4d`): only where
    Goto's rows (:func:`~mlc_mlir.schedule.cpu_recipes.goto_params`) pad M
    (:func:`~mlc_mlir.schedule.cpu_recipes.goto_padding`; else ``[Goto's MR]``), the rows whose
    ``MR * NR / lanes`` accumulators are at least
    :data:`~mlc_mlir.schedule.cpu_recipes.FMAS_IN_FLIGHT` and fit the registers with the
    ``NR / lanes`` B vectors and one A broadcast; default the one that pads M least, then the
    nearest Goto's. ResNet's 49-row im2col GEMMs on AVX2: 5 x 16 pads 49 to 50 rows where
    Goto's 4 x 16 pads to 52 (6 x 16: 54), with 10 accumulators instead of 8.
    Source: BLIS's micro-kernel shapes (Low et al., TOMS 2016)."""
    p = goto_params(target, m, n, k, threads, bits)
    mm = goto_padding(target, m, n, k, threads, bits)[0]
    v = max(1, nr // target.vector_lanes(bits))
    cands = [r for r in range(1, m + 1)
             if r * v >= FMAS_IN_FLIGHT and r * v + v + 1 <= target.vector_registers]
    if mm == 1 or not cands:
        return [p.mr], p.mr
    def padded(r):
        mult = goto_padding(target, m, n, k, threads, bits, (r, nr))[0]
        return -(-m // mult) * mult
    return cands, min(cands, key=lambda r: (padded(r), abs(r - p.mr)))


def schedule_mmt4d(sch: Schedule, block: BlockRV, ctx: RuleContext) -> None:
    """``linalg.mmt4d`` with ``M0 = K0 = 1`` (a matmul whose constant B was packed into
    ``(N / NR, K, NR)`` panels at compile time): M is padded (``pad_einsum``) to the multiple
    :func:`~mlc_mlir.schedule.cpu_recipes.goto_padding` asks of the equivalent matmul (M is
    not padded when a register tile of at least 3/4 of the full tile's rows divides it:
    :func:`~mlc_mlir.schedule.cpu_recipes.register_rows`) for the register tile's rows of
    :func:`padded_row_tiles` (sampled where Goto's rows pad M), then the matmul's nest
    (:func:`~mlc_mlir.schedule.cpu_recipes.goto_loop_nest`) on the panels, its decisions
    those of :func:`goto_decisions` with NR the panel width, then the k-unroll
    (:func:`unroll_factor`). An unpadded op fuses its elementwise epilogue chain (batch norm,
    residual add, relu of a 1x1 convolution, moved into the ``(M, N / NR, 1, NR)`` shape by
    :class:`~mlc_mlir.pipeline.layout_passes.PropagateReshapes`), placed by
    :func:`epilogue_at_tile`.

    Shapes: A (M, K, 1, 1), B (N / NR, K, NR, 1), C (M, N / NR, 1, NR); float dtypes.
    """
    blk = sch.get(block)
    m, panels, k, _, nr, _ = (d.extent for d in blk.dims)
    bits = element_bits(blk)
    threads = ctx.threads if worth_threads(ctx, blk) else 1
    rows, mr = padded_row_tiles(ctx.target, m, panels * nr, k, threads, bits, nr)
    tile = (int(categorical(sch, rows, mr)), nr) if len(rows) > 1 else None
    mm = goto_padding(ctx.target, m, panels * nr, k, threads, bits, tile)[0]
    if mm > 1:
        sch.pad_einsum(block, [mm, 1, 1, 1, 1, 1])
        m = blk.dims[0].extent
    epi = [] if mm > 1 else claim_epilogues(sch, blk, ctx)
    d = goto_decisions(sch, ctx, m, panels * nr, k, threads, bits, panel=nr, tile=tile)
    unroll = unroll_factor(sch, int(d.kc), UNROLL_K)
    goto_loop_nest(sch, block, d.threads, d.split_n, d.mr, nr, d.mc_tiles, d.nc_tiles, d.kc, False,
                   unroll, epi, epilogue_at_tile=epilogue_at_tile(sch, epi, int(d.kc) == k, 1))


def schedule_batch_matmul(sch: Schedule, block: BlockRV, ctx: RuleContext) -> None:
    """``linalg.batch_matmul`` ``(b, i, j, k)``: loops ``b0 i0 b1 i1 j0 k i2 (vectorized) j1``;
    threads over the batches or the rows (sampled where the threads divide both; default the
    batches, M when there are fewer batches than threads), their count sampled from
    :func:`~.common.thread_candidates` (default: the most); an ``MR x NR``
    register tile vectorized inside the k loop, ``[M/T/MR, MR]`` and ``[N/NR, NR]`` by
    ``sample_perfect_tile`` bounded by :func:`register_tile_bounds` (default: Goto's tile of
    :func:`~mlc_mlir.schedule.cpu_recipes.goto_params` shrunk to divisors); the k loop
    unrolled by :func:`unroll_factor`; the elementwise epilogue chain fused per register tile
    row (``j0``). The init of an unpadded op whose operands no other op of the unit computes
    is decomposed into the k loop: each register tile is zeroed right before its k loop,
    instead of a memset of all of C before the threads' loop (serial, and C read back from
    L2/L3 by the tiles; ``benchmarks/results/models_cpu_2026-11-27_znver3_r50-perf.txt``), as
    the Goto nest does with K in one KC block
    (:func:`~mlc_mlir.schedule.cpu_recipes.goto_loop_nest`). M, N and K are padded
    (``pad_einsum``) to multiples of ``threads * MR``, NR and ``UNROLL_K`` where they are not
    (:func:`~mlc_mlir.schedule.cpu_recipes.batch_matmul_padding`; an epilogue of a padded op
    keeps its own rule).

    Shapes: A (B, M, K), B (B, K, N), C (B, M, N).

    Raises ``ScheduleError`` for a block of other than 4 dims (:func:`~.common.rule_block`).
    """
    blk, (nb, m, n, k) = rule_block(sch, block, "batch_matmul", "bijk")
    bits = element_bits(blk)
    epi = pad_or_fuse_epilogues(sch, block, ctx, batch_matmul_padding(ctx.target, nb, m, n, k, ctx.threads, bits))
    nb, m, n, k = (d.extent for d in blk.dims)
    p = goto_params(ctx.target, m, n, k, ctx.threads, bits)
    bound = register_tile_bounds(ctx.target, bits)
    b, i, j, kk = sch.get_loops(block)
    # the axis over the threads: the batches (default, where the threads divide them) or the
    # rows (each thread then reads every batch's B; structural)
    axes = [a for a, e in enumerate((nb, m)) if largest_divisor(e, ctx.threads) > 1]
    axis = (int(categorical(sch, axes, axes[0])) if len(axes) > 1 else axes[0]) if axes else None
    on_batch, on_rows = axis == 0, axis == 1
    tcands = thread_candidates(nb if on_batch else m, ctx.threads)
    t = categorical(sch, tcands, tcands[-1]) if on_batch or on_rows else 1
    b0, b1 = sch.split(b, [t if on_batch else 1, None])
    i0, irest = sch.split(i, [t if on_rows else 1, None])
    mt = m // t if on_rows else m
    mr = largest_divisor(mt, p.mr)
    i1, i2 = sch.split(irest, perfect_tile(sch, irest, 2, bound["mr"], [mt // mr, mr]))
    nr = tile_width(n, p.nr)
    j0, j1 = sch.split(j, perfect_tile(sch, j, 2, bound["nr"], [n // nr, nr]))
    unroll = unroll_factor(sch, k, p.unroll_k)
    sch.reorder(b0, i0, b1, i1, j0, kk, i2, j1)
    if on_batch or on_rows:
        sch.parallel(b0 if on_batch else i0)
    for e in epi:
        sch.reverse_compute_at(e, j0)
    cur = sch.get(block)
    if cur.info.init and cur.padding is None and set(cur.info.producers) <= {cur.info.init} \
            and not cur.partial_dims():
        # each MR x NR tile of C zeroed right before its k loop (in registers), not all of C
        # by a memset before the threads' loop (a serial pass over C, read back by the tiles)
        sch.decompose_reduction(block, kk)
    if unroll > 1:
        sch.unroll(kk, unroll)
    sch.vectorize(i2)
