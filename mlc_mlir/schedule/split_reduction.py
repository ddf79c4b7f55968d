"""An ``rfactor`` of the outermost loop of a reduction dim (``RFactor.split``) realized for
:mod:`~mlc_mlir.schedule.transform_script`: ``transform.structured.split_reduction`` with
``insert_split_dimension = 0`` rewrites a contraction ``C[i..] += f(A, B)`` over ``K`` into a
partial op over ``(T, i.., K / T)`` writing ``P[t, i..]`` (each of the ``T`` partial results
contiguous: a thread that owns one writes one dense row) and a combining op ``C[i..] += sum_t
P[t, i..]``. The block's loops then tile the partial op: the factored loop tiles the new
leading dim by 1, the dim's inner loops tile ``K / T``. The partial results' fill and the
combining op are vectorized a row chunk at a time. Source: MLIR ``linalg::splitReduction``
(``transform.structured.split_reduction``); TVM ``rfactor`` of an outer loop; OpenBLAS's
threaded ``sgemv_t`` (each thread a range of rows of A, partial ``y`` vectors summed at the end).
"""

from __future__ import annotations

from typing import Optional

from .._mlir import ir, structured_transform_d, transform_d, vector_transform_d
from ..errors import ScheduleError
from ..ir.transform_values import any_op
from .factors import largest_divisor
from .loop_nest import Block

#: Elements of a row chunk of the partial results' fill and of the combining op vectorized at
#: once (a code-size choice: one ``vector<T x chunk>`` reduction unrolls into ``T * chunk /
#: lanes`` loads).
COMBINE_CHUNK = 256


def is_split(blk: Block) -> bool:
    """Whether ``blk`` has an ``rfactor`` of the outer loop of its reduction dim."""
    return blk.rfactor is not None and blk.rfactor.split


def check_splittable(blk: Block, dim: int) -> Optional[str]:
    """Why ``split_reduction`` cannot take ``blk`` with the factored loop over ``dim``, or None:
    it needs one reduction dim, the last, and an output indexed by the other dims in order (the
    loop dims of the partial op are then ``(t, dims before the reduction..., K / T)``)."""
    n = len(blk.dims)
    reductions = [d.index for d in blk.dims if d.kind == "reduction"]
    if reductions != [n - 1] or dim != n - 1:
        return f"its reduction dims are {reductions}; expected only the last one ({n - 1})"
    if tuple(blk.info.out_dims) != tuple(range(n - 1)):
        return f"its output is indexed by dims {tuple(blk.info.out_dims)}; expected {tuple(range(n - 1))}"
    return None


def op_dim(blk: Block, pos: int) -> int:
    """Dim of the partial op that ``blk.loops[pos]`` tiles: 0 for the factored loop, else the
    block's dim shifted by the new leading dim."""
    return 0 if blk.loops[pos].id == blk.rfactor.outer else blk.loops[pos].dim + 1


def emit_split(em, blk: Block, op: ir.Value) -> ir.Value:
    """``structured.split_reduction`` of ``op`` (``blk``'s payload) by the factored loop's extent;
    returns the partial op's handle and records its fill and combining op in ``em.splits``
    (vectorized by :func:`vectorize_split`).

    Raises
    ------
    ScheduleError
        If ``blk`` also has epilogues fused into its loops (the combining op writes the
        result after the partial op's loops).
    """
    if em.model.epilogues(blk):
        raise ScheduleError(f"rfactor: '{blk.name}' splits its reduction into partial results "
                            "(outer loop factored): its epilogues keep their own loops")
    factored = blk.loops[blk.loop_index(blk.rfactor.outer)]
    r = structured_transform_d.SplitReductionOp(
        any_op(), any_op(), any_op(), any_op(), op, split_factor=factored.extent,
        insert_split_dimension=0)
    row = blk.dims[blk.info.out_dims[-1]].extent if blk.info.out_dims else 1
    em.splits.setdefault(blk.func, []).append((blk, r.fill_op, r.combining_linalg_op, row))
    return r.split_linalg_op


def vectorize_split(em, fname: str) -> None:
    """Finish the splits in function ``fname`` once their partial ops are vectorized: fold the
    partial op's vector form into a contraction the outer-product lowering takes, and vectorize
    the partial results' fill and the combining op a chunk of a row at a time (the largest
    divisor of the row up to :data:`COMBINE_CHUNK` elements).

    The vectorized tile of the partial op (a ``linalg.generic``, dims ``(t, i, j, k)``, no
    named contraction) is a multiplication of B's tile read transposed and A's broadcast, then
    a ``multi_reduction`` over k; ``transfer_permutation`` patterns make the transposes and
    broadcasts explicit, ``reduction_to_contract`` folds them into one ``vector.contract`` with
    B's rows as they are in memory, and casting away its unit leading dims (``t``, ``i``)
    leaves the vector-matrix form that lowers to one FMA per row of the tile, as a matmul's
    GEMV tile does."""
    for blk, fill, comb, row in em.splits.get(fname, ()):
        loop = em.loop_handles[blk.rfactor.outer]
        p = transform_d.ApplyPatternsOp(loop)
        with ir.InsertionPoint(p.patterns):
            vector_transform_d.ApplyTransferPermutationPatternsOp()
            vector_transform_d.ApplyVectorReductionToContractPatternsOp()
        # a separate set: casting the unit dims away first would keep the transposes apart
        # from the contraction
        p = transform_d.ApplyPatternsOp(loop)
        with ir.InsertionPoint(p.patterns):
            vector_transform_d.ApplyCastAwayVectorLeadingOneDimPatternsOp()
        chunk = largest_divisor(row, COMBINE_CHUNK)
        # the fill (T, i.., n) and the combining op (t, i.., n; the sum over t inside each tile)
        for h, first in ((fill, 1), (comb, 0)):
            sizes = [first] + [1] * (len(blk.dims) - 2) + [chunk]
            tiled = structured_transform_d.TileUsingForOp(h, sizes=sizes).tiled_linalg_op
            structured_transform_d.VectorizeOp(tiled)
