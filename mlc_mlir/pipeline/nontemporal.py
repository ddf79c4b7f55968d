"""Non-temporal stores for the loops a schedule annotated :data:`NONTEMPORAL`.

An elementwise block that moves more than the last-level cache (``a + b`` of 2048x2048 float32:
48 MB through a 32 MiB L3) gains nothing from keeping its results in the caches: the first ones
are evicted before it ends. An ordinary store first reads each written line (read for
ownership), a third of such a block's memory traffic; a non-temporal store (``vmovntps``) writes
whole lines past the caches. :func:`nontemporal_stores` runs on the buffers (after
bufferization, before the vector and memref lowering): in each ``scf.for`` annotated with a
non-zero :data:`NONTEMPORAL` (the elementwise rule's sampled decision, default from the target's
cache size), each ``vector.transfer_write`` of one contiguous row of whole vectors into a
memref (in bounds, unmasked, minor identity map, unit innermost stride, leading vector dims of
1) becomes::

    if (address % A == 0) vector.store {nontemporal, alignment = A} else <the transfer_write>

with ``A`` the vector's bytes up to 64 (a cache line; LLVM splits an unaligned non-temporal
vector store into scalar ``movnti``/``movntsd``, so only aligned addresses take it: the branch
costs a compare per vector and is always the same within a call). Outputs the runtime allocates
are cache-line aligned (:func:`mlc_mlir.runtime.memref.empty_result`). Each outermost loop
holding such stores (per thread: inside an ``scf.forall``) is followed by an ``sfence``, so the
weakly ordered non-temporal stores are visible before the threads join.

Source: LLVM's ``!nontemporal`` store metadata (MLIR ``vector.store``'s ``nontemporal``); the
streaming stores of the STREAM benchmark and of glibc's ``memcpy`` above a cache-derived size;
the x86 ``sfence`` that orders them (Intel SDM vol. 1, 10.4.6.2).
"""

from __future__ import annotations

from typing import List

from .._mlir import arith_d, ir, llvm_d, memref_d, scf_d, vector_d
from ..ir.module import Module
from ..ir.walk import find_ops
from ..schedule.rules.elementwise import NONTEMPORAL
from ..target import CACHE_LINE_BYTES


def _annotated(op: ir.Operation) -> bool:
    if NONTEMPORAL not in op.attributes:
        return False
    attr = op.attributes[NONTEMPORAL]
    if isinstance(attr, ir.BoolAttr):
        return bool(attr.value)
    return isinstance(attr, ir.IntegerAttr) and ir.IntegerAttr(attr).value != 0


def _alignment(write: ir.Operation) -> int:
    """The alignment of a non-temporal store that can replace ``write`` (0: none can)."""
    if write.name != "vector.transfer_write" or len(write.results) != 0:
        return 0
    value, base = write.operands[0], write.operands[1]
    if not isinstance(base.type, ir.MemRefType) or not isinstance(value.type, ir.VectorType):
        return 0
    mt, vt = ir.MemRefType(base.type), ir.VectorType(value.type)
    if len(write.operands) != 2 + mt.rank:                 # a mask operand
        return 0
    in_bounds = [bool(ir.BoolAttr(a).value) for a in ir.ArrayAttr(write.attributes["in_bounds"])]
    perm = ir.AffineMapAttr(write.attributes["permutation_map"]).value
    if not all(in_bounds) or perm != ir.AffineMap.get_minor_identity(mt.rank, vt.rank):
        return 0
    if any(d != 1 for d in vt.shape[:-1]) or mt.get_strides_and_offset()[0][-1] != 1:
        return 0
    nbytes = vt.shape[-1] * vt.element_type.width // 8
    align = nbytes & -nbytes                                # largest power of 2 dividing it
    return min(align, CACHE_LINE_BYTES) if align >= 16 else 0


def byte_address(base: ir.Value, indices: List[ir.Value], elem_bytes: int) -> ir.Value:
    """Byte address (index) of ``base[indices]``: aligned pointer + (offset + sum i * stride) *
    element bytes, from the buffer's strided metadata (built at the insertion point). Indices
    past the buffer's extent give the address they would have in its strided layout (the
    prefetches of :mod:`.prefetch_tiles` reach the rows after a tile's view that way)."""
    rank = ir.MemRefType(base.type).rank
    meta = memref_d.ExtractStridedMetadataOp(base)
    results = list(meta.results)
    offset, strides = results[1], results[2 + rank:]
    linear = offset
    for i, s in zip(indices, strides):
        linear = arith_d.addi(linear, arith_d.muli(i, s))
    idx = ir.IndexType.get()
    ptr = memref_d.extract_aligned_pointer_as_index(base)
    return arith_d.addi(ptr, arith_d.muli(linear, arith_d.constant(idx, elem_bytes)))


def _rewrite(write: ir.Operation, align: int) -> None:
    value, base = write.operands[0], write.operands[1]
    indices = list(write.operands)[2:]
    vt = ir.VectorType(value.type)
    idx = ir.IndexType.get()
    with ir.InsertionPoint(write):
        addr = byte_address(base, indices, vt.element_type.width // 8)
        rem = arith_d.remui(addr, arith_d.constant(idx, align))
        aligned = arith_d.cmpi(arith_d.CmpIPredicate.eq, rem, arith_d.constant(idx, 0))
        branch = scf_d.IfOp(aligned, [], has_else=True)
    with ir.InsertionPoint(branch.then_block):
        flat = value if vt.rank == 1 else vector_d.shape_cast(
            ir.VectorType.get([vt.shape[-1]], vt.element_type), value)
        vector_d.store(flat, base, indices, nontemporal=True, alignment=align)
        scf_d.YieldOp([])
    with ir.InsertionPoint(branch.else_block):
        scf_d.YieldOp([])
    write.move_before(branch.else_block.operations[0])


def _fence_point(loop: ir.Operation) -> ir.Operation:
    """The outermost op holding ``loop`` within its function or ``scf.forall`` body."""
    op = loop
    while True:
        parent = op.parent
        if parent is None or parent.name in ("func.func", "scf.forall", "scf.parallel",
                                             "builtin.module"):
            return op
        op = parent


def nontemporal_stores(module: Module) -> Module:
    """``module`` (buffers; rewritten in place) with the stores of its :data:`NONTEMPORAL`
    loops made non-temporal where aligned, as the module docstring describes; ``module``
    unchanged when no annotated loop holds such a store. x86 only (``llvm.x86.sse.sfence``):
    the host code of every target is x86-64."""
    loops = [op for op in find_ops(module, "scf.for") if _annotated(op)]
    if not loops:
        return module
    fenced: List[ir.Operation] = []
    with module.context, ir.Location.unknown():
        for loop in loops:
            done = 0
            for w in find_ops(loop, "vector.transfer_write"):
                align = _alignment(w)
                if align:
                    _rewrite(w, align)
                    done += 1
            if not done:
                continue
            point = _fence_point(loop)
            if any(point == f for f in fenced):
                continue
            fenced.append(point)
            with ir.InsertionPoint.after(point):
                llvm_d.call_intrinsic(None, "llvm.x86.sse.sfence", [], [], [])
    return module
