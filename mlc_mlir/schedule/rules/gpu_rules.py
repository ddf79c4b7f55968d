"""Default GPU schedules (``target="cuda"``), one rule per op kind, written with the primitives
a user would write (TVM dlight's ``gpu.Fallback``/``gpu.Matmul`` rules; the mlc.ai GPU
chapter's recipes):

* ``elementwise``: the innermost dim split into ``[blocks, steps, threads, lanes]`` (threads up
  to :func:`default_threads`: 256 on every architecture so far; each thread a vector of
  :func:`vector_lanes` elements, 16 bytes where the dim allows, in :data:`VECTOR_STEPS`
  block-strided steps, default 1), the outer dims bound to ``blockIdx.y/z``;
* ``reduction`` (row reductions, softmax's parts, layer_norm's statistics): a block per row
  when the one reduction dim is the input's contiguous (last) dim and long enough
  (``K >= 2 * warp size``, :func:`min_cooperative`): ``split(k, [None, T])``, the parallel
  dims fused and bound to ``blockIdx.x``, ``k1`` bound to ``threadIdx.x`` -- a cooperative
  reduction (:mod:`mlc_mlir.schedule.gpu_reduction`) whose combine is sampled: warp shuffles
  (the default) or a shared-memory tree; ``split(k, [None, T, E])`` gives each thread ``E``
  contiguous elements per step (16-byte loads, sampled); short rows get a warp per row, several
  rows per block on ``threadIdx.y``; otherwise the parallel dims over
  blocks x threads, each thread reducing its rows serially;
* ``matmul`` (and 2-parallel + 1-reduction contractions): the shared-memory blocking of the
  chapter -- block tile ``(ty*ly, tx*lx)``, ``ty*tx`` threads each computing an ``ly x lx``
  register tile (``cache_write(..., "local")``), ``A`` and ``B`` panels of ``kt`` columns/rows
  staged in shared memory by cooperative copies (``cache_read(..., "shared")`` +
  ``compute_at`` at ``k0``), the init placed by ``decompose_reduction``, the five tiles and
  the register prefetch sampled (:func:`matmul_tiles`) with shape-derived defaults; f16 with dims that
  divide into warp tiles: tensor cores (``mma.sync``, :func:`schedule_matmul_mma`). A matmul
  whose inputs are computed in the same function (a fused reshape or transpose) cannot stage
  them per k-panel and gets the reduction rule;
* ``conv2d`` (NCHW): register tiles over output channels and pixels, the input window and the
  weights staged in shared memory per block of input channels (:mod:`.gpu_conv`), or, a sampled
  decision, the reduction rule;
* ``batch_matmul``, ``conv2d_nhwc`` / ``grouped_conv2d``, ``pooling`` /
  ``pooling_nhwc``: the reduction rule (output elements over blocks x threads, the reduction
  dims serial in each thread).

Tile sizes derive from the shapes and the architecture's resources
(:attr:`Target.cuda_arch <mlc_mlir.target.Target.cuda_arch>`: threads and registers per block
and per SM, the warp size; largest divisors within those), not from one GPU's measurements:
the tuner refines them.
"""

from __future__ import annotations

from typing import Dict, List, Optional

from ...errors import ScheduleError
from ...ir import dtypes
from ...target import CudaArch, max_private_elements
from ..schedule import Schedule
from ..gpu_reduction import VECTOR_LANES, WARP_SHUFFLE
from ..state import BlockRV, ExprRV
from ..factors import largest_divisor, pow2_floor
from .common import categorical
from .gpu_common import block_grid, default_threads, min_cooperative, sample_tiles, thread_options
from .gpu_mma import schedule_matmul_mma
from .gpu_conv import conv2d_tile_defaults, conv2d_tiles_fit, conv_dims, schedule_conv2d_tiles

def vector_lanes(arch: CudaArch, info, dim: int) -> List[int]:
    """Candidate elements of ``dim`` one thread reads and writes as one vector (``sch.vectorize``
    of the innermost split: ``ld.global.v4.f32``/``st.global.v4.f32``), best first: the powers
    of two that divide the dim's extent, from the most that fit in :attr:`CudaArch.vector_bytes`
    for the op's widest element (4 of f32, 8 of f16) down to 1; only ``[1]`` unless

    * ``dim`` is the output's contiguous (last) dim and every input either is contiguous along
      it too (its last index is ``dim``) or does not depend on it (a broadcast: one scalar load
      splat over the lanes) -- a strided input would be gathered lane by lane;
    * every element type is whole bytes (a vector of ``i1`` is bit-packed in memory, a
      ``memref`` of ``i1`` is not), and the body reads no tensor (a gather, ``ops.take``);
    * at least a warp of threads remains along the dim (``extent // lanes >= warp_size``).

    The accesses are 128-bit only where the buffer and the offset are 16-byte aligned; the CUDA
    lowering assumes the buffers are (:mod:`mlc_mlir.pipeline.cuda_vectors`) and LLVM proves
    the offsets (a multiple of the lanes: the row length divides by them). PyTorch's
    ``vectorized_elementwise_kernel`` picks its vector the same way (``can_vectorize_up_to``:
    the widest that every operand's contiguity and alignment allow).
    ``info``: the block's :class:`~mlc_mlir.schedule.loop_nest.OpInfo`."""
    extent = info.dims[dim].extent
    bits = [dtypes.bit_width(d) for d in info.dtypes]
    if extent is None or not bits or any(b % 8 for b in bits) or not info.out_dims or \
            info.out_dims[-1] != dim or info.gathers:
        return [1]
    for k in range(info.num_inputs):
        used = info.operand_dims[k]
        contiguous = len(used) == len(info.operand_shapes[k]) and used[-1:] == (dim,)
        if dim in used and not contiguous:
            return [1]
    most = pow2_floor(max(1, arch.vector_bytes * 8 // max(bits)))
    lanes = [v for v in (most >> i for i in range(most.bit_length()))
             if extent % v == 0 and extent // v >= arch.warp_size]
    return lanes if lanes and lanes[-1] == 1 else lanes + [1]


#: Candidate vectors per thread of a vectorized elementwise kernel (a block-strided loop; the
#: candidates that divide the blocks' extent). Default 1: each step's loads wait for the previous
#: step's stores (LLVM cannot move a load above a store to a buffer it may alias), so more steps
#: add no memory parallelism per thread; they launch fewer blocks, which the tuner weighs.
VECTOR_STEPS = (1, 2, 4, 8)


def _bind_parallel(sch: Schedule, block: BlockRV, arch: CudaArch, parallel: List[int], loops=None,
                   lanes: Optional[List[int]] = None, ragged: bool = False) -> None:
    """Split the innermost parallel dim into blocks x threads (x vector ``lanes``) and bind the
    outer parallel dims to the remaining block axes (the others stay serial loops of each
    thread); the threads are a sampled decision (:func:`thread_options`; default: the largest
    divisor up to :func:`default_threads`, keeping two blocks when nothing else gives blocks).
    ``lanes``: candidates of the vector width (:func:`vector_lanes`, the first the default),
    the innermost split vectorized, and the vectors each thread takes in a block-strided loop
    outside the threads (``split(i, [None, u, t, v])``: in step ``u`` the block's threads take
    adjacent vectors) sampled from :data:`VECTOR_STEPS` (default 1); None: no vector split.
    ``ragged``: where no divisor of the innermost extent gives a warp of threads (a prime
    extent), split it by a power of two anyway (the last block partial; scalar threads) instead
    of launching blocks of a few threads. ``loops``: the block's loops by dim (default:
    ``get_loops``, in dim order)."""
    loops = sch.get_loops(block) if loops is None else loops
    info = sch.get(block)
    ext = [info.dims[d].extent for d in parallel]
    last = parallel[-1]
    outer = [d for d in parallel[:-1] if info.dims[d].extent > 1]
    # keep at least two blocks when nothing else gives blocks
    most = default_threads(arch)
    cap = (lambda n: most if outer or n < 2 else min(most, n // 2))
    if ragged and lanes and largest_divisor(ext[-1] // lanes[0], cap(ext[-1] // lanes[0])) < arch.warp_size:
        lanes = None   # a ragged row of vectors: scalar threads (a partial tile has no vector)
    e = ext[-1] // (lanes[0] if lanes else 1)
    t = largest_divisor(e, cap(e))
    if ragged and t < arch.warp_size <= e:
        # no divisor gives a warp of threads (a prime extent): blocks of a power of two
        # threads, the last one partial (its threads past the end idle: the GPU emitter tiles
        # a partial thread level by its number of threads)
        t = pow2_floor(cap(e))
        opts = sorted({t} | {arch.warp_size << i for i in range(12) if arch.warp_size << i <=
                             min(arch.max_threads_per_block, max(cap(e), arch.warp_size))})
    else:
        opts = thread_options(arch, e, t, lambda c: outer or e // c > 1 or e < 2)
    t = categorical(sch, opts, t)
    steps = [1]
    if lanes:   # a block-strided loop of vectors per thread (elementwise ops), whole steps
        # with every thread candidate (a partial tile has no vector)
        steps = [u for u in VECTOR_STEPS if (e // max(opts)) % u == 0 and (outer or e // t // u >= 2)]
    step = categorical(sch, steps, 1) if len(steps) > 1 else None
    factors = [None] + ([step] if step is not None else []) + [t] + \
        ([categorical(sch, lanes, lanes[0])] if lanes else [])
    l0, *rest = sch.split(loops[last], factors)
    l1, vec = (rest[1], rest[2:]) if step is not None else (rest[0], rest[1:])
    if e // t > 1:
        sch.bind(l0, "blockIdx.x")
        axes = ["blockIdx.y", "blockIdx.z"]
    else:
        axes = ["blockIdx.x", "blockIdx.y", "blockIdx.z"]
    if not outer and e // t == 1:
        raise ScheduleError(f"gpu default: '{info.name}' has a single element per row and no "
                            "outer dim to spread over blocks")
    for d in reversed(outer):
        if not axes:
            break
        sch.bind(loops[d], axes.pop(0))
    if t > 1:
        sch.bind(l1, "threadIdx.x")
    if vec:
        sch.vectorize(vec[0])


def schedule_elementwise(sch: Schedule, block: BlockRV, arch: CudaArch) -> None:
    """Elementwise/injective op: every dim is parallel; see :func:`_bind_parallel`, each thread
    taking a vector of :func:`vector_lanes` elements (a sampled decision; scalar where the
    innermost dim does not allow a vector)."""
    info = sch.get(block)
    dims = [d.index for d in info.dims]
    lanes = vector_lanes(arch, info.info, dims[-1])
    _bind_parallel(sch, block, arch, dims, lanes=lanes if len(lanes) > 1 else None, ragged=True)


def schedule_reduction(sch: Schedule, block: BlockRV, arch: CudaArch) -> None:
    """Reduction over some dims: the parallel dims over blocks x threads (reduction loops inside
    each thread). Raises ScheduleError for a full reduction to a scalar (no parallel dim)."""
    info = sch.get(block)
    parallel = [d.index for d in info.dims if d.kind == "parallel" and d.extent > 1]
    if not parallel:
        raise ScheduleError(f"gpu default: '{info.name}' reduces to a single value; a full "
                            "reduction needs rfactor + a cross-block combine (not implemented)")
    # parallel dims must come first for the binds to sit outside the reduction loops
    loops = sch.get_loops(block)
    red = [d.index for d in info.dims if d.kind != "parallel"]
    order = [d.index for d in info.dims if d.kind == "parallel"] + red
    if order != list(range(len(order))):
        sch.reorder(*[loops[d] for d in order])
    if _cooperative(sch, block, arch, red, loops):
        return
    _bind_parallel(sch, block, arch, parallel, loops)


def warp_rows(arch: CudaArch, rows: int, k: int) -> int:
    """Rows per block of the default cooperative reduction of ``rows`` rows of ``k``: a warp per
    row, as many rows as a :func:`default_threads` block has warps (that divide ``rows`` and
    leave two blocks), when ``k`` is a multiple of the warp size below ``4 *
    default_threads(arch)`` -- a block per row would give each thread less than one 16-byte
    vector of f32 and pay a barrier for it (BERT's 768-wide rows); else 1 (a block per row).
    PyTorch's softmax and Apex's layer norm pick a warp per row below 1024 columns likewise;
    the tuner samples the rows (:func:`row_options`)."""
    t = default_threads(arch)
    if k % arch.warp_size or k >= 4 * t:
        return 1
    return max((r for r in row_options(arch, rows, k) if r <= t // arch.warp_size), default=1)


def row_options(arch: CudaArch, rows: int, k: int) -> List[int]:
    """Rows per block a cooperative reduction of ``rows`` rows of ``k`` may take
    (``threadIdx.y``): 1, and when ``k`` is a multiple of the warp size (each row's threads
    whole warps) the powers of two up to ``max_threads_per_block / warp_size`` that divide
    ``rows`` leaving two blocks."""
    most = arch.max_threads_per_block // arch.warp_size
    if k % arch.warp_size:
        return [1]
    return [1] + [1 << i for i in range(1, most.bit_length())
                  if rows % (1 << i) == 0 and rows // (1 << i) >= 2]


def _cooperative(sch: Schedule, block: BlockRV, arch: CudaArch, red: List[int], loops) -> bool:
    """A block per output element when the op reduces one contiguous dim of length
    ``>= min_cooperative(arch)`` (module docstring), with at least a warp of threads, the
    combine sampled (:data:`~mlc_mlir.schedule.gpu_reduction.WARP_SHUFFLE`: warp shuffles by
    default, the shared-memory tree as the alternative); with one parallel dim of extent > 1,
    several rows per block (its inner loop on ``threadIdx.y``, the rows sampled, default
    :func:`warp_rows`: a warp per row for short rows), and each thread's contiguous vector
    sampled (:data:`~mlc_mlir.schedule.gpu_reduction.VECTOR_LANES` or 1; default the widest
    that divides the row into whole steps). Returns whether it applied. ``loops``: the block's
    loops by dim."""
    info = sch.get(block)
    if len(red) != 1 or info.info.init is None or info.info.num_inputs < 1:
        return False
    r = red[0]
    k = info.dims[r].extent
    first = info.info.operand_dims[0]
    if k < min_cooperative(arch) or not first or first[-1] != r:
        return False
    big = [d.index for d in info.dims if d.kind == "parallel" and d.extent > 1]
    nrows = warp_rows(arch, info.dims[big[0]].extent, k) if len(big) == 1 else 1
    t = arch.warp_size if nrows > 1 else largest_divisor(k, default_threads(arch))
    if t < arch.warp_size:
        return False
    rows = None
    if len(big) == 1:
        rows = categorical(sch, row_options(arch, info.dims[big[0]].extent, k), nrows)
    # the threads of a row, given the rows: whole warps when several rows share a block, and
    # no more than a block holds (a mutated rows decision redraws a threads decision that no
    # longer fits)
    nr = sch.get(rows) if rows is not None else 1
    opts = [c for c in thread_options(arch, k, t, lambda c: c >= arch.warp_size)
            if c * nr <= arch.max_threads_per_block and (nr == 1 or c % arch.warp_size == 0)]
    t = categorical(sch, opts, t if t in opts else max(opts))
    # each thread's contiguous vector (16-byte loads where the row is aligned): the widest
    # that divides the row into whole steps of the block, by default
    vecs = [1] + [v for v in VECTOR_LANES if k % (sch.get(t) * v) == 0]
    vec = categorical(sch, vecs, max(vecs))
    _, k1, _ = sch.split(loops[r], [None, t, vec])
    if rows is not None:
        i0, i1 = sch.split(loops[big[0]], [None, rows])
        sch.bind(i0, "blockIdx.x")
        sch.bind(i1, "threadIdx.y")
    else:
        sch.bind(sch.fuse(*[loops[d.index] for d in info.dims if d.kind == "parallel"]), "blockIdx.x")
    sch.bind(k1, "threadIdx.x")
    # the combine: warp shuffles (1, one barrier) or the shared-memory tree (0)
    sch.annotate(block, WARP_SHUFFLE, categorical(sch, [0, 1], 1))
    return True


def schedule_matmul(sch: Schedule, block: BlockRV, arch: CudaArch) -> None:
    """``C[i, j] += A[i, k] * B[k, j]``: the GPU chapter's shared-memory blocking (module
    docstring). Other contractions fall back to :func:`schedule_reduction`."""
    info = sch.get(block)
    dims = info.dims
    # inputs computed in the same function (a fused reshape/transpose) cannot be staged into
    # shared memory per k-panel without recomputing them per tile (decompose_reduction refuses)
    fused_inputs = [p for p in info.info.producers if p != info.info.init]
    if len(dims) != 3 or [d.kind for d in dims] != ["parallel", "parallel", "reduction"] or \
            info.info.num_inputs != 2 or info.info.init is None or fused_inputs:
        schedule_reduction(sch, block, arch)
        return
    if schedule_matmul_mma(sch, block, arch):
        return
    m, n, k = (d.extent for d in dims)
    d = matmul_tile_defaults(m, n, k, arch)
    if m // (d["ty"] * d["ly"]) * (n // (d["tx"] * d["lx"])) < 2 or d["tx"] * d["ty"] < arch.warp_size:
        schedule_reduction(sch, block, arch)
        return
    schedule_matmul_tiles(sch, block, *matmul_tiles(sch, m, n, k, d))


#: Default K panel (``kt``) of the GPU matmul: the ``k1`` loop of a thread's ``ly x lx``
#: register tile between two barriers, unrolled. A code-shape choice like the CPU rules'
#: ``UNROLL_K``, not a resource of the GPU: the two panels of a 128 x 128 block at ``kt = 8``
#: take 8 KiB of shared memory, far below every architecture's 48 KiB per block; the tuner
#: samples 4 to 32 (:data:`MATMUL_TILE_OPTIONS`).
MATMUL_KT = 8


#: Unroll factor of the ``kt`` steps (``k1``) of the GPU matmul's register tile: two steps of
#: an 8 x 8 tile are 128 FMAs on 8 ``ld.shared.v4`` per loop iteration. A code-shape choice
#: read off ``ptxas -v`` for sm_90 at 128 registers: unrolled fully, LLVM hoists all the
#: panel's shared loads to the top (``ptxas`` spills a register), by 4 it spills 88-100
#: bytes, not unrolled (the affine unroll of the pipeline) 60-84; by 2 it does not spill.
MATMUL_UNROLL_K = 2


def matmul_tile_defaults(m: int, n: int, k: int, arch: CudaArch) -> Dict[str, int]:
    """The default tiles of an ``(m, n, k)`` matmul on ``arch``, largest divisors of its dims
    within:

    * register tile ``ly x lx``: the largest power-of-two square of accumulators within
      :func:`~mlc_mlir.target.max_private_elements` (64 of 255 registers: 8 x 8; the
      classic SGEMM's thread tile, 16 FMAs per 16-byte shared load with the ``A`` panel
      ``k``-major);
    * threads ``ty x tx``: the largest power-of-two square within :func:`default_threads`
      (16 x 16 of 256: a 128 x 128 block tile with 8 x 8), fewer along a dim whose blocks
      would not divide it;
    * ``kt``: :data:`MATMUL_KT`; ``prefetch``: 1 (:data:`PREFETCH`);
    * a matmul that would be one block, or whose dims give a block fewer threads than a
      warp, halves the register tile, then the threads, until it is two blocks of a warp.

    How many blocks fill a GPU depends on its SM count, not on the architecture: a grid of
    few large blocks (a 1024 x 1024 matmul is 64 blocks of 128 x 128) is the tuner's to
    trade against smaller tiles (:data:`MATMUL_TILE_OPTIONS`).
    """
    side = pow2_floor(int(default_threads(arch) ** 0.5))
    reg = pow2_floor(int(max_private_elements(arch) ** 0.5))
    d: Dict[str, int] = {}
    # a grid of one block leaves the GPU idle, a block under a warp wastes lanes: halve the
    # register tile, then the threads, until neither (else schedule_matmul takes the
    # reduction rule)
    for r, t in [(r, side) for r in (reg >> i for i in range(reg.bit_length()))] + \
            [(1, side >> i) for i in range(1, side.bit_length())]:
        lx, ly = largest_divisor(n, r), largest_divisor(m, r)
        d = {"ty": largest_divisor(m // ly, t), "tx": largest_divisor(n // lx, t), "ly": ly, "lx": lx,
             "kt": largest_divisor(k, MATMUL_KT), "prefetch": 1}
        if m // (d["ty"] * ly) * (n // (d["tx"] * lx)) >= 2 and d["ty"] * d["tx"] >= arch.warp_size:
            break
    return d


#: Annotation of the matmul (``sch.annotate(block, PREFETCH, 0 | 1)``, a sampled decision):
#: whether the CUDA lowering double-buffers its panels through registers
#: (:func:`mlc_mlir.pipeline.cuda_panels.prefetch_panels`).
PREFETCH = "mlc.prefetch"

#: Candidate sizes of the matmul's tiles (each filtered by divisibility of its dim; the rule's
#: shape-derived default is always a candidate too) and the prefetch choice.
MATMUL_TILE_OPTIONS = {"ty": (4, 8, 16, 32), "tx": (4, 8, 16, 32), "ly": (1, 2, 4, 8),
                       "lx": (1, 2, 4, 8), "kt": (4, 8, 16, 32), "prefetch": (0, 1)}


def matmul_tile_options(m: int, n: int, k: int, default: Optional[Dict[str, int]] = None) -> Dict[str, List[int]]:
    """The candidates of each tile of an ``(m, n, k)`` matmul (:data:`MATMUL_TILE_OPTIONS` that
    divide its dim alone, plus ``default[name]``: :func:`matmul_tile_defaults`), in the order
    the rule samples them."""
    dims = {"ty": m, "tx": n, "ly": m, "lx": n, "kt": k, "prefetch": 1}
    return {name: sorted({o for o in opts if name == "prefetch" or dims[name] % o == 0}
                         | ({default[name]} if default else set()))
            for name, opts in MATMUL_TILE_OPTIONS.items()}


def matmul_tiles(sch: Schedule, m: int, n: int, k: int, default: Dict[str, int],
                 forced: Optional[Dict[str, int]] = None) -> List[ExprRV]:
    """Sample the tiles ``ty, tx, ly, lx, kt`` and ``prefetch`` of :func:`schedule_matmul_tiles`
    (:func:`sample_tiles` over :func:`matmul_tile_options`), ``default`` their default
    decisions, ``forced`` values given as decisions. A combination that breaks a CUDA limit
    (threads per block, static shared memory) fails when compiled: a failed candidate of the
    tuner.

    Raises
    ------
    ScheduleError
        If a forced value is not among its candidates.
    """
    return list(sample_tiles(sch, matmul_tile_options(m, n, k, default), default, forced).values())


def schedule_matmul_tiles(sch: Schedule, block: BlockRV, ty, tx, ly, lx, kt, prefetch=1) -> None:
    """The shared-memory blocking of :func:`schedule_matmul` with given tiles: ``ty x tx``
    threads, each computing an ``ly x lx`` register tile (``cache_write(..., "local")``),
    ``A``/``B`` panels of ``kt`` staged in shared memory at ``k0``, the ``kt`` steps of the
    tile (``k1``) unrolled by :data:`MATMUL_UNROLL_K` (fully when it does not divide ``kt``
    or one of its options),
    the block annotated :data:`PREFETCH` = ``prefetch`` (1: the next panels are loaded into
    registers while the current ones are computed on). Each factor is an int or an
    ``ExprRV`` of ``sample_categorical`` (:func:`matmul_tiles`).

    Raises
    ------
    ScheduleError
        If a factor does not divide its dim (``split``).
    """
    sch.cache_write(block, 0, "local")
    _, i1, _, _, j1, _, k0, k1 = block_grid(sch, block, ty, tx, ly, lx, kt, k_inner=False)
    sch.bind(sch.fuse(i1, j1), "threadIdx.x")
    # the factor must divide every value a replay may give kt (a sampled decision's options)
    steps = getattr(kt, "options", ()) or (int(kt),)
    sch.unroll(k1, MATMUL_UNROLL_K if all(o % MATMUL_UNROLL_K == 0 for o in steps) else None)
    sch.annotate(block, PREFETCH, prefetch)
    for idx in (0, 1):
        cache = sch.cache_read(block, idx, "shared")
        sch.compute_at(cache, k0)
    sch.decompose_reduction(block, k0)


def schedule_conv2d(sch: Schedule, block: BlockRV, arch: CudaArch) -> None:
    """``conv_2d_nchw_fchw``: a sampled choice (default 1) between the register-tiled direct
    convolution with shared-memory staging (:mod:`.gpu_conv`, when its default tiles give a
    warp of threads and two blocks: :func:`~.gpu_conv.conv2d_tiles_fit`) and the reduction
    rule (one output per thread, the window read from global memory:
    :func:`schedule_reduction`)."""
    d, terms = conv_dims(sch, block)
    tiles = conv2d_tile_defaults(d, terms, arch, default_threads(arch))
    if conv2d_tiles_fit(tiles, d, terms, arch) and int(categorical(sch, [0, 1], 1)):
        schedule_conv2d_tiles(sch, block, tiles, sample=True)
        return
    schedule_reduction(sch, block, arch)


#: Op kind (``default_rules.classify``) -> GPU rule.
GPU_RULES = {
    "matmul": schedule_matmul,
    "batch_matmul": schedule_reduction,
    "reduction": schedule_matmul,
    "elementwise": schedule_elementwise,
    # the padded input of a conv or pooling is materialized by the CUDA lowering's pad kernels
    "conv2d": schedule_conv2d,
    "conv2d_nhwc": schedule_reduction,
    "grouped_conv2d": schedule_reduction,
    "pooling": schedule_reduction,
    "pooling_nhwc": schedule_reduction,
}


def apply_gpu_default_schedule(sch: Schedule, arch: CudaArch, kinds, claimed) -> Schedule:
    """Apply :data:`GPU_RULES` for ``arch`` to every op of ``sch`` whose kind has a rule and that
    is not in ``claimed`` (``kinds``: ``{(func, name): kind}``; ``fill`` and ``identity`` ops are
    left to their consumers and the cleanup).

    Raises
    ------
    ScheduleError
        If an op's kind has no GPU rule (it would run on the host), or a rule fails (names the
        rule and the op).
    """
    for key, kind in kinds.items():
        if key in claimed or kind in ("fill", "identity"):
            continue
        rule = GPU_RULES.get(kind)
        if rule is None:
            raise ScheduleError(f"gpu default schedule: no rule for op kind {kind!r} "
                                      f"('{key[1]}' in @{key[0]}) on target cuda")
        block = sch.get_block(key[1], func_name=key[0])
        try:
            rule(sch, block, arch)
        except ScheduleError as e:
            raise ScheduleError(f"gpu default rule {kind} on '{key[1]}' in @{key[0]}: {e}") from None
    return sch
