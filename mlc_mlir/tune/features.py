"""Features of a candidate schedule for the cost model: a fixed-length vector read from the tiled
loop nest (the Schedule's model after replay) and the trace's decisions, normalized against the
target (vector lanes, vector registers, L1d/L2, cores) so that one model can compare candidates
on any CPU.

Per block (up to :data:`MAX_BLOCKS`, largest iteration space first): the log extent and kind of
each loop level, the vector tile against the lanes, the register tile against the register count,
the working set of the tile below each level against L1d and L2, the parallel extent against
the cores, the unroll factors, packing/caching, reduction factorization and fused epilogues.
Globally: the number of blocks and the sampled decisions themselves. Source: TVM MetaSchedule
``PerStoreFeature`` (loop, vectorization, parallel, unroll and buffer-access features per
store), Ansor's feature set (Zheng et al., OSDI 2020).
"""

from __future__ import annotations

import math
from typing import Dict, List, Optional, Sequence

import numpy as np

from ..errors import TuningError
from ..ir import dtypes
from ..schedule.loop_nest import Block
from ..schedule.schedule import Schedule
from ..schedule.trace import Trace
from ..target import Target

#: Blocks described per candidate (largest iteration space first); further blocks are counted.
MAX_BLOCKS = 4
#: Loop levels described per block (outermost first); deeper levels are left out.
MAX_LOOPS = 10
#: Sampled values described per candidate (decisions flattened in instruction order).
MAX_DECISIONS = 24

#: Code of each loop kind in the per-level kind feature (0: no loop at this level; an unrolled
#: loop adds 0.1).
_KIND_CODE = {"serial": 0.2, "parallel": 0.4, "vectorized": 0.6, "bound": 0.8}

_BLOCK_SCALARS = (
    "present", "log_points", "has_reduction", "num_loops",
    "vector", "log_vector_elems", "inner_vector_over_lanes", "inner_vector_lane_multiple",
    "vector_regs_over_regs", "vector_regs_fit",
    "levels_in_l1", "levels_in_l2", "log_inner_ws_over_l1", "log_outer_ws_over_l2",
    "log_parallel", "parallel_over_cores", "parallel_divides_cores",
    "log_unroll", "unrolled_loops",
    "packed", "cache_writes", "rfactor", "decomposed", "epilogues",
)


def feature_names() -> List[str]:
    """Names of the entries of :func:`candidate_features`, in order."""
    names = []
    for b in range(MAX_BLOCKS):
        names += [f"b{b}.{s}" for s in _BLOCK_SCALARS]
        names += [f"b{b}.loop{p}.log_extent" for p in range(MAX_LOOPS)]
        names += [f"b{b}.loop{p}.kind" for p in range(MAX_LOOPS)]
        names += [f"b{b}.loop{p}.log_ws_over_l1" for p in range(MAX_LOOPS)]
    names += ["num_blocks", "num_decisions"]
    names += [f"decision{i}" for i in range(MAX_DECISIONS)]
    return names


def _clip(x: float, lo: float = -1.0, hi: float = 1.0) -> float:
    return float(min(hi, max(lo, x)))


def _log2(x: float) -> float:
    return math.log2(x) if x > 0 else 0.0


def _tile_extents(blk: Block, start: int) -> Dict[int, int]:
    """Per iteration dim, the extent covered by loops ``start..`` (the tile below level
    ``start``); dims without a loop there have extent 1."""
    out: Dict[int, int] = {}
    for lp in blk.loops[start:]:
        out[lp.dim] = out.get(lp.dim, 1) * lp.extent
    return out


def working_set_bytes(blk: Block, start: int) -> int:
    """Bytes of the operands touched by one iteration of loop ``start - 1`` (the tile of loops
    ``start..``): per operand, the product over the iteration dims indexing it of their tile
    extents, times its element size. Windows (convolutions) are approximated by their dims."""
    ext = _tile_extents(blk, start)
    total = 0
    for dims, dt in zip(blk.info.operand_dims, blk.info.dtypes):
        n = 1
        for d in dims:
            n *= ext.get(d, 1)
        total += n * max(1, dtypes.bit_width(dt) // 8)
    return total


def block_features(blk: Block, target: Target, sch: Schedule) -> List[float]:
    """The per-block part of :func:`candidate_features` (``len(_BLOCK_SCALARS) + 3 *
    MAX_LOOPS`` values, each within [-1, 1])."""
    bits = max((dtypes.bit_width(d) for d in blk.info.dtypes), default=32)
    lanes = target.vector_lanes(bits)
    regs = max(1, target.vector_registers)
    l1 = target.l1d_bytes or (32 << 10)
    l2 = target.l2_bytes or (256 << 10)
    cores = max(1, target.cores)
    loops = blk.loops
    points = math.prod(d.extent for d in blk.dims) if blk.dims else 1
    vec = [lp for lp in loops if lp.kind == "vectorized"]
    vec_elems = math.prod(lp.extent for lp in vec) if vec else 1
    inner = vec[-1].extent if vec else 1
    vregs = vec_elems / lanes
    ws = [working_set_bytes(blk, p) for p in range(len(loops))]
    par = math.prod(lp.extent for lp in loops if lp.kind == "parallel")
    unroll = [lp.extent if lp.unroll == 0 else lp.unroll for lp in loops if lp.unroll is not None]
    epilogues = len(sch.model.epilogues(blk))
    scalars = [
        1.0, _clip(_log2(points) / 32), float(any(d.kind != "parallel" for d in blk.dims)),
        _clip(len(loops) / (2 * MAX_LOOPS)),
        float(bool(vec)), _clip(_log2(vec_elems) / 16), _clip(inner / lanes / 8),
        float(bool(vec) and inner % lanes == 0),
        _clip(vregs / regs / 4), float(bool(vec) and vregs <= regs),
        sum(w <= l1 for w in ws) / MAX_LOOPS, sum(w <= l2 for w in ws) / MAX_LOOPS,
        _clip(_log2(ws[-1] / l1) / 16) if ws else 0.0, _clip(_log2(ws[0] / l2) / 16) if ws else 0.0,
        _clip(_log2(par) / 8), _clip(par / cores / 4), float(par > 1 and par % cores == 0),
        _clip(_log2(math.prod(unroll)) / 8) if unroll else 0.0, _clip(len(unroll) / 4),
        float(bool(blk.cache_reads)), float(bool(blk.cache_writes)), float(blk.rfactor is not None),
        float(blk.decomposed_at is not None), _clip(epilogues / 4),
    ]
    ext = [_clip(_log2(lp.extent) / 16) for lp in loops[:MAX_LOOPS]]
    kinds = [_KIND_CODE[lp.kind] + (0.1 if lp.unroll is not None else 0.0)
             for lp in loops[:MAX_LOOPS]]
    wsl = [_clip(_log2(w / l1) / 16) for w in ws[:MAX_LOOPS]]
    pad = [0.0] * (MAX_LOOPS - min(len(loops), MAX_LOOPS))
    return scalars + ext + pad + kinds + pad + wsl + pad


def decision_values(trace: Trace) -> List[float]:
    """The sampled values of ``trace`` flattened in instruction order: the factors of each
    ``sample_perfect_tile`` and the chosen candidate of each ``sample_categorical``."""
    out: List[float] = []
    for idx in sorted(trace.decisions):
        inst, d = trace.insts[idx], trace.decisions[idx]
        if inst.kind == "sample_categorical":
            out.append(float(inst.attrs["candidates"][d]))
        else:
            out.extend(float(x) for x in d)
    return out


def candidate_features(sch: Schedule, target: Target, trace: Optional[Trace] = None) -> np.ndarray:
    """Feature vector of a candidate (see the module docstring and :func:`feature_names`).

    Parameters
    ----------
    sch : Schedule
        The candidate (a generated or replayed schedule; only its model is read, nothing is
        compiled).
    target : Target
        The target the normalization refers to.
    trace : Trace, optional
        Default ``sch.trace``.

    Returns
    -------
    numpy.ndarray
        float32, shape ``(len(feature_names()),)``, entries within [-1, 1].

    Raises
    ------
    TuningError
        If ``sch`` is not a Schedule or ``target`` not a Target.
    """
    if not isinstance(sch, Schedule) or not isinstance(target, Target):
        raise TuningError(f"candidate_features: got {type(sch).__name__}, {type(target).__name__}; "
                          "expected a Schedule and a Target")
    trace = sch.trace if trace is None else trace
    blocks = [b for b in sch.model.blocks if b.kind == "compute"]
    blocks.sort(key=lambda b: (-math.prod(d.extent for d in b.dims), b.func, b.name))
    per = len(_BLOCK_SCALARS) + 3 * MAX_LOOPS
    out: List[float] = []
    for b in blocks[:MAX_BLOCKS]:
        out += block_features(b, target, sch)
    out += [0.0] * (per * (MAX_BLOCKS - min(len(blocks), MAX_BLOCKS)))
    dec = decision_values(trace)
    out += [_clip(len(blocks) / (2 * MAX_BLOCKS)), _clip(len(dec) / (2 * MAX_DECISIONS))]
    out += [_clip(_log2(v) / 16) for v in dec[:MAX_DECISIONS]]
    out += [0.0] * (MAX_DECISIONS - min(len(dec), MAX_DECISIONS))
    return np.asarray(out, dtype=np.float32)


def stack_features(rows: Sequence[np.ndarray]) -> np.ndarray:
    """Rows of :func:`candidate_features` as one ``(N, F)`` float32 matrix (``(0, F)`` if none).

    Raises
    ------
    TuningError
        If rows have different lengths.
    """
    width = len(feature_names())
    if not rows:
        return np.zeros((0, width), np.float32)
    if any(r.shape != (width,) for r in rows):
        raise TuningError(f"stack_features: rows of shapes {sorted({r.shape for r in rows})}; "
                          f"expected ({width},)")
    return np.stack(rows).astype(np.float32)
