"""Kernel buffer cleanup after mapping to threads (memref level, inside each ``gpu.launch``).

What bufferizing the GPU schedules leaves in a kernel, and what this stage makes of it
(rewrites through the bindings, each checked for the conditions that keep it exact):

1. ``forward_staging_copies`` -- a cooperative copy into shared memory is a ``nofold``
   ``tensor.pad`` tiled over threads; it bufferizes to ``memref.alloc`` (device ``malloc``,
   never freed) + a fill + ``copy(global -> tmp)`` + ``copy(tmp -> shared)``. The temporary
   goes: ``copy(global -> shared)``.
2. ``erase_self_copies`` -- ``linalg.copy ins(%x) outs(%x)`` left by in-place bufferization
   (after the thread mapping every thread would run it on the whole block tile).
3. ``hoist_accumulators`` -- a thread's ``local`` write cache (``memref.alloca``) that a serial
   loop (``k0`` of the shared-memory matmul) loads from global memory at the top of each
   iteration and stores back at the bottom: the alloca and its load move before the loop, the
   store after it, so the running sums stay in registers across ``k`` (TVM's ``cache_write(C,
   "local")`` with ``reverse_compute_at`` outside the reduction loop). A ``linalg.fill`` of the
   same tile right before the loop (the init of ``decompose_reduction``) fills the alloca
   instead of global memory. Applies only when nothing else in the loop touches the global
   buffer the tile belongs to.
4. ``private_allocations`` -- any other static ``memref.alloc`` in a kernel (device ``malloc``)
   becomes a ``memref.alloca`` (thread-private, freed on return).
6. ``private_accumulators`` -- a reduction (conv, pooling, a serial matmul tile) that a thread
   runs on a small global tile (at most :func:`max_private_elements` of the chip) right after
   filling it (``linalg.fill`` then the op with that
   tile as ``outs``, nothing between but barriers) accumulates in a ``memref.alloca`` filled
   instead, stored to the tile once after the op (else one ``st.global`` per step).
5. ``contract_multiply_adds`` -- ``arith.mulf``/``addf`` in the bodies of the kernel's linalg
   ops get ``fastmath<contract>``, so NVPTX emits ``fma.rn`` for a multiply-accumulate (nvcc's
   default ``--fmad=true``; without it LLVM emits ``mul.rn`` + ``add.rn``, which ptxas must not
   fuse).
"""

from __future__ import annotations

from typing import List, Optional

from .._mlir import ir, linalg_d, memref_d
from ..ir.module import Module
from ..ir.walk import defining_op, find_ops, users
from ..target import CudaArch, max_private_elements

#: Ops that only order threads or do nothing to memory (may sit between a fill and its loop).
_NEUTRAL = ("gpu.barrier",)


def _ops(block: ir.Block) -> List[ir.Operation]:
    return [op.operation for op in block.operations]


def _walk(root: ir.Operation, name: str) -> List[ir.Operation]:
    found = []

    def visit(op):
        op = op.operation
        if op.name == name:
            found.append(op)
        return ir.WalkResult.ADVANCE

    root.walk(visit, ir.WalkOrder.PRE_ORDER)
    return found


def view_root(v: ir.Value) -> ir.Value:
    """The buffer ``v`` is a view of (through ``memref.subview`` / ``memref.cast``)."""
    while True:
        op = defining_op(v)
        if op is None or op.name not in ("memref.subview", "memref.cast"):
            return v
        v = op.operands[0]


def in_workgroup(v: ir.Value) -> bool:
    """Whether memref ``v`` is in workgroup (shared) memory."""
    space = ir.MemRefType(v.type).memory_space
    return space is not None and str(space) == "#gpu.address_space<workgroup>"


def _copy(op: ir.Operation) -> bool:
    return op.name == "linalg.copy" and len(op.operands) == 2


def _is_const_fill(op: ir.Operation, buf: ir.Value) -> bool:
    """A fill of ``buf`` with a value (``linalg.fill`` / a ``linalg.map`` with no inputs)."""
    return op.name in ("linalg.fill", "linalg.map") and op.operands[len(op.operands) - 1] == buf


def forward_staging_copies(launch: ir.Operation) -> None:
    """Rewrite 1 of the module docstring."""
    for alloc in _walk(launch, "memref.alloc"):
        buf = alloc.results[0]
        consumers = users(buf)
        fills = [u for u in consumers if _is_const_fill(u, buf) and u.name == "linalg.map"
                 and len(u.operands) == 1]
        ins = [u for u in consumers if _copy(u) and u.operands[1] == buf]
        outs = [u for u in consumers if _copy(u) and u.operands[0] == buf]
        if len(consumers) != len(fills) + len(ins) + len(outs) or len(ins) != 1 or len(outs) != 1 \
                or len(fills) > 1 or \
                ir.MemRefType(ins[0].operands[0].type).shape != ir.MemRefType(buf.type).shape:
            continue
        order = _ops(ins[0].block)
        if outs[0] not in order or order.index(ins[0]) > order.index(outs[0]) or \
                any(f not in order or order.index(f) > order.index(ins[0]) for f in fills):
            continue   # fill, load and store in one block, in that order
        outs[0].operands[0] = ins[0].operands[0]
        for op in fills + ins + [alloc]:
            op.erase()


def erase_self_copies(launch: ir.Operation) -> None:
    """Rewrite 2 of the module docstring."""
    for op in _walk(launch, "linalg.copy"):
        if _copy(op) and op.operands[0] == op.operands[1]:
            op.erase()


def _hoist_one(loop: ir.Operation) -> bool:
    body = loop.regions[0].blocks[0]
    ops = _ops(body)
    for alloca in (op for op in ops if op.name == "memref.alloca"):
        acc = alloca.results[0]
        consumers = users(acc)
        loads = [u for u in consumers if _copy(u) and u.operands[1] == acc and u in ops]
        stores = [u for u in consumers if _copy(u) and u.operands[0] == acc and u in ops]
        if len(loads) != 1 or len(stores) != 1:
            continue
        load, store = loads[0], stores[0]
        tile = load.operands[0]
        if store.operands[1] != tile or not (ops.index(alloca) < ops.index(load) < ops.index(store)):
            continue
        tile_op = defining_op(tile)
        if tile_op is not None and tile_op.parent == loop:   # the tile must be loop-invariant
            continue
        root = view_root(tile)
        touched = []

        def visit(op, base=root, skip=(load, store)):
            op = op.operation
            if op not in skip and any(isinstance(v.type, ir.MemRefType) and view_root(v) == base
                                      for v in op.operands):
                touched.append(op)
            return ir.WalkResult.ADVANCE

        loop.walk(visit, ir.WalkOrder.PRE_ORDER)
        if touched:
            continue
        prev = _previous(loop)
        alloca.move_before(loop)
        if prev is not None and prev.name == "linalg.fill" and prev.operands[1] == tile:
            prev.operands[1] = acc   # the init fills the registers, not global memory
            prev.move_after(alloca)
            load.erase()
        else:
            load.move_before(loop)
        store.move_after(loop)
        return True
    return False


def _previous(op: ir.Operation) -> Optional[ir.Operation]:
    """The op before ``op`` in its block, skipping :data:`_NEUTRAL` ops."""
    ops = _ops(op.block)
    i = ops.index(op) - 1
    while i >= 0 and ops[i].name in _NEUTRAL:
        i -= 1
    return ops[i] if i >= 0 else None


def hoist_accumulators(launch: ir.Operation) -> int:
    """Rewrite 3 of the module docstring; returns how many tiles were hoisted (innermost loops
    first, then again from the loop they landed before)."""
    n = 0
    changed = True
    while changed:
        changed = False
        for loop in reversed(_walk(launch, "scf.for")):
            if _hoist_one(loop):
                n += 1
                changed = True
                break
    return n


def private_allocations(launch: ir.Operation) -> None:
    """Rewrite 4 of the module docstring."""
    for alloc in _walk(launch, "memref.alloc"):
        t = ir.MemRefType(alloc.results[0].type)
        if not t.has_static_shape or t.memory_space is not None:
            continue
        with ir.InsertionPoint(alloc), alloc.location:
            new = memref_d.AllocaOp(t, [], [])
        alloc.results[0].replace_all_uses_with(new.result)
        for u in users(new.result):
            if u.name == "memref.dealloc":
                u.erase()
        alloc.erase()


def private_accumulators(launch: ir.Operation, arch: CudaArch) -> int:
    """Rewrite 6 of the module docstring on ``arch``; returns how many ops now accumulate
    privately."""
    most = max_private_elements(arch)
    n = 0
    for fill in _walk(launch, "linalg.fill"):
        tile = fill.operands[1]
        t = ir.MemRefType(tile.type)
        if not t.has_static_shape or t.memory_space is not None or defining_op(tile) is None or defining_op(tile).name != "memref.subview":
            continue
        size = 1
        for d in t.shape:
            size *= d
        ops = _ops(fill.block)
        i = ops.index(fill) + 1
        while i < len(ops) and ops[i].name in _NEUTRAL:
            i += 1
        if i == len(ops) or not ops[i].name.startswith("linalg.") or size > most:
            continue
        op = ops[i]
        if op.name in ("linalg.copy", "linalg.fill", "linalg.map") or op.operands[len(op.operands) - 1] != tile:
            continue
        root = view_root(tile)
        if any(isinstance(v.type, ir.MemRefType) and view_root(v) == root
               for v in list(op.operands)[:-1]):
            continue   # an input aliases the output's buffer
        with ir.InsertionPoint(fill), fill.location:
            acc = memref_d.AllocaOp(ir.MemRefType.get(t.shape, t.element_type), [], []).result
        fill.operands[1] = acc
        op.operands[len(op.operands) - 1] = acc
        with ir.InsertionPoint(op), op.location:
            linalg_d.copy(acc, outs=[tile])   # the builder fills the op's region
        _ops(op.block)[_ops(op.block).index(op) - 1].move_after(op)
        n += 1
    return n


def contract_multiply_adds(launch: ir.Operation) -> None:
    """Rewrite 5 of the module docstring."""
    contract = ir.Attribute.parse("#arith.fastmath<contract>")   # debt: no builder in the bindings
    for name in ("arith.mulf", "arith.addf"):
        for op in _walk(launch, name):
            parent = op.parent
            if parent is not None and parent.name.startswith("linalg."):
                op.attributes["fastmath"] = contract


def drop_self_copies(module: Module) -> Module:
    """Rewrite 2 of the module docstring on all of ``module`` (host code too); returns a copy."""
    out = module.clone()
    with out.context:
        erase_self_copies(out.operation)
    return out


def clean_kernel_buffers(module: Module, arch: CudaArch) -> Module:
    """Apply rewrites 1-6 of the module docstring to every ``gpu.launch`` of ``module`` for the
    chip ``arch`` (in place on a copy); returns the copy, verified."""
    out = module.clone()
    with out.context:
        for launch in find_ops(out, "gpu.launch"):
            forward_staging_copies(launch)
            erase_self_copies(launch)
            hoist_accumulators(launch)
            private_allocations(launch)
            private_accumulators(launch, arch)
            contract_multiply_adds(launch)
    return out.verify()
