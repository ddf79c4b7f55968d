"""``PrefetchRows`` (``mlc-prefetch-rows``): software prefetch of the matrix rows a loop will
read some steps ahead, where the schedule asked for it (a loop annotated
``mlc.prefetch_rows = D``).

A GEMV on a row-major ``(K, N)`` B (:func:`~mlc_mlir.schedule.rules.gemv.schedule_gemv`)
walks the rows ``R`` at a time (the annotated loop, its induction variable the first row of
the step) and reads, per thread and chunk, ``NB`` contiguous weights of each row: ``R`` runs of
``NB`` elements that start a row apart. Where a run is shorter than a page (a thread's slice of
a narrow B: 1.5 KiB of a ``3072 x 768`` B on 2 threads), the hardware prefetchers learn each
run anew and stop at its page, so the first lines of every run wait on DRAM. The rewrite adds,
before each full-tile read ``vector.transfer_read %B[%k, %j]`` of the annotated loop's body
(``%k`` its induction variable; ``vector<R x V>`` or ``vector<V>``, ``V`` elements at least a
cache line: not the peeled columns of a partial tile), one ``memref.prefetch``
(read, locality 3) per cache line of the tile's columns in each of the rows ``%k + D + r``,
``r < R`` (clamped to the last row): the run the loop will read ``D`` rows later is requested
while this one streams. Every other op is unchanged; a loop without the attribute is not
touched.

Source: the prefetch instructions of BLAS GEMV kernels (OpenBLAS's ``sgemv`` micro-kernels
issue ``prefetcht0`` on the columns ahead); TVM's ``prefetch`` schedule primitive (a
``prefetch`` of a buffer region at a loop, ahead by a number of iterations).
"""

from __future__ import annotations

from typing import List, Optional, Tuple

from ..._mlir import arith_d, bufferization_d, ir, memref_d
from ...graph.pass_manager import Pass, register_pass
from ...ir.module import Module
from ...ir.walk import find_ops
from ...schedule.rules.gemv import PREFETCH_ROWS_ATTR as ATTR
from ...target import CACHE_LINE_BYTES


def _index(v: int) -> ir.Value:
    return arith_d.constant(ir.IndexType.get(), v)


def _tile_read(op: ir.Operation, iv: ir.Value) -> Optional[Tuple[int, int]]:
    """``(rows, columns)`` of a full-tile read of a static 2-d tensor at ``[iv, j]`` whose rows
    span at least a cache line, else None (a peeled edge column is left alone)."""
    if op.name != "vector.transfer_read" or len(op.operands) != 4:     # source, 2 indices, padding
        return None
    t = op.operands[0].type
    if not isinstance(t, ir.RankedTensorType) or not ir.RankedTensorType(t).has_static_shape \
            or ir.RankedTensorType(t).rank != 2 or op.operands[1] != iv:
        return None
    vt = ir.VectorType(op.results[0].type)
    perm = ir.AffineMapAttr(op.attributes["permutation_map"]).value
    if perm != ir.AffineMap.get_minor_identity(2, vt.rank) or vt.rank > 2 \
            or not all(ir.BoolAttr(b).value for b in ir.ArrayAttr(op.attributes["in_bounds"])) \
            or vt.shape[-1] * ir.RankedTensorType(t).element_type.width < 8 * CACHE_LINE_BYTES:
        return None
    return (vt.shape[0] if vt.rank == 2 else 1), vt.shape[-1]


def _reads(loop: ir.Operation) -> List[Tuple[ir.Operation, int, int]]:
    iv = loop.regions[0].blocks[0].arguments[0]
    tiles = [(op, _tile_read(op, iv)) for op in find_ops(loop, "vector.transfer_read")]
    return [(op, *tile) for op, tile in tiles if tile is not None]


def _prefetch(read: ir.Operation, rows: int, cols: int, ahead: int) -> None:
    """Prefetches of the ``rows x cols`` tile ``ahead`` rows after ``read``'s, before it."""
    src = read.operands[0]
    t = ir.RankedTensorType(src.type)
    with ir.InsertionPoint(read):
        buf = bufferization_d.to_buffer(ir.MemRefType.get(t.shape, t.element_type), src, read_only=True)
        last = _index(t.shape[0] - 1)
        k, j = read.operands[1], read.operands[2]
        per_line = max(1, CACHE_LINE_BYTES // max(1, t.element_type.width // 8))
        for r in range(rows):
            row = arith_d.minui(arith_d.addi(k, _index(ahead + r)), last)
            for c in range(0, cols, per_line):
                memref_d.prefetch(buf, [row, arith_d.addi(j, _index(c)) if c else j], False, 3, True)


@register_pass
class PrefetchRows(Pass):
    """Prefetch, in each ``scf.for`` annotated ``mlc.prefetch_rows = D``, the tile of each
    full-tile read of a 2-d tensor indexed by the loop's induction variable, ``D`` rows ahead
    (see the module docstring). Runs on tensors after scheduling; values are unchanged.
    """

    name = "mlc-prefetch-rows"

    def transform(self, mod: Module) -> Module:
        for loop in [op for op in find_ops(mod, "scf.for") if ATTR in op.attributes]:
            ahead = ir.IntegerAttr(loop.attributes[ATTR]).value
            for read, rows, cols in _reads(loop) if ahead > 0 else ():
                _prefetch(read, rows, cols, ahead)
        return mod
