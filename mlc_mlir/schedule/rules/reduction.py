"""Default rule for reductions (sum/mean/max/min, the row reductions of softmax, log_softmax
and layer_norm): parallel over the kept (parallel) dims, the reduced row vectorized. Source:
TVM dlight's CPU reduction rule and TOPI x86 ``schedule_reduce`` (parallel outer, vectorize
inner)."""

from __future__ import annotations

from ..schedule import Schedule
from ..state import BlockRV
from .common import RuleContext, largest_divisor, vector_tile, worth_threads


def schedule_reduction(sch: Schedule, block: BlockRV, ctx: RuleContext) -> None:
    """Schedule a block with reduction dims.

    * Row reductions (the only reduction dim is the innermost dim of the first input, e.g.
      softmax's max/sum over the last axis): the row is split into ``(C / V, V)`` and
      factorized (``rfactor``): V partial results accumulate in one vector register tile
      (vectorized), reduced to one value per row at the end. Reducing the whole row as one
      ``vector.multi_reduction`` lowers to a serial scalar chain (measured 2x slower than
      plain loops for softmax 512x1000), so it is not used.
    * Other reductions (the innermost input dim is kept, e.g. a sum over axis 0): the kept
      innermost dim is split into vectors and moved inside the reduction loops, so each
      reduction step is a vector accumulate.
    * The outermost kept dim with work is split over the threads.
    * Bodies that read iteration indices (``argmax``/``argmin``) or have several results are
      parallelized only: the vectorizer does not recognize their reductions.

    Parameters
    ----------
    sch : Schedule
    block : BlockRV
        A block with at least one reduction dim (``linalg.generic``; named reductions).
    ctx : RuleContext
    """
    blk = sch.get(block)
    fact = ctx.fact(blk)
    loops = sch.get_loops(block)
    dims = blk.dims
    par = [i for i, d in enumerate(dims) if d.kind == "parallel"]
    red = [i for i, d in enumerate(dims) if d.kind != "parallel"]
    vectorizable = fact is not None and not fact.reads_index and fact.num_results == 1
    first_in = blk.info.operand_dims[0] if blk.info.num_inputs else ()
    row = bool(first_in) and first_in[-1] in red
    order = list(par) + list(red)
    if order != list(range(len(dims))):
        sch.reorder(*[loops[i] for i in order])
    tiles = {i: loops[i] for i in range(len(dims))}
    vec_loop = None
    if vectorizable and not row and par and first_in and first_in[-1] in par \
            and first_in[-1] == par[-1]:
        # column reduction: vectors along the kept innermost dim, reduction loops outside
        d = par[-1]
        v = vector_tile(ctx, blk, dims[d].extent)
        if v > 1:
            o, i = sch.split(tiles[d], [dims[d].extent // v, v])
            sch.reorder(*([o] + [tiles[r] for r in red] + [i]))
            tiles[d] = o
            vec_loop = i
    elif vectorizable and row and len(red) == 1:
        # row reduction: partial results in one vector tile (rfactor), reduced once per row
        r = red[0]
        v = vector_tile(ctx, blk, dims[r].extent)
        if 1 < v < dims[r].extent:
            _, k1 = sch.split(tiles[r], [dims[r].extent // v, v])
            sch.rfactor(k1)
            vec_loop = k1
    if worth_threads(ctx, blk):
        for d in par:
            e = sch.get(tiles[d]).extent
            t = largest_divisor(e, ctx.threads)
            if t > 1:
                p0, p1 = sch.split(tiles[d], [t, e // t])
                sch.parallel(p0)
                tiles[d] = p1
                break
    if vec_loop is not None:
        sch.vectorize(vec_loop)
