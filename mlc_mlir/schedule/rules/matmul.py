"""Default rules for contractions: ``linalg.matmul`` (matmul, dense) with the Goto recipe,
``linalg.mmt4d`` on a pre-packed B (``graph.PackMatmulWeights``) with the same loop nest, and
``linalg.batch_matmul`` with a register-tiled batch loop; matmul and batch_matmul with
elementwise epilogues (bias add, relu) fused into their tiles. Source: Goto & van de Geijn (TOMS 2008); TVM's x86
``dense_pack``/``batch_matmul`` schedules; oneDNN's post-op fusion."""

from __future__ import annotations

from ...errors import ScheduleError
from ..cpu_recipes import (
    batch_matmul_padding, goto_padding, goto_params, schedule_matmul_goto, schedule_mmt4d_goto,
)
from ..schedule import Schedule
from ..state import BlockRV
from .common import RuleContext, element_bits, largest_divisor, worth_threads
from .epilogue import claim_epilogues


def schedule_matmul(sch: Schedule, block: BlockRV, ctx: RuleContext) -> None:
    """``linalg.matmul`` (``matmul``; ``dense`` is a matmul with a transposed B map): the Goto
    recipe (:func:`~mlc_mlir.schedule.cpu_recipes.schedule_matmul_goto`) with
    :func:`~mlc_mlir.schedule.cpu_recipes.goto_params` for the target, threads over M when M
    allows (or over N when N > M; one thread for a matmul too small to pay for the fork:
    :func:`~mlc_mlir.schedule.rules.common.worth_threads`), and the elementwise epilogue chain
    fused at the NC block. Extents that are not
    multiples of the register tile (MR x NR), the threads or a good KC are first padded
    (``pad_einsum`` with :func:`~mlc_mlir.schedule.cpu_recipes.goto_padding`); a padded
    matmul leaves its epilogue to the elementwise rule.

    A matmul with M == 1 whose B is (K, N) is a GEMV: :func:`schedule_gemv`.

    Shapes: A (M, K), B (K, N) or (N, K), C (M, N); dtypes float16/32/64, int32.
    """
    blk = sch.get(block)
    m, n, k = (d.extent for d in blk.dims)
    bits = element_bits(blk)
    threads = ctx.threads if worth_threads(ctx, blk) else 1
    if m == 1 and schedule_gemv(sch, block, ctx, threads):
        return
    padding = goto_padding(ctx.target, m, n, k, threads, bits)
    epi = []
    if padding == (1, 1, 1):
        epi = claim_epilogues(sch, blk, ctx)
    else:
        # the epilogue reads the unpadded result: it keeps its own (elementwise) rule
        sch.pad_einsum(block, list(padding))
        m, n, k = (d.extent for d in blk.dims)
    p = goto_params(ctx.target, m, n, k, threads, bits)
    schedule_matmul_goto(sch, block, threads=p.threads, mc=p.mc, nc=p.nc, kc=p.kc, nr=p.nr,
                         mr=p.mr, unroll_k=p.unroll_k, epilogues=epi, target=ctx.target)


def schedule_gemv(sch: Schedule, block: BlockRV, ctx: RuleContext, threads: int) -> bool:
    """``(1, K) @ (K, N)``: each thread takes ``N / threads`` columns; per tile of ``nr``
    columns the k loop runs innermost, accumulating ``nr / lanes`` vector registers (half the
    target's registers: enough independent FMAs to hide their latency) while B streams row
    segments of ``nr`` contiguous elements, so every weight is read once. The Goto recipe's
    row padding to MR and its KC x NC panels would read B for rows that do not exist and hop
    between rows (a 4x slower GEMV: 18 against 77 GB/s on a 768 x 3072 float32 B, 1 thread of
    a Zen 5). Returns False (nothing scheduled) when B is (N, K) or N has no multiple of the
    vector lanes per thread.

    Source: the GEMV kernels of BLAS (``sgemv`` with a transposed-row access), TVM Relax's
    dlight ``GEMV`` rule (a decode step at batch 1 reads each weight once).
    """
    blk = sch.get(block)
    _, n, _ = (d.extent for d in blk.dims)
    if blk.info.operand_dims[1][-1] != 1:      # B's contiguous dim is K (dense): not this recipe
        return False
    lanes = ctx.target.vector_lanes(element_bits(blk))
    cap = lanes * max(1, ctx.target.vector_registers // 2)
    threads = largest_divisor(n, threads)
    per = n // threads
    tiles = [t for t in range(lanes, min(per, cap) + 1, lanes) if per % t == 0]
    if not tiles:
        return False
    nr = tiles[-1]
    i, j, kk = sch.get_loops(block)
    j0, j1, j2 = sch.split(j, [threads, per // nr, nr])
    sch.reorder(i, j0, j1, kk, j2)
    if threads > 1:
        sch.parallel(j0)
    sch.vectorize(j2)
    return True


def schedule_mmt4d(sch: Schedule, block: BlockRV, ctx: RuleContext) -> None:
    """``linalg.mmt4d`` with ``M0 = K0 = 1`` (a matmul whose constant B was packed into
    ``(N / NR, K, NR)`` panels at compile time): M is padded (``pad_einsum``) to the multiple
    :func:`~mlc_mlir.schedule.cpu_recipes.goto_padding` asks of the equivalent matmul, then
    :func:`~mlc_mlir.schedule.cpu_recipes.schedule_mmt4d_goto` with
    :func:`~mlc_mlir.schedule.cpu_recipes.goto_params` for the target (M is not padded when a
    register tile of at least 3/4 of the full tile's rows divides it:
    :func:`~mlc_mlir.schedule.cpu_recipes.register_rows`). No epilogue: the packing
    pass only rewrites matmuls that feed no elementwise op.

    Shapes: A (M, K, 1, 1), B (N / NR, K, NR, 1), C (M, N / NR, 1, NR); float dtypes.
    """
    blk = sch.get(block)
    m, panels, k, _, nr, _ = (d.extent for d in blk.dims)
    bits = element_bits(blk)
    threads = ctx.threads if worth_threads(ctx, blk) else 1
    mm = goto_padding(ctx.target, m, panels * nr, k, threads, bits)[0]
    if mm > 1:
        sch.pad_einsum(block, [mm, 1, 1, 1, 1, 1])
        m = blk.dims[0].extent
    p = goto_params(ctx.target, m, panels * nr, k, threads, bits)
    schedule_mmt4d_goto(sch, block, threads=p.threads, mc=p.mc, nc=p.nc, kc=p.kc, mr=p.mr,
                        unroll_k=p.unroll_k, target=ctx.target)


def schedule_batch_matmul(sch: Schedule, block: BlockRV, ctx: RuleContext) -> None:
    """``linalg.batch_matmul`` ``(b, i, j, k)``: batches over the threads (or M when there are
    fewer batches than threads), an MR x NR register tile from
    :func:`~mlc_mlir.schedule.cpu_recipes.goto_params` vectorized inside the k loop (unrolled),
    the elementwise epilogue chain fused per register tile. M, N and K are padded
    (``pad_einsum``) to multiples of ``threads * MR``, NR and ``UNROLL_K`` where they are not
    (an epilogue of a padded op keeps its own rule).

    Loop nest: ``b0 (parallel) b1 i0 [i1] j0 k i2 (vectorized) j1``. Shapes: A (B, M, K), B
    (B, K, N), C (B, M, N).

    Raises
    ------
    ScheduleError
        If the block does not have 4 dims.
    """
    blk = sch.get(block)
    if len(blk.dims) != 4:
        raise ScheduleError(f"default rule batch_matmul: '{blk.name}' has {len(blk.dims)} dims; "
                            "expected (b, i, j, k)")
    nb, m, n, k = (d.extent for d in blk.dims)
    p = goto_params(ctx.target, m, n, k, ctx.threads, element_bits(blk))
    tb = largest_divisor(nb, ctx.threads)
    padding = batch_matmul_padding(ctx.target, nb, m, n, k, ctx.threads, element_bits(blk))
    epi = []
    if padding == [1, 1, 1, 1]:
        epi = claim_epilogues(sch, blk, ctx)
    else:
        sch.pad_einsum(block, padding)
        nb, m, n, k = (d.extent for d in blk.dims)
    b, i, j, kk = sch.get_loops(block)
    ti = largest_divisor(m, ctx.threads) if tb == 1 else 1
    mr = largest_divisor(m // ti, p.mr)
    nr = largest_divisor(n, p.nr)
    unroll = largest_divisor(k, p.unroll_k)
    b0, b1 = sch.split(b, [tb, nb // tb])
    i0, i1, i2 = sch.split(i, [ti, m // ti // mr, mr])
    j0, j1 = sch.split(j, [n // nr, nr])
    sch.reorder(b0, i0, b1, i1, j0, kk, i2, j1)
    if tb > 1:
        sch.parallel(b0)
    elif ti > 1:
        sch.parallel(i0)
    for e in epi:
        sch.reverse_compute_at(e, j0)
    if unroll > 1:
        sch.unroll(kk, unroll)
    sch.vectorize(i2)
