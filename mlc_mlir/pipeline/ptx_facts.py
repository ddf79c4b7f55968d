"""Facts read off a kernel's PTX without a GPU: its loops (a label and the branch back to it),
the instructions of its innermost loop that does arithmetic (loads per FMA, the measure of a
register tile's reuse) and what ``ptxas -v`` reports (registers, spills, shared memory). Used
by tests and benchmarks of the CUDA kernels.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Dict, List, Optional, Tuple

from .cuda import check_ptx


def ptx_loops(ptx: str) -> List[Tuple[int, int]]:
    """The loops of a PTX kernel as ``(first, last)`` line indices of ``ptx.splitlines()``: a
    label and the last branch back to it, sorted by start."""
    lines = ptx.splitlines()
    labels = {m.group(1): i for i, line in enumerate(lines) if (m := re.match(r"^(\$L\w+):", line))}
    spans: Dict[str, Tuple[int, int]] = {}
    for j, line in enumerate(lines):
        m = re.search(r"\bbra(?:\.uni)?\s+(\$L\w+);", line)
        if m and labels.get(m.group(1), j) < j:
            spans[m.group(1)] = (labels[m.group(1)], j)
    return sorted(spans.values())


@dataclasses.dataclass(frozen=True)
class LoopCounts:
    """Instructions in one PTX loop body: ``fma.rn.f32``, ``ld.shared`` and ``ld.global``."""

    fma: int
    shared_loads: int
    global_loads: int

    def loads_per_fma(self) -> float:
        """Loads (shared and global) per FMA; ``inf`` without FMAs."""
        return (self.shared_loads + self.global_loads) / self.fma if self.fma else float("inf")


def fma_loop(ptx: str) -> Optional[LoopCounts]:
    """Counts of the innermost loop of ``ptx`` holding FMAs (of :func:`ptx_loops`, the shortest
    such span), or None when no loop holds an FMA (a fully unrolled kernel)."""
    lines = ptx.splitlines()
    best = None
    for start, end in ptx_loops(ptx):
        body = "\n".join(lines[start:end])
        counts = LoopCounts(body.count("fma.rn.f32"), len(re.findall(r"ld\.shared", body)),
                            len(re.findall(r"ld\.global", body)))
        if counts.fma and (best is None or end - start < best[0]):
            best = (end - start, counts)
    return best[1] if best else None


@dataclasses.dataclass(frozen=True)
class PtxasUsage:
    """What ``ptxas -v`` reports for one kernel: registers, spill store and load bytes, static
    shared memory bytes."""

    registers: int
    spill_stores: int
    spill_loads: int
    shared_bytes: int


def ptxas_usage(ptx: str, arch: str = "sm_90") -> PtxasUsage:
    """``ptxas -arch=<arch> -v`` of ``ptx`` (one kernel; :func:`~.cuda.check_ptx`).

    Raises
    ------
    PipelineError
        If ``ptxas`` is not on PATH or rejects the PTX.
    """
    out = check_ptx(ptx, arch, verbose=True)

    def first(pattern: str) -> int:
        found = re.findall(pattern, out)
        return int(found[0]) if found else 0
    return PtxasUsage(first(r"Used (\d+) registers"), first(r"(\d+) bytes spill stores"),
                      first(r"(\d+) bytes spill loads"), first(r"(\d+) bytes smem"))
