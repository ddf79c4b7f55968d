"""Default rules for pooling: ``linalg.pooling_nchw_{max,sum}`` vectorized along the output row,
the window unrolled, channels over the threads; ``linalg.pooling_nhwc_{max,sum}`` (made by
``graph.PropagateTransposes`` between NHWC convolutions) vectorized along the channels, which
are contiguous, so strided windows need no gathers. Source: TVM TOPI x86 ``schedule_pool``
(parallel outer, vectorize the innermost output axis)."""

from __future__ import annotations

from ..schedule import Schedule
from ..state import BlockRV
from .common import RuleContext, element_bits, largest_divisor, parallelize_first, worth_threads


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


def schedule_pooling_nhwc(sch: Schedule, block: BlockRV, ctx: RuleContext) -> None:
    """Schedule ``out[n, oh, ow, c] = reduce(x[n, oh*s + kh*d, ow*s + kw*d, c])`` over ``(kh,
    kw)`` (``linalg.pooling_nhwc_{max,sum}``): loops ``n oh (parallel) ow0 c0 kh kw (unrolled)
    [ow1 c1]`` (vectorized), a tile of ``WR`` output columns x ``CR`` channels (a multiple of the
    vector lanes dividing C, at most half the vector registers in all) in registers across the
    window. Each tap loads ``WR`` contiguous channel vectors: any stride or dilation.

    Shapes: x (N, H, W, C) (already padded), window (KH, KW), out (N, OH, OW, C); float dtypes.
    """
    blk = sch.get(block)
    n, oh, ow, c, kh, kw = sch.get_loops(block)
    ext = [d.extent for d in blk.dims]
    lanes = ctx.target.vector_lanes(element_bits(blk))
    regs = max(1, ctx.target.vector_registers // 2)
    cr = lanes * largest_divisor(ext[3] // lanes, regs) if ext[3] % lanes == 0 else ext[3]
    wr = largest_divisor(ext[2], max(1, regs * lanes // cr))
    ow0, ow1 = sch.split(ow, [ext[2] // wr, wr])
    c0, c1 = sch.split(c, [ext[3] // cr, cr])
    sch.reorder(n, oh, ow0, c0, kh, kw, ow1, c1)
    parallelize_first(sch, ctx, blk, [oh], [ext[1]])
    if ext[4] * ext[5] <= ctx.target.vector_registers:
        sch.unroll(kw)
        sch.unroll(kh)
    sch.vectorize(ow1)
