"""The decisions of the fused attention kernel (:mod:`.attention`): :class:`AttentionKnobs`,
their target-derived defaults (:func:`default_knobs`), the space the tuner measures
(:func:`knob_candidates`, ``mlc_mlir.tune.attention_task``) and their record in a trace as
``sample_categorical`` instructions (:func:`sample_knobs`, :func:`decided_knobs`).
Source: TVM MetaSchedule (a kernel's decisions as sampling instructions of its trace);
FlashAttention's block sizes tuned per head dim and GPU (Dao et al., 2022).
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import List, Optional, Tuple

from ...errors import ScheduleError
from ...target import Target
from ..trace import Trace
from .common import categorical
from .softmax_exp import EXP_DEGREES


#: Values the tuner samples for each knob of :class:`AttentionKnobs` (the register budget and
#: the head dim filter them, :func:`knob_candidates`).
KEY_BLOCKS = (4, 8, 16, 32)
ROW_VECTORS = (1, 2, 3, 4)
PREFETCH_BLOCKS = (0, 1, 2, 4)


@dataclasses.dataclass(frozen=True)
class AttentionKnobs:
    """The decisions of the fused attention kernel (:func:`emit_flash_attention`).

    Attributes
    ----------
    key_block : int
        Keys per block of the online softmax (``n``): scores of a row block are ``n`` columns,
        a single row reduces ``n`` dot products at once.
    row_vectors : int
        Query rows per step of the row-block loop, in vector registers (``R``: ``R * lanes``
        rows; each broadcast key or value element feeds ``R`` FMAs).
    prefetch : int
        Key blocks the single-row (decode) loop prefetches ahead (0: none).
    threads : int
        1: the loops over (batch, head, row block) run serially in the calling thread; more:
        they are one ``scf.forall`` spread over the compile's OpenMP threads.
    exp_degree : int
        The softmax's exponentials (:func:`~.softmax_exp.shifted_exp`): 0 ``math.exp``, 6 the
        ``exp2`` form for non-positive arguments with a polynomial of that degree.
    transpose : int
        1: a row block's queries and outputs move between rows and the ``(D, R * L)`` buffers
        as ``L x L`` blocks transposed by register shuffles (``D % L == 0``); 0: element by
        element (a strided column per ``d``).
    """

    key_block: int
    row_vectors: int
    prefetch: int
    threads: int
    exp_degree: int = 0
    transpose: int = 0

    def as_tuple(self) -> Tuple[int, ...]:
        """The decisions in their order (the fields')."""
        return dataclasses.astuple(self)


def _fits(target: Target, key_block: int, row_vectors: int) -> bool:
    """Whether the ``key_block x row_vectors`` score vectors, the ``row_vectors`` query vectors
    and one broadcast fit the target's vector registers."""
    return key_block * row_vectors + row_vectors + 1 <= target.vector_registers


def default_knobs(target: Target, head_dim: int) -> AttentionKnobs:
    """The target-derived decisions: one vector register of float32 keys per block and one
    of query rows per step (``target.vector_lanes(32)``: a row's block of scores, or a key's
    column of a row block's scores, is one register); the decode loop prefetches as many blocks
    ahead as a quarter of the L1d holds (K and V rows of ``key_block`` keys of ``head_dim``
    floats each; at least one, so the reads of a block do not wait on DRAM where the hardware
    prefetchers stop at a page boundary, at most the largest of :data:`PREFETCH_BLOCKS`); the
    row loops spread over ``target.cores`` threads; a row block's queries and outputs move by
    register transposes where the lanes divide ``head_dim`` (a strided column per ``d``
    otherwise); the exponentials are ``math.exp`` (the ``exp2`` form's saving in a row block is
    a loss on the single-row decode loop, so it stays the tuner's decision)."""
    lanes = target.vector_lanes(32)
    block_bytes = 2 * lanes * head_dim * 4
    ahead = max(1, (target.l1d_bytes or (32 << 10)) // 4 // block_bytes)
    prefetch = max(p for p in PREFETCH_BLOCKS if p <= ahead)
    return AttentionKnobs(lanes, 1, prefetch, target.cores, 0, int(head_dim % lanes == 0))


def _spaces(target: Target, head_dim: int) -> Tuple[Tuple[int, ...], ...]:
    """The values the tuner samples for each knob, in :class:`AttentionKnobs`' order, each with
    the default's value; the register transposes only where ``L`` divides the head dim."""
    default = default_knobs(target, head_dim).as_tuple()
    transposes = (0, 1) if head_dim % target.vector_lanes(32) == 0 else (0,)
    spaces = (KEY_BLOCKS, ROW_VECTORS, PREFETCH_BLOCKS, (1, target.cores), EXP_DEGREES, transposes)
    return tuple(tuple(sorted(set(s) | {d})) for s, d in zip(spaces, default))


def knob_candidates(target: Target, head_dim: int) -> List[AttentionKnobs]:
    """The decisions the tuner may take: the products of the knobs' values (:func:`_spaces`)
    whose score vectors fit the registers (:func:`_fits`), with :func:`default_knobs` always
    among them."""
    out = [AttentionKnobs(*v) for v in itertools.product(*_spaces(target, head_dim)) if _fits(target, v[0], v[1])]
    default = default_knobs(target, head_dim)
    return out if default in out else out + [default]


def sample_knobs(sch, target: Target, head_dim: int, decision: Optional[AttentionKnobs] = None) -> AttentionKnobs:
    """The decisions of the kernel as one ``sample_categorical`` instruction each on ``sch`` (in
    :class:`AttentionKnobs`' order; defaults :func:`default_knobs`); ``decision``: the values to
    record, else the defaults or draws as ``sch`` takes them. A tuning record holding the trace
    is read back by :func:`decided_knobs`.

    Raises
    ------
    ScheduleError
        If ``decision`` holds a value outside its knob's candidates.
    """
    default = default_knobs(target, head_dim).as_tuple()
    values = []
    for i, cands in enumerate(_spaces(target, head_dim)):
        if decision is None:
            values.append(int(categorical(sch, list(cands), default[i])))
            continue
        want = decision.as_tuple()[i]
        if want not in cands:
            raise ScheduleError(f"attention knobs: value {want} of decision {i} is not among {list(cands)}")
        values.append(int(sch.sample_categorical(list(cands), [1.0 / len(cands)] * len(cands),
                                                 decision=cands.index(want))))
    return AttentionKnobs(*values)


def decided_knobs(trace: Trace) -> Optional[AttentionKnobs]:
    """The decisions recorded by :func:`sample_knobs` in ``trace`` (its ``sample_categorical``
    instructions; a record of the first four knobs leaves the others at 0), or None when the
    trace has none (the default)."""
    values = [int(inst.attrs["candidates"][trace.decisions[i]]) for i, inst in enumerate(trace.insts)
              if inst.kind == "sample_categorical" and i in trace.decisions]
    return AttentionKnobs(*values[:len(dataclasses.fields(AttentionKnobs))]) if len(values) >= 4 else None
