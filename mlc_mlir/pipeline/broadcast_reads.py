"""Vector reads that broadcast along their innermost dim, unrolled into scalar loads.

A register tile's operand that is constant along the vector lanes is read by a
``vector.transfer_read`` whose permutation map ends in a broadcast: an ``mmt4d`` tile's A
operand, ``(d0, d1, d2, d3) -> (d0, 0)`` into ``vector<7x32xf32>`` (seven rows of A, each one
element broadcast to 32 lanes), or the B panel's transposed read ``(d2, 0)`` into
``vector<32x7xf32>``. MLIR's ``convert-vector-to-scf{full-unroll}`` unrolls such a read into
one 1-D read per row and lowers each 1-D read with a broadcast map to an ``scf.for`` over the
lanes that loads the same element once per lane (``TransferOp1dConversion``): 7 loops of 32
loads and 32 loops of 7 loads per ``k`` step of a tile, which LLVM's ``LoopFullUnroll`` then
unrolls and ``InstCombine`` folds back into one load and a splat per row, most of the LLVM time
of a convolution network (DenseNet-121: a quarter of ``opt -O2``).

:func:`unroll_broadcast_reads` rewrites each such read on a memref (after bufferization,
before the vector lowering) into what those passes end with: one ``memref.load`` per distinct
element and a ``vector.broadcast`` of it to the innermost vector dim, inserted at its row
(``vector.insert``). A read qualifies when it is unmasked, in bounds in every dim, its map's
last result is the constant 0 and every other result is a dim of the memref or 0, and the vector
is not scalable (its row count is static). The element of row ``(i_0, ..., i_{r-2})`` is at the
read's indices plus ``i_j`` along the memref dim of result ``j`` (a broadcast result adds
nothing).

Source: the rank-0 case of MLIR's ``TransferOpReduceRank`` (``vector`` transfer permutation
patterns: a pure broadcast read becomes ``memref.load`` + ``vector.broadcast``), applied per
row as ``convert-vector-to-scf``'s full unrolling would, without its loops.
"""

from __future__ import annotations

import itertools
from typing import Dict, List, Optional, Tuple

from .._mlir import arith_d, ir, memref_d, vector_d
from ..ir.module import Module
from ..ir.walk import find_ops


def _row_dims(read: ir.Operation) -> Optional[List[Optional[int]]]:
    """For a qualifying read (module docstring), the memref dim of each result but the last
    (None: a broadcast result); else None."""
    if len(read.results) != 1 or not isinstance(read.operands[0].type, ir.MemRefType) or \
            ir.VectorType(read.results[0].type).scalable:
        return None
    rank = ir.MemRefType(read.operands[0].type).rank
    if len(read.operands) != rank + 2:                   # base, indices, padding: no mask
        return None
    if not all(ir.BoolAttr(a).value for a in ir.ArrayAttr(read.attributes["in_bounds"])):
        return None
    results = ir.AffineMapAttr(read.attributes["permutation_map"]).value.results
    dims: List[Optional[int]] = []
    for e in results:
        if isinstance(e, ir.AffineConstantExpr) and e.value == 0:
            dims.append(None)
        elif isinstance(e, ir.AffineDimExpr):
            dims.append(e.position)
        else:
            return None
    if not dims or dims[-1] is not None:
        return None
    return dims[:-1]


def _rewrite(read: ir.Operation, dims: List[Optional[int]]) -> None:
    base, indices = read.operands[0], list(read.operands)[1:-1]
    vt = ir.VectorType(read.results[0].type)
    row_type = ir.VectorType.get([vt.shape[-1]], vt.element_type)
    idx = ir.IndexType.get()
    with ir.InsertionPoint(read):
        offsets: Dict[Tuple[int, int], ir.Value] = {}
        rows: Dict[Tuple[int, ...], ir.Value] = {}

        def row(pos: Tuple[int, ...]) -> ir.Value:
            key = tuple(p if d is not None else 0 for p, d in zip(pos, dims))
            if key not in rows:
                at = list(indices)
                for p, d in zip(pos, dims):
                    if d is not None and p:
                        if (d, p) not in offsets:
                            offsets[(d, p)] = arith_d.addi(indices[d], arith_d.constant(idx, p))
                        at[d] = offsets[(d, p)]
                rows[key] = vector_d.broadcast(row_type, memref_d.load(base, at))
            return rows[key]

        if vt.rank == 1:
            value = row(())
        else:
            value = vector_d.broadcast(vt, read.operands[-1])
            for pos in itertools.product(*(range(n) for n in vt.shape[:-1])):
                value = vector_d.insert(row(pos), value, [], list(pos))
    read.results[0].replace_all_uses_with(value)
    read.erase()


def unroll_broadcast_reads(module: Module) -> Module:
    """``module`` (buffers; rewritten in place) with every ``vector.transfer_read`` that
    broadcasts along its innermost dim replaced by scalar loads and broadcasts, as the module
    docstring describes; others are left to ``convert-vector-to-scf``. Shapes: any memref rank,
    static vector shapes; dtypes: any element type."""
    with module.context, ir.Location.unknown():
        for op in find_ops(module, "vector.transfer_read"):
            dims = _row_dims(op)
            if dims is not None:
                _rewrite(op, dims)
    return module
