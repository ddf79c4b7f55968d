"""Default GPU schedules (``target="cuda"``), one rule per op kind, written with the primitives
a user would write (TVM dlight's ``gpu.Fallback``/``gpu.Matmul`` rules; the mlc.ai GPU
chapter's recipes):

* ``elementwise``: the innermost dim split into ``[blocks, threads]`` (up to
  :func:`default_threads`: 256 on every architecture so far), the outer dims bound to
  ``blockIdx.y/z``;
* ``reduction`` (row reductions, softmax's parts, layer_norm's statistics): a block per row
  when the one reduction dim is the input's contiguous (last) dim and long enough
  (``K >= 2 * warp size``, :func:`min_cooperative`): ``split(k, [None, T])``, the parallel
  dims fused and bound to ``blockIdx.x``, ``k1`` bound to ``threadIdx.x`` -- a cooperative
  reduction through shared memory (:mod:`mlc_mlir.schedule.gpu_reduction`); otherwise the parallel dims over
  blocks x threads, each thread reducing its rows serially;
* ``matmul`` (and 2-parallel + 1-reduction contractions): the shared-memory blocking of the
  chapter -- block tile ``(ty*ly, tx*lx)``, ``ty*tx`` threads each computing an ``ly x lx``
  register tile (``cache_write(..., "local")``), ``A`` and ``B`` panels of ``kt`` columns/rows
  staged in shared memory by cooperative copies (``cache_read(..., "shared")`` +
  ``compute_at`` at ``k0``), the init placed by ``decompose_reduction``, the five tiles
  sampled (:func:`matmul_tiles`) with shape-derived defaults; f16 with dims that
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
from ...target import CudaArch
from ..schedule import Schedule
from ..state import BlockRV, ExprRV
from ..factors import pow2_floor
from .common import categorical
from .gpu_conv import conv2d_tile_defaults, conv2d_tiles_fit, conv_dims, schedule_conv2d_tiles

def default_threads(arch: CudaArch) -> int:
    """Most threads per block in the default decisions: the largest power of two whose threads
    may each hold the most registers ``ptxas`` gives a thread (``threads *
    max_registers_per_thread <= registers_per_sm``: 256 with 64 Ki registers and 255 per
    thread), so no default launch fails for want of registers; the rules sample up to
    ``max_threads_per_block``. TVM dlight's fallback rules start from the same budget
    (``max_threads_per_block`` capped by the register file)."""
    t = arch.warp_size
    while 2 * t <= arch.max_threads_per_block and \
            2 * t * arch.max_registers_per_thread <= arch.registers_per_sm:
        t *= 2
    return t


def min_cooperative(arch: CudaArch) -> int:
    """Shortest reduction a block cooperates on: two elements per lane of one warp (a shorter
    row is reduced by one thread; below that the shared-memory combine's barriers cost more
    than the serial adds they save)."""
    return 2 * arch.warp_size


def _divisor(n: int, limit: int) -> int:
    """Largest divisor of ``n`` that is at most ``limit`` (>= 1)."""
    for d in range(min(n, max(limit, 1)), 0, -1):
        if n % d == 0:
            return d
    return 1


def thread_options(arch: CudaArch, extent: int, default: int, keep) -> List[int]:
    """Thread counts of a dim of ``extent``: the powers of two from a warp to
    ``max_threads_per_block`` that divide it and satisfy ``keep``, and ``default``."""
    opts = {arch.warp_size << i for i in range(12) if arch.warp_size << i <= arch.max_threads_per_block}
    return sorted({t for t in opts if extent % t == 0 and keep(t)} | {default})


def _bind_parallel(sch: Schedule, block: BlockRV, arch: CudaArch, parallel: List[int], loops=None) -> None:
    """Split the innermost parallel dim into blocks x threads and bind the outer parallel dims
    to the remaining block axes (the others stay serial loops of each thread); the threads are
    a sampled decision (:func:`thread_options`; default: the largest divisor up to
    :func:`default_threads`, keeping two blocks when nothing else gives blocks). ``loops``: the
    block's loops by dim (default: ``get_loops``, in dim order)."""
    loops = sch.get_loops(block) if loops is None else loops
    info = sch.get(block)
    ext = [info.dims[d].extent for d in parallel]
    last = parallel[-1]
    e = ext[-1]
    outer = [d for d in parallel[:-1] if info.dims[d].extent > 1]
    # keep at least two blocks when nothing else gives blocks
    most = default_threads(arch)
    t = _divisor(e, most if outer or e < 2 else min(most, e // 2))
    t = categorical(sch, thread_options(arch, e, t, lambda c: outer or e // c > 1 or e < 2), t)
    l0, l1 = sch.split(loops[last], [None, t])
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


def schedule_elementwise(sch: Schedule, block: BlockRV, arch: CudaArch) -> None:
    """Elementwise/injective op: every dim is parallel; see :func:`_bind_parallel`."""
    info = sch.get(block)
    _bind_parallel(sch, block, arch, [d.index for d in info.dims])


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


def _cooperative(sch: Schedule, block: BlockRV, arch: CudaArch, red: List[int], loops) -> bool:
    """A block per output element when the op reduces one contiguous dim of length
    ``>= min_cooperative(arch)`` (module docstring), with at least a warp of threads; returns
    whether it applied. ``loops``: the block's loops by dim."""
    info = sch.get(block)
    if len(red) != 1 or info.info.init is None or info.info.num_inputs < 1:
        return False
    r = red[0]
    k = info.dims[r].extent
    first = info.info.operand_dims[0]
    if k < min_cooperative(arch) or not first or first[-1] != r:
        return False
    t = _divisor(k, default_threads(arch))
    if t < arch.warp_size:
        return False
    t = categorical(sch, thread_options(arch, k, t, lambda c: c >= arch.warp_size), t)
    outer = [loops[d.index] for d in info.dims if d.kind == "parallel"]
    if len(outer) > 1:
        outer = [sch.fuse(*outer)]
    _, k1 = sch.split(loops[r], [None, t])
    sch.bind(outer[0], "blockIdx.x")
    sch.bind(k1, "threadIdx.x")
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
#: ``UNROLL_K``, not a resource of the GPU: the two panels of a 64 x 64 block at ``kt = 8``
#: take 4 KiB of shared memory, far below every architecture's 48 KiB per block; the tuner
#: samples 4 to 32 (:data:`MATMUL_TILE_OPTIONS`).
MATMUL_KT = 8


def matmul_tile_defaults(m: int, n: int, k: int, arch: CudaArch) -> Dict[str, int]:
    """The default tiles of an ``(m, n, k)`` matmul on ``arch``, largest divisors of its dims
    within:

    * threads ``ty x tx``: the largest power-of-two square within :func:`default_threads`
      (16 x 16 of 256);
    * register tile ``ly x lx``: the largest power-of-two square of accumulators within half
      the registers a thread has when the SM runs at full occupancy (``registers_per_sm /
      max_threads_per_sm / 2``: 16 of 32 on sm_90, 4 x 4; the other half holds the ``ly + lx``
      operands from shared memory and the addresses);
    * ``kt``: :data:`MATMUL_KT`.
    """
    side = pow2_floor(int(default_threads(arch) ** 0.5))
    reg = pow2_floor(int((arch.registers_per_sm // arch.max_threads_per_sm // 2) ** 0.5))
    lx, ly = _divisor(n, reg), _divisor(m, reg)
    return {"ty": _divisor(m // ly, side), "tx": _divisor(n // lx, side), "ly": ly, "lx": lx,
            "kt": _divisor(k, MATMUL_KT)}


#: Candidate sizes of the matmul's tiles (each filtered by divisibility of its dim; the rule's
#: shape-derived default is always a candidate too).
MATMUL_TILE_OPTIONS = {"ty": (4, 8, 16, 32), "tx": (4, 8, 16, 32), "ly": (1, 2, 4, 8),
                       "lx": (1, 2, 4, 8), "kt": (4, 8, 16, 32)}


def matmul_tile_options(m: int, n: int, k: int, default: Optional[Dict[str, int]] = None) -> Dict[str, List[int]]:
    """The candidates of each tile of an ``(m, n, k)`` matmul (:data:`MATMUL_TILE_OPTIONS` that
    divide its dim alone, plus ``default[name]``: :func:`matmul_tile_defaults`), in the order
    the rule samples them."""
    dims = {"ty": m, "tx": n, "ly": m, "lx": n, "kt": k}
    return {name: sorted({o for o in opts if dims[name] % o == 0} | ({default[name]} if default else set()))
            for name, opts in MATMUL_TILE_OPTIONS.items()}


def matmul_tiles(sch: Schedule, m: int, n: int, k: int, default: Dict[str, int],
                 forced: Optional[Dict[str, int]] = None) -> List[ExprRV]:
    """Sample the tiles ``ty, tx, ly, lx, kt`` of :func:`schedule_matmul_tiles` (one
    ``sample_categorical`` each over :func:`matmul_tile_options`), ``default`` their default
    decisions, ``forced`` values given as decisions (a value outside the candidates is a
    ``ScheduleError`` naming the decision). A combination that breaks a CUDA limit (threads per
    block, static shared memory) fails when compiled: a failed candidate of the tuner.

    Raises
    ------
    ScheduleError
        If a forced value is not among its candidates.
    """
    out = []
    for name, opts in matmul_tile_options(m, n, k, default).items():
        if forced is None:
            out.append(categorical(sch, opts, default[name]))
            continue
        decision = opts.index(forced[name]) if forced[name] in opts else len(opts)
        out.append(sch.sample_categorical(opts, [1.0 / len(opts)] * len(opts), decision=decision))
    return out


#: Tensor cores: one warp's ``mma.sync`` tile ``(m, n, k)`` for f16: the shape of the PTX
#: instruction ``mma.sync.aligned.m16n8k16`` (sm_80 and newer), fixed by the ISA.
MMA_TILE = (16, 8, 16)

#: Oldest architecture with :data:`MMA_TILE` (``m16n8k16`` f16 needs sm_80).
MMA_MIN_SM = 80


def mma_warps(arch: CudaArch):
    """Warps per block ``(y, x)`` of the tensor-core matmul: :func:`default_threads` in warps,
    as square as powers of two allow, the longer side along x (``(2, 4)`` of 8 warps)."""
    warps = max(1, default_threads(arch) // arch.warp_size)
    wy = pow2_floor(int(warps ** 0.5))
    return wy, warps // wy


def _block_grid(sch: Schedule, block: BlockRV, ty, tx, ly, lx, kt, k_inner: bool):
    """Split the ``(i, j, k)`` loops of ``block`` into ``i0, i1, i2`` (``[None, ty, ly]``),
    ``j0, j1, j2`` (``[None, tx, lx]``) and ``k0, k1`` (``[None, kt]``), reorder them to
    ``i0, j0, i1, j1, k0`` then ``i2, j2, k1`` (``k_inner``: a warp's mma steps over k inside its
    tile) or ``k1, i2, j2`` (a thread's register tile innermost), and bind ``i0``/``j0`` to
    ``blockIdx.y``/``x``. Returns ``(i0, i1, i2, j0, j1, j2, k0, k1)``.

    Raises
    ------
    ScheduleError
        If a factor does not divide its dim (``split``).
    """
    i, j, kk = sch.get_loops(block)
    i0, i1, i2 = sch.split(i, [None, ty, ly])
    j0, j1, j2 = sch.split(j, [None, tx, lx])
    k0, k1 = sch.split(kk, [None, kt])
    sch.reorder(i0, j0, i1, j1, k0, *((i2, j2, k1) if k_inner else (k1, i2, j2)))
    sch.bind(i0, "blockIdx.y")
    sch.bind(j0, "blockIdx.x")
    return i0, i1, i2, j0, j1, j2, k0, k1


def schedule_matmul_mma(sch: Schedule, block: BlockRV, arch: CudaArch) -> bool:
    """An f16 ``C[i, j] += A[i, k] * B[k, j]`` on tensor cores (sm_80 and newer) when its dims
    divide into warp tiles: blocks of :func:`mma_warps` warps, each warp computing ``16 x 8``
    outputs in ``k`` steps of 16 with ``mma.sync.m16n8k16`` (loops bound to ``warpIdx.z`` /
    ``warpIdx.y``, the block annotated ``mlc.mma_sync``: :mod:`mlc_mlir.pipeline.cuda`
    rewrites the warp's matmul with ``transform.nvgpu.rewrite_matmul_as_mma_sync``). Returns
    whether it applied (f16 operands, divisible dims, sm_80 or newer); source: the upstream
    ``nvgpu`` transform tests, TVM's ``tensorize`` with ``mma_sync`` intrinsics.
    """
    info = sch.get(block)
    m, n, k = (d.extent for d in info.dims)
    (tm, tn, tk), (wy, wx) = MMA_TILE, mma_warps(arch)
    if arch.sm < MMA_MIN_SM or set(info.info.dtypes) != {"float16"} or \
            m % (tm * wy) or n % (tn * wx) or k % tk:
        return False
    _, i1, _, _, j1, _, _, _ = _block_grid(sch, block, wy, wx, tm, tn, tk, k_inner=True)
    # warps along y and z only: blockDim.x stays one warp, since rewrite_matmul_as_mma_sync
    # takes threadIdx.x as the lane id
    sch.bind(i1, "warpIdx.z")
    sch.bind(j1, "warpIdx.y")
    sch.annotate(block, "mlc.mma_sync", True)
    return True


def schedule_matmul_tiles(sch: Schedule, block: BlockRV, ty, tx, ly, lx, kt) -> None:
    """The shared-memory blocking of :func:`schedule_matmul` with given tiles: ``ty x tx``
    threads, each computing an ``ly x lx`` register tile (``cache_write(..., "local")``),
    ``A``/``B`` panels of ``kt`` staged in shared memory at ``k0``. Each factor is an int or an
    ``ExprRV`` of ``sample_categorical`` (:func:`matmul_tiles`).

    Raises
    ------
    ScheduleError
        If a factor does not divide its dim (``split``).
    """
    sch.cache_write(block, 0, "local")
    _, i1, _, _, j1, _, k0, _ = _block_grid(sch, block, ty, tx, ly, lx, kt, k_inner=False)
    sch.bind(sch.fuse(i1, j1), "threadIdx.x")
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
