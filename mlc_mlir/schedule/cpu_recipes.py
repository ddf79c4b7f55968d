"""Hand-written CPU schedules built only from the schedule primitives, with blocking sizes
derived from a :class:`~mlc_mlir.target.Target`.

``schedule_matmul_goto`` expresses the measured recipe of ``benchmarks/recipe/NOTES.md`` (Goto
loop order, a packed B panel, an MR x NR register tile kept in registers, k unrolled, threads
over M) with ``split``/``reorder``/``parallel``/``cache_read``/``compute_at``/``unroll``/
``vectorize``, so the same trace replays, serializes and exports like any other. Its loop nest
(:func:`goto_loop_nest`) is the one the matmul and mmt4d schedule rules
(:mod:`.rules.matmul`) build from their sampled decisions; :func:`goto_params` derives the
register tile and cache blocking (the rules' default decisions) from the target's vector width,
register count, cache sizes and cores. Source: Goto & van de Geijn, "Anatomy of
High-Performance Matrix Multiplication" (TOMS 2008); BLIS's analytical model (Low et al.,
"Analytical Modeling Is Enough for High-Performance BLIS", TOMS 2016).
"""

from __future__ import annotations

import dataclasses
from typing import List, Optional, Tuple

from ..errors import ScheduleError
from ..ir import dtypes
from ..target import Target, host_target
from .factors import largest_divisor
from .schedule import Schedule
from .state import BlockRV

#: Cache sizes assumed when the target does not know them (``0``): the smallest L1d / L2 of
#: any AVX-capable x86-64 core, so blocking never overflows a real cache.
_MIN_L1D_BYTES = 32 << 10
_MIN_L2_BYTES = 256 << 10

#: k is unrolled by this factor in the register tile (DESIGN.md: 4 and 8 measure the same; 4
#: keeps code small). A code-size choice, not a machine constant.
UNROLL_K = 4

#: Loop attribute of the register tiles' row loop asking the ``lower`` stage to prefetch the
#: next tile of C, that many rows ahead, before each tile's k loop
#: (:func:`~mlc_mlir.pipeline.prefetch_tiles.prefetch_tiles`).
PREFETCH_TILE_ATTR = "mlc.prefetch_tile"

#: Independent FMAs a core keeps in flight: 2 FMA pipes x 4 cycles of latency (Skylake and
#: later Intel cores, Zen 2 to Zen 5). A register tile needs more accumulators than this, or
#: its FMAs wait on each other whenever a load is late (:func:`register_tile_shapes`).
#: Source: Agner Fog's instruction tables; BLIS's analytical model (Low et al., TOMS 2016).
FMAS_IN_FLIGHT = 8


def _pow2_floor(x: int) -> int:
    return 1 << max(0, int(x).bit_length() - 1)


def tile_width(n: int, nr: int) -> int:
    """Columns of the register tile of an ``n``-column matmul whose tile is at most ``nr``
    wide: the largest power of two that divides ``n`` and is at most ``nr``. A power of two
    because LLVM legalizes a ``vector<W x f32>`` of another length by splitting it into
    registers of unequal width and shuffling between them: an 8 x 30 tile (dense 64 x 900 ->
    300) ran at 0.2x numpy where the same dense padded to an 8 x 32 tile ran at 1.3x, and
    8 x 48 tiles (three AVX-512 vectors) 10-20x slower than 8 x 32 (one thread, loaded 2-core
    Zen 5). Source: LLVM's type legalization (``TargetLowering::getTypeConversion``: widen or
    split to a legal power-of-two vector type)."""
    return min(n & -n, _pow2_floor(nr))


def split_tile(m: int, n: int, threads: int, mr: int, nr: int) -> int:
    """The register tile's columns with which ``threads`` threads split the N columns of an
    ``(M, N)`` output (:func:`thread_splits`): :func:`tile_width` of N; for a matmul of at most
    ``mr`` rows (a GEMV-like one, bound by reading B once, where threads count for more than
    the tile width) the tile of each thread's ``N / threads`` columns, so a 1 x 1000 output
    still splits into two 500-column halves (4-wide tiles)."""
    if m <= mr and threads > 1 and n % threads == 0:
        return tile_width(n // threads, nr)
    return tile_width(n, nr)


@dataclasses.dataclass(frozen=True)
class GotoParams:
    """Blocking of :func:`schedule_matmul_goto` (before shrinking to divisors of the extents).

    Attributes
    ----------
    threads : int
        Threads over M (divides M, each thread has at least MR rows).
    mr, nr : int
        Register tile: MR rows x NR columns (NR a multiple of the vector lanes).
    kc : int
        K block: a KC x NR micro-panel of packed B fills the L1d.
    nc : int
        N block: the packed KC x NC panel of B fills the L2.
    mc : int
        M block: MC x KC of A takes at most a quarter of the L2 (a multiple of MR).
    unroll_k : int
        Unroll factor of the k loop inside the register tile.
    """

    threads: int
    mr: int
    nr: int
    kc: int
    nc: int
    mc: int
    unroll_k: int = UNROLL_K


def goto_params(target: Target, m: int, n: int, k: int, threads: Optional[int] = None,
                dtype_bits: int = 32, tile: Optional[Tuple[int, int]] = None) -> GotoParams:
    """Goto/BLIS blocking for an ``(M, N, K)`` matmul on ``target``.

    * ``NR`` = two vectors (``2 * target.vector_lanes(dtype_bits)``: 16 float32 on AVX2, 32 on
      AVX-512), so each k step loads two B vectors.
    * ``MR`` = accumulators in half the vector registers: ``(vector_registers / 2) / (NR / lanes)``
      (4 on AVX2's 16 ymm, 8 on AVX-512's 32 zmm); the other half holds the B vectors and A
      broadcasts of the unrolled k steps (DESIGN.md measured 4x16 at 0.98x numpy, 16x32
      spilling). On AVX2 that is only as many accumulators as FMAs in flight: the matmul
      rule's default is the full-register 6x16 (:func:`register_tile_shapes`; LLVM keeps its
      12 accumulators, 2 B vectors and 2 broadcasts in the 16 ymm registers with k unrolled by
      4, no spills), while the mmt4d and batch_matmul rules keep this tile.
    * ``KC`` = the largest power of two with ``KC * NR * bytes <= L1d`` (the B micro-panel
      streams from L1: 512 on a 32 KiB L1d with NR = 16).
    * ``NC`` = the largest power of two with ``KC * NC * bytes <= L2`` (the packed B panel stays
      in L2: 256 on a 512 KiB L2 with KC = 512).
    * ``MC`` = a multiple of MR with ``MC * KC * bytes <= L2 / 4``.
    * ``threads`` (default ``target.cores``) is lowered until it divides ``M`` with at least MR
      rows per thread, or, when ``N > M``, ``threads * NR`` divides ``N`` (the recipes then
      split N: :func:`schedule_matmul_goto`); 1 if neither holds.

    Parameters
    ----------
    target : Target
        A CPU target (vector_bits, vector_registers, l1d_bytes, l2_bytes, cores are read; a
        cache size of 0 means unknown and assumes 32 KiB L1d / 256 KiB L2).
    m, n, k : int
        Matmul extents (``C[M, N] += A[M, K] * B[K, N]``).
    threads : int, optional
        Upper bound on threads; default ``target.cores``.
    dtype_bits : int
        Element width of C (32 for float32).
    tile : (int, int), optional
        The register tile ``(MR, NR)`` instead of the one above (a schedule rule's sampled
        tile, :func:`register_tile_shapes`); the cache blocks derive from it.

    Returns
    -------
    GotoParams

    Raises
    ------
    ScheduleError
        If ``target`` is not a Target, an extent is not positive, or ``threads < 1``.
    """
    if not isinstance(target, Target):
        raise ScheduleError(f"goto_params: argument 'target' is {type(target).__name__}; expected a Target")
    if min(m, n, k) < 1:
        raise ScheduleError(f"goto_params: extents (M, N, K) = {(m, n, k)}; expected positive ints")
    threads = target.cores if threads is None else threads
    if not isinstance(threads, int) or threads < 1:
        raise ScheduleError(f"goto_params: threads={threads!r}; expected an int >= 1")
    lanes = target.vector_lanes(dtype_bits)
    nbytes = max(1, dtype_bits // 8)
    nr = 2 * lanes
    mr = max(1, (target.vector_registers // 2) // (nr // lanes))
    if tile is not None:
        mr, nr = tile
    l1 = target.l1d_bytes or _MIN_L1D_BYTES
    l2 = target.l2_bytes or _MIN_L2_BYTES
    kc = max(UNROLL_K, _pow2_floor(l1 // (nr * nbytes)))
    nc = max(nr, _pow2_floor(l2 // (kc * nbytes)))
    mc = mr * max(1, (l2 // 4) // (kc * nbytes) // mr)
    t = threads
    # the recipes' NR tile: a divisor of an N that is not padded (a GEMV: 1000 -> 2 x 500, 4 wide)
    while t > 1 and not any(thread_splits(m, n, t, mr, split_tile(m, n, t, mr, nr))):
        t -= 1
    return GotoParams(threads=t, mr=mr, nr=nr, kc=kc, nc=nc, mc=mc)


def register_tile_shapes(target: Target, dtype_bits: int = 32) -> List[Tuple[int, int]]:
    """Register tiles ``(MR, NR)`` a matmul rule may pad its extents for, the default first:
    Goto's tile of :func:`goto_params` where its accumulators outnumber
    :data:`FMAS_IN_FLIGHT` (8 x 32 on AVX-512's 32 registers: 16 accumulators), else the
    full-register tile of the same width (6 x 16 on AVX2's 16 registers: 12 accumulators where
    Goto's 4 x 16 has 8, exactly the FMAs in flight, so any late load stalls the FMA pipes).
    Then for ``NR`` of 2 and 4 vectors (a power of two: :func:`tile_width`) the most rows
    whose ``MR * NR / lanes`` accumulators, ``NR / lanes`` B vectors and one A broadcast fit
    the vector registers (6 x 16 and 2 x 32 on AVX2; 14 x 32 and 6 x 64 on AVX-512), and the
    3/4-height variant of each (fewer registers live across an unrolled k: 5 x 16, 11 x 32,
    5 x 64), each with at least a quarter of the registers as accumulators, and Goto's tile
    where it is not the default. 6 x 16 against 4 x 16 on AVX2 (one thread of a loaded 2-core
    Zen 3, CPU time against numpy's in the same process): 1024^3 0.81 -> 0.88x,
    1000 x 999 x 1023 0.90 -> 0.99x, 777 x 513 x 1029 0.85 -> 0.87x.
    Source: BLIS's micro-kernel shapes (Low et al., TOMS 2016: ``MR * NR / lanes`` accumulators
    within the register file, at least the FMA pipes times their latency; BLIS's Haswell
    sgemm kernel is 6 x 16)."""
    lanes = target.vector_lanes(dtype_bits)
    regs = target.vector_registers
    base = goto_params(target, 1, 1, 1, 1, dtype_bits)
    v = base.nr // lanes
    goto = (base.mr, base.nr)
    out = [goto if base.mr * v > FMAS_IN_FLIGHT else (max(base.mr, (regs - v - 1) // v), base.nr)]
    for v in (2, 4):
        full = (regs - v - 1) // v
        for mr in (full, -(-3 * full // 4)):
            if mr * v >= max(1, regs // 4) and (mr, v * lanes) not in out:
                out.append((mr, v * lanes))
    return out + ([goto] if goto not in out else [])


def thread_splits(m: int, n: int, threads: int, mr: int, nr: int) -> Tuple[bool, bool]:
    """``(over_m, over_n)``: whether ``threads`` threads can split the M rows of an ``(M, N)``
    output into equal blocks of at least ``mr`` rows, and whether (when ``N > M``) they can
    split its N columns into equal blocks of whole ``nr``-wide panels: the two thread splits of
    the Goto recipes (:func:`schedule_matmul_goto`, :func:`schedule_mmt4d_goto`)."""
    return m % threads == 0 and m // threads >= mr, n > m and n % (threads * nr) == 0


def register_rows(rows: int, mr: int) -> int:
    """The register tile's row count for ``rows`` rows (of one thread) and a full tile of
    ``mr`` rows: the largest divisor of ``rows`` that keeps at least 3/4 of the tile's
    accumulators (``ceil(3 * mr / 4) <= MR' <= mr``), or 0 when none does and the rows are
    better padded (:func:`goto_padding`). A 7 x 32 tile on AVX-512 (14 of 16 accumulators)
    computes ResNet-18's 49 and 196-row im2col GEMMs without the padded copy of A and C that
    an 8-row tile needs: 49 x 4608 x 512 2.42 -> 2.11 ms, 196 x 2304 x 256 2.18 -> 2.03 ms
    (one thread, 2-core AMD EPYC Zen 4, AVX-512). Source: BLIS's edge-case micro-kernels
    (Van Zee & van de Geijn, TOMS 2015) trade a smaller tile for the padding."""
    lo = -(-3 * mr // 4)
    return next((d for d in range(min(mr, rows), lo - 1, -1) if rows % d == 0), 0)


def goto_padding(target: Target, m: int, n: int, k: int, threads: Optional[int] = None,
                 dtype_bits: int = 32, tile: Optional[Tuple[int, int]] = None) -> Tuple[int, int, int]:
    """``pad_einsum`` multiples ``(M, N, K)`` that make the Goto blocking of an ``(M, N, K)``
    matmul perfect (1 where the extent is fine as it is).

    * ``M``: a multiple of ``threads * MR`` (``threads`` lowered until each thread has at least
      MR rows), so every thread gets whole register tiles, unless a slightly smaller tile
      divides the rows (:func:`register_rows`: 49 rows take a 7-row tile on AVX-512, 4 + 3 + 1
      would pad); only of MR when the threads split N
      (N > M, see :func:`schedule_matmul_goto`); a matmul of at most MR rows (a GEMV, bound by
      reading B once) is not padded at all;
    * ``N``: a multiple of ``NR`` when that wastes less than the divisor tile would (1023 ->
      1024 rather than an 11-wide register tile, 61 -> 64 rather than 1-wide; 48 with NR = 32
      keeps its 24-wide tile, as padded it would use 3/4 of its columns all the same);
    * ``K``: kept when it has a divisor ``KC`` of at least half the target's KC (or K fits in
      one KC block) and a divisor in ``2..UNROLL_K`` for the unrolled k loop; otherwise padded
      to balanced blocks: ``ceil(K / KC)`` blocks of a multiple of ``UNROLL_K`` (a prime K = 53
      becomes 56; 999 stays, with KC = 333 and k unrolled by 3).

    The padded region costs one copy of each padded operand (zeros), against a register tile
    that would otherwise shrink to a divisor (``nr = 11`` for N = 1023: 0.19x numpy). The
    matmul rule computes a matmul whose M or N this pads with edge tiles instead
    (``rules.matmul.schedule_edge_tiles``) and pads only K; batch_matmul and mmt4d pad.
    Source: TVM ``pad_einsum`` (MetaSchedule's padding of non-divisible GEMMs); BLIS's edge
    handling by zero-padded micro-panels (Van Zee & van de Geijn, TOMS 2015).

    Parameters
    ----------
    target, m, n, k, threads, dtype_bits, tile
        As for :func:`goto_params`.

    Returns
    -------
    tuple of int
        Multiples for ``sch.pad_einsum(block, [M, N, K])``.

    Raises
    ------
    ScheduleError
        As :func:`goto_params`.
    """
    p = goto_params(target, m, n, k, threads, dtype_bits, tile)
    if m <= p.mr:
        return 1, 1, 1   # a GEMV-like matmul streams B once: padding would copy all of it
    t = target.cores if threads is None else threads
    t = max(1, min(t, m // p.mr))
    lanes = target.vector_lanes(dtype_bits)
    d = tile_width(n, p.nr)
    # pad N when the padded columns waste less than the partial vectors of a divisor tile would
    nn = p.nr if n / (-(-n // p.nr) * p.nr) > d / (-(-d // lanes) * lanes) else 1
    np_ = -(-n // nn) * nn
    if t > 1 and np_ > m and np_ % (t * p.nr) == 0:   # threads over N (schedule_matmul_goto)
        mm = 1 if register_rows(m, p.mr) else p.mr
    else:
        mm = 1 if m % t == 0 and register_rows(m // t, p.mr) else t * p.mr
    kc = largest_divisor(k, p.kc)
    if (k <= p.kc or 2 * kc >= p.kc) and largest_divisor(kc, p.unroll_k) >= min(2, p.unroll_k):
        kk = 1
    else:
        blocks = -(-k // p.kc)
        kk = -(-k // (blocks * p.unroll_k)) * p.unroll_k
    return mm, nn, kk


def batch_matmul_padding(target: Target, nb: int, m: int, n: int, k: int,
                         threads: Optional[int] = None, dtype_bits: int = 32) -> List[int]:
    """``pad_einsum`` multiples ``[B, M, N, K]`` of a ``(B, M, N, K)`` batch_matmul for its
    register-tiled rule (1 where the extent is fine as it is): M to a multiple of ``T * MR``
    when the threads go over M (fewer batches than threads; a matrix of at most MR rows, or
    whose rows per thread have a divisor from ``MR / 2`` to ``MR``, the rule's row tile, is not
    padded), N to a multiple of NR, K to a multiple of ``UNROLL_K`` when K has no divisor in
    ``2..UNROLL_K``. The batch is never padded. Source: TVM ``pad_einsum``.

    Raises
    ------
    ScheduleError
        As :func:`goto_params`.
    """
    threads = target.cores if threads is None else threads
    p = goto_params(target, m, n, k, threads, dtype_bits)
    tb = largest_divisor(nb, threads)
    tm = max(1, min(threads if tb == 1 else 1, m // p.mr))
    # a register tile of a divisor of the rows from MR / 2 up needs no padding (ResNet's
    # Winograd GEMMs: 196 = 28 x 7 rows, MR = 8)
    whole = m % tm == 0 and 2 * largest_divisor(m // tm, p.mr) >= p.mr
    return [1, 1 if m <= p.mr or m % (tm * p.mr) == 0 or whole else tm * p.mr,
            1 if n % p.nr == 0 else p.nr,
            1 if largest_divisor(k, p.unroll_k) >= min(2, p.unroll_k) else p.unroll_k]


def packs_b(rows: int, mr: int, nr: int, b_transposed: bool = False) -> bool:
    """Whether the Goto matmul packs B by default (``cache_read`` per ``(j0, k0)`` block) for a
    thread computing ``rows`` rows with an ``MR x NR`` register tile. A B stored ``(N, K)``
    (``b_transposed``: ``dense``) is packed whenever a panel is reused by two MR row blocks (read
    in place, each k step would gather NR elements K apart). A ``(K, N)`` B is packed when the
    rows are at least 4 micro-panel widths (64 on AVX2): a packed panel is reused once per MR
    row block; with fewer rows the copy (every B element written and read once more) does not
    pay back: ResNet-18's
    49 x 4608 x 512 im2col GEMM (52 rows after padding) took 7.0 ms packed and 6.5 ms reading B
    in place (one thread; 4.5 vs 4.1 ms on two), while BERT's 128 x 128 x 512 still gains from
    packing (0.43 -> 0.42 ms); 2-core AVX2 EPYC (znver1). The tuning space has the choice as a
    knob (``pack``)."""
    return rows >= 2 * mr if b_transposed else rows >= 4 * nr


#: The matmul rules' default decision on packing A (:func:`goto_loop_nest`'s ``pack_a``):
#: read in place, as measured there; the tuner samples both.
PACK_A = False


def prefetches_c(target: Target, rows: int, n: int, dtype_bits: int = 32) -> bool:
    """Whether the Goto matmul prefetches the next ``MR x NR`` tile of C by default
    (:func:`goto_loop_nest`'s ``prefetch_c``) for a thread computing ``rows`` rows of ``n``
    columns: where that block of C is larger than the target's L2, so a tile's rows, last
    touched a whole block earlier, come from L3 or DRAM when its k loop starts (see
    :func:`goto_loop_nest`). A smaller C stays in the L2 and the prefetches would only cost
    their instructions. Source: BLIS's and OpenBLAS's x86 micro-kernels prefetch C."""
    return rows * n * max(1, dtype_bits // 8) > (target.l2_bytes or _MIN_L2_BYTES)


def schedule_matmul_goto(sch: Schedule, block: BlockRV, threads: Optional[int] = None,
                         mc: Optional[int] = None, nc: Optional[int] = None,
                         kc: Optional[int] = None, nr: Optional[int] = None,
                         mr: Optional[int] = None, unroll_k: Optional[int] = None,
                         epilogues=(), pack: Optional[bool] = None,
                         target: Optional[Target] = None, split_n: Optional[bool] = None) -> Schedule:
    """Schedule a matmul-like block ``(i, j, k)`` (``linalg.matmul``, or ``dense``'s transposed-B
    matmul) for the CPU.

    Loop nest (outer to inner): ``i0`` (parallel over ``threads``), ``j0`` (NC), ``k0`` (KC),
    ``i1`` (MC), ``j1`` (NR panel), ``i2`` (MR), ``k1`` (unrolled) and the vectorized ``MR x NR``
    register tile. With ``split_n`` the threads split N instead (``jt j0 k0 i1 ...``): the
    default when N > M and ``threads * NR`` divides N, where B (K x N) is the bigger operand and
    splitting M would make every thread pack all of it. B is packed per ``(j0, k0)`` block (``cache_read`` + ``compute_at(k0)``).
    The init is decomposed (``decompose_reduction``) into the ``k0`` loop with epilogues (each
    tile of C is zeroed where the epilogue reads it), else into the parallel loop unless the
    op is padded (then C is zeroed once, with the padded operands, before the parallel loop).
    Each blocking size is reduced to the largest divisor of its extent: pad odd extents first
    (``sch.pad_einsum(block, goto_padding(...))``, as the default rule does). A B stored
    ``(N, K)`` (``dense``) is packed transposed, into ``(K, NR)`` panels.

    Parameters
    ----------
    sch : Schedule
    block : BlockRV
        A block with iteration dims ``(i, j, k)``; operands A ``(M, K)`` (or ``(K, M)``), B
        ``(K, N)`` or ``(N, K)``, C ``(M, N)``; float or integer dtypes.
    threads, mc, nc, kc, nr, mr, unroll_k : int, optional
        Each one left out comes from :func:`goto_params` for ``target`` (``threads``: the
        target's cores, lowered to divide M).
    epilogues : sequence of BlockRV
        Elementwise consumer blocks (bias add, relu) fused into the ``j0`` tile with
        ``reverse_compute_at`` (before the init is decomposed), in producer-to-consumer order.
    pack : bool, optional
        Pack B (default: :func:`packs_b`; a single-row matmul reads B once, so packing would
        only double its memory traffic).
    split_n : bool, optional
        Threads over N rather than M (default: see above).
    target : Target, optional
        Default: the host (:func:`mlc_mlir.target.host_target`).

    Returns
    -------
    Schedule
        ``sch``, with the recipe's instructions appended to its trace.

    Raises
    ------
    ScheduleError
        If the block is not a 3-loop (i, j, k) op or ``threads`` does not divide M (with
        ``split_n``: ``threads * NR`` does not divide N).
    """
    blk = sch.get(block)
    if len(blk.loops) != 3:
        raise ScheduleError(f"schedule_matmul_goto: expected loops (i, j, k), got {len(blk.loops)} loops")
    m, n, kk = (d.extent for d in blk.dims)
    bits = dtypes.bit_width(blk.info.dtypes[-1]) if blk.info.dtypes else 32
    p = goto_params(target or host_target(), m, n, kk, threads, bits)
    threads = p.threads if threads is None else threads
    mr, nr, kc, nc, mc = (p.mr if mr is None else mr, p.nr if nr is None else nr,
                          p.kc if kc is None else kc, p.nc if nc is None else nc,
                          p.mc if mc is None else mc)
    nr = split_tile(m, n, threads, p.mr, nr)
    kc = largest_divisor(kk, kc)
    unroll_k = largest_divisor(kc, p.unroll_k if unroll_k is None else unroll_k)
    if split_n is None:
        split_n = threads > 1 and thread_splits(m, n, threads, mr, nr)[1]
    if split_n and n % (threads * nr) != 0:
        raise ScheduleError(f"schedule_matmul_goto: {threads} threads x NR={nr} do not divide N={n}")
    if not split_n and m % threads != 0:
        raise ScheduleError(f"schedule_matmul_goto: {threads} threads do not divide M={m}")
    mt, nt = (m, n // threads) if split_n else (m // threads, n)
    mr = largest_divisor(mt, mr)
    if pack is None:
        pack = packs_b(mt, mr, nr, b_transposed=blk.info.operand_dims[1][-1:] == (2,))
    goto_loop_nest(sch, block, threads, split_n, mr, nr, largest_divisor(mt // mr, max(mc // mr, 1)),
                   largest_divisor(nt // nr, max(nc // nr, 1)), kc, pack, unroll_k, epilogues)
    return sch


def goto_loop_nest(sch: Schedule, block: BlockRV, threads: int, split_n: bool, mr: int, nr: int,
                   mc_tiles: int, nc_tiles: int, kc: int, pack: bool, unroll_k: int,
                   epilogues=(), per_thread: Optional[int] = None, pack_a: bool = False,
                   prefetch_c: bool = False, epilogue_at_tile: bool = False) -> None:
    """The loop nest of :func:`schedule_matmul_goto` and :func:`schedule_mmt4d_goto` from its
    sizes, each an int or a sampled ``ExprRV`` that the splits take as a factor (the rules'
    decisions): ``k`` split ``[None, KC]``; the threads' dim (N with ``split_n``, else M) split
    ``[threads, None]``; M split ``[None, MC / MR, MR]`` and N ``[None, NC / NR, NR]``
    (``mc_tiles`` register tiles per M block, ``nc_tiles`` panels per N block; an mmt4d's N
    is already in panels: ``[None, nc_tiles]``, its ``m0 n0 k0`` loops innermost); loops
    ``i0 j0 k0 i1 j1 i2 k1 i3 j2``, epilogues at ``j0`` (``i2`` with ``epilogue_at_tile``), the
    init decomposed, B packed at ``k0`` when ``pack``, A packed at ``i1`` when ``pack_a`` (each ``MC x KC`` block as
    ``KC x MR`` micro-panels, as BLIS packs A), the next ``MR x NR`` tile of C prefetched before
    each tile's k loop when ``prefetch_c`` (:data:`PREFETCH_TILE_ATTR` on ``i2``, where ``i2``
    has more than one tile), ``k1`` unrolled by ``unroll_k``, the ``MR x NR`` tile vectorized.

    The register tile reads A by one ``vbroadcastss`` per element and row wherever the rows
    lie: a packed A saves no instruction and costs a copy per NC block (:data:`PACK_A`: read in
    place by default, sampled by the tuner). A tile's C rows come from beyond the L2 when an
    ``M x NC`` block exceeds it: :func:`prefetches_c` (``benchmarks/results/tune_cpu_*_matmul-packa.txt``).
    Each size must divide what is left of its extent (checked by ``split``), except with
    ``per_thread`` (a multiple of MR, or of NR with ``split_n``): each thread takes that many
    rows (columns), the last one fewer, and the M and N splits may end in partial tiles (edge
    tiles, peeled by the transform script: ``transform_script._Emitter.peel_partial``).

    Raises
    ------
    ScheduleError
        If a size does not divide its extent, or ``epilogue_at_tile`` with several KC blocks.
    """
    blk = sch.get(block)
    i, j, k, *panel = sch.get_loops(block)   # mmt4d: m0, n0 (the packed panel), k0
    k0, k1 = sch.split(k, [None, kc])
    if split_n:
        # threads over N: each packs only its own columns of B (over M, every thread packs
        # all of B: a 49 x 4608 x 512 im2col GEMM packs 9.4 MB once per thread; one thread
        # running the 2-thread schedule: 13.6 ms over M, 9.0 ms over N, 8.0 ms unthreaded)
        outer, j = sch.split(j, [threads, per_thread])
    else:
        outer, i = sch.split(i, [threads, per_thread])
    i1, i2, i3 = sch.split(i, [None, mc_tiles, mr])
    j0, j1, *j2 = sch.split(j, [None, nc_tiles] + ([] if panel else [nr]))
    sch.reorder(outer, j0, k0, i1, j1, i2, k1, i3, *j2, *panel)
    if threads > 1:
        sch.parallel(outer)
    if epilogue_at_tile and (sch.get(k0).extent != 1 or pack):
        raise ScheduleError(f"goto_loop_nest: an epilogue at the register tile needs one KC block "
                            f"(k0: {sch.get(k0).extent}) and no B packed per call")
    for e in epilogues:
        sch.reverse_compute_at(e, i2 if epilogue_at_tile else j0)
    if blk.info.init and epilogues:
        # at the register tile: each tile zeroed in registers (C stored once, by the epilogue);
        # else each (M / threads, NC) tile of C zeroed in the temporary the epilogue reads (not
        # copied there from a C zeroed whole: BERT 1 thread 5.4 -> 4.8 ms)
        sch.decompose_reduction(block, k1 if epilogue_at_tile else k0)
    elif blk.info.init and blk.padding is None and sch.get(k0).extent == 1 and not pack and not pack_a \
            and set(blk.info.producers) <= {blk.info.init} and not sch.get(block).partial_dims():
        # K in one KC block, operands computed by no other op here (which the init's tiling
        # would recompute per tile) and no peeled edge tiles: each register tile zeroed in
        # registers before its k loop, not C by a memset read back by the tiles. ResNet-50's 1x1 convolutions as packed GEMMs, one thread, CPU time:
        # 196 x 1024 x 256 0.406 -> 0.388 ms, 784 x 512 x 128 0.421 -> 0.415 ms (2-core AMD
        # EPYC znver5, loaded host). Not with a packed B: the packing is then neither hoisted
        # to k0 nor vectorized (repacked element by element for every register tile:
        # 512 x 512 x 512, one thread of a loaded 2-core Zen 3, 19.6 -> 3.7 ms CPU time)
        sch.decompose_reduction(block, k1)
    elif blk.info.init and threads > 1 and blk.padding is None:
        # each thread zeroes its own rows of C (the init fused into the scf.forall). Not for a
        # padded op: its init reaches the forall through tensor.pad, fused with the pads of A
        # and B (structured.fuse), so every thread would pad all of the operand it does not
        # split and compute into a fresh C tile copied back; unfused, the pads and the fill run
        # once before the forall. 777 x 513 x 1029, CPU time per call on a 2-core Zen 5 (loaded
        # host, OMP_WAIT_POLICY=passive): 1 thread 5.5 ms, 2 threads 10.2 -> 5.6 ms;
        # 1000 x 999 x 1023: 1 thread 12.4 ms, 2 threads 20.1 -> 12.6 ms
        sch.decompose_reduction(block, j0)
    if pack:
        packed = sch.cache_read(block, 1, "local")
        sch.compute_at(packed, k0)
    if pack_a:
        sch.compute_at(sch.cache_read(block, 0, "local"), i1)
    if prefetch_c and sch.get(i2).extent != 1:   # one tile per MC block: no i2 loop
        sch.annotate(i2, PREFETCH_TILE_ATTR, mr)
    if unroll_k > 1:
        sch.unroll(k1, int(unroll_k))
    sch.vectorize(i3)


def packed_b_panel(target: Target, m: int, n: int, k: int, dtype: str,
                   threads: Optional[int] = None) -> int:
    """The panel width ``NR`` to pack a constant B of an ``(M, N, K)`` matmul with at compile time
    (``layout_passes.PackMatmulWeights``: ``linalg.mmt4d`` on ``(N / NR, K, NR)`` panels, scheduled by
    :func:`schedule_mmt4d_goto`), or 0 to keep the ``linalg.matmul``: float dtypes whose N is a
    multiple of the Goto register tile's ``NR`` (two vectors of the target) and whose K needs no
    padding (:func:`goto_padding`: a padded K would pad the packed constant in every call),
    with more than ``MR`` rows (a GEMV streams its B once either way).

    Raises
    ------
    ScheduleError
        As :func:`goto_params`.
    """
    if not dtypes.is_float(dtype):
        return 0
    bits = dtypes.bit_width(dtype)
    p = goto_params(target, m, n, k, threads, bits)
    if m <= p.mr or n % p.nr != 0 or goto_padding(target, m, n, k, threads, bits)[2] != 1:
        return 0
    return p.nr


def schedule_mmt4d_goto(sch: Schedule, block: BlockRV, threads: Optional[int] = None,
                        mc: Optional[int] = None, nc: Optional[int] = None,
                        kc: Optional[int] = None, mr: Optional[int] = None,
                        unroll_k: Optional[int] = None, split_n: Optional[bool] = None,
                        target: Optional[Target] = None) -> Schedule:
    """Schedule a ``linalg.mmt4d`` with ``M0 = K0 = 1`` (a matmul on a pre-packed B:
    ``C[m, n1, 0, n0] += A[m, k, 0, 0] * B[n1, k, n0, 0]``, from ``layout_passes.PackMatmulWeights``)
    with the loop nest of :func:`schedule_matmul_goto` minus its packing: ``i0`` (threads over
    M; with ``split_n`` over the panels ``n1``), ``j0`` (NC / NR panels), ``k0`` (KC), ``i1``
    (MC), ``j1`` (one panel), ``i2`` (MR), ``k1`` (unrolled), and the vectorized ``MR x NR``
    register tile that reads one contiguous ``KC x NR`` micro-panel. ``NR`` is the packed
    panel width (the ``n0`` extent); the other sizes default to :func:`goto_params` and are
    reduced to divisors of their extents (pad M first: the default rule uses
    :func:`goto_padding`). Source: Goto & van de Geijn (TOMS 2008); IREE's ``mmt4d`` tiling.

    Parameters
    ----------
    sch : Schedule
    block : BlockRV
        A ``linalg.mmt4d`` block, dims ``(m1, n1, k1, m0, n0, k0)`` with ``m0 = k0 = 1``.
    threads, mc, nc, kc, mr, unroll_k : int, optional
        As for :func:`schedule_matmul_goto`.
    split_n : bool, optional
        Threads over the panels (default: when ``N > M`` and the threads divide the panels).
    target : Target, optional
        Default: the host.

    Returns
    -------
    Schedule
        ``sch`` (its trace extended by the recipe).

    Raises
    ------
    ScheduleError
        If the block does not have 6 dims with unit ``m0`` and ``k0``, or ``threads`` divides
        neither M (nor, with ``split_n``, the panels).
    """
    blk = sch.get(block)
    ext = [d.extent for d in blk.dims]
    if len(blk.loops) != 6 or ext[3] != 1 or ext[5] != 1:
        raise ScheduleError(f"schedule_mmt4d_goto: expected mmt4d dims (m1, n1, k1, m0=1, n0, k0=1), "
                            f"got extents {ext}")
    m, panels, kk, nr = ext[0], ext[1], ext[2], ext[4]
    bits = dtypes.bit_width(blk.info.dtypes[-1]) if blk.info.dtypes else 32
    p = goto_params(target or host_target(), m, panels * nr, kk, threads, bits)
    threads = p.threads if threads is None else threads
    mr, kc, nc, mc = (p.mr if mr is None else mr, p.kc if kc is None else kc,
                      p.nc if nc is None else nc, p.mc if mc is None else mc)
    kc = largest_divisor(kk, kc)
    unroll_k = largest_divisor(kc, p.unroll_k if unroll_k is None else unroll_k)
    if split_n is None:
        split_n = threads > 1 and thread_splits(m, panels * nr, threads, 1, nr)[1]
    if split_n and panels % threads != 0:
        raise ScheduleError(f"schedule_mmt4d_goto: {threads} threads do not divide the "
                            f"{panels} panels of B")
    if not split_n and m % threads != 0:
        raise ScheduleError(f"schedule_mmt4d_goto: {threads} threads do not divide M={m}")
    mt, pt = (m, panels // threads) if split_n else (m // threads, panels)
    mr = largest_divisor(mt, mr)
    goto_loop_nest(sch, block, threads, split_n, mr, nr, largest_divisor(mt // mr, max(mc // mr, 1)),
                   largest_divisor(pt, max(nc // nr, 1)), kc, False, unroll_k)
    return sch
