"""Design spaces from schedule rules: for each block of a task's function, the stochastic rule of
its op kind (multi-level tiling for matmul/dense and batch_matmul, a tiled direct convolution,
tiled parallel + vector loops for elementwise and reduction blocks) samples the knobs that the
default rule of :mod:`mlc_mlir.schedule.default_rules` fixes, so the default schedule is one
point of the space.

A *space* is a callable ``space(sch) -> None`` applying primitives, ``sample_*`` included, to a
fresh ``Schedule(task.module, seed=s)``. Sampled tile sizes and thread counts feed ``split``
directly, so ``Schedule.from_trace(mod, trace, decisions=...)`` with other decisions gives the
other program, or a :class:`~mlc_mlir.errors.ScheduleError` when the decisions do not fit
together. A candidate list may be derived from an earlier sampled value (the unroll factors that
divide the sampled KC): the list is recorded in the trace, so replay reproduces it.

Some choices are *structural*: their sampled value feeds no primitive, it steers which
primitives run or enters one as a constant: packing B or not (``cache_read``), unrolling the
convolution window or not, the unroll factors (``unroll`` records its factor as a constant, not
as the sampled variable) and a row reduction's vector tile (``rfactor`` needs a constant split:
the emitter's ``tile_reduction_using_for`` takes no knob). :func:`structural_sampling` finds
them in a trace; a search changes them by running the space again with the decisions
(:func:`generate`), which is also right for every other decision.

Kinds without a stochastic rule (:data:`FIXED_KINDS`: pooling, mmt4d) get their default rule:
a fixed point of every space. Source: TVM MetaSchedule ``PostOrderApply`` + schedule rules
(``MultiLevelTiling``, ``ParallelizeVectorizeUnroll``, ``AddRFactor``), Goto & van de Geijn.
"""

from __future__ import annotations

from typing import Callable, Dict, List, Optional, Sequence

from ..errors import ScheduleError, TuningError
from ..ir.module import Module
from ..schedule.default_rules import RULES, apply_rules
from ..schedule.rules.common import RuleContext, vector_tile, worth_threads
from ..schedule.rules.elementwise import vectorizable
from ..schedule.rules.reduction import reduction_layout
from ..schedule.rules.payload import payload_facts
from ..schedule.schedule import Schedule
from ..schedule.state import BlockRV, ExprRV, LoopRV
from ..schedule.trace import RV, SAMPLING_KINDS, Trace
from ..target import Target
from .contraction_space import sample_batch_matmul, sample_conv2d, sample_matmul
from .gpu_space import GpuRuleSpace
from .space_sampling import categorical, thread_candidates, vector_candidates

SpaceRule = Callable[[Schedule, BlockRV, RuleContext], None]
Space = Callable[[Schedule], None]


def _parallel_outer(sch: Schedule, ctx: RuleContext, blk, tiles: Dict[int, LoopRV],
                    dims: Sequence[int]) -> None:
    """Split the first of ``dims`` whose (current) extent has a divisor in ``2..threads`` into
    ``[t, None]`` with ``t`` sampled from :func:`thread_candidates` (1 included: a one-thread
    loop), and make the outer loop parallel; nothing when the block is too small for threads at
    that depth (:func:`~mlc_mlir.schedule.rules.common.worth_threads`, the iterations of the
    dims before it as forks)."""
    forks = 1
    for d in dims:
        if not worth_threads(ctx, blk, forks):
            return
        e = sch.get(tiles[d]).extent
        forks *= e
        cands = thread_candidates(e, ctx.threads)
        if len(cands) > 1:
            t = categorical(sch, cands, max(cands))
            p0, p1 = sch.split(tiles[d], [t, None])
            sch.parallel(p0)
            tiles[d] = p1
            return


def sample_elementwise(sch: Schedule, block: BlockRV, ctx: RuleContext) -> None:
    """An all-parallel block: the innermost dim split ``[None, V]`` with ``V`` sampled from
    :func:`vector_candidates` and vectorized (when :func:`vectorizable`), the
    outermost dim with work split over sampled threads (:func:`_parallel_outer`).
    Default point: :func:`~mlc_mlir.schedule.rules.elementwise.schedule_elementwise`."""
    blk = sch.get(block)
    loops = sch.get_loops(block)
    last = len(blk.dims) - 1
    tiles = dict(enumerate(loops))
    cands = vector_candidates(ctx, blk, blk.dims[last].extent) if vectorizable(blk, ctx) else []
    inner = None
    if cands:
        v = categorical(sch, cands, vector_tile(ctx, blk, blk.dims[last].extent))
        tiles[last], inner = sch.split(loops[last], [None, v])
    _parallel_outer(sch, ctx, blk, tiles, range(len(blk.dims)))
    if inner is not None:
        sch.vectorize(inner)


def sample_reduction(sch: Schedule, block: BlockRV, ctx: RuleContext) -> None:
    """A block with reduction dims, as
    :func:`~mlc_mlir.schedule.rules.reduction.schedule_reduction` with sampled sizes: a row
    reduction's row split ``[None, V]`` and factorized (``rfactor``, V partial sums in a vector);
    a column reduction's kept innermost dim split ``[None, V]`` inside the reduction loops;
    ``V`` from :func:`vector_candidates` (below the row length for rows, or 1: a plain row
    loop); threads over the
    first kept dim with work (:func:`_parallel_outer`)."""
    lay = reduction_layout(sch, block, ctx)
    blk, dims, par, red, tiles = lay.blk, lay.blk.dims, lay.par, lay.red, lay.tiles
    vec_loop = None
    if lay.column:
        d = par[-1]
        cands = vector_candidates(ctx, blk, dims[d].extent)
        if cands:
            v = categorical(sch, cands, vector_tile(ctx, blk, dims[d].extent))
            o, vec_loop = sch.split(tiles[d], [None, v])
            sch.reorder(*([o] + [tiles[r] for r in red] + [vec_loop]))
            tiles[d] = o
    elif lay.row:
        r = red[0]
        cands = [c for c in vector_candidates(ctx, blk, dims[r].extent) if c < dims[r].extent]
        if cands:
            # structural: the emitter tiles an rfactor'ed reduction with static sizes only
            # (``tile_reduction_using_for`` takes no knob), so V enters the split as a constant;
            # V = 1: no rfactor (the default when the row is a single vector tile)
            dv = vector_tile(ctx, blk, dims[r].extent)
            v = int(categorical(sch, [1] + cands, dv if 1 < dv < dims[r].extent else 1))
            if v > 1:
                _, vec_loop = sch.split(tiles[r], [None, v])
                sch.rfactor(vec_loop)
    _parallel_outer(sch, ctx, blk, tiles, par)
    if vec_loop is not None:
        sch.vectorize(vec_loop)


#: Op kind -> stochastic rule; other kinds of :data:`~mlc_mlir.schedule.default_rules.RULES`
#: keep their default rule (fixed) inside the space.
SPACE_RULES: Dict[str, SpaceRule] = {
    "matmul": sample_matmul,
    "batch_matmul": sample_batch_matmul,
    "conv2d": sample_conv2d,
    "elementwise": sample_elementwise,
    "reduction": sample_reduction,
}

#: Kinds scheduled by their default rule inside a space, with the reason.
FIXED_KINDS: Dict[str, str] = {
    "pooling": "default rule (vectorized output row, unrolled window); no stochastic rule yet",
    "pooling_nhwc": "default rule (vectorized channels, unrolled window); no stochastic rule yet",
    "mmt4d": "default rule (Goto nest on the pre-packed panels of B); no stochastic rule yet",
}


class RuleSpace:
    """The design space of a task's function: every named linalg op by the rule of its op kind
    (TVM MetaSchedule ``PostOrderApply`` over schedule rules), anchors before their epilogues in
    the order of :data:`~mlc_mlir.schedule.default_rules.RULES`.

    Parameters
    ----------
    target : Target
        A CPU target; every candidate list and bound derives from it.
    threads : int, optional
        Upper bound on threads; default ``target.cores``.

    Raises
    ------
    TuningError
        If ``target`` is not a CPU Target or ``threads < 1``.
    """

    def __init__(self, target: Target, threads: Optional[int] = None):
        if not isinstance(target, Target) or target.kind != "cpu":
            raise TuningError(f"default_space: target is {target!r}; expected a cpu Target")
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
        ctx = RuleContext(self.target, self.threads, self._facts[id(mod)][1])
        ctx.claimed.update((b.func, b.name) for b in sch.model.blocks)
        apply_rules(sch, ctx, {kind: SPACE_RULES.get(kind, rule) for kind, rule in RULES.items()},
                    "space rule")


def default_space(target: Target, threads: Optional[int] = None):
    """The rule-based design space for ``target``: :class:`RuleSpace` on a CPU,
    :class:`~mlc_mlir.tune.gpu_space.GpuRuleSpace` (block/thread/k tile knobs of matmuls) on
    CUDA (``threads`` does not apply there).

    Raises
    ------
    TuningError
        If ``target`` is neither a cpu nor a cuda Target, or ``threads < 1``.
    """
    if isinstance(target, Target) and target.kind == "cuda":
        return GpuRuleSpace(target)
    return RuleSpace(target, threads)


# ---------------------------------------------------------------------------- running a space
class _DecidedSchedule(Schedule):
    """A Schedule whose sampling primitives take the ``i``-th sampling call's decision from
    ``forced[i]`` (when present); an invalid forced decision is re-sampled when ``repair``."""

    #: Whether the space's rules take their default decisions (see :func:`default_point`).
    at_default = False

    def __init__(self, mod: Module, seed: Optional[int], forced: Sequence, repair: bool):
        super().__init__(mod, seed)
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

    def sample_perfect_tile(self, loop, n, max_innermost_factor=16, decision=None):
        if decision is not None:
            return super().sample_perfect_tile(loop, n, max_innermost_factor, decision)
        return self._decide(super().sample_perfect_tile, loop, n, max_innermost_factor)

    def sample_categorical(self, candidates, probs, decision=None) -> ExprRV:
        if decision is not None:
            return super().sample_categorical(candidates, probs, decision)
        return self._decide(super().sample_categorical, candidates, probs)


def sampled_decisions(trace: Trace) -> List:
    """The decisions of ``trace``'s sampling instructions in instruction order (the key of a
    candidate within one space; the ``forced`` argument of :func:`generate`)."""
    return [trace.decisions[i] for i, inst in enumerate(trace.insts)
            if inst.kind in SAMPLING_KINDS and i in trace.decisions]


def generate(space: Space, mod: Module, seed: Optional[int] = None,
             forced: Optional[Sequence] = None, repair: bool = False) -> Schedule:
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

    Returns
    -------
    Schedule
        Its trace is a complete candidate (replays with ``Schedule.from_trace``).

    Raises
    ------
    ScheduleError
        If the space fails, or (without ``repair``) a forced decision does not fit.
    """
    sch = _DecidedSchedule(mod, seed, forced or [], repair)
    space(sch)
    return sch


def default_point(space: Space, mod: Module) -> Optional[Schedule]:
    """The default schedule as a point of ``space``: the space run with every rule's default
    decision (the value its default rule in :mod:`mlc_mlir.schedule.default_rules` derives
    from the target), so the tuner can measure it first and seed its search with it.

    Parameters
    ----------
    space : callable
        A :class:`RuleSpace`; any other space has no known default point.
    mod : Module
        The task's module.

    Returns
    -------
    Schedule or None
        Its trace carries the default decisions (:func:`sampled_decisions`); None for a space
        that is not a :class:`RuleSpace`, or when a rule's default is not among its candidates
        (the ``ScheduleError`` is swallowed: the tuner then measures the empty trace only).
    """
    if not isinstance(space, RuleSpace):
        return None
    sch = _DecidedSchedule(mod, 0, [], False)
    sch.at_default = True
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
