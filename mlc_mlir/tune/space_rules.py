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

Kinds without a stochastic rule (:data:`FIXED_KINDS`: pooling) get their default rule: a fixed
point of every space. Source: TVM MetaSchedule ``PostOrderApply`` + schedule rules
(``MultiLevelTiling``, ``ParallelizeVectorizeUnroll``, ``AddRFactor``), Goto & van de Geijn.
"""

from __future__ import annotations

from typing import Callable, Dict, List, Optional, Sequence

from ..errors import ScheduleError, TuningError
from ..ir.module import Module
from ..schedule.cpu_recipes import batch_matmul_padding, goto_padding, goto_params
from ..schedule.default_rules import RULES, apply_rules
from ..schedule.rules.common import (RuleContext, element_bits, largest_divisor, vector_tile,
                                     worth_threads)
from ..schedule.rules.elementwise import contiguous_last
from ..schedule.rules.epilogue import claim_epilogues
from ..schedule.rules.reduction import reduction_layout
from ..schedule.rules.payload import payload_facts
from ..schedule.schedule import Schedule
from ..schedule.state import BlockRV, ExprRV, LoopRV
from ..schedule.trace import RV, SAMPLING_KINDS, Trace
from ..target import Target
from .gpu_space import GpuRuleSpace

SpaceRule = Callable[[Schedule, BlockRV, RuleContext], None]
Space = Callable[[Schedule], None]

#: Vectors per vectorized tile the spaces choose from (the default rule takes up to
#: ``VECTORS_PER_TILE`` = 4; the space also offers 1..3).
TILE_VECTORS = (1, 2, 3, 4)

#: Unroll factors of the matmul's k loop (code-size choices, not machine constants).
UNROLL_FACTORS = (1, 2, 4, 8)

#: Multiples of the cache-derived blocks (Goto's MC, NC, KC) the matmul space offers.
BLOCK_SCALES = (0.25, 0.5, 1.0, 2.0)


def _categorical(sch: Schedule, candidates: Sequence, default) -> ExprRV:
    """``sch.sample_categorical`` over ``candidates`` (uniform); at the default point of the
    space (:func:`default_point`) the decision is ``default``.

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


def _tile(sch: Schedule, loop: LoopRV, n: int, bound: int, default: Sequence[int]) -> List[ExprRV]:
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


def register_tile_bounds(target: Target, bits: int) -> Dict[str, int]:
    """Bounds of the register tile and cache blocks derived from the target.

    * ``mr``: rows of the MR x NR tile, at most half the vector registers (each row holds at
      least one accumulator vector; the other half is left for B vectors and A broadcasts).
    * ``nr``: columns, at most 4 vectors (``4 * lanes``).
    * ``kc``: the K block, at most ``L1d / (lanes * bytes)`` (a one-vector-wide B micro-panel
      fits L1d).

    Returns
    -------
    dict
        ``{"mr": int, "nr": int, "kc": int}``, each >= 1.
    """
    lanes = target.vector_lanes(bits)
    nbytes = max(1, bits // 8)
    l1 = target.l1d_bytes or (32 << 10)
    return {"mr": max(1, target.vector_registers // 2), "nr": 4 * lanes,
            "kc": max(lanes, l1 // (lanes * nbytes))}


def _near(extent: int, center: int, scales: Sequence[float] = BLOCK_SCALES) -> List[int]:
    """Divisors of ``extent`` nearest below ``center * s`` for each scale ``s`` (sorted,
    unique; always includes the one for scale 1)."""
    return sorted({largest_divisor(extent, max(1, int(center * s))) for s in scales})


def matmul_register_tiles(target: Target, bits: int, mt: int, n: int) -> Dict[int, List[int]]:
    """Register tiles ``{NR: [MR, ...]}`` of a matmul with ``mt`` rows per thread and ``n``
    columns, derived from the target's vector lanes and registers.

    ``NR`` is 1 to 4 vectors (dividing ``n``); ``MR`` divides ``mt`` with the ``MR * NR / lanes``
    accumulators, the ``NR / lanes`` B vectors and one A broadcast within the vector registers
    (the register budget), and at least ``vector_registers / 4`` accumulators (enough
    independent FMAs to hide their latency). Goto's tile (:func:`goto_params`, shrunk to
    divisors) is always included, so tiny or odd extents still have one tile.
    """
    lanes = target.vector_lanes(bits)
    regs = target.vector_registers
    p = goto_params(target, max(mt, 1), n, 1, 1, bits)
    out: Dict[int, List[int]] = {}
    for v in TILE_VECTORS:
        nr = v * lanes
        if n % nr:
            continue
        mrs = [d for d in range(1, mt + 1) if mt % d == 0 and regs // 4 <= d * v <= regs - v - 1]
        if mrs:
            out[nr] = mrs
    dnr, dmr = largest_divisor(n, p.nr), largest_divisor(mt, p.mr)
    out[dnr] = sorted(set(out.get(dnr, [])) | {dmr})
    return dict(sorted(out.items()))


# ------------------------------------------------------------------------- rules by kind
def sample_matmul(sch: Schedule, block: BlockRV, ctx: RuleContext) -> None:
    """Multi-level tiling of ``linalg.matmul`` (matmul, dense) in the Goto structure, its knobs
    around :func:`~mlc_mlir.schedule.cpu_recipes.goto_params` for the target.

    Loop nest ``i0 (parallel) j0 k0 i1 j1 i2 k1 (unrolled) i3 j2 (vectorized MR x NR)``, as
    :func:`~mlc_mlir.schedule.cpu_recipes.schedule_matmul_goto`. Knobs, each a
    ``sample_categorical`` (a list may derive from an earlier decision; it is recorded):

    * ``t`` = threads (:func:`thread_candidates`: M divisible, at least Goto's MR rows per
      thread); with a single candidate the loop is not parallel. With N > M and ``t * NR``
      dividing N, whether they split N (the recipe's default) or M (structural).
    * ``NR`` then ``MR``: the register tile (:func:`matmul_register_tiles`).
    * ``MC / MR``, ``NC / NR`` and ``KC``: cache blocks at :data:`BLOCK_SCALES` times Goto's
      MC, NC and KC (cache-derived), shrunk to divisors.
    * pack B (``cache_read`` at ``k0``) or not (structural).
    * the unroll factor of ``k1``: :data:`UNROLL_FACTORS` dividing KC (structural).

    The default schedule (:func:`~mlc_mlir.schedule.rules.matmul.schedule_matmul`) is the point
    of Goto's values (:func:`default_point`). The elementwise epilogue chain (bias, relu) is
    computed at ``j0``. Extents that are not multiples of the register tile, threads or a good
    KC are padded first (``pad_einsum`` with
    :func:`~mlc_mlir.schedule.cpu_recipes.goto_padding`, as the default rule; the epilogue then
    keeps its own rule). The init is decomposed as the recipe does. Shapes: A (M, K) (or transposed), B (K, N) or (N, K), C (M, N).

    Raises
    ------
    ScheduleError
        If the block does not have 3 dims.
    """
    blk = sch.get(block)
    if len(blk.dims) != 3:
        raise ScheduleError(f"space rule matmul: '{blk.name}' has {len(blk.dims)} dims; expected (i, j, k)")
    m, n, k = (d.extent for d in blk.dims)
    bits = element_bits(blk)
    padding = goto_padding(ctx.target, m, n, k, ctx.threads, bits)
    if padding != (1, 1, 1):   # as the default rule: odd extents padded, epilogue left apart
        sch.pad_einsum(block, list(padding))
        m, n, k = (d.extent for d in blk.dims)
    p = goto_params(ctx.target, m, n, k, ctx.threads, bits)
    i, j, kk = sch.get_loops(block)
    tcands = thread_candidates(m, ctx.threads, p.mr)
    t = int(_categorical(sch, tcands, p.threads)) if len(tcands) > 1 else 1
    over_n = t > 1 and n > m and n % (t * largest_divisor(n, p.nr)) == 0 \
        and int(_categorical(sch, [1, 0], 1))   # threads over N (structural)
    mt, nt = (m, n // t) if over_n else (m // t, n)
    tiles = matmul_register_tiles(ctx.target, bits, mt, nt)
    nr = _categorical(sch, list(tiles), largest_divisor(nt, p.nr))
    mr = _categorical(sch, tiles[int(nr)], largest_divisor(mt, p.mr))
    rows = mt // int(mr)
    mcb = _categorical(sch, _near(rows, max(p.mc // int(mr), 1)), largest_divisor(rows, max(p.mc // int(mr), 1)))
    cols = nt // int(nr)
    ncb = _categorical(sch, _near(cols, max(p.nc // int(nr), 1)), largest_divisor(cols, max(p.nc // int(nr), 1)))
    kc = _categorical(sch, _near(k, p.kc), largest_divisor(k, p.kc))
    pack = _categorical(sch, [0, 1], int(mt >= 2 * int(mr)))
    unroll = int(_categorical(sch, [u for u in UNROLL_FACTORS if int(kc) % u == 0],
                              largest_divisor(int(kc), p.unroll_k)))
    if over_n:
        outer, j = sch.split(j, [t, None])
    else:
        outer, i = sch.split(i, [t, None])
    i1, i2, i3 = sch.split(i, [None, mcb, mr])
    j0, j1, j2 = sch.split(j, [None, ncb, nr])
    k0, k1 = sch.split(kk, [None, kc])
    sch.reorder(outer, j0, k0, i1, j1, i2, k1, i3, j2)
    if len(tcands) > 1:
        sch.parallel(outer)
    epi = claim_epilogues(sch, blk, ctx) if padding == (1, 1, 1) else []
    for e in epi:
        sch.reverse_compute_at(e, j0)
    info = blk.info
    if info.init and epi:
        sch.decompose_reduction(block, k0)
    elif info.init and t > 1 and (padding == (1, 1, 1) or set(info.producers) <= {info.init}):
        sch.decompose_reduction(block, j0)
    if int(pack):   # structural knob: see the module docstring
        packed = sch.cache_read(block, 1, "local")
        sch.compute_at(packed, k0)
    if unroll > 1:
        sch.unroll(k1, unroll)
    sch.vectorize(i3)


def sample_batch_matmul(sch: Schedule, block: BlockRV, ctx: RuleContext) -> None:
    """``linalg.batch_matmul`` ``(b, i, j, k)`` as
    :func:`~mlc_mlir.schedule.rules.matmul.schedule_batch_matmul` with sampled sizes: loops
    ``b0 i0 b1 i1 j0 k i2 (vectorized) j1``; threads over the batches (or over M when the
    batches do not divide over them), sampled from :func:`thread_candidates`; ``[M/T/MR, MR]``
    and ``[N/NR, NR]`` by ``sample_perfect_tile`` bounded by :func:`register_tile_bounds`; the
    k loop unrolled by a sampled factor of :data:`UNROLL_FACTORS` (structural: ``unroll``
    records its factor as a constant), epilogues at ``j0``. Odd extents are padded first
    (:func:`~mlc_mlir.schedule.cpu_recipes.batch_matmul_padding`, as the default rule; the
    epilogue then keeps its own rule).

    Raises
    ------
    ScheduleError
        If the block does not have 4 dims.
    """
    blk = sch.get(block)
    if len(blk.dims) != 4:
        raise ScheduleError(f"space rule batch_matmul: '{blk.name}' has {len(blk.dims)} dims; "
                            "expected (b, i, j, k)")
    nb, m, n, k = (d.extent for d in blk.dims)
    padding = batch_matmul_padding(ctx.target, nb, m, n, k, ctx.threads, element_bits(blk))
    if padding != [1, 1, 1, 1]:   # as the default rule: odd extents padded, epilogue left apart
        sch.pad_einsum(block, padding)
        nb, m, n, k = (d.extent for d in blk.dims)
    bound = register_tile_bounds(ctx.target, element_bits(blk))
    b, i, j, kk = sch.get_loops(block)
    on_batch = largest_divisor(nb, ctx.threads) > 1
    on_rows = not on_batch and largest_divisor(m, ctx.threads) > 1
    tcands = thread_candidates(nb if on_batch else m, ctx.threads)
    p = goto_params(ctx.target, m, n, k, ctx.threads, element_bits(blk))
    t = _categorical(sch, tcands, max(tcands)) if on_batch or on_rows else 1
    b0, b1 = sch.split(b, [t if on_batch else 1, None])
    i0, irest = sch.split(i, [t if on_rows else 1, None])
    mt = m // int(t) if on_rows else m
    mr = largest_divisor(mt, p.mr)
    i1, i2 = sch.split(irest, _tile(sch, irest, 2, bound["mr"], [mt // mr, mr]))
    nr = largest_divisor(n, p.nr)
    j0, j1 = sch.split(j, _tile(sch, j, 2, bound["nr"], [n // nr, nr]))
    ucands = [u for u in UNROLL_FACTORS if k % u == 0]
    unroll = int(_categorical(sch, ucands, largest_divisor(k, p.unroll_k)))
    sch.reorder(b0, i0, b1, i1, j0, kk, i2, j1)
    if on_batch or on_rows:
        sch.parallel(b0 if on_batch else i0)
    epi = claim_epilogues(sch, blk, ctx) if padding == [1, 1, 1, 1] else []
    for e in epi:
        sch.reverse_compute_at(e, j0)
    if unroll > 1:
        sch.unroll(kk, unroll)
    sch.vectorize(i2)


def sample_conv2d(sch: Schedule, block: BlockRV, ctx: RuleContext) -> None:
    """``linalg.conv_2d_nchw_fchw`` as :func:`~mlc_mlir.schedule.rules.conv.schedule_conv2d`
    with sampled knobs: loops ``n f0 (parallel) f1 oh ow0 c kh kw ow1 (vectorized)``; output
    channels over sampled threads (:func:`thread_candidates`, when the block is worth threads);
    the output row tile ``[OW/WR, WR]`` by ``sample_perfect_tile`` with ``WR`` at most half the
    vector registers' lanes; the window unrolled or not (``sample_categorical([0, 1])``,
    structural), epilogues at ``ow0``. Shapes: x (N, C, H, W) (padded), w (F, C, KH, KW)."""
    blk = sch.get(block)
    n, f, oh, ow, c, kh, kw = sch.get_loops(block)
    ext = [d.extent for d in blk.dims]
    lanes = ctx.target.vector_lanes(element_bits(blk))
    tcands = thread_candidates(ext[1], ctx.threads) if worth_threads(ctx, blk) else [1]
    t = _categorical(sch, tcands, max(tcands)) if len(tcands) > 1 else 1
    f0, f1 = sch.split(f, [t, None])
    wr_max = lanes * max(1, ctx.target.vector_registers // 2)
    wr = largest_divisor(ext[3], wr_max)
    ow0, ow1 = sch.split(ow, _tile(sch, ow, 2, wr_max, [ext[3] // wr, wr]))
    unroll = _categorical(sch, [0, 1], int(ext[5] * ext[6] <= ctx.target.vector_registers))
    sch.reorder(n, f0, f1, oh, ow0, c, kh, kw, ow1)
    if len(tcands) > 1:
        sch.parallel(f0)
    epi = claim_epilogues(sch, blk, ctx)
    for e in epi:
        sch.reverse_compute_at(e, ow0)
    if int(unroll):   # structural knob
        sch.unroll(kw)
        sch.unroll(kh)
    sch.vectorize(ow1)


def _parallel_outer(sch: Schedule, ctx: RuleContext, blk, tiles: Dict[int, LoopRV],
                    dims: Sequence[int]) -> None:
    """Split the first of ``dims`` whose (current) extent has a divisor in ``2..threads`` into
    ``[t, None]`` with ``t`` sampled from :func:`thread_candidates` (1 included: a one-thread
    loop), and make the outer loop parallel; nothing when the block is too small for threads
    (:func:`~mlc_mlir.schedule.rules.common.worth_threads`)."""
    if not worth_threads(ctx, blk):
        return
    for d in dims:
        e = sch.get(tiles[d]).extent
        cands = thread_candidates(e, ctx.threads)
        if len(cands) > 1:
            t = _categorical(sch, cands, max(cands))
            p0, p1 = sch.split(tiles[d], [t, None])
            sch.parallel(p0)
            tiles[d] = p1
            return


def sample_elementwise(sch: Schedule, block: BlockRV, ctx: RuleContext) -> None:
    """An all-parallel block: the innermost dim split ``[None, V]`` with ``V`` sampled from
    :func:`vector_candidates` and vectorized (when its operands are contiguous along it), the
    outermost dim with work split over sampled threads (:func:`_parallel_outer`).
    Default point: :func:`~mlc_mlir.schedule.rules.elementwise.schedule_elementwise`."""
    blk = sch.get(block)
    loops = sch.get_loops(block)
    last = len(blk.dims) - 1
    tiles = dict(enumerate(loops))
    cands = vector_candidates(ctx, blk, blk.dims[last].extent) if contiguous_last(blk) else []
    inner = None
    if cands:
        v = _categorical(sch, cands, vector_tile(ctx, blk, blk.dims[last].extent))
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
            v = _categorical(sch, cands, vector_tile(ctx, blk, dims[d].extent))
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
            v = int(_categorical(sch, [1] + cands, dv if 1 < dv < dims[r].extent else 1))
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
