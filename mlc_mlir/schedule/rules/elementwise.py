"""Default rule for elementwise, broadcast and injective blocks (all iteration dims parallel):
parallel over the outermost dim that has work, vectorized along the innermost dim. Source: TVM
``schedule_injective`` (TOPI x86) and dlight's elementwise rule (fuse, parallel, vectorize)."""

from __future__ import annotations

from ..schedule import Schedule
from ..state import BlockRV
from .common import RuleContext, parallelize_first, vector_tile


def contiguous_last(blk) -> bool:
    """Whether every operand that the innermost dim indexes has it as its own innermost dim (a
    vector along it is a contiguous load/store; a transpose's input is not)."""
    last = len(blk.dims) - 1
    return all(not dims or last not in dims or dims[-1] == last for dims in blk.info.operand_dims)


def schedule_elementwise(sch: Schedule, block: BlockRV, ctx: RuleContext) -> None:
    """Schedule an all-parallel block: ``d0 .. [dp0 (parallel) dp1] .. dn0, dn1 (vectorized)``.

    The innermost dim is split into ``(E / V, V)`` with ``V`` up to 4 vectors of the target's
    lanes (:func:`~.common.vector_tile`) and vectorized when its operands are contiguous along
    it and every indexing map is one the vectorizer accepts; the outermost dim with an extent above 1 is split over the threads (a divisor of its
    extent) when the block moves at least an L1d per thread. Shapes: any rank >= 1; dtypes:
    any the vectorizer accepts (float16/32/64, int8..64).

    Parameters
    ----------
    sch : Schedule
    block : BlockRV
        A block whose dims are all parallel.
    ctx : RuleContext
    """
    blk = sch.get(block)
    loops = sch.get_loops(block)
    extents = [d.extent for d in blk.dims]
    facts = ctx.fact(blk)
    vectorizable = contiguous_last(blk) and (facts is None or facts.simple_maps)
    v = vector_tile(ctx, blk, extents[-1]) if vectorizable else 1
    inner = None
    if v > 1:
        outer_last, inner = sch.split(loops[-1], [extents[-1] // v, v])
        loops[-1] = outer_last
        extents[-1] //= v
    parallelize_first(sch, ctx, blk, loops, extents)
    if inner is not None:
        sch.vectorize(inner)
