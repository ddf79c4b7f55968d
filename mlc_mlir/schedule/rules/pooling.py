"""Default rule for ``linalg.pooling_nchw_{max,sum}``: vectorized along the output row, the
window unrolled, channels over the threads. Source: TVM TOPI x86 ``schedule_pool`` (parallel
outer, vectorize the innermost output axis)."""

from __future__ import annotations

from ..schedule import Schedule
from ..state import BlockRV
from .common import RuleContext, element_bits, largest_divisor, worth_threads


def schedule_pooling(sch: Schedule, block: BlockRV, ctx: RuleContext) -> None:
    """Schedule ``out[n, c, oh, ow] = reduce(x[n, c, oh*s + kh*d, ow*s + kw*d])`` over ``(kh,
    kw)``: loops ``n c0 (parallel) c1 oh ow0 kh kw (unrolled) ow1 (vectorized)``, ``WR`` output
    elements of a row in vector registers (the largest divisor of OW up to half the vector
    registers' lanes), the window unrolled when ``KH * KW`` does not exceed the vector
    registers. Only for stride 1 and dilation 1 (read from the shapes: ``W = OW + KW - 1``):
    a strided window vectorizes into gathers, measured 2.5x slower than plain loops (max pool
    3x3 stride 2 on 1x64x56x56: 1.67 ms unscheduled, 4.23 ms vectorized), so strided pooling
    gets the threads only. Stride 1 (same shape, 3x3): 2.46 -> 2.24 ms on one thread.

    Shapes: x (N, C, H, W) (already padded), window (KH, KW), out (N, C, OH, OW); float dtypes.
    """
    blk = sch.get(block)
    n, c, oh, ow, kh, kw = sch.get_loops(block)
    ext = [d.extent for d in blk.dims]
    lanes = ctx.target.vector_lanes(element_bits(blk))
    wr = largest_divisor(ext[3], lanes * max(1, ctx.target.vector_registers // 2))
    t = largest_divisor(ext[1], ctx.threads) if worth_threads(ctx, blk) else 1
    if t > 1:
        c0, c = sch.split(c, [t, ext[1] // t])
        sch.parallel(c0)
    if blk.info.operand_shapes[0][3] != ext[3] + ext[5] - 1:
        return   # strided or dilated window: no vectorization (see above)
    ow0, ow1 = sch.split(ow, [ext[3] // wr, wr])
    sch.reorder(c, oh, ow0, kh, kw, ow1)
    if ext[4] * ext[5] <= ctx.target.vector_registers:
        sch.unroll(kw)
        sch.unroll(kh)
    sch.vectorize(ow1)
