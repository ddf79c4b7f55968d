"""Rules for 2-D convolutions (the form each convolution runs in is decided in
:mod:`.conv_strategy`); each samples its tiles, threads and unrolling (decisions whose
defaults derive from the target, the values described below).

* ``linalg.conv_2d_nhwc_hwcf`` (:func:`schedule_conv2d_nhwc`): a direct convolution with a
  register tile of ``WR`` output columns x ``k`` vectors of output channels
  (:func:`nhwc_register_tile`), output-channel blocks outermost (their filter panel stays in L1,
  input channels blocked when it does not: :func:`filter_block_channels`), the window unrolled.
  ``mlc.compile`` rewrites the NCHW convolutions that :func:`~.conv_strategy.prefers_nhwc` picks into this form
  (``layout_passes.ConvToNHWC``: transposes around the op; a constant filter's is folded).
* ``linalg.conv_2d_nchw_fchw`` (:func:`schedule_conv2d`): the output row tiled, the window
  unrolled, elementwise epilogues (bias, relu) fused per row tile; used for the convolutions
  :func:`~.conv_strategy.prefers_nhwc` leaves in NCHW and for schedules built on NCHW payloads directly.
* ``linalg.conv_2d_ngchw_gfchw`` (:func:`schedule_grouped_conv2d`); depthwise ones run as
  ``linalg.depthwise_conv_2d_nhwc_hwc`` (:mod:`.depthwise`).
* One-image NCHW convolutions with ragged output channels over large maps
  (:func:`~.conv_strategy.prefers_nchw_im2col`) run as the GEMM ``W (F, C*KH*KW) x cols (C*KH*KW, OH*OW)``.
* Small output maps (:func:`~.conv_strategy.prefers_im2col`) are not scheduled as convolutions at all:
  ``mlc.compile`` rewrites them into an im2col copy + ``linalg.matmul`` (``layout_passes.ConvToIm2col``).
* Stride-1 3x3 convolutions that :func:`~.conv_strategy.winograd_tile` picks are not either: ``mlc.compile``
  rewrites them into Winograd F(m x m, 3 x 3) transforms around a ``linalg.batch_matmul``
  (``layout_passes.ConvToWinograd``), which the elementwise and batch_matmul rules schedule.

Source: oneDNN's direct convolution and TVM TOPI x86 ``conv2d_NCHWc`` (output channels in the
vector, register blocking of the output width, kernel loops unrolled, reordered weights); TVM
``conv2d_nchw`` (output width vectorized); TVM ``ConvertLayout`` for the per-op layout change.

Why NHWC: MLIR 22's structured vectorizer decomposes a 2-D convolution into 1-D ones and
vectorizes those in NWC form, the vector lanes over the *output channels*. For NCHW with one
channel per tile that gives ``vector<1xf32>`` FMAs (scalar code; LLVM's SLP vectorizer re-packs
them: 84 ``vinsertps`` and 128 spill/reload instructions next to 63 FMAs in the inner loop); with
several channels per tile, strided filter gathers and accumulator transposes every reduction
step (30 ms). In NHWC/HWCF the channel vector is contiguous in the filter and the output: the
inner loop is 72 FMAs, 30 broadcasts, 9 filter loads and no spills (8 x 8 tile). im2col +
the Goto GEMM recipe (``transform.structured.convert_conv2d_to_img2col``) was not pursued: its
64 x 576 x 3136 GEMM alone took 12.3-12.9 ms with the default matmul schedule (19-23 GFLOP/s on
this znver1; 3136 x 576 x 64 the same), before the 7 MB patch copy, against 6.9 ms for PyTorch's
whole convolution and 7.1 ms for the NHWC kernel in the same run.

Measured on a shared 2-core AVX2 EPYC (znver1), float32, one thread, ``benchmarks/tune_cpu.py
--impls torch,default --threads 1`` (ratio = PyTorch eager (oneDNN) ms / ours in the same run;
two runs with PyTorch at 6.7 ms for the first layer, as in the issue): 1x64x56x56 3x3 -> 64
0.89-0.93 (7.2-7.5 ms; the NCHW rule: 0.36-0.42); 1x256x14x14 3x3 -> 256 0.74-0.77 (NCHW rule
0.45); 1x64x56x56 3x3 stride 2 -> 128 0.90-0.99; 1x64x56x56 1x1 stride 2 -> 128 0.89-1.00;
1x256x14x14 1x1 -> 256 0.74-0.89. The filters are function arguments there, so their
transposes run in every call (measured alone: 0.06 ms for 64x64x3x3, 1.5-2.4 ms for
256x256x3x3); constant filters are folded. The input and output transposes
cost about 0.2 ms each for the first layer. Two threads could not be judged on that machine
(PyTorch's own 2-thread runs took 30 ms there; see the benchmark's output).
"""

from __future__ import annotations

import math
from typing import Sequence

from ...target import Target
from ..cpu_recipes import FMAS_IN_FLIGHT
from ..schedule import Schedule
from ..state import BlockRV
from .common import (
    RuleContext, categorical, element_bits, largest_divisor, near_divisors, parallelize_first,
    perfect_tile, thread_candidates, worth_threads,
)
from .epilogue import claim_epilogues, epilogue_reads


def nhwc_register_tile(target: Target, ow: int, f: int, kw: int = 3, stride: int = 1,
                       dilation: int = 1, dtype_bits: int = 32, edges: bool = True, wide: bool = True,
                       pow2: bool = True):
    """``(WR, FR)``: the register tile of :func:`schedule_conv2d_nhwc`: ``WR`` output columns
    x ``FR = k * lanes`` output channels (``k`` vectors, ``FR`` divides ``f``) among
    :func:`register_tile_fits`' tiles, chosen by a load count per FMA over one window row of
    ``kw`` taps, summed over the ``OW / WR`` full tiles of an output row and, where ``WR`` does
    not divide ``OW``, its edge tile of ``OW mod WR`` columns (peeled: its own static tile):

    * FMAs: ``kw * WR * k`` per tile;
    * broadcast inputs: the distinct input columns the row reads,
      ``min(kw * WR, (WR - 1) * stride + (kw - 1) * dilation + 1)``, when the window row is
      unrolled and LLVM can keep them live across the taps (:func:`broadcasts_fit`), else
      ``kw * WR`` (each tap broadcasts its own), cost 1 each;
    * filter vectors: ``kw * k`` per tile, cost 2 each (a whole vector through the load ports).

    Tiles with more accumulators come first up to a quarter of the registers or 3/4 of
    :data:`~mlc_mlir.schedule.cpu_recipes.FMAS_IN_FLIGHT`, whichever is more (FMA latency: 6 on
    AVX2, 8 on AVX-512; a 4 x 8 stem tile, which reuses its broadcasts, would leave half the FMA
    pipes idle), then the cost; ties go to tiles without an edge, then more accumulators, then
    wider rows. On AVX2 this
    gives 8 x 8 for a stride-1 3x3 over 56 columns, 7 x 8 over 14 columns and 28 (reusing the
    broadcasts), and 6 x 16 with a 4-column edge for the 7x7 stride-2 stem over 112 columns
    (a wide tile: 12 accumulators, its window row rolled; 0.83 loads per FMA against 1.0 for
    4 x 16, whose 8 broadcasts per tap do not fit beside its accumulators, and 8 x 8, which
    reuses its 21 broadcasts across the taps by spilling them: 34 stack accesses per 56 FMAs).
    Light ResNet-50's stem with its batch norm, relu and max pool, one thread of a loaded 2-core
    znver3, interleaved with onnxruntime: 6 x 16 rolled 0.84-0.89 of the 4 x 16 time (min of
    30-40 rounds, four runs; per-round medians 0.89-0.97), onnxruntime/ours 0.83-0.86 ->
    0.97-1.00 (``benchmarks/results/models_cpu_2026-11-27_znver3_stem6.txt``). A 1x1 64 -> 256
    over 56 columns (forced direct: the default runs it as a GEMM) 4 x 16 -> 6 x 16 with a
    2-column edge: 0.93-0.98 (min) / 0.87-0.93 (medians).
    On AVX-512 the stem keeps 7 x 32 (16 divides 112; 14 accumulators reusing their broadcasts).

    A wide tile has ``k >= 2``: with one filter vector each broadcast feeds one FMA, as in the
    unrolled tile, and the rolled window only adds its loop (shufflenet's 3x3 stride-2 stem,
    24 channels over 112 columns: 14 x 8 rolled 1.02x (min) / 1.07x (per-round medians) the
    time of 8 x 8; the tuner still samples it). ``k`` is a power of two (``pow2``,
    :func:`whole_register_vectors`): a ``k * lanes``-element vector of another length is not
    split into ``k`` registers by LLVM but legalized through a wider one, and the tile's
    accumulators go through the stack at every reduction step (the tuner still samples such
    ``FR``: :func:`_channel_tiles`). ZFNet-512's 7x7 stride-2 stem, 96 channels over 109
    columns: 1 x 48 (``WR`` dividing 109, any ``k``) -> 6 x 16 with a 1-column edge, 0.29x the
    time (one layer with its batch norm, relu and max pool).

    ``edges=False`` keeps ``WR`` a divisor of ``ow``, ``wide=False`` the accumulators within
    half the registers and ``pow2=False`` any ``k``: the tile space that :mod:`.conv_strategy`'s
    choices between this kernel and the GEMM were measured against.
    """
    lanes = target.vector_lanes(dtype_bits)
    acc = max(1, target.vector_registers // 2)
    chains = max(acc // 2, -(-3 * min(acc, FMAS_IN_FLIGHT) // 4))
    best, best_key = (1, lanes if f % lanes == 0 else 1), None
    for wr in range(1, min(ow, target.vector_registers) + 1):
        if not edges and ow % wr:
            continue
        for k in range(1, target.vector_registers // wr + 1):
            if f % (k * lanes) or not register_tile_fits(target, wr, k, wide and k > 1) \
                    or pow2 and not whole_register_vectors(k):
                continue
            reuse = not rolled_window(target, wr, k) and broadcasts_fit(target, wr, k, stride, dilation)

            def loads(w):   # one window row of a w-column tile
                cols = min(kw * w, (w - 1) * stride + (kw - 1) * dilation + 1) if reuse else kw * w
                return cols + 2 * kw * k
            full, edge = divmod(ow, wr)
            cost = (full * loads(wr) + (loads(edge) if edge else 0)) / (kw * ow * k)
            key = (-min(wr * k, chains), round(cost, 6), edge > 0, -wr * k, -wr)
            if best_key is None or key < best_key:
                best, best_key = (wr, k * lanes), key
    return best


def whole_register_vectors(k: int) -> bool:
    """Whether an output-channel tile of ``k`` vectors (``vector<k * lanes x f32>`` in the
    register tile of :func:`schedule_conv2d_nhwc`) lowers to ``k`` vector registers: ``k`` a
    power of two. LLVM's type legalization splits a power-of-two vector into registers and
    widens any other length first, so a ``k = 3`` or ``6`` tile's accumulators, carried through
    the reduction loops, spill: on AVX2 (llvm-mca znver3) the 4 x 24 stem tile's rolled window
    step 185 stack accesses for 12 FMAs, 10.7 cycles per FMA; 2 x 24 unrolled 66 for 54, 1.7;
    1 x 48 (zfnet512's 7x7 stem over 109 columns) 64 for 42, 2.0; 4 x 16 and 2 x 32 none,
    0.50. Whole models, one thread: zfnet512 and shufflenet 1.69x and 1.41x the time with
    their stems at 4 x 24
    (``benchmarks/results/models_cpu_2026-11-27_znver3_stem6.txt``)."""
    return k > 0 and k & (k - 1) == 0


def register_tile_fits(target: Target, wr: int, k: int, wide: bool = True) -> bool:
    """Whether a ``WR x k``-vector register tile of :func:`schedule_conv2d_nhwc` fits the vector
    registers: its accumulators within half of them (the other half holds the broadcasts and
    filter vectors of an unrolled window row), or, with ``wide``, a wide tile
    (:func:`rolled_window`) whose accumulators, ``k`` filter vectors and one broadcast fit them
    all (12 accumulators on AVX2's 16 registers: 6 x 16; not 7 x 16 or 3 x 32), as the GEMM's
    register tiles (:func:`~mlc_mlir.schedule.cpu_recipes.register_tile_shapes`)."""
    regs = target.vector_registers
    return wr * k <= max(1, regs // 2) or wide and wr * k + k + 1 <= regs


def rolled_window(target: Target, wr: int, k: int) -> bool:
    """Whether a ``WR x k``-vector register tile (:func:`register_tile_fits`) is wide: more
    accumulators than half the vector registers. Its window row stays rolled (the default of
    :func:`schedule_conv2d_nhwc`'s unroll decision), so each tap broadcasts its own ``WR``
    inputs one at a time: unrolled, LLVM keeps the broadcasts live for the next taps and spills
    (the stem's 6 x 16 on AVX2, window row unrolled: 34 stack accesses per 84 FMAs; rolled:
    none, 22 instructions per 12 FMAs)."""
    return wr * k > max(1, target.vector_registers // 2)


def broadcasts_fit(target: Target, wr: int, k: int, stride: int = 1, dilation: int = 1) -> bool:
    """Whether a ``WR x k``-vector register tile of :func:`schedule_conv2d_nhwc` leaves the
    registers to reuse its input broadcasts across the unrolled taps of a window row. Tap
    ``t + g`` reads the columns of tap ``t`` shifted by whole outputs when ``g * dilation`` is a
    multiple of ``stride`` (``g = stride / gcd(stride, dilation)``), so the broadcasts of ``g``
    taps, ``g * WR``, stay live with the ``WR * k`` accumulators and the ``k`` filter vectors;
    one more than the vector registers fits (a tap's first broadcast dies at its first FMA,
    before the next tap's last one is loaded: the stride-1 8 x 8 tile on AVX2 reuses its
    broadcasts without spills). A conservative bound: LLVM's scheduler may shorten the live
    ranges further (the stem's 4 x 16 keeps its 13 broadcasts without spills), but a tile
    beyond it needs that luck (the stem's 8 x 8 spills)."""
    g = stride // math.gcd(stride, dilation)
    return wr * k + k + g * wr <= target.vector_registers + 1


def filter_block_channels(target: Target, taps: int, c: int, fr: int, dtype_bits: int = 32) -> int:
    """Input channels per block of :func:`schedule_conv2d_nhwc`: all ``c`` when one output-channel
    block's filter panel (``taps * c * fr`` elements) fits the L1d or a quarter of the L2; else
    the largest divisor of ``c`` whose panel slice takes at most half the L1d (the rest holds the
    input rows and the output tile). Unknown cache sizes (0) assume a 32 KiB L1d and 256 KiB L2.

    A panel in the L2 is streamed into the row tiles at one filter vector per ``WR`` FMAs
    (:func:`nhwc_register_tile`), which the L2 sustains; channel blocks instead cost a zeroing
    pass and an epilogue pass over the output and a re-read of every output tile per block.
    Interleaved runs on a 2-core AVX-512 EPYC (znver5, 48 KiB L1d, 1 MiB L2), one thread, with
    the bias epilogue: 1x64x56x56 3x3 -> 64 (a 73 KiB panel) 1.01 -> 0.97 ms unblocked,
    1x128x28x28 -> 128 (147 KiB) 0.97 -> 0.94 ms. Larger panels (a quarter of the L2 and up)
    keep the blocks: their rows, ``F`` elements apart in a constant filter, fall into few
    sets of the L2.
    """
    l1 = target.l1d_bytes or (32 << 10)
    l2 = target.l2_bytes or (256 << 10)
    per_channel = taps * fr * max(1, dtype_bits // 8)
    if per_channel * c <= max(l1, l2 // 4):
        return c
    return largest_divisor(c, max(1, (l1 // 2) // per_channel))


def blocks_inside_rows(target: Target, ext: Sequence[int], stride: int, dilation: int, fr: int,
                       dtype_bits: int = 32, epilogue_reads: int = 0) -> bool:
    """Whether :func:`schedule_conv2d_nhwc` should run its output-channel blocks inside the
    output rows (``n oh f0 ow0 ...``) rather than around them (``n f0 oh ow0 ...``), for a
    convolution of loop extents ``ext = (N, OH, OW, F, KH, KW, C)`` with output-channel tile
    ``fr`` and unblocked input channels.

    Blocks outside read the whole input map once per block and write the output (and read
    any epilogue operand of its shape, such as a residual) in ``OH x OW x FR`` stripes, one
    ``FR``-element piece of every pixel's row; blocks inside read the input once and write
    whole output rows, while every block's filter panel is re-read per row. Rows go outside when
    one block's pass (the input map plus its output stripe) exceeds the L2, so the blocks
    would stream the input again from L3/DRAM, and the whole filter plus one output row's input
    window and output row fits the L2. Each of the ``epilogue_reads`` tensors of the output's
    shape that the fused epilogues read (a residual add: :func:`~.epilogue.epilogue_reads`) adds
    a stripe of its own to the block's pass. Unknown L2 size (0): 256 KiB.

    Measured on a 2-core AMD EPYC znver5 (AVX-512, 1 MiB L2), loaded host, one thread, CPU
    time, light ResNet-50's units with their epilogues, blocks around -> inside the rows,
    interleaved, caches flushed before each call (the weights and the input come from DRAM,
    as in the model): 1x56x56x64 1x1 -> 256 + residual add 1.16 -> 1.01 ms (warm 0.66 ->
    0.61), without the add 0.71 -> 0.67, 1x56x56x256 1x1 -> 128 1.14 -> 1.05, 1x1 256 -> 64
    0.70 -> 0.64, 3x3 stride 2 128 -> 128 over 56x56 1.23 -> 1.20; the 3x3 64 -> 64 over
    56x56 and the 7x7 stem tie. On a 2-core Intel Emerald Rapids (AVX-512, 2 MiB L2), one
    thread, warm, the 1x1 64 -> 256 + residual add with 64-channel blocks (a 1.6 MiB pass
    without the residual's stripe, 2.4 MiB with it): around 1.35-1.48 ms, inside 1.05-1.09 ms
    (min of 5 interleaved rounds,
    ``benchmarks/results/conv_tiles_2026-11-28_emeraldrapids_session32.txt``). Source: the loop
    order of oneDNN's direct convolution (``oh`` outside the output-channel blocks when the
    input is large) and TVM's ``conv2d_NCHWc`` reorder.
    """
    e = max(1, dtype_bits // 8)
    _, oh, ow, f, kh, kw, c = ext
    ih, iw = (oh - 1) * stride + (kh - 1) * dilation + 1, (ow - 1) * stride + (kw - 1) * dilation + 1
    l2 = target.l2_bytes or (256 << 10)
    block_pass = (ih * iw * c + (1 + epilogue_reads) * oh * ow * fr) * e
    rows_set = (kh * kw * c * f + kh * iw * c + ow * f) * e
    return f > fr and block_pass > l2 and rows_set <= l2


def schedule_conv2d_nhwc(sch: Schedule, block: BlockRV, ctx: RuleContext) -> None:
    """Schedule ``out[n, oh, ow, f] += x[n, oh*s + kh*d, ow*s + kw*d, c] * w[kh, kw, c, f]``
    (``linalg.conv_2d_nhwc_hwcf``, dims ``n, oh, ow, f, kh, kw, c``).

    Loop nest: ``n f0 (parallel: threads x blocks) [c0] oh ow0 c1 kh kw (unrolled) [ow1 f1]``
    (vectorized): a ``WR x FR`` tile of the output (:func:`nhwc_register_tile`) stays in
    registers across the ``c, kh, kw`` reduction; each step broadcasts ``WR`` inputs (shared
    between neighbouring taps once the window is unrolled) and loads one filter vector of ``FR``
    contiguous output channels. Output-channel blocks are outermost, so one block's filter panel
    (``KH * KW * C * FR`` elements) is reused from L1/L2 by every row tile. The window is unrolled
    when its taps do not exceed the vector registers; the init (``linalg.fill``) runs once.
    When a block's filter panel exceeds the L1d and a quarter of the L2, the input channels are blocked
    (:func:`filter_block_channels`, ``c0`` outside the row tiles) so each ``c1`` slice of the
    panel stays in L1 across the row tiles (the output tile is re-read once per ``c0``).
    Measured (2-core AVX2 EPYC, one thread, loaded machine, torch 12.3 ms in the same run):
    1x256x14x14 3x3 -> 256 as NHWC 17.5 ms unblocked, 14.2 ms with 32-channel blocks.

    With several output-channel blocks (``F > FR``) the filter panel is packed (``cache_read``
    + ``compute_at(c0 or f0)``: a contiguous ``KH x KW x C1 x FR`` copy per block, TVM/oneDNN's
    pre-packed ``OIhw8o`` weights done per call): its rows are ``F`` elements apart, and for
    ``F = 512`` (2 KiB) they fall into 2 of the 64 L1 sets, so the unpacked panel never stays in
    L1. Interleaved A/B runs on that EPYC, one thread: 1x9x9x512 -> 512 15.9 -> 12.7 ms,
    1x16x16x256 -> 256 8.3 -> 7.1 ms, 1x58x58x64 -> 64 7.2 -> 6.6 ms. A window wider than the
    vector registers (the 7x7 stem) has only its rows unrolled: 8.1 -> 7.3 ms for
    1x230x230x3 7x7 stride 2 -> 64.

    Elementwise epilogues (bias, relu; ``layout_passes.ConvToNHWC`` moves them before its transpose back
    to NCHW) are fused per row tile when the input channels are not blocked; the init is then
    decomposed into the row tile (``decompose_reduction`` at ``c``). With channel blocks they
    run per output-channel block (``reverse_compute_at(f0)``: the block's ``OH x OW x FR`` slice
    is still in L2) and the init is decomposed at ``c0``, so each thread zeroes its own block
    instead of a serial memset of the whole output (ResNet-18's 64- and 128-channel 3x3 convs
    on AVX-512, whose 73 KiB filter panel exceeds the 32 KiB L1d: whole model 37.1 -> 36.8 ms
    on one thread, 21.0 -> 20.8 ms on two, 2-core AMD EPYC Zen 4).

    Decisions, in order, the values above being their defaults: ``WR`` among the widths
    :func:`_row_tiles` (``[ceil(OW / WR), WR]``: a ``WR`` that does not divide ``OW`` leaves an
    edge tile of ``OW mod WR`` columns, whose loop iteration ``transform.loop.peel`` splits off
    with the epilogues and the init fused in the row tile, so both tiles are static:
    :func:`~mlc_mlir.schedule.partial_tiles.peel_partial`); ``FR`` among whole vectors that
    divide ``F`` and fit the registers with the sampled ``WR`` (:func:`_channel_tiles`); the
    input-channel block (the divisors of ``C`` near :func:`filter_block_channels`' and ``C``
    itself: no block); the input channels inside the window loops (``kh kw c``) or outside
    them (``c kh kw``; inside for a wide tile whose channel block outnumbers a window row's
    taps: the longer loop innermost, the window being rolled); without an input-channel block
    and with several output-channel blocks, the blocks inside the output rows or around them
    (:func:`blocks_inside_rows`; inside, the threads split the rows and the filter is not
    packed); the axis over the threads (output-channel blocks or rows, :func:`_parallel_axis`)
    and the thread count; packing the filter panel or not (blocks outside the rows only); the
    window unrolled (both loops, ``kw`` only, or none; none for a wide tile,
    :func:`rolled_window`). All but the tiles and the thread count are structural.

    Shapes: x (N, H, W, C) (already padded), w (KH, KW, C, F), out (N, OH, OW, F); float
    dtypes; any stride and dilation.
    """
    blk = sch.get(block)
    n, oh, ow, f, kh, kw, c = sch.get_loops(block)
    ext = [d.extent for d in blk.dims]
    facts = ctx.fact(blk)
    stride, dilation = ((facts.strides or (1, 1))[1], (facts.dilations or (1, 1))[1]) \
        if facts is not None else (1, 1)
    bits = element_bits(blk)
    regs = ctx.target.vector_registers
    lanes = ctx.target.vector_lanes(bits) if ext[3] % ctx.target.vector_lanes(bits) == 0 else 1
    wr, fr = nhwc_register_tile(ctx.target, ext[2], ext[3], ext[5], stride, dilation, bits)
    # the row tile need not divide OW: the edge tile is peeled (partial_tiles.peel_partial)
    ow0, ow1 = sch.split(ow, [None, categorical(sch, _row_tiles(ctx.target, ext[2]), wr)])
    wr = sch.get(ow1).extent
    f0, f1 = sch.split(f, [None, categorical(sch, *_channel_tiles(ctx.target, ext[3], wr, fr, bits))])
    fr = sch.get(f1).extent
    wide = rolled_window(ctx.target, wr, fr // lanes)
    cb0 = filter_block_channels(ctx.target, ext[4] * ext[5], ext[6], fr, bits)
    cb = categorical(sch, sorted(set(near_divisors(ext[6], cb0)) | {ext[6]}), cb0)
    # a wide tile's rolled window: the longer of its reduction loops innermost, the input
    # channels (of a block) when they outnumber a window row's taps. 3x3 stride 2 128 -> 128
    # over 28 columns (forced direct), 6 x 16 against 4 x 16 (window unrolled): channels outside
    # the window 1.22-1.31x the time, inside 0.74-0.76x; the stem (3 channels, 7 taps): outside
    # 0.87, inside 0.90
    inner_c = int(categorical(sch, [0, 1], int(wide and cb > ext[5])))
    rows_out = 0
    if cb < ext[6]:
        c0, c1 = sch.split(c, [None, cb])
        red = (kh, kw, c1) if inner_c else (c1, kh, kw)
        sch.reorder(n, f0, c0, oh, ow0, *red, ow1, f1)
    else:
        c0 = None
        if ext[3] > fr:
            rows_out = int(categorical(sch, [0, 1], int(
                blocks_inside_rows(ctx.target, ext, stride, dilation, fr, bits, epilogue_reads(sch, blk, ctx))
                and ext[1] % max(1, ctx.threads) == 0)))
        red = (kh, kw, c) if inner_c else (c, kh, kw)
        sch.reorder(*((n, oh, f0) if rows_out else (n, f0, oh)), ow0, *red, ow1, f1)
    threaded = _parallel_axis(sch, ctx, blk, f0, oh, c0, ext[3] // fr, ext[1], bool(rows_out))
    if threaded is not None and threaded[0] == 0:
        f0 = threaded[1]
    if not rows_out and int(categorical(sch, [0, 1], int(ext[3] > fr and ext[1] * -(-ext[2] // wr) > 1))):
        # several output-channel blocks: a block's filter panel is strided by F (2 KiB rows for
        # F = 512 map to 2 L1 sets); pack it contiguously once per (f0, c0), reused by every
        # row tile
        packed = sch.cache_read(block, 1, "local")
        sch.compute_at(packed, c0 if c0 is not None else f0)
    epi = claim_epilogues(sch, blk, ctx)
    if cb == ext[6]:  # epilogues per row tile
        for e in epi:
            sch.reverse_compute_at(e, ow0)
        if epi and blk.info.init:
            # the output tile the epilogue reads is zeroed in place, not copied (memrefCopy,
            # one call per tile) from an output zeroed whole: ResNet-18 147 -> 128 ms
            sch.decompose_reduction(block, red[0])
    else:
        # with channel blocks c0 sits above the row tiles: epilogues per output-channel block
        # (its OH x OW x FR slice is still in L2), zeroed by its thread before the c0 loop
        # rather than by a serial memset of the whole output
        for e in epi:
            sch.reverse_compute_at(e, f0)
        if blk.info.init and (epi or (threaded is not None and set(blk.info.producers) <= {blk.info.init})):
            sch.decompose_reduction(block, c0)
    # window rows unrolled: 2 both loops, 1 kw only (a 7x7 stem), 0 none
    unroll = int(categorical(sch, [0, 1, 2], 0 if wide else
                             2 if ext[4] * ext[5] <= regs else int(ext[5] <= regs)))
    if unroll:
        sch.unroll(kw)
    if unroll == 2:
        sch.unroll(kh)
    sch.vectorize(ow1)


def _parallel_axis(sch: Schedule, ctx: RuleContext, blk, f0, oh, c0, blocks: int, rows: int,
                   rows_outer: bool = False):
    """The thread decomposition of :func:`schedule_conv2d_nhwc` (loops ``n f0 [c0] oh ...``,
    ``blocks`` output-channel blocks, ``rows`` output rows): the axis split over the threads,
    sampled among the output-channel blocks (0) and the output rows (1) that have a thread
    count dividing them (default: the blocks where they divide, as
    :func:`~.common.parallelize_first` picks), then the thread count
    (:func:`~.common.thread_candidates`, default the most). A row split is hoisted above the
    blocks (``n oh0 f0 [c0] oh1 ...``): one fork per call, each thread computing every block of
    its rows (its own filter panel copies, its input rows and output rows only) instead of half
    the blocks of every row (each thread reading the whole input). Nothing when the block is
    too small for threads (:func:`~.common.worth_threads`). With ``rows_outer`` (loops
    ``n oh f0 ...``, :func:`blocks_inside_rows`) only the rows are split, and the blocks stay
    inside each thread's rows.

    Source: TVM TOPI x86 ``conv2d_NCHWc`` (the parallel axis fused from batch, output-channel
    blocks and rows), oneDNN's direct convolution (threads over ``mb x oc_blocks x oh``).

    Returns
    -------
    (int, LoopRV) or None
        The axis (0 blocks, 1 rows) and the loop inside its parallel split.
    """
    if not worth_threads(ctx, blk):
        return None
    axes = [a for a, e in enumerate((blocks, rows)) if len(thread_candidates(e, ctx.threads)) > 1
            and (a == 1 or not rows_outer)]
    if not axes:
        return None
    axis = int(categorical(sch, axes, axes[0])) if len(axes) > 1 else axes[0]
    loop, extent = (f0, blocks) if axis == 0 else (oh, rows)
    tcands = thread_candidates(extent, ctx.threads)
    par, inner = sch.split(loop, [categorical(sch, tcands, tcands[-1]), None])
    sch.parallel(par)
    if axis == 1 and not rows_outer:
        sch.reorder(par, f0, *([c0] if c0 is not None else []))
    return axis, inner


def _row_tiles(target: Target, ow: int):
    """The row tiles ``WR`` :func:`schedule_conv2d_nhwc` samples for ``ow`` output columns:
    every width up to ``ow`` that a one-vector output-channel tile fits
    (:func:`register_tile_fits`), whether or not it divides ``ow``."""
    return [w for w in range(1, min(ow, target.vector_registers) + 1) if register_tile_fits(target, w, 1)]


def _channel_tiles(target: Target, f: int, wr: int, fr: int, bits: int):
    """``(candidates, default)`` of the output-channel tile ``FR`` of an NHWC convolution with
    ``f`` output channels and a sampled row tile ``wr``: whole vectors (``k * lanes``, or any
    ``k`` when ``f`` is not a multiple of the lanes) dividing ``f`` whose ``wr x k`` tile fits
    the registers (:func:`register_tile_fits`); default ``fr`` (:func:`nhwc_register_tile`),
    or the candidate nearest it for a row tile it does not fit."""
    lanes = target.vector_lanes(bits)
    vec = lanes if f % lanes == 0 else 1
    cands = [k * vec for k in range(1, max(1, target.vector_registers // wr) + 1)
             if f % (k * vec) == 0 and register_tile_fits(target, wr, k)]
    cands = cands or [vec if f % vec == 0 else 1]
    return cands, min(cands, key=lambda x: (abs(x - fr), x))


def schedule_conv2d(sch: Schedule, block: BlockRV, ctx: RuleContext) -> None:
    """Schedule ``out[n, f, oh, ow] += x[n, c, oh*s + kh*d, ow*s + kw*d] * w[f, c, kh, kw]``.

    Loop nest: ``n f0 (parallel) f1 oh ow0 c kh kw (unrolled) ow1 (vectorized)``: one output
    channel's row tile of ``WR`` outputs stays in vector registers across the ``c, kh, kw``
    reduction (each step: one row load of the input, one broadcast weight, ``WR / lanes`` FMAs).
    Decisions: the threads over output channels (:func:`~.common.thread_candidates`, default
    the most, when the block is worth threads); ``[OW / WR, WR]`` by ``sample_perfect_tile``
    with ``WR`` at most half the vector registers' lanes (default: the largest divisor of OW
    within that, 64 float32 on AVX2); the window unrolled or not (structural; default: when its
    taps ``KH * KW`` do not exceed the vector registers). Measured on a
    2-core AVX2 EPYC, 1x64x56x56 3x3 -> 64, one thread: 143 ms unscheduled, 15.7 ms.

    The "vectorized" row is really scalar: the 1-D convolution vectorizer works in NWC with the
    lanes over output channels, one here, so each output column is a ``vector<1xf32>`` FMA that
    LLVM's SLP vectorizer re-packs (inserts, shuffles, spills). Tiles that put output channels
    in the vector (``F x W`` register blocks) were measured slower (30-80 ms): strided filter
    gathers and an accumulator transpose on every reduction step. Hence
    :func:`schedule_conv2d_nhwc` for the convolutions :func:`~.conv_strategy.prefers_nhwc` picks.

    Shapes: x (N, C, H, W) (already padded by ``tensor.pad``), w (F, C, KH, KW), out
    (N, F, OH, OW); float dtypes; any stride and dilation.
    """
    blk = sch.get(block)
    n, f, oh, ow, c, kh, kw = sch.get_loops(block)
    ext = [d.extent for d in blk.dims]
    lanes = ctx.target.vector_lanes(element_bits(blk))
    tcands = thread_candidates(ext[1], ctx.threads) if worth_threads(ctx, blk) else [1]
    t = categorical(sch, tcands, tcands[-1]) if len(tcands) > 1 else 1
    f0, f1 = sch.split(f, [t, None])
    wr_max = lanes * max(1, ctx.target.vector_registers // 2)
    wr = largest_divisor(ext[3], wr_max)
    ow0, ow1 = sch.split(ow, perfect_tile(sch, ow, 2, wr_max, [ext[3] // wr, wr]))
    unroll = categorical(sch, [0, 1], int(ext[5] * ext[6] <= ctx.target.vector_registers))
    sch.reorder(n, f0, f1, oh, ow0, c, kh, kw, ow1)
    if len(tcands) > 1:
        sch.parallel(f0)
    epi = claim_epilogues(sch, blk, ctx)
    for e in epi:
        sch.reverse_compute_at(e, ow0)
    if int(unroll):   # structural: unroll takes no sampled value
        sch.unroll(kw)
        sch.unroll(kh)
    sch.vectorize(ow1)


def schedule_grouped_conv2d(sch: Schedule, block: BlockRV, ctx: RuleContext) -> None:
    """Schedule ``linalg.conv_2d_ngchw_gfchw`` (groups > 1), dims ``(n, g, f, oh, ow, c, kh,
    kw)``: groups (or, with fewer groups than threads, output channels per group) over the
    threads; the loop nest is otherwise left as it is. The structured vectorizer has no 1-D
    decomposition of grouped convolutions, and moving the output row innermost (for LLVM's loop
    vectorizer) measured slower (depthwise 1x64x56x56 3x3, one thread: 1.72 ms unscheduled,
    1.96 ms reordered). ``mlc.compile`` sends depthwise ones to
    :func:`~.depthwise.schedule_depthwise_nhwc` and those with matrix-sized groups to the
    batch matmul (:func:`~.conv_strategy.prefers_grouped_gemm`); this rule takes the rest (channel
    multipliers, integer dtypes, GPU targets, payloads scheduled directly).
    """
    blk = sch.get(block)
    n, g, f, oh, ow, c, kh, kw = sch.get_loops(block)
    ext = [d.extent for d in blk.dims]
    parallelize_first(sch, ctx, blk, [g, f], [ext[1], ext[2]])
