"""Rule for depthwise convolutions in NHWC (``linalg.depthwise_conv_2d_nhwc_hwc``, made by
``layout_passes.DepthwiseToNHWC`` from the depthwise grouped convolutions that
:func:`prefers_depthwise_nhwc` picks): channels in the vector, a row of output pixels in
registers, the window unrolled, rows over the threads.

A depthwise convolution does ``KH * KW`` multiply-adds per output element and reads each input
element about ``KH * KW / (SH * SW)`` times: it is bound by loads from L1, not by FMAs. Each tap
of a ``WR`` x ``CR`` register tile loads ``CR / lanes`` filter vectors (shared by the ``WR``
columns) and the input vectors of its columns (neighbouring taps of one window row read
overlapping columns at stride 1), so wider rows cut the loads per FMA
(:func:`depthwise_register_tile`). Source: TVM TOPI x86 ``depthwise_conv2d_NCHWc`` (channel
blocks in the vector, output width register-blocked, kernel unrolled), XNNPACK's ``dwconv``
micro-kernels (channel tiles of whole vectors, all taps unrolled).
"""

from __future__ import annotations

import math
from typing import List, Sequence, Tuple

from ...ir import dtypes
from ...target import Target
from ..schedule import Schedule
from ..state import BlockRV
from .common import RuleContext, categorical, element_bits, parallelize_first, perfect_tile
from .epilogue import claim_epilogues
from .pooling import unroll_window


def prefers_depthwise_nhwc(target: Target, x_shape: Sequence[int], w_shape: Sequence[int],
                           out_shape: Sequence[int], dtype: str) -> bool:
    """Whether a depthwise grouped convolution (input ``(N, G, 1, H, W)`` padded, filter
    ``(G, 1, 1, KH, KW)``, output ``(N, G, 1, OH, OW)``) should run as NHWC
    (``layout_passes.DepthwiseToNHWC`` + :func:`schedule_depthwise_nhwc`): float dtypes on CPU
    targets. The GPU rule maps NCHW output elements to threads, and integer dtypes keep the
    grouped rule's plain loops."""
    return target.kind == "cpu" and dtypes.is_float(dtype)


def channel_vector(target: Target, c: int, dtype_bits: int) -> int:
    """The vector width (elements) of a channel tile over ``c`` channels: the target's lanes
    when they divide ``c``, else the largest power of two dividing both (a half or quarter
    register: 136 channels take 8-lane vectors on AVX-512), at least 1 (the lanes are a power
    of two, so this is their greatest common divisor)."""
    return math.gcd(c, target.vector_lanes(dtype_bits))


def depthwise_register_tile(target: Target, ow: int, c: int, kw: int, stride: int, dilation: int,
                            dtype_bits: int = 32) -> Tuple[int, int]:
    """``(WR, CR)``: ``WR`` output columns (a divisor of ``ow``) x ``CR = k * vec`` channels
    (:func:`channel_vector`, ``CR`` divides ``c``) held in ``WR * k`` accumulators, at most half
    the vector registers (the other half holds the filter and input vectors of a window row).
    Chosen by the loads per FMA over one unrolled window row of ``kw`` taps,
    ``(cols + kw) / (kw * WR)`` with ``cols = min(kw * WR, (WR - 1) * stride + (kw - 1) *
    dilation + 1)`` the input columns the row reads: the widest row first, then the most
    channel vectors that fit (fewer loop iterations, more independent FMA chains)."""
    vec = channel_vector(target, c, dtype_bits)
    acc = max(1, target.vector_registers // 2)
    best, best_key = (1, vec), None
    for wr in (d for d in range(1, min(ow, acc) + 1) if ow % d == 0):
        cols = min(kw * wr, (wr - 1) * stride + (kw - 1) * dilation + 1)
        for k in (k for k in range(1, acc // wr + 1) if c % (k * vec) == 0):
            key = (round((cols + kw) / (kw * wr), 6), -wr * k)
            if best_key is None or key < best_key:
                best, best_key = (wr, k * vec), key
    return best


def _channel_tiles(target: Target, c: int, wr: int, bits: int) -> List[int]:
    """The channel tiles of :func:`schedule_depthwise_nhwc` for a sampled row tile ``wr``:
    multiples of :func:`channel_vector` dividing ``c`` whose ``wr * k`` accumulators fit half
    the vector registers (at least one vector)."""
    vec = channel_vector(target, c, bits)
    acc = max(1, target.vector_registers // 2)
    return [k * vec for k in range(1, max(1, acc // wr) + 1) if c % (k * vec) == 0] or [vec]


def schedule_depthwise_nhwc(sch: Schedule, block: BlockRV, ctx: RuleContext) -> None:
    """Schedule ``out[n, oh, ow, c] += x[n, oh*s + kh*d, ow*s + kw*d, c] * w[kh, kw, c]``
    (``linalg.depthwise_conv_2d_nhwc_hwc``, dims ``n, oh, ow, c, kh, kw``).

    Loop nest: ``n oh (parallel) ow0 c0 kh kw (unrolled) [ow1 c1]`` (vectorized: the 2-D
    window is decomposed into 1-D ``depthwise_conv_1d_nwc_wc`` taps, the lanes over the
    channels): a ``WR x CR`` output tile (:func:`depthwise_register_tile`) stays in registers
    across the window. Elementwise epilogues (bias, batch-norm scale and shift, relu) are fused
    per tile (``reverse_compute_at(c0)``) and the zero init decomposed into it, so the output is
    written once.

    Decisions (defaults as above): ``[OW / WR, WR]`` (``sample_perfect_tile``, ``WR`` at most
    half the vector registers), ``CR`` (:func:`_channel_tiles`), the threads over rows
    (:func:`~.common.parallelize_first`), the window unrolled or not
    (:func:`~.pooling.unroll_window`).

    Shapes: x (N, H, W, C) (already padded), w (KH, KW, C), out (N, OH, OW, C); float dtypes;
    any stride and dilation.
    """
    blk = sch.get(block)
    n, oh, ow, c, kh, kw = sch.get_loops(block)
    ext = [d.extent for d in blk.dims]
    facts = ctx.fact(blk)
    stride, dilation = ((facts.strides or (1, 1))[1], (facts.dilations or (1, 1))[1]) \
        if facts is not None else (1, 1)
    bits = element_bits(blk)
    acc = max(1, ctx.target.vector_registers // 2)
    wr, cr = depthwise_register_tile(ctx.target, ext[2], ext[3], ext[5], stride, dilation, bits)
    ow0, ow1 = sch.split(ow, perfect_tile(sch, ow, 2, acc, [ext[2] // wr, wr]))
    wr = sch.get(ow1).extent
    cands = _channel_tiles(ctx.target, ext[3], wr, bits)
    c0, c1 = sch.split(c, [None, categorical(sch, cands, cr if cr in cands else cands[-1])])
    sch.reorder(n, oh, ow0, c0, kh, kw, ow1, c1)
    parallelize_first(sch, ctx, blk, [oh], [ext[1]])
    epi = claim_epilogues(sch, blk, ctx)
    for e in epi:
        sch.reverse_compute_at(e, c0)
    if epi and blk.info.init:
        sch.decompose_reduction(block, kh)
    unroll_window(sch, ctx, kh, kw, ext[4] * ext[5])
    sch.vectorize(ow1)
