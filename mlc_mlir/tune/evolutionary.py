"""Evolutionary search over the decisions of a space, guided by a cost model.

Each :meth:`EvolutionarySearch.propose`:

1. starts a population from the best measured candidates (elitism), the default point of the
   space (:func:`~.space_rules.default_point`: the compiler's default schedule) and fresh
   samples;
2. evolves it for a few generations: children by *mutation* (one sampling decision drawn
   again: another perfect tile, another categorical candidate) or *crossover* (each decision
   from one of two parents of the same space); the cost model scores every candidate and the
   best survive; a generation that brings no new child ends the evolution, and sampling stops
   after a run of samples that bring nothing new (a small space is soon exhausted);
3. returns the best-scored candidates never measured (decision sets are compared, so nothing is
   measured twice), each validated by replay (``Schedule.from_trace`` of its JSON), plus a
   fraction of fresh random samples (epsilon-greedy exploration).

:meth:`EvolutionarySearch.notify` retrains the cost model on the new measurements. Children are
made by running the space again with the decisions (:func:`~.space_rules.generate`), so a
structural decision (one that steers which primitives run) changes the program as well as a
tile size does. Source: TVM MetaSchedule ``EvolutionarySearch`` (population, elites, mutators,
epsilon-greedy, cost-model-guided selection), Ansor's evolutionary search (Zheng et al., OSDI
2020).
"""

from __future__ import annotations

import itertools
import json
import random
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

from ..errors import ScheduleError, TuningError
from ..ir.module import Module
from ..schedule.loop_nest import analyze_module
from ..schedule.schedule import Schedule
from ..schedule.trace import SAMPLING_KINDS, Trace
from .cost_model import CostModel, XGBCostModel, random_scores
from .features import candidate_features
from .search import SearchStrategy, Space, TuneContext
from .space_rules import default_point, generate, sampled_decisions

#: A candidate: its key (decisions), trace and features.
Candidate = Tuple[str, Trace, np.ndarray]


def decision_key(trace: Trace) -> str:
    """The identity of a candidate within one space: its sampled decisions in order (the space
    is deterministic given them)."""
    return json.dumps(sampled_decisions(trace), separators=(",", ":"))


def _prime_factor(x: int, rng: random.Random) -> int:
    """A random prime factor of ``x`` (> 1)."""
    primes, d = [], 2
    while d * d <= x:
        while x % d == 0:
            primes.append(d)
            x //= d
        d += 1
    if x > 1:
        primes.append(x)
    return rng.choice(primes)


def mutated_decision(kind: str, attrs: dict, decision, rng: random.Random):
    """Another decision for one sampling instruction, near ``decision``.

    * ``sample_perfect_tile``: a prime factor moves from one tile position to another (the
      product is kept; TVM ``MutateTileSize``); None (draw afresh) if every factor is 1.
    * ``sample_categorical``: another candidate index, uniformly (TVM ``MutateUnroll``,
      ``MutateParallel``); None if there is a single candidate.
    """
    if kind == "sample_categorical":
        others = [i for i in range(len(attrs["candidates"])) if i != decision]
        return rng.choice(others) if others else None
    movable = [i for i, f in enumerate(decision) if f > 1]
    if not movable or len(decision) < 2:
        return None
    src = rng.choice(movable)
    dst = rng.choice([i for i in range(len(decision)) if i != src])
    p = _prime_factor(decision[src], rng)
    out = list(decision)
    out[src] //= p
    out[dst] *= p
    return out


def mutate(space: Space, mod: Module, parent: Trace, rng: random.Random,
           attempts: int = 8, ops: Optional[dict] = None) -> Optional[Schedule]:
    """A child of ``parent`` with one sampling decision changed (:func:`mutated_decision`): the
    space is run with the parent's decisions except that one; later decisions that no longer
    fit (a candidate list that depends on it) are drawn afresh.

    Parameters
    ----------
    space : callable
    mod : Module
    parent : Trace
        A trace of ``space`` on ``mod``.
    rng : random.Random
    attempts : int
        Tries before giving up (a moved factor may break the innermost bound).
    ops : dict, optional
        The analysis of ``mod`` (:func:`~.space_rules.generate`).

    Returns
    -------
    Schedule or None
        The child (its decisions differ from the parent's), or None if no try gave one.
    """
    order = [i for i in sorted(parent.decisions) if parent.insts[i].kind in SAMPLING_KINDS]
    if not order:
        return None
    dec = [parent.decisions[i] for i in order]
    key = decision_key(parent)
    for _ in range(attempts):
        i = rng.randrange(len(order))
        inst = parent.insts[order[i]]
        forced = list(dec)
        forced[i] = mutated_decision(inst.kind, inst.attrs, dec[i], rng)
        try:
            child = generate(space, mod, rng.randrange(2**31), forced, repair=True, ops=ops)
        except ScheduleError:
            continue
        got = sampled_decisions(child.trace)
        applied = forced[i] is None or (i < len(got) and got[i] == forced[i])
        if applied and decision_key(child.trace) != key:
            return child
    return None


def crossover(space: Space, mod: Module, a: Trace, b: Trace, rng: random.Random,
              ops: Optional[dict] = None) -> Optional[Schedule]:
    """A child taking each decision from ``a`` or ``b`` (uniform crossover of two parents of the
    same space; TVM's evolutionary search mutates only, Ansor crosses over too); ``ops``: the
    analysis of ``mod`` (:func:`~.space_rules.generate`). Decisions pair by sampling order; where
    one parent took more decisions (a decision that opens others, such as packing A, was on in
    it), the child's decisions past the shorter parent's come from one parent picked at random.

    Returns
    -------
    Schedule or None
        None when a parent has no decisions, or the mix does not fit together (the space raises
        ``ScheduleError``).
    """
    da, db = sampled_decisions(a), sampled_decisions(b)
    if not da or not db:
        return None
    forced = [x if rng.random() < 0.5 else y for x, y in zip(da, db)]
    forced += (da if rng.random() < 0.5 else db)[len(forced):]
    try:
        return generate(space, mod, rng.randrange(2**31), forced, repair=False, ops=ops)
    except ScheduleError:
        return None


class _TaskState:
    """What the strategy keeps per task: its cost model, the analysis of its module (shared by
    every schedule of it) and the features of seen candidates."""

    def __init__(self, model: CostModel, ops: dict):
        self.model = model
        self.ops = ops
        self.point: Optional[Candidate] = None   # the default point, once made
        self.replayed: Dict[str, Candidate] = {}   # record trace -> candidate (() if it fails)
        self.features: Dict[str, np.ndarray] = {}
        self.fed = 0             # history records the model has learned from
        self.parsed: Dict[str, Trace] = {}


class EvolutionarySearch(SearchStrategy):
    """Cost-model-guided evolutionary search (TVM MetaSchedule ``EvolutionarySearch``).

    Parameters
    ----------
    cost_model : callable, optional
        ``cost_model() -> CostModel``, one model per task; default :class:`XGBCostModel`
        (TuningError at the first proposal if xgboost is missing).
    population_size : int
        Candidates per generation.
    generations : int
        Rounds of mutation/crossover per proposal.
    elite_ratio : float
        Fraction of the initial population taken from the best measured candidates.
    crossover_prob : float
        Probability that a child comes from crossover (else mutation).
    eps_greedy : float
        Fraction of each batch that is fresh random samples.
    validate : bool
        Replay every proposed candidate with ``Schedule.from_trace`` (through its JSON) before
        returning it; one that does not replay is skipped.
    max_fail : int
        Consecutive fresh samples, or children of one generation, that bring no new candidate
        (a duplicate, or a sample the space rejects) after which that loop stops: a small space
        is exhausted after a few samples, not after ``8 * population_size`` of them, and a
        generation with no new child ends the evolution (TVM ``EvolutionarySearch``'s
        ``max_fail_count``).

    Raises
    ------
    TuningError
        For out-of-range parameters.
    """

    def __init__(self, cost_model: Optional[Callable[[], CostModel]] = None,
                 population_size: int = 64, generations: int = 3, elite_ratio: float = 0.25,
                 crossover_prob: float = 0.2, eps_greedy: float = 0.1, validate: bool = True,
                 max_fail: int = 16):
        if population_size < 2 or generations < 0 or not 0 <= elite_ratio <= 1 or \
                not 0 <= crossover_prob <= 1 or not 0 <= eps_greedy <= 1 or \
                type(max_fail) is not int or max_fail < 1:
            raise TuningError(f"EvolutionarySearch: population_size={population_size} (>= 2), "
                              f"generations={generations} (>= 0), elite_ratio={elite_ratio}, "
                              f"crossover_prob={crossover_prob}, eps_greedy={eps_greedy} (in [0, 1]), "
                              f"max_fail={max_fail!r} (an int >= 1)")
        self.cost_model = cost_model or XGBCostModel
        self.population_size = population_size
        self.generations = generations
        self.elite_ratio = elite_ratio
        self.crossover_prob = crossover_prob
        self.eps_greedy = eps_greedy
        self.validate = validate
        self.max_fail = max_fail
        self._states: Dict[Tuple[str, str], _TaskState] = {}

    # ------------------------------------------------------------------ per-task state
    def _state(self, ctx: TuneContext) -> _TaskState:
        key = (ctx.task.workload, ctx.target.key())
        if key not in self._states:
            self._states[key] = _TaskState(self.cost_model(), analyze_module(ctx.task.module))
        return self._states[key]

    def _parse(self, st: _TaskState, text: str) -> Trace:
        if text not in st.parsed:
            st.parsed[text] = Trace.from_json(text)
        return st.parsed[text]

    def _candidate(self, ctx: TuneContext, st: _TaskState, sch: Schedule) -> Candidate:
        """Key, trace and features of a generated schedule."""
        trace = sch.trace
        key = decision_key(trace)
        if key not in st.features:
            st.features[key] = candidate_features(sch, ctx.target, trace)
        return key, trace, st.features[key]

    def _replays(self, ctx: TuneContext, trace: Trace) -> bool:
        """Whether ``trace`` (through its JSON) replays on the task's module."""
        if not self.validate:
            return True
        try:
            Schedule.from_trace(ctx.task.module, Trace.from_json(trace.as_json()),
                                ops=self._state(ctx).ops)
        except ScheduleError:
            return False
        return True

    def _fresh(self, ctx: TuneContext, st: _TaskState, n: int, avoid: set) -> List[Candidate]:
        out: List[Candidate] = []
        failures: List[str] = []
        fails = 0
        for _ in range(max(1, n) * 8):
            if len(out) >= n or fails >= self.max_fail:
                break
            fails += 1
            try:
                sch = generate(ctx.space, ctx.task.module, ctx.rng.randrange(2**31), ops=st.ops)
            except ScheduleError as e:
                failures.append(str(e))
                continue
            c = self._candidate(ctx, st, sch)
            if c[0] not in avoid:
                avoid.add(c[0])
                out.append(c)
                fails = 0
        if not out and failures and not ctx.history:
            raise TuningError(f"EvolutionarySearch: no sample of the space applies to task "
                              f"'{ctx.task.name}'; the space failed with: {failures[0]}")
        return out

    def _scores(self, ctx: TuneContext, st: _TaskState, cands: List[Candidate]) -> np.ndarray:
        if not cands:
            return np.zeros(0)
        if not st.model.trained:
            return random_scores(ctx.rng, len(cands))
        return np.asarray(st.model.predict(np.stack([c[2] for c in cands])), dtype=np.float64)

    # ------------------------------------------------------------------ the strategy
    def propose(self, ctx: TuneContext, n: int) -> List[Trace]:
        st = self._state(ctx)
        mod = ctx.task.module
        measured = {decision_key(self._parse(st, r.trace)) for r in ctx.history}
        measured_json = ctx.measured()
        ok = sorted((r for r in ctx.history if r.ok), key=lambda r: r.latency_ms)
        pop: List[Candidate] = []
        seen: set = set()
        elites = [r for r in ok if self._parse(st, r.trace).decisions]   # not the empty trace
        for r in elites[:int(self.population_size * self.elite_ratio)]:
            if r.trace not in st.replayed:
                try:
                    sch = Schedule.from_trace(mod, self._parse(st, r.trace), ops=st.ops)
                    st.replayed[r.trace] = self._candidate(ctx, st, sch)
                except ScheduleError:
                    st.replayed[r.trace] = ()
            c = st.replayed[r.trace]
            if c and c[0] not in seen:
                seen.add(c[0])
                pop.append(c)
        if st.point is None:   # the default schedule seeds every population
            point = default_point(ctx.space, mod, st.ops)
            st.point = () if point is None else self._candidate(ctx, st, point)
        if st.point:
            c = st.point
            if c[0] not in seen:
                seen.add(c[0])
                pop.append(c)
        pop += self._fresh(ctx, st, self.population_size - len(pop), seen)
        pool: Dict[str, Candidate] = {c[0]: c for c in pop}
        for _ in range(self.generations):
            scores = self._scores(ctx, st, pop)
            cum = list(itertools.accumulate(scores - scores.min() + 1e-3))
            children: List[Candidate] = []
            fails = 0
            for _ in range(self.population_size):
                if fails >= self.max_fail:
                    break
                fails += 1
                if len(pop) >= 2 and ctx.rng.random() < self.crossover_prob:
                    a, b = ctx.rng.choices(pop, cum_weights=cum, k=2)
                    sch = crossover(ctx.space, mod, a[1], b[1], ctx.rng, st.ops)
                else:
                    sch = mutate(ctx.space, mod, ctx.rng.choices(pop, cum_weights=cum)[0][1],
                                 ctx.rng, ops=st.ops)
                c = None if sch is None else self._candidate(ctx, st, sch)
                if c is not None and c[0] not in pool:
                    pool[c[0]] = c
                    children.append(c)
                    fails = 0
            if not children:
                break
            merged = pop + children
            order = np.argsort(-self._scores(ctx, st, merged), kind="stable")
            pop = [merged[i] for i in order[:self.population_size]]
        unmeasured = [c for c in pool.values() if c[0] not in measured]
        n_random = int(round(n * self.eps_greedy))
        scores = self._scores(ctx, st, unmeasured)
        picks: List[Candidate] = []
        for i in np.argsort(-scores, kind="stable"):
            if len(picks) >= n - n_random:
                break
            c = unmeasured[i]
            if c[1].as_json() not in measured_json and self._replays(ctx, c[1]):
                picks.append(c)
        avoid = measured | {c[0] for c in picks}
        while len(picks) < n:
            extra = [c for c in self._fresh(ctx, st, n - len(picks), avoid)
                     if c[1].as_json() not in measured_json and self._replays(ctx, c[1])]
            if not extra:
                break
            picks += extra
        return [c[1] for c in picks[:n]]

    def notify(self, ctx: TuneContext, records) -> None:
        """Retrain the task's cost model on the records not learned yet (all of
        ``ctx.history`` past the ones already seen). Failed candidates count as throughput 0;
        traces without decisions (the tuner's baseline, the compiler's default schedule for an
        empty trace) are left out: their features would not describe the program that ran."""
        st = self._state(ctx)
        new = ctx.history[st.fed:]
        st.fed = len(ctx.history)
        rows, lats = [], []
        for r in new:
            trace = self._parse(st, r.trace)
            if not trace.decisions:
                continue
            key = decision_key(trace)
            if key not in st.features:
                try:
                    sch = Schedule.from_trace(ctx.task.module, trace, ops=st.ops)
                except ScheduleError:
                    continue
                st.features[key] = candidate_features(sch, ctx.target, trace)
            rows.append(st.features[key])
            lats.append(r.latency_ms)
        if rows:
            st.model.update(np.stack(rows), lats)
