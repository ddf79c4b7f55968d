"""Hand-written CPU schedules built only from the schedule primitives.

``schedule_matmul_goto`` expresses the measured recipe of ``benchmarks/recipe/NOTES.md`` (Goto
loop order, a packed B panel, an 8x32 register tile kept in registers, k unrolled by 4, threads
over M) with ``split``/``reorder``/``parallel``/``cache_read``/``compute_at``/``unroll``/
``vectorize``, so the same trace replays, serializes and exports like any other. Source: Goto &
van de Geijn, "Anatomy of High-Performance Matrix Multiplication" (TOMS 2008).
"""

from __future__ import annotations

from typing import Optional

from ..errors import ScheduleError
from .schedule import Schedule
from .state import BlockRV


def _largest_divisor(n: int, cap: int) -> int:
    return max(d for d in range(1, min(n, cap) + 1) if n % d == 0)


def schedule_matmul_goto(sch: Schedule, block: BlockRV, threads: int = 1, mc: int = 32,
                         nc: int = 512, kc: int = 256, nr: int = 32, mr: int = 8,
                         unroll_k: int = 4, epilogues=(), pack: Optional[bool] = None) -> Schedule:
    """Schedule a matmul-like block ``(i, j, k)`` (``linalg.matmul``, or ``dense``'s transposed-B
    matmul) for the CPU.

    Loop nest (outer to inner): ``i0`` (parallel over ``threads``), ``j0`` (NC), ``k0`` (KC),
    ``i1`` (MC), ``j1`` (NR panel), ``i2`` (MR), ``k1`` (unrolled) and the vectorized ``MR x NR``
    register tile. B is packed per ``(j0, k0)`` block (``cache_read`` + ``compute_at(k0)``).
    With threads, the init is decomposed into the parallel loop when the block's inputs are not
    computed by other ops (``decompose_reduction`` would recompute them per tile).
    Each blocking size is reduced to the largest divisor of its extent.

    ``pack``: pack B (default: when a thread has at least two MR row blocks to reuse the panel;
    a single-row matmul reads B once, so packing would only double its memory traffic).

    ``epilogues``: elementwise consumer blocks (bias add, relu) fused into the ``j1`` tile with
    ``reverse_compute_at``.

    Raises
    ------
    ScheduleError
        If the block is not a 3-loop (i, j, k) op or ``threads`` does not divide M / MR.
    """
    loops = sch.get_loops(block)
    if len(loops) != 3:
        raise ScheduleError(f"schedule_matmul_goto: expected loops (i, j, k), got {len(loops)} loops")
    i, j, k = loops
    blk = sch.get(block)
    m, n, kk = (d.extent for d in blk.dims)
    if m % threads != 0:
        raise ScheduleError(f"schedule_matmul_goto: {threads} threads do not divide M={m}")
    mt = m // threads
    mr = _largest_divisor(mt, mr)
    mc = _largest_divisor(mt // mr, max(mc // mr, 1)) * mr
    nr = _largest_divisor(n, nr)
    nc = _largest_divisor(n // nr, max(nc // nr, 1)) * nr
    kc = _largest_divisor(kk, kc)
    unroll_k = _largest_divisor(kc, unroll_k)
    i0, i1, i2, i3 = sch.split(i, [threads, mt // mc, mc // mr, mr])
    j0, j1, j2 = sch.split(j, [n // nc, nc // nr, nr])
    k0, k1 = sch.split(k, [kk // kc, kc])
    sch.reorder(i0, j0, k0, i1, j1, i2, k1, i3, j2)
    if threads > 1:
        sch.parallel(i0)
        info = blk.info
        if info.init and not [p for p in info.producers if p != info.init]:
            # each thread zeroes its own rows of C (the init fused into the scf.forall)
            sch.decompose_reduction(block, j0)
    if pack is None:  # a packed panel is reused by every MR row block of a thread's rows
        pack = mt >= 2 * mr
    if pack:
        packed = sch.cache_read(block, 1, "local")
        sch.compute_at(packed, k0)
    for e in epilogues:
        sch.reverse_compute_at(e, j0)
    if unroll_k > 1:
        sch.unroll(k1, unroll_k)
    sch.vectorize(i3)
    return sch
