"""Rule for reductions (sum/mean/max/min, the row reductions of softmax, log_softmax and
layer_norm): parallel over the kept (parallel) dims, the reduced row vectorized; the vector tile
and the thread count are sampled decisions with target-derived defaults. Source: TVM dlight's
CPU reduction rule, TOPI x86 ``schedule_reduce`` (parallel outer, vectorize inner) and
MetaSchedule's ``AddRFactor``."""

from __future__ import annotations

import dataclasses
from typing import Dict, List

from ..loop_nest import Block
from ..schedule import Schedule
from ..state import BlockRV, LoopRV
from .common import RuleContext, categorical, element_bits, parallelize_first, vector_candidates, vector_tile


@dataclasses.dataclass
class ReductionLayout:
    """How a reduction block is laid out, after its kept dims were moved outside its reduced
    ones (:func:`reduction_layout`).

    Attributes
    ----------
    blk : Block
    par, red : list of int
        The kept (parallel) and reduced dims.
    tiles : dict of int to LoopRV
        The current outermost loop of each dim.
    row : bool
        A row reduction that can be vectorized: one reduced dim, the innermost dim of the
        first input (softmax's max/sum over the last axis): split and ``rfactor`` it.
    column : bool
        A vectorizable reduction whose first input's innermost dim is the innermost kept dim
        (a sum over axis 0): vectors along that kept dim, reduction loops outside them.
    """

    blk: Block
    par: List[int]
    red: List[int]
    tiles: Dict[int, LoopRV]
    row: bool
    column: bool


def reduction_layout(sch: Schedule, block: BlockRV, ctx: RuleContext) -> ReductionLayout:
    """Reorder ``block``'s loops to kept dims then reduced dims and classify it (row or column
    reduction, or neither). Bodies that read iteration indices (``argmax``) or have several
    results are neither: the vectorizer does not recognize their reductions; nor are ops whose
    maps are not all dims or zeros (a diagonal ``einsum('jij->j')``, ``d0`` twice in one map)."""
    blk = sch.get(block)
    fact = ctx.fact(blk)
    loops = sch.get_loops(block)
    dims = blk.dims
    par = [i for i, d in enumerate(dims) if d.kind == "parallel"]
    red = [i for i, d in enumerate(dims) if d.kind != "parallel"]
    vectorizable = fact is not None and not fact.reads_index and fact.num_results == 1 and fact.simple_maps
    first_in = blk.info.operand_dims[0] if blk.info.num_inputs else ()
    row = bool(first_in) and first_in[-1] in red
    order = par + red
    if order != list(range(len(dims))):
        sch.reorder(*[loops[i] for i in order])
    column = vectorizable and not row and bool(par) and bool(first_in) and first_in[-1] == par[-1]
    return ReductionLayout(blk, par, red, dict(enumerate(loops)),
                           row=vectorizable and row and len(red) == 1, column=column)


def _fits_registers(ctx: RuleContext, blk: Block, extent: int) -> bool:
    """Whether ``extent`` accumulators of ``blk``'s widest element take at most half the
    target's vector registers (the other half for the loaded vectors)."""
    bits = element_bits(blk)
    return extent * bits <= (ctx.target.vector_registers // 2) * ctx.target.vector_bits


def _row_tile(ctx: RuleContext, blk: Block, extent) -> int:
    """The default accumulator tile of a row reduction: the largest multiple of the lanes that
    divides ``extent`` with its accumulators in at most a quarter of the vector registers (that
    many independent loads in flight per step: a long row streams from L2 or L3; 8 vectors of
    AVX-512, 4 of AVX2), else :func:`~.common.vector_tile`."""
    if extent is None:
        return vector_tile(ctx, blk, extent)
    lanes = ctx.target.vector_lanes(element_bits(blk))
    most = max(1, ctx.target.vector_registers // 4) * lanes
    whole = [v for v in range(lanes, most + 1, lanes) if extent % v == 0]
    return whole[-1] if whole else vector_tile(ctx, blk, extent)


def schedule_reduction(sch: Schedule, block: BlockRV, ctx: RuleContext) -> None:
    """Schedule a block with reduction dims.

    * Row reductions (the only reduction dim is the innermost dim of the first input, e.g.
      softmax's max/sum over the last axis): the row is split into ``(C / V, V)`` and
      factorized (``rfactor``): V partial results accumulate in one vector register tile
      (vectorized), reduced to one value per row at the end. ``V`` is sampled from
      :func:`~.common.vector_candidates` below the row length, or 1 (a plain row loop; the
      default when :func:`~.common.vector_tile` is the whole row). It is structural: the
      emitter's ``tile_reduction_using_for`` takes static sizes, so ``V`` enters the split as
      a constant and another decision is applied by running the rule again. Reducing the whole row as one
      ``vector.multi_reduction`` lowers to a serial scalar chain (measured 2x slower than
      plain loops for softmax 512x1000), so it is not used.
    * Other reductions (the innermost input dim is kept, e.g. a sum over axis 0): the kept
      innermost dim is split into vectors and moved inside the reduction loops, so each
      reduction step is a vector accumulate; ``V`` sampled from
      :func:`~.common.vector_candidates` (default :func:`~.common.vector_tile`), and the whole
      kept dim (the default then) when its accumulators take at most half the vector registers:
      the input then streams once in address order (the first level of a blocked sum,
      ``builder.reduction._blocked_sum``), instead of once per ``V``-wide column strip.
    * The outermost kept dim with work is split over sampled threads
      (:func:`~.common.parallelize_first`).
    * Dynamic extents (symbolic sizes): the vectorized dim is split into ``(None, V)``, its
      last tile partial (masked); a dynamic kept dim is made parallel as it is.
    * Bodies that read iteration indices (``argmax``/``argmin``) or have several results are
      parallelized only: the vectorizer does not recognize their reductions.

    Parameters
    ----------
    sch : Schedule
    block : BlockRV
        A block with at least one reduction dim (``linalg.generic``; named reductions).
    ctx : RuleContext
    """
    lay = reduction_layout(sch, block, ctx)
    blk, dims, par, red, tiles = lay.blk, lay.blk.dims, lay.par, lay.red, lay.tiles
    vec_loop = None
    if lay.column:
        # column reduction: vectors along the kept innermost dim, reduction loops outside
        d = par[-1]
        e = dims[d].extent
        cands = vector_candidates(ctx, blk, e)
        dv = vector_tile(ctx, blk, e)
        if cands and e is not None and e > dv and _fits_registers(ctx, blk, e):
            cands, dv = sorted(set(cands) | {e}), e
        if cands:
            v = categorical(sch, cands, dv)
            o, i = sch.split(tiles[d], [None, v])
            sch.reorder(*([o] + [tiles[r] for r in red] + [i]))
            tiles[d] = o
            vec_loop = i
    elif lay.row:
        # row reduction: partial results in one vector tile (rfactor), reduced once per row
        r = red[0]
        e = dims[r].extent
        dv = _row_tile(ctx, blk, e)
        cands = [c for c in sorted(set(vector_candidates(ctx, blk, e)) | {dv}) if c > 1 and (e is None or c < e)]
        v = int(categorical(sch, [1] + cands, dv if dv in cands else 1)) if cands else 1
        if v > 1:
            _, k1 = sch.split(tiles[r], [None, v])   # a dynamic row: a partial last tile
            sch.rfactor(k1)
            vec_loop = k1
    parallelize_first(sch, ctx, blk, [tiles[d] for d in par], [sch.get(tiles[d]).extent for d in par])
    if vec_loop is not None:
        sch.vectorize(vec_loop)
