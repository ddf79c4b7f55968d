"""Rules for pooling (tiles, threads and window unrolling sampled, with target-derived defaults):
``linalg.pooling_nchw_{max,sum}`` vectorized along the output row,
the window unrolled, channels over the threads; ``linalg.pooling_nhwc_{max,sum}`` (made by
``graph.PropagateTransposes`` between NHWC convolutions) vectorized along the channels, which
are contiguous, so strided windows need no gathers. Source: TVM TOPI x86 ``schedule_pool``
(parallel outer, vectorize the innermost output axis)."""

from __future__ import annotations

from typing import Sequence

from ...ir import dtypes
from ...target import Target
from ..schedule import Schedule
from ..state import BlockRV
from .common import RuleContext, categorical, element_bits, largest_divisor, parallelize_first, perfect_tile


def prefers_pool_nhwc(target: Target, x_shape: Sequence[int], window: Sequence[int],
                      out_shape: Sequence[int], dtype: str) -> bool:
    """Whether an NCHW pooling (padded input ``(N, C, H, W)``, window ``(KH, KW)``, output
    ``(N, C, OH, OW)``) should run in NHWC (``layout_passes.PoolToNHWC`` +
    :func:`schedule_pooling_nhwc`): float dtypes on CPU targets with a strided or dilated
    window (``W != OW + KW - 1``), which :func:`schedule_pooling` leaves unvectorized, over
    channels that fill whole vectors or more than one (``C % lanes == 0`` or ``C > lanes``: the
    NHWC rule's channel tile), for 2-D windows (``KH > 1``). Measured on a 2-core AMD EPYC
    znver5 (AVX-512), one thread, ShuffleNet's 3x3 stride-2 max pool over 24 x 112 x 112: 1.1 ms
    NCHW, 0.04 ms NHWC (plus its transposes). A 1-D window (``KH == 1``, e.g. ``avg_pool1d``)
    reads each row once in NCHW, where the two transposes would cost more than the pooling:
    ``avg_pool1d(x, 4)`` on 8 x 64 x 4096, 0.20 ms NCHW against 1.45 ms in NHWC."""
    if target.kind != "cpu" or not dtypes.is_float(dtype) or window[0] == 1 or \
            x_shape[3] == out_shape[3] + window[1] - 1:
        return False
    lanes = target.vector_lanes(dtypes.bit_width(dtype))
    return x_shape[1] % lanes == 0 or x_shape[1] > lanes


def schedule_pooling(sch: Schedule, block: BlockRV, ctx: RuleContext) -> None:
    """Schedule ``out[n, c, oh, ow] = reduce(x[n, c, oh*s + kh*d, ow*s + kw*d])`` over ``(kh,
    kw)``: loops ``n c0 (parallel) c1 oh ow0 kh kw (unrolled) ow1 (vectorized)``, ``WR`` output
    elements of a row in vector registers (the largest divisor of OW up to half the vector
    registers' lanes), the window unrolled when ``KH * KW`` does not exceed the vector
    registers. Only for stride 1 and dilation 1 (read from the shapes: ``W = OW + KW - 1``):
    a strided window vectorizes into gathers, measured 2.5x slower than plain loops (max pool
    3x3 stride 2 on 1x64x56x56: 1.67 ms unscheduled, 4.23 ms vectorized), so strided pooling
    gets the threads only. Stride 1 (same shape, 3x3): 2.46 -> 2.24 ms on one thread.

    Decisions (defaults as above): the threads over channels
    (:func:`~.common.parallelize_first`), ``[OW / WR, WR]`` (``sample_perfect_tile``), the
    window unrolled or not (:func:`unroll_window`).

    Shapes: x (N, C, H, W) (already padded), window (KH, KW), out (N, C, OH, OW); float dtypes.
    """
    blk = sch.get(block)
    n, c, oh, ow, kh, kw = sch.get_loops(block)
    ext = [d.extent for d in blk.dims]
    lanes = ctx.target.vector_lanes(element_bits(blk))
    split = parallelize_first(sch, ctx, blk, [c], [ext[1]])
    if split is not None:
        c = split[1]
    if blk.info.operand_shapes[0][3] != ext[3] + ext[5] - 1:
        return   # strided or dilated window: no vectorization (see above)
    bound = lanes * max(1, ctx.target.vector_registers // 2)
    wr = largest_divisor(ext[3], bound)
    ow0, ow1 = sch.split(ow, perfect_tile(sch, ow, 2, bound, [ext[3] // wr, wr]))
    sch.reorder(c, oh, ow0, kh, kw, ow1)
    unroll_window(sch, ctx, kh, kw, ext[4] * ext[5])
    sch.vectorize(ow1)


def unroll_window(sch: Schedule, ctx: RuleContext, kh, kw, taps: int) -> None:
    """Unroll a pooling window's loops or not (a structural ``sample_categorical([0, 1])``;
    default: when its ``taps`` do not exceed the vector registers)."""
    if int(categorical(sch, [0, 1], int(taps <= ctx.target.vector_registers))):
        sch.unroll(kw)
        sch.unroll(kh)


def schedule_pooling_nhwc(sch: Schedule, block: BlockRV, ctx: RuleContext) -> None:
    """Schedule ``out[n, oh, ow, c] = reduce(x[n, oh*s + kh*d, ow*s + kw*d, c])`` over ``(kh,
    kw)`` (``linalg.pooling_nhwc_{max,sum}``): loops ``n oh (parallel) ow0 c0 kh kw (unrolled)
    [ow1 c1]`` (vectorized), a tile of ``WR`` output columns x ``CR`` channels (a multiple of the
    vector lanes dividing C, at most half the vector registers in all) in registers across the
    window. Each tap loads ``WR`` contiguous channel vectors: any stride or dilation.
    Decisions (defaults as above): ``CR`` among the multiples of the lanes dividing C within
    half the vector registers, ``[OW / WR, WR]`` (``sample_perfect_tile``, bounded by the
    registers left for the sampled ``CR``), the threads over rows, the window unrolled or not.

    Shapes: x (N, H, W, C) (already padded), window (KH, KW), out (N, OH, OW, C); float dtypes.
    """
    blk = sch.get(block)
    n, oh, ow, c, kh, kw = sch.get_loops(block)
    ext = [d.extent for d in blk.dims]
    lanes = ctx.target.vector_lanes(element_bits(blk))
    regs = max(1, ctx.target.vector_registers // 2)
    if ext[3] % lanes == 0:
        crs = [lanes * k for k in range(1, regs + 1) if ext[3] % (lanes * k) == 0]
        cr = categorical(sch, crs, lanes * largest_divisor(ext[3] // lanes, regs))
    else:
        cr = ext[3]
    bound = max(1, regs * lanes // cr)
    wr = largest_divisor(ext[2], bound)
    ow0, ow1 = sch.split(ow, perfect_tile(sch, ow, 2, bound, [ext[2] // wr, wr]))
    c0, c1 = sch.split(c, [None, cr])
    sch.reorder(n, oh, ow0, c0, kh, kw, ow1, c1)
    parallelize_first(sch, ctx, blk, [oh], [ext[1]])
    unroll_window(sch, ctx, kh, kw, ext[4] * ext[5])
    sch.vectorize(ow1)
