"""Software prefetch of the next output tile of a register-tiled loop, for the loops a schedule
annotated :data:`~mlc_mlir.schedule.cpu_recipes.PREFETCH_TILE_ATTR` ``= D``.

The Goto matmul (:func:`~mlc_mlir.schedule.cpu_recipes.goto_loop_nest`) loads its ``MR x NR``
tile of C into the accumulators before the register tile's k loop and stores it after. With
K in several KC blocks every tile of C is read once per block, and between two reads of a tile
the loops visit every other tile of the thread's ``M x NC`` block of C, which is larger than
the L2 for a large M: each tile's first FMAs wait for its rows to come from L3 or DRAM (777 x
513 x 1029 on one thread of a loaded 2-core Zen 3: 14% of the samples of the kernel on the 12
loads of the C tile). :func:`prefetch_tiles` runs on the buffers (after bufferization, with
:func:`~mlc_mlir.pipeline.nontemporal.nontemporal_stores`): in each ``scf.for`` annotated with
``D > 0`` (the loop over the register tiles' rows, step ``MR``), each 2-d
``vector.transfer_read`` of the loop body itself (the tile of C; the A and B reads sit in the k
loop inside) is preceded by one ``llvm.prefetch`` (read, locality 3: into L1) of the first and
the last element of each of the rows ``D`` to ``D + rows - 1`` after the tile's first row in
the same buffer: the next tile's rows, requested a whole k loop before they are read. A
prefetch never faults, so the last tile's prefetches past the end of C need no guard.

Source: the C prefetches of BLAS micro-kernels (OpenBLAS's Haswell ``sgemm`` kernel and BLIS's
``bli_sgemm_haswell_asm_6x16`` issue ``prefetcht0`` on the rows of the next C tile); TVM's
``prefetch`` schedule primitive.
"""

from __future__ import annotations

from typing import List

from .._mlir import arith_d, ir, llvm_d
from ..ir.module import Module
from ..ir.walk import find_ops
from ..schedule.cpu_recipes import PREFETCH_TILE_ATTR
from ..target import CACHE_LINE_BYTES
from .nontemporal import byte_address


def _ahead(loop: ir.Operation) -> int:
    if PREFETCH_TILE_ATTR not in loop.attributes:
        return 0
    attr = loop.attributes[PREFETCH_TILE_ATTR]
    return ir.IntegerAttr(attr).value if isinstance(attr, ir.IntegerAttr) else 0


def _tile_reads(loop: ir.Operation) -> List[ir.Operation]:
    """The 2-d, in-bounds, unmasked minor-identity ``vector.transfer_read`` s of a rank-2
    memref in ``loop``'s body itself."""
    out = []
    for op in loop.regions[0].blocks[0].operations:
        if op.name != "vector.transfer_read" or not isinstance(op.operands[0].type, ir.MemRefType):
            continue
        mt, vt = ir.MemRefType(op.operands[0].type), ir.VectorType(op.results[0].type)
        if mt.rank != 2 or vt.rank != 2 or len(op.operands) != 4:    # source, 2 indices, padding
            continue
        perm = ir.AffineMapAttr(op.attributes["permutation_map"]).value
        if perm == ir.AffineMap.get_minor_identity(2, 2):
            out.append(op)
    return out


def _prefetch(read: ir.Operation, ahead: int) -> None:
    base = read.operands[0]
    vt = ir.VectorType(read.results[0].type)
    rows, cols = vt.shape
    nbytes = max(1, vt.element_type.width // 8)
    idx = ir.IndexType.get()
    i32 = ir.IntegerType.get_signless(32)
    ptr = ir.Type.parse("!llvm.ptr")
    with ir.InsertionPoint(read):
        i, j = read.operands[1], read.operands[2]
        last = arith_d.addi(j, arith_d.constant(idx, cols - 1))
        flags = [arith_d.constant(i32, v) for v in (0, 3, 1)]   # read, locality 3, data cache
        for r in range(rows):
            row = arith_d.addi(i, arith_d.constant(idx, ahead + r))
            for col in ([j, last] if cols * nbytes > CACHE_LINE_BYTES // 2 else [j]):
                addr = byte_address(base, [row, col], nbytes)
                p = llvm_d.inttoptr(ptr, arith_d.index_cast(ir.IntegerType.get_signless(64), addr))
                llvm_d.call_intrinsic(None, "llvm.prefetch.p0", [p] + flags, [], [])


def prefetch_tiles(module: Module) -> Module:
    """``module`` (buffers; rewritten in place) with the next tile's rows prefetched in each
    loop annotated :data:`PREFETCH_TILE_ATTR` ``> 0``, as the module docstring describes."""
    loops = [op for op in find_ops(module, "scf.for") if _ahead(op) > 0]
    with module.context, ir.Location.unknown():
        for loop in loops:
            for read in _tile_reads(loop):
                _prefetch(read, _ahead(loop))
    return module
