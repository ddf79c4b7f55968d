"""Default rule for ``linalg.conv_2d_nchw_fchw``: a direct convolution vectorized along the
output row, the window unrolled, output channels over the threads, elementwise epilogues (bias,
relu) fused per output row tile. Source: TVM TOPI x86 ``conv2d_nchw`` (direct schedule: output
width vectorized, kernel loops unrolled), oneDNN's direct convolution (register blocking of the
output, post-ops)."""

from __future__ import annotations

from ..schedule import Schedule
from ..state import BlockRV
from .common import RuleContext, element_bits, largest_divisor, parallelize_first, worth_threads
from .epilogue import epilogue_chain


def schedule_conv2d(sch: Schedule, block: BlockRV, ctx: RuleContext) -> None:
    """Schedule ``out[n, f, oh, ow] += x[n, c, oh*s + kh*d, ow*s + kw*d] * w[f, c, kh, kw]``.

    Loop nest: ``n f0 (parallel) f1 oh ow0 c kh kw (unrolled) ow1 (vectorized)``: one output
    channel's row tile of ``WR`` outputs stays in vector registers across the ``c, kh, kw``
    reduction (each step: one row load of the input, one broadcast weight, ``WR / lanes`` FMAs).
    ``WR`` is the largest divisor of OW whose accumulators take at most half the vector
    registers (``lanes * vector_registers / 2`` elements: 64 float32 on AVX2). The window is
    unrolled when its taps (``KH * KW``) do not exceed the vector registers. Measured on a
    2-core AVX2 EPYC, 1x64x56x56 3x3 -> 64, one thread: 143 ms unscheduled, 15.7 ms.

    Tiles that put output channels in the vector (``F x W`` register blocks) were measured
    slower here (70-80 ms): the 1-D convolution vectorizer works in NWC and transposes the
    accumulator tile on every reduction step.

    Shapes: x (N, C, H, W) (already padded by ``tensor.pad``), w (F, C, KH, KW), out
    (N, F, OH, OW); float dtypes; any stride and dilation.
    """
    blk = sch.get(block)
    n, f, oh, ow, c, kh, kw = sch.get_loops(block)
    ext = [d.extent for d in blk.dims]
    lanes = ctx.target.vector_lanes(element_bits(blk))
    wr = largest_divisor(ext[3], lanes * max(1, ctx.target.vector_registers // 2))
    t = largest_divisor(ext[1], ctx.threads) if worth_threads(ctx, blk) else 1
    f0, f1 = sch.split(f, [t, ext[1] // t])
    ow0, ow1 = sch.split(ow, [ext[3] // wr, wr])
    sch.reorder(n, f0, f1, oh, ow0, c, kh, kw, ow1)
    if t > 1:
        sch.parallel(f0)
    epi = [sch.get_block(e, func_name=blk.func) for e in epilogue_chain(sch, blk, ctx)]
    ctx.claimed.update((blk.func, sch.get(e).name) for e in epi)
    for e in epi:
        sch.reverse_compute_at(e, ow0)
    if ext[5] * ext[6] <= ctx.target.vector_registers:
        sch.unroll(kw)
        sch.unroll(kh)
    sch.vectorize(ow1)


def schedule_grouped_conv2d(sch: Schedule, block: BlockRV, ctx: RuleContext) -> None:
    """Schedule ``linalg.conv_2d_ngchw_gfchw`` (groups > 1, depthwise included), dims ``(n, g,
    f, oh, ow, c, kh, kw)``: groups (or, with fewer groups than threads, output channels per
    group) over the threads; the loop nest is otherwise left as it is. The structured vectorizer
    has no 1-D decomposition of grouped convolutions, and moving the output row innermost (for
    LLVM's loop vectorizer) measured slower (depthwise 1x64x56x56 3x3, one thread: 1.72 ms
    unscheduled, 1.96 ms reordered).
    """
    blk = sch.get(block)
    n, g, f, oh, ow, c, kh, kw = sch.get_loops(block)
    ext = [d.extent for d in blk.dims]
    parallelize_first(sch, ctx, blk, [g, f], [ext[1], ext[2]])
