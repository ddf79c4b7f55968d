"""GPU design spaces (``target="cuda"``): the default GPU schedules with the matmul's tiles as
knobs (TVM MetaSchedule's ``MultiLevelTiling`` for CUDA, ``SSSRRSRS`` reduced to the chapter's
shared-memory blocking).

A matmul (``linalg.matmul``, 2 parallel + 1 reduction dims) gets five ``sample_categorical``
knobs, each over powers of two that divide its dim:

* ``ty``, ``tx``: threads of a block along M and N (``ty * tx`` threads, 32..1024);
* ``ly``, ``lx``: the register tile each thread computes (``cache_write(..., "local")``);
* ``kt``: the K panel staged in shared memory per step (``cache_read(..., "shared")`` at ``k0``).

A combination that breaks a CUDA limit (threads per block, 48 KiB of static shared memory) is a
failed candidate, never a crash: the tuner records the error. Every other op kind gets its
default GPU rule (:data:`mlc_mlir.schedule.rules.gpu_rules.GPU_RULES`).
"""

from __future__ import annotations

import dataclasses
from typing import Dict, Iterator, List, Optional, Sequence

from ..errors import TuningError
from ..schedule.default_rules import classify
from ..schedule.rules.gpu_rules import GPU_RULES, schedule_matmul_tiles
from ..schedule.schedule import Schedule
from ..target import Target

#: Candidate extents of each knob (filtered by divisibility of the dim).
THREAD_TILES = (4, 8, 16, 32)
REGISTER_TILES = (1, 2, 4, 8)
K_TILES = (4, 8, 16, 32)

#: Static shared memory a block may use without opting in (bytes).
MAX_SHARED_BYTES = 48 * 1024
MAX_THREADS = 1024


@dataclasses.dataclass(frozen=True)
class MatmulTiles:
    """One point of the matmul space (see the module docstring)."""

    ty: int
    tx: int
    ly: int
    lx: int
    kt: int

    def threads(self) -> int:
        """Threads per block."""
        return self.ty * self.tx

    def shared_bytes(self, elem_bytes: int = 4) -> int:
        """Shared memory of the ``A`` and ``B`` panels."""
        return (self.ty * self.ly + self.tx * self.lx) * self.kt * elem_bytes

    def valid(self, m: int, n: int, k: int, elem_bytes: int = 4) -> bool:
        """Whether the tiles divide ``(m, n, k)`` and fit CUDA's per-block limits."""
        return (m % (self.ty * self.ly) == 0 and n % (self.tx * self.lx) == 0 and k % self.kt == 0
                and 32 <= self.threads() <= MAX_THREADS
                and self.shared_bytes(elem_bytes) <= MAX_SHARED_BYTES)


def _dividing(extent: int, options: Sequence[int]) -> List[int]:
    return [o for o in options if extent % o == 0]


def knob_options(m: int, n: int, k: int) -> Dict[str, List[int]]:
    """The options of each knob for an ``(m, n, k)`` matmul (each divides its dim alone)."""
    return {"ty": _dividing(m, THREAD_TILES), "tx": _dividing(n, THREAD_TILES),
            "ly": _dividing(m, REGISTER_TILES), "lx": _dividing(n, REGISTER_TILES),
            "kt": _dividing(k, K_TILES)}


def matmul_tile_candidates(m: int, n: int, k: int, elem_bytes: int = 4) -> Iterator[MatmulTiles]:
    """Every valid point of the space for an ``(m, n, k)`` matmul (largest register tiles
    first), e.g. for a grid search or to seed an evolutionary search."""
    o = knob_options(m, n, k)
    for ly in reversed(o["ly"]):
        for lx in reversed(o["lx"]):
            for ty in o["ty"]:
                for tx in o["tx"]:
                    for kt in o["kt"]:
                        t = MatmulTiles(ty, tx, ly, lx, kt)
                        if t.valid(m, n, k, elem_bytes):
                            yield t


def sample_gpu_matmul(sch: Schedule, block, tiles: Optional[MatmulTiles] = None) -> None:
    """Apply the matmul space to ``block``: one ``sample_categorical`` per knob (decided by
    ``tiles`` when given, else sampled), then
    :func:`~mlc_mlir.schedule.rules.gpu_rules.schedule_matmul_tiles`.

    Raises
    ------
    ScheduleError
        If a knob has no option dividing its dim, or ``tiles`` is not among the options.
    """
    info = sch.get(block)
    m, n, k = (d.extent for d in info.dims)
    rvs = {}
    for name, opts in knob_options(m, n, k).items():
        decision = None if tiles is None else opts.index(getattr(tiles, name)) \
            if getattr(tiles, name) in opts else len(opts)
        rvs[name] = sch.sample_categorical(opts, [1.0] * len(opts), decision=decision)
    schedule_matmul_tiles(sch, block, rvs["ty"], rvs["tx"], rvs["ly"], rvs["lx"], rvs["kt"])


class GpuRuleSpace:
    """The design space of a task's function on a CUDA target: the matmul knobs of
    :func:`sample_gpu_matmul` for matmuls, the default GPU rule for other op kinds.

    Parameters
    ----------
    target : Target
        A cuda Target.

    Raises
    ------
    TuningError
        If ``target`` is not a cuda Target.
    """

    def __init__(self, target: Target):
        if not isinstance(target, Target) or target.kind != "cuda":
            raise TuningError(f"GpuRuleSpace: target is {target!r}; expected a cuda Target")
        self.target = target

    def __repr__(self) -> str:
        return f"GpuRuleSpace({self.target.key()})"

    def __call__(self, sch: Schedule) -> None:
        """Apply the space to ``sch`` (a fresh Schedule of the task's module).

        Raises
        ------
        ScheduleError
            If a rule fails.
        """
        claimed = {(b.func, b.name) for b in sch.model.blocks}
        for key, info in list(sch.model.ops.items()):
            kind = classify(info)
            if key in claimed or kind == "fill":
                continue
            block = sch.get_block(key[1], func_name=key[0])
            if kind == "matmul":
                sample_gpu_matmul(sch, block)
            elif kind in GPU_RULES:
                GPU_RULES[kind](sch, block)
            else:
                raise TuningError(f"GpuRuleSpace: no GPU rule for op kind {kind!r} ('{key[1]}')")
