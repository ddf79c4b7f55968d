"""Stochastic schedule rules of the contractions: multi-level tiling of ``linalg.matmul`` in
the Goto structure, of ``linalg.batch_matmul``, and a tiled direct convolution, each sampling the
knobs that its default rule (:mod:`mlc_mlir.schedule.rules`) fixes from the target's registers
and caches, so the default schedule is one point of the space.

Source: TVM MetaSchedule ``MultiLevelTiling``; Goto & van de Geijn, "Anatomy of
High-Performance Matrix Multiplication" (2008).
"""

from __future__ import annotations

from typing import Dict, List, Sequence

from ..errors import ScheduleError
from ..schedule.cpu_recipes import batch_matmul_padding, goto_padding, goto_params, packs_b, thread_splits
from ..schedule.factors import divisors
from ..schedule.rules.common import RuleContext, element_bits, largest_divisor, worth_threads
from ..schedule.rules.epilogue import claim_epilogues
from ..schedule.schedule import Schedule
from ..schedule.state import BlockRV
from ..target import Target
from .space_sampling import TILE_VECTORS, categorical, sample_tile, thread_candidates

#: Unroll factors of the matmul's k loop (code-size choices, not machine constants).
UNROLL_FACTORS = (1, 2, 4, 8)

#: Multiples of the cache-derived blocks (Goto's MC, NC, KC) the matmul space offers.
BLOCK_SCALES = (0.25, 0.5, 1.0, 2.0)

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


def near_divisors(extent: int, center: int, scales: Sequence[float] = BLOCK_SCALES) -> List[int]:
    """Divisors of ``extent`` nearest below ``center * s`` for each scale ``s`` (sorted,
    unique; always includes the one for scale 1)."""
    return sorted({largest_divisor(extent, max(1, int(center * s))) for s in scales})


def matmul_register_tiles(target: Target, bits: int, mt: int, n: int) -> Dict[int, List[int]]:
    """Register tiles ``{NR: [MR, ...]}`` of a matmul with ``mt`` rows per thread and ``n``
    columns, derived from the target's vector lanes and registers.

    ``NR`` is 1 to 4 vectors (dividing ``n``); ``MR`` divides ``mt`` with the ``MR * NR / lanes``
    accumulators, the ``NR / lanes`` B vectors and one A broadcast within the vector registers
    (the register budget), and at least ``vector_registers / 4`` accumulators (enough
    independent FMAs to hide their latency). Goto's tile (:func:`~mlc_mlir.schedule.cpu_recipes.goto_params`, shrunk to
    divisors) is always included, so tiny or odd extents still have one tile.
    """
    lanes = target.vector_lanes(bits)
    regs = target.vector_registers
    p = goto_params(target, max(mt, 1), n, 1, 1, bits)
    out: Dict[int, List[int]] = {}
    for v in TILE_VECTORS:
        nr = v * lanes
        if n % nr:
            continue
        mrs = [d for d in divisors(mt) if regs // 4 <= d * v <= regs - v - 1]
        if mrs:
            out[nr] = mrs
    dnr, dmr = largest_divisor(n, p.nr), largest_divisor(mt, p.mr)
    out[dnr] = sorted(set(out.get(dnr, [])) | {dmr})
    return dict(sorted(out.items()))



# ------------------------------------------------------------------------- rules by kind
def sample_matmul(sch: Schedule, block: BlockRV, ctx: RuleContext) -> None:
    """Multi-level tiling of ``linalg.matmul`` (matmul, dense) in the Goto structure, its knobs
    around :func:`~mlc_mlir.schedule.cpu_recipes.goto_params` for the target.

    Loop nest ``i0 (parallel) j0 k0 i1 j1 i2 k1 (unrolled) i3 j2 (vectorized MR x NR)``, as
    :func:`~mlc_mlir.schedule.cpu_recipes.schedule_matmul_goto`. Knobs, each a
    ``sample_categorical`` (a list may derive from an earlier decision; it is recorded):

    * ``t`` = threads (:func:`~mlc_mlir.schedule.cpu_recipes.thread_splits`: M divisible with at
      least Goto's MR rows per thread, or N > M divisible into ``t * NR`` columns; none when
      the matmul is too small to pay for a fork); with a single candidate the loop is not
      parallel. Where both splits are possible, whether they split N (the recipe's default)
      or M (structural).
    * ``NR`` then ``MR``: the register tile (:func:`matmul_register_tiles`).
    * ``MC / MR``, ``NC / NR`` and ``KC``: cache blocks at :data:`BLOCK_SCALES` times Goto's
      MC, NC and KC (cache-derived), shrunk to divisors.
    * pack B (``cache_read`` at ``k0``) or not (structural).
    * the unroll factor of ``k1``: :data:`UNROLL_FACTORS` dividing KC (structural).

    The default schedule (:func:`~mlc_mlir.schedule.rules.matmul.schedule_matmul`) is the point
    of Goto's values (:func:`~.space_rules.default_point`). The elementwise epilogue chain (bias, relu) is
    computed at ``j0``. Extents that are not multiples of the register tile, threads or a good
    KC are padded first (``pad_einsum`` with
    :func:`~mlc_mlir.schedule.cpu_recipes.goto_padding`, as the default rule; the epilogue then
    keeps its own rule). The init is decomposed as the recipe does. Shapes: A (M, K) (or transposed), B (K, N) or (N, K), C (M, N).

    Raises
    ------
    ScheduleError
        If the block does not have 3 dims.
    """
    blk = sch.get(block)
    if len(blk.dims) != 3:
        raise ScheduleError(f"space rule matmul: '{blk.name}' has {len(blk.dims)} dims; expected (i, j, k)")
    m, n, k = (d.extent for d in blk.dims)
    bits = element_bits(blk)
    threads = ctx.threads if worth_threads(ctx, blk) else 1   # as the default rule
    padding = goto_padding(ctx.target, m, n, k, threads, bits)
    if padding != (1, 1, 1):   # as the default rule: odd extents padded, epilogue left apart
        sch.pad_einsum(block, list(padding))
        m, n, k = (d.extent for d in blk.dims)
    p = goto_params(ctx.target, m, n, k, threads, bits)
    i, j, kk = sch.get_loops(block)
    nr0 = largest_divisor(n, p.nr)
    # thread counts that split M or N (goto_params' rule: its choice is the largest)
    tcands = [t for t in range(1, threads + 1) if t == 1 or any(thread_splits(m, n, t, p.mr, nr0))]
    t = int(categorical(sch, tcands, p.threads)) if len(tcands) > 1 else 1
    splits_m, splits_n = thread_splits(m, n, t, p.mr, nr0) if t > 1 else (False, False)
    # threads over N (structural): sampled where both splits are possible
    over_n = splits_n and (not splits_m or bool(int(categorical(sch, [1, 0], 1))))
    mt, nt = (m, n // t) if over_n else (m // t, n)
    tiles = matmul_register_tiles(ctx.target, bits, mt, nt)
    nr = categorical(sch, list(tiles), largest_divisor(nt, p.nr))
    mr = categorical(sch, tiles[int(nr)], largest_divisor(mt, p.mr))
    rows = mt // int(mr)
    mcb = categorical(sch, near_divisors(rows, max(p.mc // int(mr), 1)), largest_divisor(rows, max(p.mc // int(mr), 1)))
    cols = nt // int(nr)
    ncb = categorical(sch, near_divisors(cols, max(p.nc // int(nr), 1)), largest_divisor(cols, max(p.nc // int(nr), 1)))
    kc = categorical(sch, near_divisors(k, p.kc), largest_divisor(k, p.kc))
    b_transposed = blk.info.operand_dims[1][-1:] == (2,)   # B stored (N, K): dense
    pack = categorical(sch, [0, 1], int(packs_b(mt, int(mr), int(nr), b_transposed)))
    unroll = int(categorical(sch, [u for u in UNROLL_FACTORS if int(kc) % u == 0],
                              largest_divisor(int(kc), p.unroll_k)))
    if over_n:
        outer, j = sch.split(j, [t, None])
    else:
        outer, i = sch.split(i, [t, None])
    i1, i2, i3 = sch.split(i, [None, mcb, mr])
    j0, j1, j2 = sch.split(j, [None, ncb, nr])
    k0, k1 = sch.split(kk, [None, kc])
    sch.reorder(outer, j0, k0, i1, j1, i2, k1, i3, j2)
    if len(tcands) > 1:
        sch.parallel(outer)
    epi = claim_epilogues(sch, blk, ctx) if padding == (1, 1, 1) else []
    for e in epi:
        sch.reverse_compute_at(e, j0)
    info = blk.info
    if info.init and epi:
        sch.decompose_reduction(block, k0)
    elif info.init and t > 1 and (padding == (1, 1, 1) or set(info.producers) <= {info.init}):
        sch.decompose_reduction(block, j0)
    if int(pack):   # structural knob: see the module docstring
        packed = sch.cache_read(block, 1, "local")
        sch.compute_at(packed, k0)
    if unroll > 1:
        sch.unroll(k1, unroll)
    sch.vectorize(i3)


def sample_batch_matmul(sch: Schedule, block: BlockRV, ctx: RuleContext) -> None:
    """``linalg.batch_matmul`` ``(b, i, j, k)`` as
    :func:`~mlc_mlir.schedule.rules.matmul.schedule_batch_matmul` with sampled sizes: loops
    ``b0 i0 b1 i1 j0 k i2 (vectorized) j1``; threads over the batches (or over M when the
    batches do not divide over them), sampled from :func:`~.space_sampling.thread_candidates`; ``[M/T/MR, MR]``
    and ``[N/NR, NR]`` by ``sample_perfect_tile`` bounded by :func:`register_tile_bounds`; the
    k loop unrolled by a sampled factor of :data:`UNROLL_FACTORS` (structural: ``unroll``
    records its factor as a constant), epilogues at ``j0``. Odd extents are padded first
    (:func:`~mlc_mlir.schedule.cpu_recipes.batch_matmul_padding`, as the default rule; the
    epilogue then keeps its own rule).

    Raises
    ------
    ScheduleError
        If the block does not have 4 dims.
    """
    blk = sch.get(block)
    if len(blk.dims) != 4:
        raise ScheduleError(f"space rule batch_matmul: '{blk.name}' has {len(blk.dims)} dims; "
                            "expected (b, i, j, k)")
    nb, m, n, k = (d.extent for d in blk.dims)
    padding = batch_matmul_padding(ctx.target, nb, m, n, k, ctx.threads, element_bits(blk))
    if padding != [1, 1, 1, 1]:   # as the default rule: odd extents padded, epilogue left apart
        sch.pad_einsum(block, padding)
        nb, m, n, k = (d.extent for d in blk.dims)
    bound = register_tile_bounds(ctx.target, element_bits(blk))
    b, i, j, kk = sch.get_loops(block)
    on_batch = largest_divisor(nb, ctx.threads) > 1
    on_rows = not on_batch and largest_divisor(m, ctx.threads) > 1
    tcands = thread_candidates(nb if on_batch else m, ctx.threads)
    p = goto_params(ctx.target, m, n, k, ctx.threads, element_bits(blk))
    t = categorical(sch, tcands, max(tcands)) if on_batch or on_rows else 1
    b0, b1 = sch.split(b, [t if on_batch else 1, None])
    i0, irest = sch.split(i, [t if on_rows else 1, None])
    mt = m // int(t) if on_rows else m
    mr = largest_divisor(mt, p.mr)
    i1, i2 = sch.split(irest, sample_tile(sch, irest, 2, bound["mr"], [mt // mr, mr]))
    nr = largest_divisor(n, p.nr)
    j0, j1 = sch.split(j, sample_tile(sch, j, 2, bound["nr"], [n // nr, nr]))
    ucands = [u for u in UNROLL_FACTORS if k % u == 0]
    unroll = int(categorical(sch, ucands, largest_divisor(k, p.unroll_k)))
    sch.reorder(b0, i0, b1, i1, j0, kk, i2, j1)
    if on_batch or on_rows:
        sch.parallel(b0 if on_batch else i0)
    epi = claim_epilogues(sch, blk, ctx) if padding == [1, 1, 1, 1] else []
    for e in epi:
        sch.reverse_compute_at(e, j0)
    if unroll > 1:
        sch.unroll(kk, unroll)
    sch.vectorize(i2)


def sample_conv2d(sch: Schedule, block: BlockRV, ctx: RuleContext) -> None:
    """``linalg.conv_2d_nchw_fchw`` as :func:`~mlc_mlir.schedule.rules.conv.schedule_conv2d`
    with sampled knobs: loops ``n f0 (parallel) f1 oh ow0 c kh kw ow1 (vectorized)``; output
    channels over sampled threads (:func:`~.space_sampling.thread_candidates`, when the block is worth threads);
    the output row tile ``[OW/WR, WR]`` by ``sample_perfect_tile`` with ``WR`` at most half the
    vector registers' lanes; the window unrolled or not (``sample_categorical([0, 1])``,
    structural), epilogues at ``ow0``. Shapes: x (N, C, H, W) (padded), w (F, C, KH, KW)."""
    blk = sch.get(block)
    n, f, oh, ow, c, kh, kw = sch.get_loops(block)
    ext = [d.extent for d in blk.dims]
    lanes = ctx.target.vector_lanes(element_bits(blk))
    tcands = thread_candidates(ext[1], ctx.threads) if worth_threads(ctx, blk) else [1]
    t = categorical(sch, tcands, max(tcands)) if len(tcands) > 1 else 1
    f0, f1 = sch.split(f, [t, None])
    wr_max = lanes * max(1, ctx.target.vector_registers // 2)
    wr = largest_divisor(ext[3], wr_max)
    ow0, ow1 = sch.split(ow, sample_tile(sch, ow, 2, wr_max, [ext[3] // wr, wr]))
    unroll = categorical(sch, [0, 1], int(ext[5] * ext[6] <= ctx.target.vector_registers))
    sch.reorder(n, f0, f1, oh, ow0, c, kh, kw, ow1)
    if len(tcands) > 1:
        sch.parallel(f0)
    epi = claim_epilogues(sch, blk, ctx)
    for e in epi:
        sch.reverse_compute_at(e, ow0)
    if int(unroll):   # structural knob
        sch.unroll(kw)
        sch.unroll(kh)
    sch.vectorize(ow1)

