"""The GEMV rule: a matmul with one row (``M == 1``, a decode step's projections) streams its
``(K, N)`` B once, ``GEMV_ROWS`` rows of it per step into vector accumulators, its columns
chunked over the threads, the rows a step reads prefetched ahead (``prepare_passes.PrefetchRows``);
a transposed B (``dense``) is read along K with an rfactor of the dot products
(:func:`schedule_gemv_rows`). Called by :func:`~.matmul.schedule_matmul`. Source: OpenBLAS's
``sgemv_n``/``sgemv_t`` kernels; TVM dlight's ``GEMV`` rule; MLC-LLM's decode kernels."""

from __future__ import annotations

from typing import List, Optional, Tuple

from ...target import Target
from ..schedule import Schedule
from ..state import BlockRV
from .common import (
    RuleContext, categorical, element_bits, largest_divisor, vector_candidates, vector_tile,
)

#: Unroll factors of a contraction's k loop the rules sample (code-size choices, not machine
#: constants; the default is Goto's ``UNROLL_K`` shrunk to a divisor).
UNROLL_FACTORS = (1, 2, 4, 8)

#: Rows of B a GEMV step reads together (:func:`schedule_gemv`): that many concurrent
#: sequential streams, and one accumulator update per that many rows (OpenBLAS's ``sgemv_n``
#: kernels take 4 or 8 columns of A per step). 8 measured ahead of 4 and 1 on a 768 x 50257 B
#: (1 thread of a loaded 2-core Zen 5: 21.8, 24.3 and 54 ms); the tuner samples
#: :data:`UNROLL_FACTORS`.
GEMV_ROWS = 8

#: Loop attribute asking the ``prepare`` stage to prefetch the rows a GEMV step reads that many
#: rows ahead (:class:`~mlc_mlir.pipeline.prepare_passes.prefetch_rows.PrefetchRows`).
PREFETCH_ROWS_ATTR = "mlc.prefetch_rows"

#: Steps ahead a GEMV may prefetch its rows (:func:`schedule_gemv`; 0: none).
PREFETCH_STEPS = (0, 1, 2)

#: Bytes of a page: the hardware prefetchers stop at its boundary (the base page of x86-64
#: and AArch64 Linux).
PAGE_BYTES = 4096

def gemv_chunk(n: int, threads: int, chunks: int, v: int) -> Optional[int]:
    """Columns ``NB`` (a multiple of ``v``) of each of the ``chunks`` chunks of the ``threads``
    slices of ``n`` columns (``split(j, [threads, chunks, NB / v, v])``), the slices as equal
    as whole tiles allow: ``NB = ceil(ceil(n / threads) / chunks)`` rounded up to ``v``. None
    where the last thread would get no column (the split would use fewer threads)."""
    nb = -(-(-(-n // threads)) // chunks // v) * v
    return nb if -(-n // (chunks * nb)) == threads and -(-n // nb) > (threads - 1) * chunks else None


def gemv_chunk_counts(target: Target, per: int, nbytes: int) -> Tuple[int, List[int]]:
    """Chunk counts of a GEMV thread slice of ``per`` columns of ``nbytes``-byte elements
    (:func:`schedule_gemv`): ``(default, candidates)``. The default keeps each chunk's
    accumulators within half the L1d (they are read and written once per group of rows); the
    candidates add half as many chunks, twice as many, and one chunk per half of the L2
    (accumulators in L2, each row read in one run)."""
    l1 = target.l1d_bytes or (32 << 10)
    l2 = target.l2_bytes or (256 << 10)
    dflt = max(1, -(-per * nbytes // (l1 // 2)))
    return dflt, sorted({dflt, max(1, dflt // 2), 2 * dflt, max(1, -(-per * nbytes // (l2 // 2)))})


def schedule_gemv(sch: Schedule, block: BlockRV, ctx: RuleContext, threads: int) -> bool:
    """``(1, K) @ (K, N)`` with B stored ``(K, N)``: B streams row by row, so every weight is
    read once and in address order. Loops ``i j0 (parallel) j1 k0 j2 (k1 j3: one vector tile)``:
    each of ``T`` threads takes a slice of about ``N / T`` columns, cut into ``C`` equal chunks
    of ``NB`` columns (:func:`gemv_chunk`: the slices differ by less than one vector tile per chunk); for
    each chunk the k0 loop walks the rows of B ``R`` at a time, reading the ``NB`` contiguous
    weights of each of those rows as ``NB / V`` tiles of ``V`` (:func:`~.common.vector_tile`
    lanes) that update the chunk's accumulators once per group of rows (the ``R x V`` tile is
    one vector contraction). Decisions, in order: ``T`` (the thread counts that give every
    thread columns; default the most), ``C`` (:func:`gemv_chunk_counts`; default the fewest
    chunks whose accumulators fit half the L1d), ``R`` (divisors of K among
    :data:`UNROLL_FACTORS` and :data:`GEMV_ROWS`; default the largest divisor up to
    :data:`GEMV_ROWS`) and the steps of ``R`` rows whose runs are prefetched ahead
    (:data:`PREFETCH_STEPS`, an annotation of the k0 loop that the ``prepare`` stage's
    :class:`~mlc_mlir.pipeline.prepare_passes.prefetch_rows.PrefetchRows` realizes; default one
    step where a chunk's run of a row is shorter than a page, :data:`PAGE_BYTES`: the
    hardware prefetchers learn each such run anew, else none); all structural.

    After ``T``, where ``T > 1`` divides K, N is whole vector tiles and one chunk can hold a
    whole row's accumulators (a candidate of :func:`gemv_chunk_counts` for ``N``): whether the
    threads split K instead of N (structural). Loops ``i k0 (parallel, T) j1 k1 j2 (k2 j3)``:
    ``rfactor`` of the outer K loop (``structured.split_reduction``) gives each thread
    ``K / T`` whole rows of B, streamed as one contiguous range, into its own partial result
    (partials laid out ``(T, 1, N)``, each a dense row), and a vectorized combining op sums the
    ``T`` partials into C; the chunks then cut all of N (those that divide it), ``R`` divides
    ``K / T``, nothing is prefetched. Default: the K split where the default chunk count of a
    whole row is one (its accumulators fit half the L1d). The N split gives each thread a run
    of ``N / T`` columns per row, 1.5 to 6 KiB for GPT-2's projections: the prefetchers
    restart at each run's page: on 2 threads of a loaded 2-core Zen 5 the K split reads
    GPT-2's four projection weights 1.35 to 2.55x faster (``benchmarks/gemv_split_cpu.py``).

    Holding the accumulators of an ``NR``-column tile in registers and running k innermost
    instead reads ``NR`` elements of each row in turn, one new page per row: the hardware
    prefetchers stop at page boundaries, so the loads wait on DRAM (LM head ``768 x 50257``,
    1 thread of a loaded 2-core Zen 5: 40 ms against numpy's 21 ms). Chunks and thread
    slices that do not divide ``N`` end in a partial tile (peeled). Returns False (nothing
    scheduled) when B's contiguous dim is K (``dense`` on a runtime B) or N is below one
    vector.

    Source: BLAS ``sgemv`` on a row-major ``A^T x`` (row-wise axpy updates of a cached ``y``
    block, as OpenBLAS's ``sgemv_t`` kernels), TVM Relax's dlight ``GEMV`` rule (a decode step
    at batch 1 reads each weight once); OpenBLAS's threaded ``sgemv_t`` (each thread a range of
    rows, partial ``y`` vectors summed after) for the K split.
    """
    blk = sch.get(block)
    _, n, k = (d.extent for d in blk.dims)
    if blk.info.operand_dims[1][-1] != 1:      # B's contiguous dim is K (dense): row dots
        return schedule_gemv_rows(sch, block, ctx, threads)
    bits = element_bits(blk)
    lanes = ctx.target.vector_lanes(bits)
    if n < lanes:
        return False
    v = vector_tile(ctx, blk, None)            # the vectors of a tile; a partial last one peeled
    v = v if n >= v else lanes
    tcands = [t for t in range(1, max(1, min(threads, n // v)) + 1) if gemv_chunk(n, t, 1, v)]
    t = int(categorical(sch, tcands, tcands[-1])) if len(tcands) > 1 else 1
    nbytes = max(1, bits // 8)
    split = 0
    row_chunks, row_counts = gemv_chunk_counts(ctx.target, n, nbytes)
    if t > 1 and k % t == 0 and n % v == 0 and row_counts[0] == 1:
        # K split by default where a whole row's accumulators take one chunk: each thread
        # then streams one contiguous range of B
        split = int(categorical(sch, [0, 1], int(row_chunks == 1)))
    per = n if split else -(-(-(-n // t)) // v) * v
    dflt, counts = gemv_chunk_counts(ctx.target, per, nbytes)
    nbs = {c: gemv_chunk(n, 1 if split else t, c, v) for c in counts}
    counts = [c for c in counts if nbs[c] and not (split and n % nbs[c])]
    dflt = dflt if dflt in counts else counts[-1]
    chunks = int(categorical(sch, counts, dflt)) if len(counts) > 1 else counts[0]
    nb = nbs[chunks]
    kt = k // t if split else k
    rows = int(categorical(sch, sorted({r for r in UNROLL_FACTORS if kt % r == 0} | {largest_divisor(kt, GEMV_ROWS)}),
                           largest_divisor(kt, GEMV_ROWS)))
    ahead = 0
    if kt // rows > 1 and not split:
        dflt = int(nb * nbytes < PAGE_BYTES)
        ahead = int(categorical(sch, list(PREFETCH_STEPS), PREFETCH_STEPS[dflt]))
    i, j, kk = sch.get_loops(block)
    if split:
        k0, k1, k2 = sch.split(kk, [t, None, rows])
        j1, j2, j3 = sch.split(j, [None, nb // v, v])
        sch.reorder(i, k0, j1, k1, j2, k2, j3)
        sch.rfactor(k0)
        sch.parallel(k0)
        sch.vectorize(k2 if rows > 1 else j3)
        return True
    j0, j1, j2, j3 = sch.split(j, [t, None, nb // v, v])
    k0, k1 = sch.split(kk, [None, rows])
    sch.reorder(i, j0, j1, k0, j2, k1, j3)
    if t > 1:
        sch.parallel(j0)
    if ahead:
        sch.annotate(k0, PREFETCH_ROWS_ATTR, ahead * rows)
    sch.vectorize(k1 if rows > 1 else j3)
    return True


def schedule_gemv_rows(sch: Schedule, block: BlockRV, ctx: RuleContext, threads: int) -> bool:
    """``(1, K) @ (N, K)^T`` (``dense`` at M = 1, B stored ``(N, K)``; a matrix-vector product
    ``W @ x`` with W row-major): each output is the dot product of a contiguous row of B with
    A's row, so B streams once in address order as ``N`` row reductions. Loops ``i j0
    (parallel) j1 k0 k1 (vectorized)``: the threads take ``ceil(N / threads)`` rows each (the
    last slice partial; the count sampled, default the most); every row
    is split into ``(K / V, V)`` and factorized (``rfactor``): ``V`` partial sums (``V / lanes``
    independent vector accumulators, :func:`~.common.vector_tile` of K by default, sampled
    from :func:`~.common.vector_candidates`) accumulate over ``k0``, reduced to one value per
    row at the end, as :func:`~.reduction.schedule_reduction` does a row reduction. Returns
    False (nothing scheduled) when no tile of 2 to ``K - 1`` elements divides K (a prime K).

    Source: BLAS ``sgemv`` on a row-major ``A x`` (``sgemv_t`` of a column-major matrix: one
    dot product per row, several accumulators), TVM dlight's ``GEMV`` rule for its
    reduction-innermost case (rfactor of the inner reduction).
    """
    blk = sch.get(block)
    _, n, k = (d.extent for d in blk.dims)
    cands = [c for c in vector_candidates(ctx, blk, k) if c < k and k % c == 0]
    if not cands:
        return False
    dv = vector_tile(ctx, blk, k)
    v = int(categorical(sch, cands, dv if dv in cands else cands[-1]))
    i, j, kk = sch.get_loops(block)
    _, k1 = sch.split(kk, [None, v])
    sch.rfactor(k1)
    t = int(categorical(sch, list(range(1, min(threads, n) + 1)), min(threads, n)))
    per = -(-n // t)
    if t > 1 and -(-n // per) == t:            # t slices of ceil(N / t) rows, the last partial
        j0, _ = sch.split(j, [None, per])
        sch.parallel(j0)
    sch.vectorize(k1)
    return True
