"""Sampling helpers shared by the stochastic schedule rules of the design spaces
(:mod:`.space_rules`, :mod:`.contraction_space`): a categorical or perfect-tile decision that
takes the default rule's value at the default point of the space, and the candidate lists of
thread counts and vector tiles derived from the target.

Source: TVM MetaSchedule ``sample_categorical`` / ``sample_perfect_tile`` as used by its schedule
rules.
"""

from __future__ import annotations

from typing import List, Sequence

from ..errors import ScheduleError
from ..schedule.rules.common import RuleContext, element_bits, vector_tile
from ..schedule.schedule import Schedule
from ..schedule.state import ExprRV, LoopRV

#: Vectors per vectorized tile the spaces choose from (the default rule takes up to
#: ``VECTORS_PER_TILE`` = 4; the space also offers 1..3).
TILE_VECTORS = (1, 2, 3, 4)

def categorical(sch: Schedule, candidates: Sequence, default) -> ExprRV:
    """``sch.sample_categorical`` over ``candidates`` (uniform); at the default point of the
    space (:func:`~.space_rules.default_point`) the decision is ``default``.

    Raises
    ------
    ScheduleError
        At the default point, if ``default`` is not a candidate.
    """
    candidates = list(candidates)
    if getattr(sch, "at_default", False):
        if default not in candidates:
            raise ScheduleError(f"default point: {default!r} is not among the candidates {candidates}")
        return sch.sample_categorical(candidates, [1.0 / len(candidates)] * len(candidates),
                                      decision=candidates.index(default))
    return sch.sample_categorical(candidates, [1.0 / len(candidates)] * len(candidates))


def sample_tile(sch: Schedule, loop: LoopRV, n: int, bound: int, default: Sequence[int]) -> List[ExprRV]:
    """``sch.sample_perfect_tile(loop, n, bound)``; ``default`` at the default point."""
    if getattr(sch, "at_default", False):
        return sch.sample_perfect_tile(loop, n, bound, decision=list(default))
    return sch.sample_perfect_tile(loop, n, bound)


def thread_candidates(extent: int, threads: int, min_per_thread: int = 1) -> List[int]:
    """Thread counts ``t <= threads`` that divide ``extent`` with at least ``min_per_thread``
    iterations each (always includes 1)."""
    return [t for t in range(1, threads + 1)
            if extent % t == 0 and (t == 1 or extent // t >= min_per_thread)]


def vector_candidates(ctx: RuleContext, blk, extent: int) -> List[int]:
    """Vector tile sizes along a dim of ``extent``: multiples of the target's lanes
    (:data:`TILE_VECTORS` vectors) that divide it, plus the default rule's choice
    (:func:`~mlc_mlir.schedule.rules.common.vector_tile`); sizes above 1 only."""
    lanes = ctx.target.vector_lanes(element_bits(blk))
    cands = {v * lanes for v in TILE_VECTORS if extent % (v * lanes) == 0}
    cands.add(vector_tile(ctx, blk, extent))
    return sorted(c for c in cands if c > 1)

