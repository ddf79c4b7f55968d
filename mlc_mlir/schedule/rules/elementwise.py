"""Rule for elementwise, broadcast and injective blocks (all iteration dims parallel): parallel
over the outermost dim that has work, vectorized along the innermost dim; the vector tile and the
thread count are sampled decisions with target-derived defaults. Source: TVM
``schedule_injective`` (TOPI x86), dlight's elementwise rule (fuse, parallel, vectorize) and
MetaSchedule's ``ParallelizeVectorizeUnroll``."""

from __future__ import annotations

from typing import Optional

from ...target import CACHE_LINE_BYTES
from ..cpu_recipes import tile_width
from ..schedule import Schedule
from ..state import BlockRV
from .common import (RuleContext, avx2_transposes, block_bytes, categorical, element_bits,
                     mark_avx2_transposes, parallelize_first, vector_candidates, vector_tile)
from .epilogue import claim_epilogues

#: Loop annotation (an int, 0 or 1) asking for non-temporal stores of the vectors the loop
#: writes (:mod:`mlc_mlir.pipeline.nontemporal` realizes it).
NONTEMPORAL = "mlc.nontemporal"

#: Half of a cache line, bytes (:func:`half_line_tile`).
HALF_LINE_BYTES = CACHE_LINE_BYTES // 2


def contiguous_last(info) -> bool:
    """Whether every operand of op ``info`` (an ``OpInfo``) that the innermost dim indexes has
    it as its own innermost dim (a vector along it is a contiguous load/store; a transpose's
    input is not)."""
    last = len(info.dims) - 1
    return all(not dims or last not in dims or dims[-1] == last for dims in info.operand_dims)


def vectorizable(blk, ctx: RuleContext) -> bool:
    """Whether an all-parallel block's innermost dim may be vectorized: its operands are
    contiguous along it (:func:`contiguous_last`) and every indexing map and body is one the
    vectorizer accepts (``OpFacts.simple_maps``: no ``5 - i``; a ``tensor.extract`` gather with
    such maps, ``OpFacts.gathers``, is vectorized with ``vectorize_nd_extract``)."""
    facts = ctx.fact(blk)
    return contiguous_last(blk.info) and (facts is None or facts.simple_maps or facts.gathers)


def lane_tile(ctx: RuleContext, blk, extent) -> Optional[int]:
    """For a static innermost ``extent`` above the target's lanes that they do not divide (a
    700-wide row with 16 lanes): the vector tile of whole vectors, up to
    :func:`~.common.vector_tile`'s size, with a partial last tile (peeled), instead of the
    largest divisor (a 50-lane tile is 3 full vectors and a masked one each step), for ops of
    rank >= 2 (their rows go to the threads); else None."""
    lanes = ctx.target.vector_lanes(element_bits(blk))
    if extent is None or extent <= lanes or extent % lanes == 0 or len(blk.dims) < 2:
        return None   # rank 1: threads split the vector loop itself, which is then not peeled
    return min(vector_tile(ctx, blk, None), extent // lanes * lanes)


def schedule_elementwise(sch: Schedule, block: BlockRV, ctx: RuleContext) -> None:
    """Schedule an all-parallel block: ``d0 .. [dp0 (parallel) dp1] .. dn0, dn1 (vectorized)``.

    The innermost dim is split into ``(E / V, V)`` and vectorized when its operands are
    contiguous along it and every indexing map is one the vectorizer accepts (:func:`vectorizable`),
    ``V`` sampled from :func:`~.common.vector_candidates` (default: up to 4 vectors of the
    target's lanes, :func:`~.common.vector_tile`); the outermost dim that the threads divide is
    split over sampled threads (a divisor of its extent; default: the most), its parallel loop
    outermost, when the block moves at least an L1d per thread
    (:func:`~.common.parallelize_first` with ``hoist``; with ``uneven`` where no extent it is
    worth threads at is divisible: its first loop of rows in chunks of ``ceil(E / t)``, unless
    a partial vector tile is peeled inside). In a block that streams past the
    last-level cache (:func:`streams_past_cache`) the loop over the vector tiles is annotated
    :data:`NONTEMPORAL` with a sampled 0 or 1 (default 1) and, unless its body computes a
    transcendental function (``OpFacts.transcendental``: bound by arithmetic, which half-width
    vectors would slow), the vectors default to half a cache line where the target's are a
    whole one (:func:`half_line_tile`). A static innermost dim that the lanes do not divide
    gets whole vectors and a peeled partial last tile (:func:`lane_tile`). A dynamic innermost
    dim is split into ``(None, V)`` (the last tile partial, vectorized with masks); a dynamic
    outermost dim is made parallel as it is. Where the extents are static and the vector tiles
    whole, the chain of
    elementwise consumers of the block's result over the same shape
    (:func:`~.epilogue.claim_epilogues`: single uses, no transposed operand) runs on each vector
    tile (``reverse_compute_at`` at the tile loop), so a GEMM's epilogue unit (scale + shift,
    residual add, relu) makes one pass over memory with one result buffer instead of one per
    op: light ResNet-50's 28 x 28 x 512 one, one thread, 0.131 -> 0.055 ms, its whole model
    39.9 -> 39.0 ms (2-core AMD EPYC znver5, loaded host; TVM ``FuseOps`` of injective chains).
    Shapes: any rank >= 1; dtypes: any the vectorizer accepts (float16/32/64, int8..64).

    Parameters
    ----------
    sch : Schedule
    block : BlockRV
        A block whose dims are all parallel.
    ctx : RuleContext
    """
    blk = sch.get(block)
    if transpose_tile(sch, block, ctx):
        return
    loops = sch.get_loops(block)
    extents = [d.extent for d in blk.dims]
    cands = vector_candidates(ctx, blk, extents[-1]) if vectorizable(blk, ctx) else []
    inner = None
    ragged = False   # a peeled partial vector tile: no partial thread chunk around it
    streaming = streams_past_cache(ctx, blk)
    if cands:
        default = vector_tile(ctx, blk, extents[-1])
        whole = lane_tile(ctx, blk, extents[-1])
        if whole is not None:
            cands, default = sorted(set(cands) | {whole}), whole
        facts = ctx.fact(blk)
        light = facts is None or not facts.transcendental
        half = half_line_tile(ctx, blk, extents[-1]) if streaming and light else None
        if half is not None:
            cands, default = sorted(set(cands) | {half}), half
        v = categorical(sch, cands, default)
        # a partial last tile is peeled, which consumes the tile loop: no annotation on it,
        # no epilogue attached to it
        whole = extents[-1] is not None and extents[-1] % v == 0
        ragged = not whole
        streaming = streaming and whole
        whole = whole and None not in extents   # static tiles: the chain tiled with them
        outer_last, inner = sch.split(loops[-1], [None, v])   # dynamic or ragged: a partial last tile
        loops[-1] = outer_last
        extents[-1] = None if extents[-1] is None else -(-extents[-1] // v)
    split = parallelize_first(sch, ctx, blk, loops, extents, hoist=True, uneven=not ragged)
    if inner is not None:
        tiles = split[1] if split is not None and split[0] == len(loops) - 1 else loops[-1]
        # its chain of elementwise consumers (a bias, a residual add, a relu after a GEMM's
        # output) runs on each vector tile: one pass over memory instead of one per op
        for e in claim_epilogues(sch, blk, ctx) if whole else ():
            sch.reverse_compute_at(e, tiles)
        sch.vectorize(inner)
        if streaming and sch.get(tiles).extent != 1:
            sch.annotate(tiles, NONTEMPORAL, categorical(sch, [0, 1], 1))


def half_line_tile(ctx: RuleContext, blk, extent) -> Optional[int]:
    """The lanes of a vector of half a cache line (32 bytes: 8 float32) where the target's
    vectors are a whole line or more (AVX-512) and they divide a static ``extent``; else None.

    A block that streams from memory reads its arguments where the caller put them: numpy's
    and PyTorch's buffers are 16-byte aligned, so every 64-byte load of such an argument spans
    two cache lines, a 32-byte load every other one. Measured on AMD EPYC znver5 (AVX-512),
    ``a + b`` of 2048x2048 float32 with 16-byte aligned inputs and non-temporal stores, one
    thread: 0.92 ms with 4 x 16 lanes, 0.62 ms with 8 lanes (regular stores: 0.91 / 0.89 ms);
    the same in C with ``_mm512`` / ``_mm256`` intrinsics: 0.91 / 0.62 ms, and 0.67 ms for
    64-byte aligned inputs with 64-byte vectors. A block bound by arithmetic loses: the
    ``gelu_tanh(a + b)`` of two 4096x1024 inputs took 12.8 ms with 8 lanes against 2.1 ms with
    4 x 16 (both with non-temporal stores), so the rule keeps whole vectors for bodies with a
    transcendental function. Used for blocks :func:`streams_past_cache` selects. Source: the split-load penalty of the Intel optimization
    manual (data alignment for AVX-512) and AMD's Zen software optimization guide."""
    bits = element_bits(blk)
    lanes = ctx.target.vector_lanes(bits)
    half = (HALF_LINE_BYTES * 8) // bits
    if extent is None or lanes * bits < 2 * HALF_LINE_BYTES * 8 or half < 2 or extent % half:
        return None
    return half


def streams_past_cache(ctx: RuleContext, blk) -> bool:
    """Whether a block moves at least the last-level cache's bytes (operands in all; the
    target's L3, else L2): its first results are evicted before it ends, so storing them past the
    caches (non-temporal stores) costs a consumer nothing and saves the read for ownership of
    every written line, a third of an ``a + b``'s memory traffic. False when the size or the
    cache is unknown. Source: the streaming stores of STREAM and of glibc's ``memcpy`` above a
    cache-derived threshold; oneDNN's elementwise kernels."""
    llc = ctx.target.l3_bytes or ctx.target.l2_bytes
    nbytes = block_bytes(blk)
    return bool(llc) and nbytes is not None and nbytes >= llc


def transpose_tile(sch: Schedule, block: BlockRV, ctx: RuleContext) -> bool:
    """Schedule a permuting copy (one input, e.g. ``linalg.transpose``, whose innermost dim is
    not the output's) as 2-D tiles: the output's innermost dim ``dn`` split by the largest power
    of two that divides it, up to the target's lanes and at least a quarter of them (8 of 16
    lanes for the 56 columns of an NHWC -> NCHW copy, 4 for 28),
    the dim ``dm`` indexing the input's innermost dim that half the lanes divide (the ``C`` of an
    ``F, C, 3, 3`` filter) split by half the lanes, the ``dm1 x dn1``
    tile innermost and vectorized (a ``vector.transpose`` of registers: both sides read and
    write whole vectors or runs), the tile loops ``dm0, dn0`` outermost and the first of them
    over the threads. Returns False (nothing
    recorded) for other blocks or extents without such divisors.

    Measured on a 2-core AVX2 EPYC, float32, one thread: NHWC -> NCHW of 1x56x56x64 0.98 ms as
    scalar loops, 0.60 ms with 8 x 8 tiles, 0.50 ms with 4 x 8; a 256x256x3x3 FCHW -> HWCF
    filter 2.4 -> 2.2 ms (4 x 8), 5.6 -> 2.2 ms in a loaded run. On a 2-core AVX-512 EPYC
    (znver5), one thread, a 3x3 convolution whose output goes back from NHWC to NCHW as 8 x 8
    tiles instead of scalar loops (16 lanes do not divide 56 or 28): 1x64x56x56 -> 64 1.04 ->
    1.01 ms, 1x128x28x28 -> 128 1.01 -> 0.97 ms (8 x 4 tiles). Where the target has the AVX2
    8 x 8 transpose (:func:`~.common.avx2_transposes`: 8 float32 lanes), the tiles are 8 x 8
    (when 8 divides ``dm``) and take that lowering (:func:`~.common.mark_avx2_transposes`):
    one thread of a 2-core AMD EPYC Zen 3, CPU time, against 4 x 8 tiles with the generic
    lowering: NHWC -> NCHW 1x56x56x64 0.106 -> 0.064 ms, 1x28x28x128 0.055 -> 0.043 ms, a
    512 x 768 matrix 0.182 -> 0.114 ms, NCHW -> NHWC 1x64x56x56 0.080 -> 0.078 ms; a 256 x 256
    x 3 x 3 filter to HWCF 0.189 -> 0.229 ms (a filter of constant weights is transposed once,
    at compile time). Source: the blocked transpose of TVM's ``schedule_injective`` on x86
    and of oneDNN's reorders.
    """
    blk = sch.get(block)
    info = blk.info
    facts = ctx.fact(blk)
    if info.num_inputs != 1 or len(info.operand_dims) != 2 or contiguous_last(info) or \
            (facts is not None and not facts.simple_maps) or not info.operand_dims[0]:
        return False
    extents = [d.extent for d in blk.dims]
    if None in extents:
        return False
    dn = len(extents) - 1
    bits = element_bits(blk)
    lanes = ctx.target.vector_lanes(bits)
    vn = tile_width(extents[dn], lanes)
    # square lanes x lanes tiles where the target has the AVX2 8 x 8 transpose, else half-height
    square = lanes == 8 and vn == lanes and avx2_transposes(ctx.target, bits)
    vm = lanes if square else max(1, lanes // 2)

    def tiled_dim(rows):
        # the input's innermost dim that whole tiles divide (a filter's 3x3 window is skipped);
        # partial tiles measured slower than scalar loops (2 x 8: 0.39 vs 0.13 ms)
        return next((d for d in reversed(info.operand_dims[0]) if d == dn or extents[d] % rows == 0), dn)
    dm = tiled_dim(vm)
    if dm == dn and square:   # no input dim that 8 divides: the half-height tiles
        square, vm = False, max(1, lanes // 2)
        dm = tiled_dim(vm)
    if dm == dn or vn < max(2, lanes // 4) or vm == 1:
        return False
    loops = sch.get_loops(block)
    n0, n1 = sch.split(loops[dn], [extents[dn] // vn, vn])
    m0, m1 = sch.split(loops[dm], [extents[dm] // vm, vm])
    rest = [d for d in range(len(loops)) if d not in (dm, dn)]
    order = [m0, n0] + [loops[d] for d in rest]
    sch.reorder(*order, m1, n1)
    # the tile loops outermost: a 3x3 filter's window loops would otherwise hold the parallel
    # loop inside them (one fork/join per tap)
    parallelize_first(sch, ctx, blk, order, [extents[dm] // vm, extents[dn] // vn] +
                      [extents[d] for d in rest])
    sch.vectorize(m1)
    if square:
        mark_avx2_transposes(sch, block, ctx.target, bits)
    return True
