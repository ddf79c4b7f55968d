"""Sampling primitives (TVM ``sample_perfect_tile``, ``sample_categorical``): a decision is given
(on replay), taken from the caller's ``default`` (a schedule rule's target-derived choice, on a
schedule built with ``defaults=True``) or drawn, and checked against the sampling constraints;
the ``ExprRV`` s carry their options, which become the options of the ``transform.tune.knob`` s
they feed."""

from __future__ import annotations

import functools
import math
from typing import List, Optional, Sequence, Tuple

from ..errors import ScheduleError
from .factors import divisors
from .state import ExprRV, LoopRV, ScheduleState, as_int


def perfect_tilings(extent: int, n: int, max_innermost_factor: int) -> List[List[int]]:
    """All ordered ``n``-factor perfect factorizations of ``extent`` whose innermost factor is
    at most ``max_innermost_factor`` (the support of TVM's ``sample_perfect_tile``)."""
    return [list(t) for t in _perfect_tilings(extent, n, max_innermost_factor)]


@functools.lru_cache(maxsize=64)
def _perfect_tilings(extent: int, n: int, max_innermost_factor: int) -> Tuple[Tuple[int, ...], ...]:
    """:func:`perfect_tilings`, enumerated once per argument triple (a tuner samples the same
    loops many times; a highly composite extent has tens of thousands of tilings)."""
    def rec(rem: int, k: int) -> List[Tuple[int, ...]]:
        if k == 1:
            return [(rem,)] if rem <= max_innermost_factor else []
        return [(d,) + rest for d in divisors(rem) for rest in rec(rem // d, k - 1)]

    return tuple(rec(extent, n))


class SamplingPrimitives(ScheduleState):
    """Primitives that sample integers (decisions of a stochastic schedule)."""

    def sample_perfect_tile(self, loop: LoopRV, n: int, max_innermost_factor: int = 16,
                            decision: Optional[Sequence[int]] = None,
                            default: Optional[Sequence[int]] = None) -> List[ExprRV]:
        """Sample ``n`` factors whose product is the loop's extent, the innermost at most
        ``max_innermost_factor`` (TVM ``sample_perfect_tile``).

        In the transform script each tile size the factors determine is a
        ``transform.tune.knob`` whose options are the sizes the constraint allows and whose
        ``selected`` value is this decision.

        Parameters
        ----------
        loop : LoopRV
        n : int
            Number of factors, >= 1.
        max_innermost_factor : int
            Bound on the last factor, >= 1.
        decision : list of int, optional
            The factors (on replay); checked against the constraint.
        default : list of int, optional
            The factors taken when no ``decision`` is given and the schedule takes defaults
            (``Schedule(..., defaults=True)``); checked like a decision. Not recorded: the
            trace records the decision.

        Returns
        -------
        list of ExprRV

        Raises
        ------
        ScheduleError
            If ``decision`` is not an ``n``-way perfect tiling of the extent within the bound.
        """
        blk, pos, lp = self._loop("sample_perfect_tile", loop)
        n = as_int("sample_perfect_tile", "n", n, 1)
        mif = as_int("sample_perfect_tile", "max_innermost_factor", max_innermost_factor, 1)
        if decision is None and default is not None and self._defaults:
            decision = default
        if decision is None:
            support = _perfect_tilings(lp.extent, n, mif)
            if not support:
                raise ScheduleError(f"sample_perfect_tile: no {n}-way tiling of extent {lp.extent} "
                                    f"with innermost <= {mif}")
            decision = list(self._rng.choice(support))
        if not isinstance(decision, (list, tuple)):
            raise ScheduleError(f"sample_perfect_tile: decision {decision!r} is not a list of ints")
        decision = [as_int("sample_perfect_tile", "decision", d, 1) for d in decision]
        if len(decision) != n or math.prod(decision) != lp.extent:
            raise ScheduleError(f"sample_perfect_tile: decision {decision} is not a {n}-way perfect "
                                f"tiling of extent {lp.extent}")
        if decision[-1] > mif:
            raise ScheduleError(f"sample_perfect_tile: decision {decision} has innermost factor "
                                f"{decision[-1]}; expected <= max_innermost_factor={mif}")
        rvs = [self._new_rv("v") for _ in range(n)]
        self._record("sample_perfect_tile", [loop], {"n": n, "max_innermost_factor": mif},
                     rvs, decision=decision)
        opts = divisors(lp.extent)
        return [ExprRV(d, r, [o for o in opts if i < n - 1 or o <= mif])
                for i, (d, r) in enumerate(zip(decision, rvs))]

    def sample_categorical(self, candidates: Sequence[int], probs: Sequence[float],
                           decision: Optional[int] = None, default: Optional[int] = None) -> ExprRV:
        """Sample one of ``candidates`` with probabilities ``probs`` (TVM
        ``sample_categorical``); the decision is the chosen index. ``default`` (an index) is
        the decision taken when none is given and the schedule takes defaults
        (``Schedule(..., defaults=True)``); it is not recorded.

        Raises
        ------
        ScheduleError
            If lengths differ, a candidate is not an int, probabilities are negative, or the
            decision is out of range.
        """
        if not isinstance(candidates, (list, tuple)) or not isinstance(probs, (list, tuple)):
            raise ScheduleError(f"sample_categorical: candidates and probs must be lists, got "
                                f"{candidates!r} and {probs!r}")
        candidates = [as_int("sample_categorical", "candidates", c) for c in candidates]
        probs = list(probs)
        if not candidates or len(candidates) != len(probs) or \
                any(not isinstance(p, (int, float)) or isinstance(p, bool) or p < 0 for p in probs) \
                or sum(probs) <= 0:
            raise ScheduleError(f"sample_categorical: need equal-length candidates and non-negative "
                                f"probs, got {candidates} and {probs}")
        if decision is None and default is not None and self._defaults:
            decision = default
        if decision is None:
            decision = self._rng.choices(range(len(candidates)), weights=probs)[0]
        decision = as_int("sample_categorical", "decision", decision)
        if not 0 <= decision < len(candidates):
            raise ScheduleError(f"sample_categorical: decision {decision} is not an index of {candidates}")
        rv = self._new_rv("v")
        self._record("sample_categorical", [], {"candidates": candidates, "probs": probs}, [rv],
                     decision=decision)
        return ExprRV(candidates[decision], rv, candidates)
