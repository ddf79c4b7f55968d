"""Default rule for ``linalg.matmul`` / ``linalg.batch_matmul`` with dynamic extents (symbolic
sizes: ``M = seq``, ``K = seq`` of attention, ...): a register-tiled loop nest whose tiles
may be partial, compiled once for every size.

Loop nest (``C[b, i, j] += A[b, i, k] * B[b, k, j]``)::

    b          (parallel when static and worth threads)
    j0         N / NR panels of C (parallel over the threads when N is static)
    i0         M / MR row blocks
    k          the reduction, one rank-1 update of the register tile per step
    i1, j1     the MR x NR register tile (vectorized; masked where partial)

``MR`` and ``NR`` come from the target (:func:`~mlc_mlir.schedule.cpu_recipes.goto_params`:
NR two vectors, MR accumulators in half the vector registers). A partial tile (the last rows of
M, the last columns of a dynamic or indivisible N) is vectorized with masks at the full tile's
sizes, or peeled (full static tiles, then the remainder one row or column at a time: see
``transform_script._Emitter.peel_partial``); nothing is padded or
copied. A plain matmul whose N is dynamic runs on one thread (its partial row blocks would be
the tiles of an ``scf.forall``, which is not peeled). At ``M == 1`` (a decode step's GEMV) the nest streams B
once, parallel over the N panels; at large M the same nest re-reads each ``K x NR`` panel of B
per row block from cache instead of packing it (the static Goto recipes pack B): one schedule
serves both, at the cost of the GEMM's packing gain; specialized variants chosen at run time
(``scf.if`` on M, as Relax's ``dlight`` GEMV/GEMM split) are not emitted.

Source: the BLIS micro-kernel loop order (Van Zee & van de Geijn, TOMS 2015) without the
packing; masked vectorization of partial tiles (MLIR ``transform.structured.vectorize`` with
``vector_sizes``).
"""

from __future__ import annotations

from ...ir import dtypes
from ..cpu_recipes import goto_params
from ..schedule import Schedule
from ..state import BlockRV
from .common import RuleContext, element_bits, largest_divisor, parallelize_first

#: Stand-in extent for a dynamic dim when asking the Goto blocking for its register tile
#: (only MR and NR are read, which do not depend on the extents).
_LARGE = 1 << 16


def schedule_dynamic_matmul(sch: Schedule, block: BlockRV, ctx: RuleContext) -> None:
    """Schedule a ``linalg.matmul`` (dims ``i, j, k``) or ``linalg.batch_matmul`` (``b, i, j,
    k``) with at least one dynamic extent (see the module docstring). float dtypes are
    vectorized; integer ones keep the loop nest without vectors.

    Parameters
    ----------
    sch : Schedule
    block : BlockRV
    ctx : RuleContext
    """
    blk = sch.get(block)
    dims = blk.dims
    batch = len(dims) == 4
    loops = sch.get_loops(block)
    b_loop = loops[0] if batch else None
    i, j, k = loops[-3:]
    m_ext, n_ext, k_ext = (d.extent for d in dims[-3:])
    bits = element_bits(blk)
    p = goto_params(ctx.target, m_ext or _LARGE, n_ext or _LARGE, k_ext or _LARGE, ctx.threads, bits)
    lanes = ctx.target.vector_lanes(bits)
    nr = p.nr
    if n_ext is not None and n_ext % nr:
        # a divisor of N in whole vectors, else NR with a partial last panel
        nr = next((v for v in range(nr, lanes - 1, -lanes) if n_ext % v == 0), nr)
    mr = p.mr if m_ext is None or m_ext >= p.mr else max(1, m_ext)
    i0, i1 = sch.split(i, [None if m_ext is None else -(-m_ext // mr), mr])
    j0, j1 = sch.split(j, [None if n_ext is None else -(-n_ext // nr), nr])
    order = ([b_loop] if batch else []) + [j0, i0, k, i1, j1]
    sch.reorder(*order)
    j0_ext = None if n_ext is None else -(-n_ext // nr)
    done = None
    if batch and dims[0].extent is not None and dims[0].extent > 1:
        done = parallelize_first(sch, ctx, blk, [b_loop], [dims[0].extent])
    if done is None and j0_ext is not None and largest_divisor(j0_ext, ctx.threads) > 1:
        done = parallelize_first(sch, ctx, blk, [j0], [j0_ext])
    if dtypes.is_float(blk.info.dtypes[-1]):
        sch.vectorize(i1)
