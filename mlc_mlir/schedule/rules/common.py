"""What every schedule rule shares: the rule context (target, threads, payload facts), the
target-derived choices of thread count and vector tile, and the decisions a rule samples.

A rule is written once, as a stochastic rule (TVM MetaSchedule's schedule rules): each choice is
a sampling instruction (:func:`categorical`, :func:`perfect_tile`) over candidates derived from
the target, with the rule's target-derived choice as its ``default``. On a ``Schedule`` built
with ``defaults=True`` (the compiler's default schedule) every decision is its default; on one
built with ``defaults=False`` (the tuner's candidates) decisions are drawn, and a recorded trace
replays either."""

from __future__ import annotations

import dataclasses
import math
from typing import Dict, List, Optional, Sequence, Set, Tuple

from ...errors import ScheduleError
from ...ir import dtypes
from ...target import Target
from ..factors import largest_divisor
from ..loop_nest import Block
from ..state import BlockRV, ExprRV, LoopRV
from ..vector_lowering import AVX2_TRANSPOSE_ATTR
from .payload import OpFacts

#: Vectors per vectorized tile of an elementwise or row op: a few independent vectors per
#: iteration hide the latency of loads and FMAs (TVM's dlight elementwise rule unrolls likewise).
VECTORS_PER_TILE = 4

#: Vectors per vectorized tile the rules sample from (the default: :func:`vector_tile`).
TILE_VECTORS = (1, 2, 3, 4)

#: Multiples of a cache-derived block (Goto's MC, NC, KC; a convolution's channel block) the
#: rules sample around it (:func:`near_divisors`).
BLOCK_SCALES = (0.25, 0.5, 1.0, 2.0)


@dataclasses.dataclass
class RuleContext:
    """Inputs of a schedule rule.

    Attributes
    ----------
    target : Target
        The CPU target the constants derive from.
    threads : int
        Upper bound on threads (``target.cores`` unless overridden).
    facts : dict of (func, name) to OpFacts
        Payload facts (:func:`~.payload.payload_facts`).
    claimed : set of (func, name)
        Blocks already scheduled or fused as epilogues (rules add the ones they take).
    """

    target: Target
    threads: int
    facts: Dict[Tuple[str, str], OpFacts]
    claimed: Set[Tuple[str, str]] = dataclasses.field(default_factory=set)

    def fact(self, blk: Block) -> Optional[OpFacts]:
        """Payload facts of ``blk`` (None for ops not at a function's top level)."""
        return self.facts.get((blk.func, blk.name))


def near_divisors(extent: int, center: int, scales: Sequence[float] = BLOCK_SCALES) -> List[int]:
    """Divisors of ``extent`` nearest below ``center * s`` for each scale ``s`` (sorted,
    unique; always includes the one for scale 1): the candidates of a cache block whose
    target-derived size is ``center``."""
    return sorted({largest_divisor(extent, max(1, int(center * s))) for s in scales})


def rule_block(sch, block, rule: str, dims: Sequence[str]) -> Tuple[Block, List[int]]:
    """``(block, extents)`` of the block a rule schedules, whose dims must be ``dims`` (names
    for the message, e.g. ``("i", "j", "k")``).

    Raises
    ------
    ScheduleError
        If the block has another number of dims (names the rule and the block).
    """
    blk = sch.get(block)
    if len(blk.dims) != len(dims):
        raise ScheduleError(f"rule {rule}: '{blk.name}' has {len(blk.dims)} dims; expected "
                            f"({', '.join(dims)})")
    return blk, [d.extent for d in blk.dims]


def element_bits(blk: Block) -> int:
    """Widest element of the block's operands, in bits (sets the vector lanes)."""
    return max((dtypes.bit_width(d) for d in blk.info.dtypes), default=32)


def vector_tile(ctx: RuleContext, blk: Block, extent: Optional[int]) -> int:
    """Elements of the vectorized tile along a dim of ``extent``: the largest multiple of the
    target's lanes (``target.vector_lanes`` of the widest element) up to ``VECTORS_PER_TILE``
    vectors, and at most one vector register per operand in all (a Winograd transform's 36
    inputs and 16 outputs get one vector: 4 spilled), that divides the extent; else the largest divisor up to that size (a partial
    vector); 1: do not vectorize. A dynamic extent (None) gets the whole size: its last tile is
    partial (a ``[None, V]`` split, vectorized with masks)."""
    lanes = ctx.target.vector_lanes(element_bits(blk))
    vectors = max(1, min(VECTORS_PER_TILE, ctx.target.vector_registers // max(1, len(blk.info.operand_dims))))
    if extent is None:
        return vectors * lanes
    whole = [v for v in range(lanes, vectors * lanes + 1, lanes) if extent % v == 0]
    return whole[-1] if whole else largest_divisor(extent, vectors * lanes)


def block_bytes(blk: Block) -> Optional[int]:
    """Bytes of the block's operands in all; None when a size is dynamic."""
    if any(d < 0 for s in blk.info.operand_shapes for d in s):
        return None
    return sum(math.prod(s) * dtypes.bit_width(d) // 8
               for s, d in zip(blk.info.operand_shapes, blk.info.dtypes))


def worth_threads(ctx: RuleContext, blk: Block, forks: int = 1) -> bool:
    """Whether the block moves enough data to pay for starting threads ``forks`` times (a
    parallel loop nested in loops of ``forks`` iterations in all): every thread gets at least
    an L1d's worth of the block's operands per fork (an OpenMP fork/join costs microseconds).
    ResNet-18's 7x7 im2col copy, parallelized over its channels inside 441 window iterations,
    took 0.81 ms with 2 threads against 0.24 ms with one (2-core AVX2 EPYC)."""
    nbytes = block_bytes(blk)
    if nbytes is None:
        return ctx.threads > 1   # a dynamic size: assumed large enough
    l1 = ctx.target.l1d_bytes or (32 << 10)
    return ctx.threads > 1 and nbytes >= ctx.threads * l1 * max(1, forks)


def categorical(sch, candidates: Sequence[int], default: int) -> ExprRV:
    """``sch.sample_categorical`` over ``candidates`` (uniform) whose default decision is the
    candidate ``default`` (the rule's target-derived choice).

    Raises
    ------
    ScheduleError
        If ``default`` is not a candidate (a rule whose default lies outside its own space).
    """
    candidates = [int(c) for c in candidates]
    if default not in candidates:
        raise ScheduleError(f"rule decision: default {default!r} is not among the candidates {candidates}")
    return sch.sample_categorical(candidates, [1.0 / len(candidates)] * len(candidates),
                                  default=candidates.index(default))


def perfect_tile(sch, loop: LoopRV, n: int, bound: int, default: Sequence[int]) -> List[ExprRV]:
    """``sch.sample_perfect_tile(loop, n, bound)`` whose default decision is ``default``."""
    return sch.sample_perfect_tile(loop, n, bound, default=[int(d) for d in default])


def block_size(sch, extent: int, center: int) -> ExprRV:
    """A sampled cache block of a dim of ``extent``: one of :func:`near_divisors` of the
    target-derived size ``center``; default the largest divisor of ``extent`` up to it."""
    center = max(1, center)
    return categorical(sch, near_divisors(extent, center), largest_divisor(extent, center))


def thread_candidates(extent: int, threads: int) -> List[int]:
    """Thread counts ``t <= threads`` that divide ``extent`` (always includes 1)."""
    return [t for t in range(1, threads + 1) if extent % t == 0]


def vector_candidates(ctx: RuleContext, blk: Block, extent: Optional[int]) -> List[int]:
    """Vector tile sizes along a dim of ``extent``: multiples of the target's lanes
    (:data:`TILE_VECTORS` vectors) that divide it, and :func:`vector_tile`'s choice; sizes
    above 1 only (empty: do not vectorize). A dynamic extent (None) gets :func:`vector_tile`'s
    choice only (its last tile partial)."""
    lanes = ctx.target.vector_lanes(element_bits(blk))
    cands = set() if extent is None else {v * lanes for v in TILE_VECTORS if extent % (v * lanes) == 0}
    cands.add(vector_tile(ctx, blk, extent))
    return sorted(c for c in cands if c > 1)


def uneven_thread_candidates(extent: int, threads: int) -> List[int]:
    """Thread counts ``t <= threads`` whose chunks of ``ceil(extent / t)`` iterations cover
    ``extent`` in exactly ``t`` chunks (every thread gets iterations; the last chunk may be
    shorter: 7 rows over 2 threads as 4 and 3); always includes 1."""
    return [t for t in range(1, min(threads, extent) + 1) if -(-extent // -(-extent // t)) == t]


def parallelize_first(sch, ctx: RuleContext, blk: Block, loops: Sequence, extents: Sequence[int],
                      hoist: bool = False, uneven: bool = False):
    """Split the first of ``loops`` (current extents ``extents``, outermost first) whose extent
    has a divisor in ``2..ctx.threads`` into ``[t, e / t]`` and make the outer loop parallel,
    ``t`` sampled from :func:`thread_candidates` (default: the largest; 1 runs the loop on one
    thread); a dynamic loop (extent None) is made parallel as it is (one ``scf.forall``
    iteration per element, spread over the threads); nothing when the block is too small for
    threads at that depth
    (:func:`worth_threads` with the iterations of the loops before it as forks). Shared by the
    rules (TVM TOPI's ``parallel`` of the outermost fused axis).

    With ``uneven``, where no loop the block is worth threads at has such a divisor (a 7 x 7
    x 3 x 3 im2col copy of ResNet's last stage: every extent odd but the innermost, where the
    threads would fork 441 times), the first of those loops (the outer loops of a vector tile
    aside) of at least 2 iterations is split into ``[t, ceil(e / t)]``, the last thread's chunk
    shorter (TVM's imperfect ``split``; 7 rows: 4 and 3), ``t`` sampled from
    :func:`uneven_thread_candidates` (default: the most; 1: serial).

    With ``hoist`` (loops that commute: an all-parallel block) a split below the first loop is
    moved above the loops before it, so the threads fork once per call rather than once per
    iteration of those loops (a Winograd output transform over 7 tile rows:
    ``for 7: forall 2`` becomes ``forall 2: for 7``); whether the block is worth threads is
    still judged with the forks of the nested split, so hoisting only removes forks.

    Returns
    -------
    (int, LoopRV) or None
        The position in ``loops`` that was split and its inner loop.
    """
    forks = 1
    first_odd = None
    for pos, (loop, e) in enumerate(zip(loops, extents)):
        if not worth_threads(ctx, blk, forks):
            break
        if e is None:
            sch.parallel(loop)
            return pos, loop
        cands = thread_candidates(e, ctx.threads)
        forks *= e
        if len(cands) > 1:
            return pos, _split_parallel(sch, loops, pos, categorical(sch, cands, cands[-1]), hoist)
        if first_odd is None and e > 1 and pos < len(loops) - 1:
            first_odd = pos
    if not uneven or first_odd is None:
        return None
    cands = uneven_thread_candidates(extents[first_odd], ctx.threads)
    return first_odd, _split_parallel(sch, loops, first_odd, categorical(sch, cands, cands[-1]), hoist)


def _split_parallel(sch, loops: Sequence, pos: int, threads, hoist: bool):
    """Split ``loops[pos]`` into ``[threads, rest]`` (a partial last chunk where ``threads``
    does not divide it), make the outer loop parallel (moved above ``loops[:pos]`` with
    ``hoist``); returns the inner loop."""
    outer, inner = sch.split(loops[pos], [threads, None])
    sch.parallel(outer)
    if hoist and pos > 0:
        sch.reorder(outer, *loops[:pos])
    return inner


def avx2_transposes(target: Target, bits: int) -> bool:
    """Whether ``target`` transposes 8 x 8 blocks of ``bits``-bit elements with MLIR's AVX2
    shuffle sequence (:data:`~mlc_mlir.schedule.vector_lowering.AVX2_TRANSPOSE_ATTR`): 32-bit
    elements on a target with AVX2."""
    return bits == 32 and "avx2" in target.features


def mark_avx2_transposes(sch, block: BlockRV, target: Target, bits: int) -> None:
    """Annotate ``block`` (one whose transposes are 8 x 8 blocks: a ``dense`` B packed
    transposed, a permuting copy's tiles) :data:`~mlc_mlir.schedule.vector_lowering.AVX2_TRANSPOSE_ATTR`
    where :func:`avx2_transposes` holds; other targets keep the generic lowering."""
    if avx2_transposes(target, bits):
        sch.annotate(block, AVX2_TRANSPOSE_ATTR, True)
