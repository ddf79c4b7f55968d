"""Facts read off a kernel's PTX without a GPU: the instructions of its innermost loop that
does arithmetic (loads per FMA, the measure of a register tile's reuse) and what ``ptxas -v``
reports (registers, spills, shared memory). Used by tests and benchmarks of the CUDA kernels.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
import tempfile
from typing import Optional

from ..errors import PipelineError


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
    """Counts of the innermost loop of ``ptx`` holding FMAs (a label to the branch back to it,
    the shortest such span), or None when no loop holds an FMA (a fully unrolled kernel)."""
    lines = ptx.splitlines()
    labels = {ln.strip().rstrip(":"): i for i, ln in enumerate(lines) if ln.startswith("$L")}
    best = None
    for j, ln in enumerate(lines):
        m = re.search(r"bra(?:\.uni)?\s+(\$L\w+);", ln)
        start = labels.get(m.group(1), j) if m else j
        if start >= j:
            continue
        body = "\n".join(lines[start:j])
        counts = LoopCounts(body.count("fma.rn.f32"), len(re.findall(r"ld\.shared", body)),
                            len(re.findall(r"ld\.global", body)))
        if counts.fma and (best is None or j - start < best[0]):
            best = (j - start, counts)
    return best[1] if best else None


@dataclasses.dataclass(frozen=True)
class PtxasUsage:
    """What ``ptxas -v`` reports for one kernel: registers, spill store bytes, shared bytes."""

    registers: int
    spill_bytes: int
    shared_bytes: int


def ptxas_usage(ptx: str, arch: str = "sm_90") -> PtxasUsage:
    """``ptxas -arch=<arch> -v`` of ``ptx`` (one kernel).

    Raises
    ------
    PipelineError
        If ``ptxas`` is not on PATH or rejects the PTX.
    """
    exe = shutil.which("ptxas")
    if exe is None:
        raise PipelineError("ptx facts: ptxas is not on PATH")
    with tempfile.NamedTemporaryFile("w", suffix=".ptx") as f:
        f.write(ptx)
        f.flush()
        proc = subprocess.run([exe, f"-arch={arch}", "-v", f.name, "-o", "/dev/null"],
                              capture_output=True, text=True)
    if proc.returncode != 0:
        raise PipelineError(f"ptx facts: ptxas rejected the PTX:\n{proc.stderr}")

    def first(pattern: str) -> int:
        found = re.findall(pattern, proc.stderr)
        return int(found[0]) if found else 0
    return PtxasUsage(first(r"Used (\d+) registers"), first(r"(\d+) bytes spill stores"),
                      first(r"(\d+) bytes smem"))
