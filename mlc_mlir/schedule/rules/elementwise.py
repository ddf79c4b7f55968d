"""Rule for elementwise, broadcast and injective blocks (all iteration dims parallel): parallel
over the outermost dim that has work, vectorized along the innermost dim; the vector tile and the
thread count are sampled decisions with target-derived defaults. Source: TVM
``schedule_injective`` (TOPI x86), dlight's elementwise rule (fuse, parallel, vectorize) and
MetaSchedule's ``ParallelizeVectorizeUnroll``."""

from __future__ import annotations

from typing import Optional

from ..cpu_recipes import tile_width
from ..schedule import Schedule
from ..state import BlockRV
from .common import (RuleContext, categorical, element_bits, parallelize_first, vector_candidates,
                     vector_tile)


def contiguous_last(blk) -> bool:
    """Whether every operand that the innermost dim indexes has it as its own innermost dim (a
    vector along it is a contiguous load/store; a transpose's input is not)."""
    last = len(blk.dims) - 1
    return all(not dims or last not in dims or dims[-1] == last for dims in blk.info.operand_dims)


def vectorizable(blk, ctx: RuleContext) -> bool:
    """Whether an all-parallel block's innermost dim may be vectorized: its operands are
    contiguous along it (:func:`contiguous_last`) and every indexing map and body is one the
    vectorizer accepts (``OpFacts.simple_maps``: no ``tensor.extract`` gather, no ``5 - i``)."""
    facts = ctx.fact(blk)
    return contiguous_last(blk) and (facts is None or facts.simple_maps)


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
    (:func:`~.common.parallelize_first` with ``hoist``). A static innermost dim that
    the lanes do not divide gets whole vectors and a peeled partial last tile (:func:`lane_tile`).
    A dynamic innermost dim is split into ``(None, V)`` (the last tile partial, vectorized with masks); a dynamic outermost
    dim is made parallel as it is. Shapes: any rank >= 1; dtypes: any the vectorizer accepts
    (float16/32/64, int8..64).

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
    if cands:
        default = vector_tile(ctx, blk, extents[-1])
        whole = lane_tile(ctx, blk, extents[-1])
        if whole is not None:
            cands, default = sorted(set(cands) | {whole}), whole
        v = categorical(sch, cands, default)
        outer_last, inner = sch.split(loops[-1], [None, v])   # dynamic or ragged: a partial last tile
        loops[-1] = outer_last
        extents[-1] = None if extents[-1] is None else -(-extents[-1] // v)
    parallelize_first(sch, ctx, blk, loops, extents, hoist=True)
    if inner is not None:
        sch.vectorize(inner)


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
    1.01 ms, 1x128x28x28 -> 128 1.01 -> 0.97 ms (8 x 4 tiles). Source: the blocked transpose
    of TVM's ``schedule_injective`` on x86 and of oneDNN's reorders.
    """
    blk = sch.get(block)
    info = blk.info
    facts = ctx.fact(blk)
    if info.num_inputs != 1 or len(info.operand_dims) != 2 or contiguous_last(blk) or \
            (facts is not None and not facts.simple_maps) or not info.operand_dims[0]:
        return False
    extents = [d.extent for d in blk.dims]
    if None in extents:
        return False
    dn = len(extents) - 1
    lanes = ctx.target.vector_lanes(element_bits(blk))
    vm = max(1, lanes // 2)
    vn = tile_width(extents[dn], lanes)
    # dm: the input's innermost dim that whole tiles divide (a filter's 3x3 window is skipped);
    # partial tiles measured slower than scalar loops (2 x 8: 0.39 vs 0.13 ms)
    dm = next((d for d in reversed(info.operand_dims[0]) if d == dn or extents[d] % vm == 0), dn)
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
    return True

