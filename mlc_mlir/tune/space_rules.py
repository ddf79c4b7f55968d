"""Design spaces from schedule rules: the space of a task's function is the schedule rules of
:mod:`mlc_mlir.schedule.default_rules`, each a stochastic rule whose decisions (threads,
register and cache tiles, vector tiles, packing, unrolling) are sampling instructions with
target-derived defaults. The compiler's default schedule is the rules with their default
decisions (``Schedule(mod, defaults=True)``); a candidate is the same rules with drawn decisions
(``defaults=False``), so the default schedule is one point of every space, and no rule is
written twice.

A *space* is a callable ``space(sch) -> None`` applying primitives, ``sample_*`` included, to a
fresh ``Schedule`` of ``task.module``. Sampled tile sizes and thread counts feed ``split``
directly, so ``Schedule.from_trace(mod, trace, decisions=...)`` with other decisions gives the
other program, or a :class:`~mlc_mlir.errors.ScheduleError` when the decisions do not fit
together. A candidate list may be derived from an earlier sampled value (the unroll factors that
divide the sampled KC): the list is recorded in the trace, so replay reproduces it.

Some choices are *structural*: their sampled value feeds no primitive, it steers which
primitives run or enters one as a constant: packing B or not (``cache_read``), unrolling the
convolution window or not, a GEMV's threads splitting N or K, the unroll factors (``unroll`` records its factor as a constant, not
as the sampled variable) and a row reduction's vector tile (``rfactor`` needs a constant split:
the emitter's ``tile_reduction_using_for`` takes no knob). :func:`structural_sampling` finds
them in a trace; a search changes them by running the space again with the decisions
(:func:`generate`), which is also right for every other decision.

Source: TVM MetaSchedule ``PostOrderApply`` + schedule rules (``MultiLevelTiling``,
``ParallelizeVectorizeUnroll``, ``AddRFactor``), whose ``sample_*`` decisions a trace records.
"""

from __future__ import annotations

from typing import Callable, Dict, List, Optional, Sequence

from ..errors import ScheduleError, TuningError
from ..ir.module import Module
from ..schedule.default_rules import apply_default_schedule
from ..schedule.rules.payload import payload_facts
from ..schedule.schedule import Schedule
from ..schedule.trace import RV, SAMPLING_KINDS, Trace
from ..target import Target

Space = Callable[[Schedule], None]


class RuleSpace:
    """The design space of a task's function: every named linalg op by the rule of its op kind
    (TVM MetaSchedule ``PostOrderApply`` over schedule rules), anchors before their epilogues:
    :func:`~mlc_mlir.schedule.default_rules.apply_default_schedule`'s rules (the CPU rules, or
    the GPU rules on a cuda target), sampling on a ``Schedule`` built with ``defaults=False``.

    Parameters
    ----------
    target : Target
        A cpu or cuda target; every candidate list and default derives from it.
    threads : int, optional
        Upper bound on threads of a CPU target; default ``target.cores`` (not used on cuda).

    Raises
    ------
    TuningError
        If ``target`` is neither a cpu nor a cuda Target, or ``threads < 1``.
    """

    def __init__(self, target: Target, threads: Optional[int] = None):
        if not isinstance(target, Target) or target.kind not in ("cpu", "cuda"):
            raise TuningError(f"default_space: target is {target!r}; expected a cpu or cuda Target")
        threads = target.cores if threads is None else threads
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
            raise TuningError(f"default_space: threads={threads!r}; expected an int >= 1")
        self.target = target
        self.threads = threads
        self._facts: Dict[int, tuple] = {}   # id(payload) -> (payload, its payload_facts)

    def __repr__(self) -> str:
        return f"RuleSpace({self.target.key()}, threads={self.threads})"

    def __call__(self, sch: Schedule) -> None:
        """Apply the rules to ``sch`` (a fresh Schedule of the task's module).

        Raises
        ------
        ScheduleError
            If a rule fails (names the rule and the op).
        """
        mod = sch.payload
        if id(mod) not in self._facts:   # the payload is never modified: facts are reusable
            self._facts = {id(mod): (mod, payload_facts(mod))}
        apply_default_schedule(sch, self.target, self.threads, facts=self._facts[id(mod)][1])


def default_space(target: Target, threads: Optional[int] = None) -> RuleSpace:
    """The rule-based design space for ``target`` (:class:`RuleSpace`).

    Raises
    ------
    TuningError
        If ``target`` is neither a cpu nor a cuda Target, or ``threads < 1``.
    """
    return RuleSpace(target, threads)


# ---------------------------------------------------------------------------- running a space
class _DecidedSchedule(Schedule):
    """A Schedule whose sampling primitives take the ``i``-th sampling call's decision from
    ``forced[i]`` (when present) and draw the others; an invalid forced decision is re-sampled
    when ``repair``."""

    def __init__(self, mod: Module, seed: Optional[int], forced: Sequence, repair: bool,
                 ops: Optional[dict] = None):
        super().__init__(mod, seed, defaults=False, ops=ops)
        self._forced = list(forced)
        self._repair = repair
        self._ordinal = 0

    def _decide(self, sample, *args):
        i = self._ordinal
        self._ordinal += 1
        want = self._forced[i] if i < len(self._forced) else None
        if want is None:
            return sample(*args, decision=None)
        try:
            return sample(*args, decision=want)
        except ScheduleError:
            if not self._repair:
                raise
            return sample(*args, decision=None)

    def sample_perfect_tile(self, loop, n, max_innermost_factor=16, decision=None, default=None):
        if decision is not None:
            return super().sample_perfect_tile(loop, n, max_innermost_factor, decision)
        return self._decide(super().sample_perfect_tile, loop, n, max_innermost_factor)

    def sample_categorical(self, candidates, probs, decision=None, default=None):
        if decision is not None:
            return super().sample_categorical(candidates, probs, decision)
        return self._decide(super().sample_categorical, candidates, probs)


def sampled_decisions(trace: Trace) -> List:
    """The decisions of ``trace``'s sampling instructions in instruction order (the key of a
    candidate within one space; the ``forced`` argument of :func:`generate`)."""
    return [trace.decisions[i] for i, inst in enumerate(trace.insts)
            if inst.kind in SAMPLING_KINDS and i in trace.decisions]


def generate(space: Space, mod: Module, seed: Optional[int] = None,
             forced: Optional[Sequence] = None, repair: bool = False,
             ops: Optional[dict] = None) -> Schedule:
    """Run ``space`` on a fresh Schedule of ``mod``.

    Parameters
    ----------
    space : callable
        ``space(sch) -> None``.
    mod : Module
        The task's module.
    seed : int, optional
        Seed of the sampling.
    forced : sequence, optional
        Decisions by sampling order (``forced[i]`` for the ``i``-th sampling call; None or a
        short list: sample the rest), as :func:`sampled_decisions` gives them.
    repair : bool
        Re-sample a forced decision that does not fit (instead of raising).
    ops : dict, optional
        :func:`~mlc_mlir.schedule.loop_nest.analyze_module` of ``mod`` (candidates of one task
        share it).

    Returns
    -------
    Schedule
        Its trace is a complete candidate (replays with ``Schedule.from_trace``).

    Raises
    ------
    ScheduleError
        If the space fails, or (without ``repair``) a forced decision does not fit.
    """
    sch = _DecidedSchedule(mod, seed, forced or [], repair, ops)
    space(sch)
    return sch


def default_point(space: Space, mod: Module, ops: Optional[dict] = None) -> Optional[Schedule]:
    """The default schedule as a point of ``space``: the space run on a ``Schedule`` that takes
    every rule's default decision (``defaults=True``: the schedule
    :func:`~mlc_mlir.schedule.default_rules.apply_default_schedule` builds), so the tuner can
    measure it first and seed its search with it.

    Parameters
    ----------
    space : callable
        A :class:`RuleSpace`; any other space has no known default point.
    mod : Module
        The task's module.
    ops : dict, optional
        Its analysis (:func:`generate`).

    Returns
    -------
    Schedule or None
        Its trace carries the default decisions (:func:`sampled_decisions`); None for a space
        that is not a :class:`RuleSpace`, or when a rule fails on ``mod`` (the
        ``ScheduleError`` is swallowed: the tuner then measures the empty trace only).
    """
    if not isinstance(space, RuleSpace):
        return None
    sch = Schedule(mod, 0, defaults=True, ops=ops)
    try:
        space(sch)
    except ScheduleError:
        return None
    return sch


def structural_sampling(trace: Trace) -> List[int]:
    """Indices of sampling instructions whose outputs no later instruction uses: their value
    steered the space's Python code (a structural choice), so replay with another decision
    would not change the program; change them with :func:`generate`."""
    used = set()
    for inst in trace.insts:
        stack = list(inst.inputs) + list(inst.attrs.values())
        while stack:
            v = stack.pop()
            if isinstance(v, list):
                stack.extend(v)
            elif isinstance(v, RV):
                used.add(v.name)
    return [i for i, inst in enumerate(trace.insts)
            if inst.kind in SAMPLING_KINDS and not any(o.name in used for o in inst.outputs)]
