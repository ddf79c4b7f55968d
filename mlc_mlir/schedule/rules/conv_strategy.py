"""Which form a 2-D convolution runs in: the layout and algorithm decisions of ``mlc.compile``'s
layout rewrites and of the tuner, each a predicate of the target and the convolution's shapes.

* :func:`prefers_nhwc` -- an NCHW convolution rewritten into NHWC (``layout_passes.ConvToNHWC``)
  for :func:`~.conv.schedule_conv2d_nhwc`;
* :func:`prefers_nchw_im2col` -- a one-image NCHW convolution as the GEMM
  ``W (F, C*KH*KW) x cols (C*KH*KW, OH*OW)``;
* :func:`prefers_im2col` (with :func:`pointwise_row_tile_short`) -- an NHWC convolution as
  im2col + ``linalg.matmul`` (``layout_passes.ConvToIm2col``);
* :func:`prefers_grouped_gemm` -- a grouped convolution as a per-group ``linalg.batch_matmul``;
* :func:`winograd_tile` -- a stride-1 3x3 convolution as Winograd F(m x m, 3 x 3);
* :func:`conv_algorithms` -- the tuned algorithm decision (``mlc.conv_algorithm``) over these,
  recorded by :func:`sample_conv_algorithm` and read back by :func:`decided_algorithm`.

Source: TVM's per-op strategies (Relay ``OpStrategy``: ``conv2d_nchwc`` / ``conv2d_winograd``
implementations chosen per shape or by measurement) and ``ConvertLayout``; the measurements
behind each bound are in its docstring.
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

from ...ir import dtypes
from ...ir.module import CONV_DIRECT, CONV_IM2COL
from ...target import Target
from ..cpu_recipes import FMAS_IN_FLIGHT, goto_params, register_rows
from ..schedule import Schedule
from ..trace import Trace
from .common import categorical
from .conv import nhwc_register_tile


def prefers_nhwc(target: Target, x_shape: Sequence[int], w_shape: Sequence[int],
                 out_shape: Sequence[int], dtype: str) -> bool:
    """Whether an NCHW convolution (input ``(N, C, H, W)``, filter ``(F, C, KH, KW)``, output
    ``(N, F, OH, OW)``, element dtype ``dtype``) should run as NHWC (``layout_passes.ConvToNHWC`` +
    :func:`~.conv.schedule_conv2d_nhwc`): float dtypes whose output channels fill whole vectors of the
    target (``F % lanes == 0``), so the output-channel register tile has no partial vector, and
    those with more output channels than one vector that are no whole number of vectors
    (``F = 24`` on AVX-512): :func:`prefers_im2col` sends these on to the GEMM, whose column
    panels take a ragged edge. The others (``F = 6``, integer dtypes) keep the NCHW rule, and
    so does every convolution on a GPU target (the GPU rule maps NCHW output elements to
    threads; its padded input comes from the pad kernels of :mod:`mlc_mlir.pipeline.cuda_pads`).
    """
    if target.kind != "cpu" or not dtypes.is_float(dtype) or \
            prefers_nchw_im2col(target, x_shape, w_shape, out_shape, dtype):
        return False
    lanes = target.vector_lanes(dtypes.bit_width(dtype))
    return w_shape[0] % lanes == 0 or w_shape[0] > lanes


def prefers_nchw_im2col(target: Target, x_shape: Sequence[int], w_shape: Sequence[int],
                        out_shape: Sequence[int], dtype: str) -> bool:
    """Whether an NCHW convolution of one image (input ``(1, C, H, W)``, filter
    ``(F, C, KH, KW)``, output ``(1, F, OH, OW)``) should run as the NCHW im2col GEMM
    ``W (F, C*KH*KW) x cols (C*KH*KW, OH*OW)`` (``layout_passes.ConvToIm2col`` with
    ``select_nchw``, no layout transposes) rather than in NHWC: float dtypes on CPU targets
    whose output channels are no whole number of vectors (``F % lanes != 0``: the NHWC GEMM
    would put them in its ragged vector columns) over a large output map, whole vectors of
    pixels (``OH * OW % lanes == 0`` and above :data:`IM2COL_MAX_OUTPUT_PIXELS`), which then
    fill the GEMM's columns. Measured on a 2-core AMD EPYC znver5 (AVX-512), one thread, CPU
    time, ShuffleNet's stem GEMM (3x3 stride 2, 3 -> 24 channels over 112 x 112) with relu:
    12544 x 27 x 24 (NHWC) 0.54 ms, 24 x 27 x 12544 (NCHW) 0.12 ms.
    """
    if target.kind != "cpu" or not dtypes.is_float(dtype) or x_shape[0] != 1:
        return False
    lanes = target.vector_lanes(dtypes.bit_width(dtype))
    pixels = out_shape[2] * out_shape[3]
    return w_shape[0] % lanes != 0 and pixels % lanes == 0 and pixels > IM2COL_MAX_OUTPUT_PIXELS


#: Largest output map (OH * OW) that :func:`prefers_im2col` sends to the GEMM: the default of
#: the tuned algorithm decision (:func:`conv_algorithms` offers direct and im2col for every
#: float convolution). A bound on the shapes, not on the machine: it separates the layers the
#: same way on a 16-register AVX2 core with a 32 KiB L1d and 512 KiB L2 (znver1, see
#: :func:`prefers_im2col`) and on a 32-register AVX-512 core with 48 KiB and 1 MiB (znver5;
#: medians of 15 interleaved runs, one thread, loaded host, ResNet-18's 3x3 layers with bias +
#: relu, direct / im2col: 28x28 outputs 128 ch 2.04 / 2.36 ms, stride 2 64 -> 128 1.35 / 1.38;
#: 14x14 outputs 256 ch 1.85 / 1.79, stride 2 128 -> 256 1.48 / 1.37; 7x7 512 ch 5.55 / 5.01,
#: best runs 2.70 / 1.13; ``benchmarks/results/im2col_bound_2026-11-26_znver5_rules-derive.txt``),
#: so no Target quantity, each twice as large on the second core, moves it.
IM2COL_MAX_OUTPUT_PIXELS = 256


def prefers_im2col(target: Target, x_shape: Sequence[int], w_shape: Sequence[int],
                   out_shape: Sequence[int], dtype: str) -> bool:
    """Whether an NHWC convolution (input ``(N, H, W, C)``, filter ``(KH, KW, C, F)``, output
    ``(N, OH, OW, F)``) should run as im2col + GEMM (``layout_passes.ConvToIm2col`` and the matmul rule)
    rather than :func:`~.conv.schedule_conv2d_nhwc`: float dtypes with small output maps
    (``OH * OW <= 256``, the deep layers of a CNN), 1x1 convolutions whose direct row tile
    is shorter than the GEMM's (:func:`pointwise_row_tile_short`; no longer than it where the
    direct tile is lean, :func:`lean_direct_tile`), and convolutions of at least one vector of
    input channels over maps up to :data:`IM2COL_LEAN_MAX_OUTPUT_PIXELS` whose direct tile is
    lean (AVX2's 7 x 8 tile over 28 columns). There the direct kernel has few, short row
    tiles (``WR`` must divide ``OW``: 1 or 7 for 7x7 maps) and deep channel counts put the input
    rows into the same L1 sets, while the im2col copy is small (CPU targets only). Measured on a 2-core AVX2 EPYC
    (znver1), one thread, ResNet-18's NHWC convolutions direct -> im2col: 7x7 3x3 512 ch
    12.6 -> 8.9 ms, 7x7 stride 2 256 -> 512 6.3 -> 3.9 ms, 14x14 3x3 256 ch 7.0 -> 6.6 ms, 14x14
    stride 2 128 -> 256 4.1 -> 3.2 ms, 7x7 1x1 stride 2 0.47 -> 0.39 ms; 28x28 outputs tie,
    56x56 (6.2 -> 8.4 ms) and the 112x112 stem lose. The bound is a shape property (how many
    output pixels a row tile can cover), not a constant of one CPU. Output channels that are no
    whole number of vectors (``F % lanes != 0``, :func:`prefers_nhwc`) always go to the GEMM:
    the direct kernel's output-channel tile is whole vectors. Measured on a 2-core AMD EPYC
    znver5 (AVX-512), one thread, ShuffleNet's stem (1x3x224x224, 3x3 stride 2 -> 24, bias +
    relu, with the layout transposes): NCHW rule 2.20 ms, NHWC direct 2.28 ms, im2col 0.65 ms.
    """
    if target.kind != "cpu" or not dtypes.is_float(dtype):
        return False
    if out_shape[1] * out_shape[2] <= IM2COL_MAX_OUTPUT_PIXELS:
        return True
    lanes = target.vector_lanes(dtypes.bit_width(dtype))
    if w_shape[3] % lanes:
        return True
    if tuple(w_shape[:2]) == (1, 1):
        return pointwise_row_tile_short(target, out_shape, w_shape, dtype, strict=not lean_direct_tile(
            target, x_shape, w_shape, out_shape, dtype))
    return out_shape[1] * out_shape[2] <= IM2COL_LEAN_MAX_OUTPUT_PIXELS and w_shape[2] >= lanes and \
        lean_direct_tile(target, x_shape, w_shape, out_shape, dtype)


#: Largest output map (OH * OW) that :func:`prefers_im2col` sends to the GEMM when the direct
#: tile is lean (:func:`lean_direct_tile`): up to 28 x 28. A bound on the shapes, as
#: :data:`IM2COL_MAX_OUTPUT_PIXELS`: the patch copy grows with the map (7.2 MB for ResNet's
#: 3x3 64 -> 64 over 56 x 56, against 3.6 MB for 128 -> 128 over 28 x 28) and is amortized
#: over fewer output channels there. Measured on a 2-core AMD EPYC znver3 (AVX2), one thread,
#: light ResNet-50 whole model, thread CPU time, min of 6 interleaved rounds on a loaded host
#: (load 9): lean 3x3 convolutions as GEMMs up to 28 x 28 111 ms, also over 56 x 56 118 ms,
#: none (main) 133 ms; onnxruntime 99 ms.
IM2COL_LEAN_MAX_OUTPUT_PIXELS = 4 * IM2COL_MAX_OUTPUT_PIXELS


def lean_direct_tile(target: Target, x_shape: Sequence[int], w_shape: Sequence[int],
                     out_shape: Sequence[int], dtype: str) -> bool:
    """Whether the register tile of :func:`~.conv.schedule_conv2d_nhwc` for an NHWC convolution
    (input ``(N, H, W, C)`` padded, filter ``(KH, KW, C, F)``, output ``(N, OH, OW, F)``) has at
    most :data:`~mlc_mlir.schedule.cpu_recipes.FMAS_IN_FLIGHT` accumulators (``WR * FR / lanes``
    of :func:`~.conv.nhwc_register_tile`): no more independent FMA chains than the FMA units
    need, so every stall of its in-place operand loads (the filter read where it lies, its
    rows ``F`` elements apart; the input broadcasts) idles them; the GEMM's tile reads packed
    panels, its k loop unrolled. The direct tile is taken among the tiles these measurements
    knew (``nhwc_register_tile(..., edges=False, wide=False, pow2=False)``: ``WR`` divides ``OW``, at most
    half the vector registers: 8 accumulators on a 16-register AVX2 core, 14 to 16 on a
    32-register AVX-512 one); the rule's own tile may be wider (an edge tile, 12 accumulators
    with its window rolled), unmeasured against the GEMM here. The stride is taken from the shapes
    (``(W - KW) / (OW - 1)``, dilation 1).

    Measured on a 2-core AMD EPYC znver3 (AVX2), one thread, light ResNet-50's units, direct
    -> im2col GEMM (with its epilogue unit), min of single calls on a loaded host: 1x1 over
    28 x 28 128 -> 512 + residual 2.32 -> 1.24 ms; 3x3 128 -> 128 over 28 x 28 (a 7 x 8 tile)
    6.1 -> 3.0 ms, stride 2 5.7 -> 3.0 ms; the whole model, one thread, thread CPU time, 8
    interleaved rounds: 139.8 -> 107.5 ms (medians 149.1 -> 126.8), onnxruntime 94.9 (106.4)
    (``benchmarks/results/models_cpu_2026-11-27_znver3_r50-ort.txt``). On AVX-512 (16 and 14
    accumulators) no decision changes.
    """
    if target.kind != "cpu" or not dtypes.is_float(dtype):
        return False
    bits = dtypes.bit_width(dtype)
    ow, kw = out_shape[2], w_shape[1]
    stride = max(1, (x_shape[2] - kw) // (ow - 1)) if ow > 1 else 1
    wr, fr = nhwc_register_tile(target, ow, w_shape[3], kw, stride, 1, bits, edges=False, wide=False, pow2=False)
    return wr * fr // target.vector_lanes(bits) <= FMAS_IN_FLIGHT


def pointwise_row_tile_short(target: Target, out_shape: Sequence[int], w_shape: Sequence[int],
                             dtype: str, strict: bool = True) -> bool:
    """Whether the direct NHWC kernel of a 1x1 convolution (filter ``(1, 1, C, F)``, output
    ``(N, OH, OW, F)``) would use a register tile of fewer output columns than the rows of the
    GEMM's: ``WR`` of :func:`~.conv.nhwc_register_tile` (a divisor of ``OW`` within half the
    registers, the tiles measured here: ``edges=False, wide=False, pow2=False``) against ``MR`` of
    :func:`~mlc_mlir.schedule.cpu_recipes.goto_params` shrunk to the ``N * OH * OW`` rows
    (:func:`~mlc_mlir.schedule.cpu_recipes.register_rows`). A 1x1 convolution is a GEMM of
    ``(N * OH * OW, C) x (C, F)`` whose rows need not divide a map row; with a shorter row tile
    the direct kernel loads more filter vectors per FMA (``4 x 64`` over 28 columns on AVX-512
    against the GEMM's ``8 x 32``). Measured on a 2-core AMD EPYC znver5 (AVX-512), one thread,
    CPU time of ResNet-50's units with bias, relu and residual add: over 28 x 28 outputs
    (``WR = 4``) 128 -> 512 0.56 -> 0.49 ms, 512 -> 256 1.20 -> 0.85 ms, stride 2 256 -> 512
    1.16 -> 0.86 ms, 512 -> 128 0.39 both ways; over 56 x 56 (``WR = 8 = MR``) the direct
    kernel stays ahead (256 -> 128 0.80 vs 0.84 ms, 64 -> 256 0.50 vs 0.64 ms). With
    ``strict=False`` a row tile as long as the GEMM's counts as short too (a tie goes to the
    GEMM: :func:`prefers_im2col` for a lean direct tile).
    """
    bits = dtypes.bit_width(dtype)
    wr, _ = nhwc_register_tile(target, out_shape[2], w_shape[3], 1, 1, 1, bits, edges=False, wide=False, pow2=False)
    rows = out_shape[0] * out_shape[1] * out_shape[2]
    mr = goto_params(target, rows, w_shape[3], w_shape[2], 1, bits).mr
    tile = register_rows(rows, mr) or mr
    return wr < tile if strict else wr <= tile


def prefers_grouped_gemm(target: Target, x_shape: Sequence[int], w_shape: Sequence[int],
                         out_shape: Sequence[int], dtype: str) -> bool:
    """Whether a grouped convolution (input ``(N, G, C, H, W)`` padded, filter
    ``(G, F, C, KH, KW)``, output ``(N, G, F, OH, OW)``, ``C`` and ``F`` per group) should run
    as a per-group im2col + ``linalg.batch_matmul`` (``layout_passes.GroupedConvToBatchMatmul``
    and the batch matmul rule) rather than :func:`~.conv.schedule_grouped_conv2d`: float dtypes on CPU
    targets whose per-group GEMM is a matrix product, more than one input and one output
    channel per group (depthwise convolutions, ``C == 1``, and channel multipliers, ``F == 1``,
    keep the grouped rule: their GEMM would be a dot product per pixel), with at least one full
    vector of output pixels (``N * OH * OW >= lanes``: the GEMM's vectorized dimension).
    """
    if target.kind != "cpu" or not dtypes.is_float(dtype):
        return False
    if x_shape[2] < 2 or w_shape[1] < 2:
        return False
    return out_shape[0] * out_shape[3] * out_shape[4] >= target.vector_lanes(dtypes.bit_width(dtype))


#: Smallest multiply-add reduction of the GEMM (direct convolution MACs / Winograd GEMM MACs)
#: for which :func:`winograd_tile` rewrites a convolution. A ratio of two operation counts on
#: one machine, so its FMA rate, vector width and register count cancel out; what is left is
#: an algorithmic margin: the Winograd path (the input and output transforms, and the
#: ``(m + 2)^2`` small GEMMs that stream the transformed filter once per row block) must save
#: at least half of the direct kernel's multiply-adds to pay for its extra passes over memory
#: (Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks", 2016: F(2x2, 3x3) takes
#: 16 products for 4 outputs against 36, 2.25x; F(4x4, 3x3) 36 for 16 against 144, 4x, on maps
#: they tile exactly). The bound admits F(2x2) only on maps
#: it tiles (nearly) exactly and F(4x4) down to 14x14 maps; the tile itself is a tuned decision
#: (:func:`conv_algorithms` offers 2 and 4).
WINOGRAD_MIN_SAVING = 2.0


#: The Winograd tiles whose outputs depend on their 3x3 windows only: F(2x2, 3x3), whose
#: transforms' zero coefficients (skipped exactly, ``layout_passes.conv_winograd``) connect an
#: output to exactly the 3 x 3 input pixels a direct convolution reads (each row of ``B^T``
#: reads input points {0, 2}, {1, 2}, {1, 2}, {1, 3} and the outputs sum points {0, 1, 2},
#: {1, 2, 3}): a NaN or a huge pixel reaches only the outputs whose window reads it, and its
#: relative error against float64 (3-5e-7) is below the direct convolution's (0.7-1.2e-6). The
#: default compile (``CompileOptions.winograd=None``) takes these where :func:`winograd_tile`
#: picks them; F(4x4, 3x3) mixes a 6 x 6 input tile into each output (error ~6e-6) and stays
#: opt-in (``winograd=True``).
WINDOW_LOCAL_TILES = (2,)


def winograd_tile(target: Target, x_shape: Sequence[int], w_shape: Sequence[int],
                  out_shape: Sequence[int], dtype: str, tiles: Sequence[int] = (4, 2)) -> int:
    """The output tile ``m`` of Winograd F(m x m, 3 x 3) for a stride-1 3x3 NHWC convolution
    (``layout_passes.ConvToWinograd``; input ``(N, H, W, C)``, filter ``(3, 3, C, F)``, output
    ``(N, OH, OW, F)``), or 0 to keep the direct (or im2col) convolution.

    For ``m`` in ``tiles`` (4 and 2; the default compile passes :data:`WINDOW_LOCAL_TILES`) the
    GEMM has ``T = N * ceil(OH / m) * ceil(OW / m)`` rows per point and
    ``(m + 2)^2 * T * C * F`` multiply-adds against the direct ``9 * N * OH * OW * C * F``; the
    ``m`` with the larger saving is taken when the saving is at least
    :data:`WINOGRAD_MIN_SAVING` and the GEMM has at least two register-tile row blocks
    (``T >= 2 * MR``, :func:`~mlc_mlir.schedule.cpu_recipes.goto_params`): the transformed
    filter is ``(m + 2)^2 / 9`` times the filter and the GEMM streams it once per row block,
    so few rows leave it bound by memory. float32 on CPU targets only (the transforms' constants
    lose float16 precision; the GPU schedules of the transforms are not measured).

    Measured on a 2-core AVX-512 EPYC (znver4), one thread, with bias + relu, against the
    direct/im2col convolution (``python benchmarks/winograd_cpu.py``): 64x56x56 -> 64
    2.27 -> 1.03 ms (m = 4); 128x28x28 -> 128 2.15 -> 0.77 (m = 4); 256x14x14 -> 256
    2.15 -> 0.93 (m = 4, 16 rows: the 14 x 14 map extended to 16 x 16); 512x7x7 -> 512 kept
    (im2col 2.29 ms; m = 2, a 1.7x saving, 2.45; m = 4 about 5). Relative error against
    float64: 5-7e-6 for m = 4, 3-6e-7 for m = 2, 0.7-1.7e-6 for the direct convolution.
    """
    if target.kind != "cpu" or dtype != "float32" or tuple(w_shape[:2]) != (3, 3):
        return 0
    n, oh, ow = out_shape[0], out_shape[1], out_shape[2]
    c, f = w_shape[2], w_shape[3]
    best, best_saving = 0, WINOGRAD_MIN_SAVING
    for m in tiles:
        rows = n * -(-oh // m) * -(-ow // m)
        mr = goto_params(target, rows, f, c, 1, 32).mr
        saving = 9 * n * oh * ow / ((m + 2) ** 2 * rows)
        if rows >= 2 * mr and saving >= best_saving:
            best, best_saving = m, saving
    return best


def conv_algorithms(target: Target, x_shape: Sequence[int], w_shape: Sequence[int],
                    out_shape: Sequence[int], dtype: str, winograd_fits: bool,
                    winograd: Optional[bool]) -> Tuple[List[int], int]:
    """``(candidates, default)`` of the algorithm decision of an NHWC convolution (input
    ``(N, H, W, C)`` padded, filter ``(KH, KW, C, F)``, output ``(N, OH, OW, F)``), the values
    of ``mlc.conv_algorithm``: ``CONV_DIRECT`` (0, :func:`~.conv.schedule_conv2d_nhwc`),
    ``CONV_IM2COL`` (1, ``layout_passes.ConvToIm2col`` + the matmul rule) and the Winograd output tiles
    2 and 4 (``layout_passes.ConvToWinograd`` + the batch_matmul and elementwise rules) where
    ``winograd_fits`` (a float32 stride-1 3x3 window over an input padded by the compiler,
    ``layout_passes.conv_winograd.winograd_applies``) and ``winograd`` is not False.

    The default is the compile's own choice: :func:`winograd_tile`'s tile where it picks one
    (among 4 and 2 when ``winograd`` is True, among :data:`WINDOW_LOCAL_TILES` when it is None),
    else im2col where :func:`prefers_im2col`, else direct. With ``winograd=False`` there is no
    Winograd candidate. Non-float dtypes and GPU targets have the one candidate the rewrites
    leave them (direct).
    Source: TVM's per-op strategies (``conv2d_nchwc`` / ``conv2d_winograd`` implementations
    chosen by measurement, Relay ``OpStrategy``); Ansor/MetaSchedule's layout and algorithm
    choices as decisions of the search.
    """
    if target.kind != "cpu" or not dtypes.is_float(dtype):
        return [CONV_DIRECT], CONV_DIRECT
    wino = winograd_fits and dtype == "float32" and winograd is not False
    candidates = [CONV_DIRECT, CONV_IM2COL] + ([2, 4] if wino else [])
    default = winograd_tile(target, x_shape, w_shape, out_shape, dtype,
                            (4, 2) if winograd else WINDOW_LOCAL_TILES) if wino else 0
    if not default:
        default = CONV_IM2COL if prefers_im2col(target, x_shape, w_shape, out_shape, dtype) else CONV_DIRECT
    return candidates, default


def sample_conv_algorithm(sch: Schedule, candidates: Sequence[int], default: int,
                          decision: Optional[int] = None) -> int:
    """The algorithm decision of :func:`conv_algorithms` as ``sample_categorical`` on ``sch``
    (``decision``: the candidate to record, else the default or a draw as ``sch`` takes
    them); returns the chosen candidate. The trace of ``sch`` then records it; a tuning record
    holding that trace is read back by :func:`decided_algorithm`."""
    cands = [int(c) for c in candidates]
    if decision is None:
        return int(categorical(sch, cands, default))
    return int(sch.sample_categorical(cands, [1.0 / len(cands)] * len(cands), decision=cands.index(decision)))


def decided_algorithm(trace: Trace) -> Optional[int]:
    """The candidate chosen by the ``sample_categorical`` of :func:`sample_conv_algorithm` in
    ``trace`` (the first such instruction), or None when the trace has none (the default)."""
    for i, inst in enumerate(trace.insts):
        if inst.kind == "sample_categorical" and i in trace.decisions:
            return int(inst.attrs["candidates"][trace.decisions[i]])
    return None
