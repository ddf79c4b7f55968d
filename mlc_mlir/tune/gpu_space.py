"""The GPU matmul's tiles as points of a space (``target="cuda"``): the design space of a GPU
task is the GPU schedule rules (:data:`mlc_mlir.schedule.rules.gpu_rules.GPU_RULES`) drawing
their decisions (:class:`~mlc_mlir.tune.space_rules.RuleSpace`; TVM MetaSchedule's
``MultiLevelTiling`` for CUDA, ``SSSRRSRS`` reduced to the chapter's shared-memory blocking). A
matmul (``linalg.matmul``, 2 parallel + 1 reduction dims) samples
five tiles and a switch (:func:`~mlc_mlir.schedule.rules.gpu_rules.matmul_tiles`):

* ``ty``, ``tx``: threads of a block along M and N (``ty * tx`` threads, 32..1024);
* ``ly``, ``lx``: the register tile each thread computes (``cache_write(..., "local")``);
* ``kt``: the K panel staged in shared memory per step (``cache_read(..., "shared")`` at ``k0``);
* ``prefetch``: 1 to load the next panels into registers while computing on the current ones
  (:data:`~mlc_mlir.schedule.rules.gpu_rules.PREFETCH`), 0 not to.

A combination that breaks a CUDA limit of the target's architecture
(:class:`~mlc_mlir.target.CudaArch`: ``max_threads_per_block``, and
``static_shared_bytes_per_block``, since the lowering allocates the panels as ``__shared__``
arrays; the architecture's larger opt-in limit, 227 KiB on sm_90, needs dynamic shared memory)
is a failed candidate, never a crash: the tuner records the error. This module also enumerates
the valid tiles (:func:`matmul_tile_candidates`) for grid searches and benchmarks.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, Iterator

from ..pipeline.cuda_panels import panel_pad
from ..schedule.rules.gpu_mma import mma_tile_defaults, mma_tile_options
from ..schedule.rules.gpu_rules import (
    matmul_tile_defaults, matmul_tile_options, matmul_tiles, schedule_matmul_tiles,
)
from ..schedule.schedule import Schedule
from ..target import CudaArch


@dataclasses.dataclass(frozen=True)
class MatmulTiles:
    """One point of the matmul space (see the module docstring)."""

    ty: int
    tx: int
    ly: int
    lx: int
    kt: int
    prefetch: int = 1

    def threads(self) -> int:
        """Threads per block."""
        return self.ty * self.tx

    def shared_bytes(self, elem_bytes: int = 4) -> int:
        """Shared memory of the ``A`` and ``B`` panels (``A`` stored ``k``-major with
        :func:`~mlc_mlir.pipeline.cuda_panels.panel_pad` elements per row when a thread reads
        several of its rows)."""
        pad = panel_pad(elem_bytes) if self.ly > 1 else 0
        return (self.ty * self.ly + pad + self.tx * self.lx) * self.kt * elem_bytes

    def valid(self, m: int, n: int, k: int, arch: CudaArch, elem_bytes: int = 4) -> bool:
        """Whether the tiles divide ``(m, n, k)`` and fit the per-block limits of ``arch``
        (a warp to ``max_threads_per_block`` threads, ``static_shared_bytes_per_block``)."""
        return (m % (self.ty * self.ly) == 0 and n % (self.tx * self.lx) == 0 and k % self.kt == 0
                and arch.warp_size <= self.threads() <= arch.max_threads_per_block
                and self.shared_bytes(elem_bytes) <= arch.static_shared_bytes_per_block)


def matmul_tile_candidates(m: int, n: int, k: int, arch: CudaArch,
                           elem_bytes: int = 4) -> Iterator[MatmulTiles]:
    """Every valid point of the space for an ``(m, n, k)`` matmul on ``arch`` (a target's
    :attr:`~mlc_mlir.target.Target.cuda_arch`; largest register tiles first), e.g. for a grid
    search or to seed an evolutionary search."""
    o = matmul_tile_options(m, n, k)
    for ly in reversed(o["ly"]):
        for lx in reversed(o["lx"]):
            for ty in o["ty"]:
                for tx in o["tx"]:
                    for kt in o["kt"]:
                        for prefetch in reversed(o["prefetch"]):
                            t = MatmulTiles(ty, tx, ly, lx, kt, prefetch)
                            if t.valid(m, n, k, arch, elem_bytes):
                                yield t


def sample_gpu_matmul(sch: Schedule, block, tiles: MatmulTiles, arch: CudaArch) -> None:
    """The GPU matmul rule's tiles with the decisions ``tiles``
    (:func:`~mlc_mlir.schedule.rules.gpu_rules.matmul_tiles`, the defaults of ``arch``), then
    :func:`~mlc_mlir.schedule.rules.gpu_rules.schedule_matmul_tiles`.

    Raises
    ------
    ScheduleError
        If a tile is not among the options of its dim.
    """
    m, n, k = (d.extent for d in sch.get(block).dims)
    forced = dataclasses.asdict(tiles)
    schedule_matmul_tiles(sch, block, *matmul_tiles(sch, m, n, k, matmul_tile_defaults(m, n, k, arch), forced))


def mma_tile_candidates(m: int, n: int, k: int, arch: CudaArch) -> Iterator[Dict[str, int]]:
    """Decisions of the f16 tensor-core rule
    (:func:`~mlc_mlir.schedule.rules.gpu_mma.schedule_matmul_mma`'s ``forced``) for an
    ``(m, n, k)`` matmul on ``arch``: the default first, then each staged point of
    :func:`~mlc_mlir.schedule.rules.gpu_mma.mma_tile_options` within the block's limits
    (threads, static shared memory for ``stages`` copies of both f16 panels, accumulators
    within half of ``max_registers_per_thread``, two blocks at least), square ``64 x 64`` warp
    tiles, ``kt = 32`` and two stages first, 4 to 8 warps first; the unstaged form last.
    Nothing when the rule does not apply."""
    default = mma_tile_defaults(m, n, k, arch)
    if default is None:
        return
    yield dict(default, staged=1)
    o = mma_tile_options(m, n, k, default)
    points = []
    for wy in o["wy"]:
        for wx in o["wx"]:
            for wm in o["wm"]:
                for wn in o["wn"]:
                    for kt in o["kt"]:
                        for st in o["stages"]:
                            bm, bn = wy * wm, wx * wn
                            if m % bm or n % bn or (m // bm) * (n // bn) < 2 or \
                                    wy * wx * arch.warp_size > arch.max_threads_per_block or \
                                    (bm + bn) * kt * 2 * st > arch.static_shared_bytes_per_block or \
                                    wm * wn // (2 * arch.warp_size) > arch.max_registers_per_thread // 2:
                                continue
                            t = {"wy": wy, "wx": wx, "wm": wm, "wn": wn, "kt": kt, "stages": st,
                                 "staged": 1}
                            if t != dict(default, staged=1):
                                points.append(t)
    points.sort(key=lambda t: (t["wm"] * t["wn"] != 64 * 64, t["wm"] != t["wn"], t["kt"] != 32,
                               t["stages"] != 2, abs(t["wy"] * t["wx"] - 6), t["wy"] != t["wx"]))
    yield from points
    yield {"staged": 0}
