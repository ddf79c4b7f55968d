"""What the GPU schedule rules share (:mod:`.gpu_rules`, :mod:`.gpu_mma`): the default thread
budget of a block, the thread counts a dim may take, named tile decisions sampled together and
the block/thread grid of a tiled matmul. Quantities derive from the architecture's resources
(:class:`~mlc_mlir.target.CudaArch`), as TVM dlight's GPU rules derive theirs from the target.
"""

from __future__ import annotations

from typing import Dict, List, Optional

from ...target import CudaArch
from ..schedule import Schedule
from ..state import BlockRV, ExprRV
from .common import categorical


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


def thread_options(arch: CudaArch, extent: int, default: int, keep) -> List[int]:
    """Thread counts of a dim of ``extent``: the powers of two from a warp to
    ``max_threads_per_block`` that divide it and satisfy ``keep``, and ``default``."""
    opts = {arch.warp_size << i for i in range(12) if arch.warp_size << i <= arch.max_threads_per_block}
    return sorted({t for t in opts if extent % t == 0 and keep(t)} | {default})


def sample_tiles(sch: Schedule, options: Dict[str, List[int]], default: Dict[str, int],
                 forced: Optional[Dict[str, int]] = None) -> Dict[str, ExprRV]:
    """One ``sample_categorical`` per named tile over its ``options``, ``default`` the default
    decisions, ``forced`` values given as decisions (a name it lacks takes its default; a
    value outside the candidates is a ``ScheduleError`` naming the decision). Returns
    ``{name: ExprRV}`` in ``options``' order.

    Raises
    ------
    ScheduleError
        If a forced value is not among its candidates.
    """
    out = {}
    for name, opts in options.items():
        if forced is None:
            out[name] = categorical(sch, opts, default[name])
            continue
        value = forced.get(name, default[name])
        decision = opts.index(value) if value in opts else len(opts)
        out[name] = sch.sample_categorical(opts, [1.0 / len(opts)] * len(opts), decision=decision)
    return out


def block_grid(sch: Schedule, block: BlockRV, ty, tx, ly, lx, kt, k_inner: bool):
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
