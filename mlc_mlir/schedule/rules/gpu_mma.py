"""The tensor-core (``mma.sync``) matmul rule of the GPU schedules: A and B panels staged in
shared memory per k panel, warps of several ``16 x 8 x 16`` tiles, the copy pipeline's depth;
every tile a sampled decision with defaults from the architecture's registers, threads and
shared memory (:class:`~mlc_mlir.target.CudaArch`). The CUDA lowering turns the annotated
matmul into ``ldmatrix`` + ``mma.sync`` with ``cp.async`` panels
(:mod:`mlc_mlir.pipeline.cuda_mma`). Source: the CUTLASS / IREE ``MmaSync`` matmul pipelines.
"""

from __future__ import annotations

from typing import Dict, List, Optional

from ...target import CudaArch
from ..factors import pow2_floor
from ..schedule import Schedule
from ..state import BlockRV
from .gpu_common import block_grid, default_threads, sample_tiles


#: Tensor cores: one warp's ``mma.sync`` tile ``(m, n, k)`` for f16: the shape of the PTX
#: instruction ``mma.sync.aligned.m16n8k16`` (sm_80 and newer), fixed by the ISA.
MMA_TILE = (16, 8, 16)


#: Oldest architecture with :data:`MMA_TILE` (``m16n8k16`` f16 needs sm_80).
MMA_MIN_SM = 80


def warp_grid(warps: int):
    """``(y, x)`` of a block of ``warps`` warps (a power of two), as square as powers of two
    allow, the longer side along x (``(2, 4)`` of 8 warps, ``(2, 2)`` of 4)."""
    wy = pow2_floor(int(warps ** 0.5))
    return wy, warps // wy


def mma_warps(arch: CudaArch):
    """Warps per block ``(y, x)`` of the unstaged tensor-core form (one ``16 x 8`` tile per
    warp): :func:`default_threads` in warps, as a :func:`warp_grid` (``(2, 4)`` of 8 warps).
    The staged form's warps come from :func:`mma_tile_defaults`."""
    return warp_grid(max(1, default_threads(arch) // arch.warp_size))


#: Candidates of the staged tensor-core matmul's tiles (:func:`schedule_matmul_mma`): warps of a
#: block along M and N, a warp's tile (multiples of :data:`MMA_TILE`), the K panel staged in
#: shared memory per step (a multiple of the instruction's k).
MMA_TILE_OPTIONS = {"wy": (1, 2, 4), "wx": (1, 2, 4), "wm": (16, 32, 64, 128),
                    "wn": (8, 16, 32, 64, 128), "kt": (16, 32, 64), "stages": (1, 2, 3)}


#: Default depth of the staged tensor-core matmul's copy pipeline (``stages``): the panels of
#: the next k steps are copied (``cp.async``, two buffers each) while the warps compute on the
#: current one; 1: one buffer, each copy waited before its k step.
MMA_STAGES = 2


#: Default K panel of the staged tensor-core matmul: two ``mma.sync`` k steps per pair of
#: barriers (a code-shape choice like :data:`~.gpu_rules.MATMUL_KT`; the tuner samples 16 to 64).
MMA_KT = 32


def mma_lane_registers(wm: int, wn: int) -> int:
    """Registers per lane a ``wm x wn`` f16 warp tile takes in the staged kernel (estimate):
    its accumulators (two halves per register: ``wm * wn / 64``), the ``ldmatrix`` fragments
    of two ``k`` steps (``A``: 4 per ``16 x 16`` tile, ``B``: 2 per ``16 x 8``; ``ptxas``
    loads the next step's during the current one's ``mma``), and 32 for addresses, indices
    and the copy loop. ``ptxas`` (sm_90, no ``.maxnreg``) takes 164-168 for ``64 x 64`` (160
    here) and 106-120 for ``64 x 32`` (112)."""
    return wm * wn // 64 + 2 * (wm // 16 * 4 + wn // 8 * 2) + 32


def resident_warps(arch: CudaArch, warps: int, lane_registers: int) -> int:
    """Warps of ``warps``-warp blocks an SM holds when each lane takes ``lane_registers``
    (whole blocks within the register file and ``max_threads_per_sm``)."""
    per_block = warps * arch.warp_size
    blocks = min(arch.registers_per_sm // (per_block * max(lane_registers, 1)),
                 arch.max_threads_per_sm // per_block)
    return blocks * warps


def mma_tile_defaults(m: int, n: int, k: int, arch: CudaArch) -> Optional[Dict[str, int]]:
    """Default tiles of the staged tensor-core matmul on ``arch``, or None when the dims do not
    divide into them:

    * warp tile ``wm x wn``: the largest of ``16x8, 16x16, 32x16, 32x32, 64x32, 64x64, ...``
      whose f16 accumulators (two per 32-bit register, ``wm * wn / 64`` registers per lane)
      take at most a quarter of the 256 registers a thread addresses
      (``max_registers_per_thread + 1``; the rest holds the ``A``/``B`` fragments and the
      addresses): ``64 x 64`` (64 registers), CUTLASS's warp tile;
    * warps ``wy x wx``: of the power-of-two warp counts up to :func:`default_threads`, the
      one whose blocks keep the most warps resident per SM (:func:`resident_warps` at
      :func:`mma_lane_registers`; ties to more warps per block, which share each staged panel
      among more warps), as a :func:`warp_grid`: ``2 x 2`` for ``64 x 64`` tiles (three
      blocks, 12 warps per SM; 8 warps of ~164 registers fit once), CUTLASS's ``128 x 128``
      block of 4 warps; ``2 x 4`` for ``64 x 32`` tiles;
    * the warp tile halved while it does not divide the dims or leaves a single block (None
      when even ``16 x 8`` tiles do);
    * ``kt``: the largest of :data:`MMA_TILE_OPTIONS` up to :data:`MMA_KT` dividing ``k``;
    * ``stages``: :data:`MMA_STAGES`, fewer where ``stages`` buffers of both f16 panels would
      pass ``static_shared_bytes_per_block``.

    Source: CUTLASS's default sm_80 tensor-core GEMM (``128 x 128 x 32`` blocks of 2 x 2 warps
    of ``64 x 64``), the occupancy calculation of the CUDA C++ Programming Guide.
    """
    tm, tn, tk = MMA_TILE
    wm, wn = tm, tn
    while True:
        nm, nn = (wm, 2 * wn) if 2 * wn <= wm else (2 * wm, wn)
        if nm * nn // (2 * arch.warp_size) > (arch.max_registers_per_thread + 1) // 4:
            break
        wm, wn = nm, nn
    lanes = mma_lane_registers(wm, wn)
    most = max(1, default_threads(arch) // arch.warp_size)
    wy, wx = warp_grid(max((1 << i for i in range(most.bit_length())),
                           key=lambda w: (resident_warps(arch, w, lanes), w)))
    if m % (tm * wy) or n % (tn * wx) or k % tk:
        return None
    while m % (wy * wm):
        wm //= 2
    while n % (wx * wn):
        wn //= 2
    while (m // (wy * wm)) * (n // (wx * wn)) < 2:   # two blocks at least
        if wm > tm and (wm >= 2 * wn or wn == tn):
            wm //= 2
        elif wn > tn:
            wn //= 2
        else:
            return None
    kt = max(t for t in MMA_TILE_OPTIONS["kt"] if k % t == 0 and t <= MMA_KT or t == tk)
    stages = MMA_STAGES   # fewer where the f16 panels' buffers would pass the static limit
    while stages > 1 and (wy * wm + wx * wn) * kt * 2 * stages > arch.static_shared_bytes_per_block:
        stages -= 1
    return {"wy": wy, "wx": wx, "wm": wm, "wn": wn, "kt": kt, "stages": stages}


def mma_tile_options(m: int, n: int, k: int, default: Dict[str, int]) -> Dict[str, List[int]]:
    """The candidates of each staged tensor-core tile (:data:`MMA_TILE_OPTIONS` that divide
    their dim; every ``stages``), plus ``default[name]``, in the order
    :func:`schedule_matmul_mma` samples them."""
    dims = {"wy": m // MMA_TILE[0], "wx": n // MMA_TILE[1], "wm": m, "wn": n, "kt": k}
    return {name: sorted({o for o in opts if name not in dims or dims[name] % o == 0} | {default[name]})
            for name, opts in MMA_TILE_OPTIONS.items()}


def schedule_matmul_mma(sch: Schedule, block: BlockRV, arch: CudaArch,
                        forced: Optional[Dict[str, int]] = None) -> bool:
    """An f16 ``C[i, j] += A[i, k] * B[k, j]`` on tensor cores (``mma.sync.m16n8k16``, sm_80 and
    newer); returns whether it applied (f16 operands, dims that divide into warp tiles, sm_80 or
    newer). A sampled decision ``staged`` picks the form:

    * ``staged = 1`` (default): the standard tensor-core pipeline (CUTLASS's, IREE's LLVMGPU
      ``MmaSync``): blocks of ``wy x wx`` warps (loops bound to ``warpIdx.z`` / ``warpIdx.y``),
      each warp computing a ``wm x wn`` tile of several ``16 x 8`` mma tiles over ``kt``-deep
      panels of ``A`` and ``B`` staged in shared memory by the block's threads
      (``cache_read(..., "shared")`` at ``k0``), the init placed before ``k0``
      (``decompose_reduction``); tiles from :func:`mma_tile_defaults`, each sampled over
      :func:`mma_tile_options` (``forced``: given decisions, as in :func:`matmul_tiles`). The
      CUDA lowering (:mod:`mlc_mlir.pipeline.cuda_mma`) keeps ``C`` in registers across
      ``k``, reads the fragments with ``ldmatrix``, copies with ``cp.async`` and pipelines the
      copies ``stages`` deep (the annotation's value);
    * ``staged = 0``: one ``16 x 8`` tile per warp read from global memory in ``k`` steps of 16
      (:func:`mma_warps` warps), rewritten by ``transform.nvgpu.rewrite_matmul_as_mma_sync``.

    The block is annotated ``mlc.mma_sync``. A sampled combination past the block's limits
    (threads, static shared memory) fails when compiled: a failed candidate of the tuner.

    Raises
    ------
    ScheduleError
        If a forced value is not among its candidates.
    """
    info = sch.get(block)
    m, n, k = (d.extent for d in info.dims)
    default = mma_tile_defaults(m, n, k, arch)
    if arch.sm < MMA_MIN_SM or set(info.info.dtypes) != {"float16"} or default is None:
        return False
    form = None if forced is None else {"staged": forced.get("staged", 1)}
    if int(sample_tiles(sch, {"staged": [0, 1]}, {"staged": 1}, form)["staged"]):
        t = sample_tiles(sch, mma_tile_options(m, n, k, default), default, forced)
        loops = block_grid(sch, block, t["wy"], t["wx"], t["wm"], t["wn"], t["kt"], k_inner=True)
        for idx in (0, 1):
            sch.compute_at(sch.cache_read(block, idx, "shared"), loops[6])
        sch.decompose_reduction(block, loops[6])
        stages = int(t["stages"])
    else:
        (tm, tn, tk), (wy, wx) = MMA_TILE, mma_warps(arch)
        loops = block_grid(sch, block, wy, wx, tm, tn, tk, k_inner=True)
        stages = 1
    # warps along y and z only: blockDim.x stays one warp, since rewrite_matmul_as_mma_sync
    # takes threadIdx.x as the lane id
    sch.bind(loops[1], "warpIdx.z")
    sch.bind(loops[4], "warpIdx.y")
    sch.annotate(block, "mlc.mma_sync", stages)
    return True
