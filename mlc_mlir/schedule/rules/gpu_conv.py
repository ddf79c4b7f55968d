"""The GPU's direct convolution (``linalg.conv_2d_nchw_fchw``, ``target="cuda"``): register
tiles over output channels and pixels, the input window and the weight slice staged in shared
memory per block of input channels (TVM's ``conv2d_direct`` CUDA schedule and MetaSchedule's
``MultiLevelTiling`` ``SSSRRSRS`` for a conv; the mlc.ai GPU chapter's matmul blocking applied
to the conv's loops).

Loops ``n, f, oh, ow, c, kh, kw`` become::

    fused(f0, n, h0, w0)   -> blockIdx.x   # a block: tf*lf channels x th*lh rows x tw*lw columns
      fused(f1, h1, w1)    -> threadIdx.x  # tf*th*tw threads
        c0                                 # kt input channels per step, after a barrier:
                                           #   input window [kt, ih, iw] and weights
                                           #   [tf*lf, kt, kh, kw] copied to shared memory
          c1, kh, kw, f2, h2, w2           # each thread: lf x lh x lw accumulators in registers

Each value a thread loads from shared memory feeds ``lh * lw`` (a weight) or ``lf`` (an input)
FMAs. The accumulators are a ``local`` write cache (:func:`cache_write`), kept in registers
across ``c0`` by the CUDA lowering (:mod:`mlc_mlir.pipeline.cuda_buffers`).

Tile sizes derive from the shape and the architecture (:func:`conv2d_tile_defaults`), are
sampled decisions (:func:`schedule_conv2d_tiles`), and the tuner refines them.
"""

from __future__ import annotations

import math
from typing import Dict, List, Tuple

from ...errors import ScheduleError
from ...target import CudaArch
from ..operand_tiles import tile_shape
from ..schedule import Schedule
from ..state import BlockRV
from ..factors import divisors, largest_divisor, pow2_floor
from .common import categorical, perfect_tile

#: Fewest SMs' worth of resident threads (``max_threads_per_sm`` each) the default register
#: tile keeps busy: it shrinks (halving the accumulators) until the conv has that many threads,
#: so a late ResNet layer (512 x 7 x 7 outputs) is not left to a handful of blocks. A
#: code-shape floor, not one GPU's SM count; the tuner samples larger tiles.
MIN_RESIDENT_SMS = 8

#: Reduction steps (``kt * kh * kw``) per shared-memory stage the default aims at: ``kt`` is
#: the largest divisor of ``C`` within ``STAGE_STEPS / (kh * kw)`` (8 channels of a 3x3
#: window; the matmul's ``kt = 8`` has 8 steps of ``ly * lx`` FMAs, a 3x3 window 9 per channel).
STAGE_STEPS = 64

#: Tile names (threads along ``f, oh, ow``; registers along them; input channels a stage).
TILE_NAMES = ("tf", "th", "tw", "lf", "lh", "lw", "kt")

#: Loop names of ``conv_2d_nchw_fchw``, in dim order.
DIMS = ("n", "f", "oh", "ow", "c", "kh", "kw")


def conv_dims(sch: Schedule, block: BlockRV) -> Tuple[Dict[str, int], tuple]:
    """Extents of the dims :data:`DIMS` of a ``conv_2d_nchw_fchw`` block and the index terms of
    its input and weight (:func:`~mlc_mlir.schedule.operand_tiles.map_terms`: strides and
    dilations)."""
    info = sch.get(block).info
    return dict(zip(DIMS, (d.extent for d in info.dims))), info.operand_terms[:2]


def shared_bytes(t: Dict[str, int], d: Dict[str, int], terms: tuple, elem_bytes: int = 4) -> int:
    """Shared memory of one stage of tiles ``t`` for a conv of dims ``d`` and operand index
    ``terms`` (:func:`conv_dims`): the input window ``kt x ih x iw`` and the weights
    ``tf*lf x kt x kh x kw`` a block reads per step (:func:`~.operand_tiles.tile_shape`)."""
    inside = [1, t["tf"] * t["lf"], t["th"] * t["lh"], t["tw"] * t["lw"], t["kt"], d["kh"], d["kw"]]
    return sum(math.prod(tile_shape(x, inside)) for x in terms) * elem_bytes


def conv2d_tile_defaults(d: Dict[str, int], terms: tuple, arch: CudaArch, threads: int) -> Dict[str, int]:
    """Default tiles of a conv of dims ``d`` and index ``terms`` (:func:`conv_dims`) on ``arch``, at most
    ``threads`` threads a block (the GPU rules' ``default_threads``):

    * accumulators a thread: the matmul rule's register budget (half the registers a thread
      has at full occupancy, a power-of-two square: 16 on sm_90), halved while the conv would
      have fewer than :data:`MIN_RESIDENT_SMS` SMs' worth of threads; split as ``lf`` output
      channels (the square root) times ``lw`` then ``lh`` pixels (largest divisors);
    * threads: along ``ow`` (coalesced loads and stores) up to a quarter of ``threads``, then
      ``oh`` within that quarter, the rest over output channels ``tf``;
    * ``kt``: :data:`STAGE_STEPS`, reduced while a stage exceeds half the static shared memory
      of a block (two blocks an SM).
    """
    reg = pow2_floor(int((arch.registers_per_sm // arch.max_threads_per_sm // 2) ** 0.5)) ** 2
    outputs = d["n"] * d["f"] * d["oh"] * d["ow"]
    acc = reg
    while acc > 1 and outputs // acc < MIN_RESIDENT_SMS * arch.max_threads_per_sm:
        acc //= 2
    lf = largest_divisor(d["f"], pow2_floor(int(acc ** 0.5)))
    lw = largest_divisor(d["ow"], acc // lf)
    lh = largest_divisor(d["oh"], acc // (lf * lw))
    spatial = max(1, threads // 4)
    tw = largest_divisor(d["ow"] // lw, spatial)
    th = largest_divisor(d["oh"] // lh, spatial // tw)
    tf = largest_divisor(d["f"] // lf, threads // (tw * th))
    t = {"tf": tf, "th": th, "tw": tw, "lf": lf, "lh": lh, "lw": lw,
         "kt": largest_divisor(d["c"], max(1, STAGE_STEPS // (d["kh"] * d["kw"])))}
    while t["kt"] > 1 and shared_bytes(t, d, terms) > arch.static_shared_bytes_per_block // 2:
        t["kt"] = largest_divisor(d["c"], t["kt"] - 1)
    return t


def kt_options(c: int, default: int) -> List[int]:
    """Candidates of ``kt``: the divisors of ``c`` up to 64 channels, and the default."""
    return sorted({v for v in divisors(c) if v <= 64} | {default})


def conv2d_tiles_fit(t: Dict[str, int], d: Dict[str, int], terms: tuple, arch: CudaArch) -> bool:
    """Whether tiles ``t`` give at least a warp of threads, two blocks, and a stage within
    the static shared memory of a block."""
    threads = t["tf"] * t["th"] * t["tw"]
    blocks = d["n"] * d["f"] * d["oh"] * d["ow"] // (threads * t["lf"] * t["lh"] * t["lw"])
    return arch.warp_size <= threads <= arch.max_threads_per_block and blocks >= 2 and \
        shared_bytes(t, d, terms) <= arch.static_shared_bytes_per_block


def schedule_conv2d_tiles(sch: Schedule, block: BlockRV, tiles: Dict[str, int], sample: bool = False) -> None:
    """The loop structure of the module docstring with tiles ``tiles`` (:data:`TILE_NAMES`).
    With ``sample`` they are the default decisions of the sampled ones: ``f``, ``oh``, ``ow``
    each split by ``sample_perfect_tile`` into ``[blocks, threads, registers]`` (registers at
    most 8; TVM MetaSchedule's tiling of a conv's spatial loops), ``kt`` by
    ``sample_categorical`` over :func:`kt_options`. Other tiles (threads per block beyond
    ``max_threads_per_block``, a stage beyond the static shared memory) fail when compiled: a
    failed candidate of the tuner.

    Raises
    ------
    ScheduleError
        If a dim is not a multiple of its tiles (``tf * lf`` of ``f``, ``th * lh`` of ``oh``,
        ``tw * lw`` of ``ow``, ``kt`` of ``c``): a partial tile would give the kernel's thread
        loops dynamic bounds.
    """
    d, _ = conv_dims(sch, block)
    splits = (("f", "tf", "lf"), ("oh", "th", "lh"), ("ow", "tw", "lw"))
    for dim, t, r in splits + (("c", "kt", "kt"),):
        step = tiles[t] * (tiles[r] if r != t else 1)
        if d[dim] % step:
            raise ScheduleError(f"gpu conv2d: {dim} = {d[dim]} is not a multiple of its tile "
                                f"{step} (tiles {tiles})")
    sch.cache_write(block, 0, "local")
    n, f, oh, ow, c, kh, kw = sch.get_loops(block)
    factors = {}
    for (dim, t, r), loop in zip(splits, (f, oh, ow)):
        default = [d[dim] // (tiles[t] * tiles[r]), tiles[t], tiles[r]]
        factors[dim] = perfect_tile(sch, loop, 3, 8, default) if sample else [None] + default[1:]
    kt = categorical(sch, kt_options(d["c"], tiles["kt"]), tiles["kt"]) if sample else tiles["kt"]
    f0, f1, f2 = sch.split(f, factors["f"])
    h0, h1, h2 = sch.split(oh, factors["oh"])
    w0, w1, w2 = sch.split(ow, factors["ow"])
    c0, c1 = sch.split(c, [None, kt])
    sch.reorder(f0, n, h0, w0, f1, h1, w1, c0, c1, kh, kw, f2, h2, w2)
    sch.bind(sch.fuse(f0, n, h0, w0), "blockIdx.x")
    sch.bind(sch.fuse(f1, h1, w1), "threadIdx.x")
    for idx in (0, 1):
        sch.compute_at(sch.cache_read(block, idx, "shared"), c0)
