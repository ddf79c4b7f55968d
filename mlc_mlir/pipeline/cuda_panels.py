"""Memory traffic of the shared-memory GPU matmul (the classic SGEMM kernel: Volkov & Demmel,
"Benchmarking GPUs to tune dense linear algebra", SC'08; the CUTLASS SIMT and MAGMA SGEMM
kernels), as rewrites of the mapped kernels. Before outlining (:func:`rewrite_panels`, memref
level, inside each ``gpu.launch``):

1. ``transpose_row_panels`` -- the ``A`` panel of a thread's register tile (``M x K`` rows of
   ``A`` in workgroup memory, of which each thread reads ``ly > 1`` rows of one column per
   ``k`` step: ``ly`` loads ``kt`` elements apart) is stored ``K``-major: the workgroup buffer
   becomes ``K x (M + pad)`` and every view of it a view of its transpose
   (``memref.reinterpret_cast`` to strides ``[1, M + pad]``), so a thread's ``ly`` values of
   one ``k`` are contiguous (``ld.shared.v4``; the classic SGEMM layout). ``pad``
   (:func:`panel_pad`, 16 bytes) keeps each ``k`` row 16-byte aligned and moves the transposed
   stores of one warp (threads two rows apart writing the same ``k``) off one bank.
2. ``prefetch_panels`` -- double buffering through registers (the "prefetch" of the CUTLASS
   SIMT and MAGMA SGEMM main loops): a serial loop whose body starts with cooperative copies
   from global into workgroup memory (``linalg.copy``, barriers between them), then a
   barrier, ..., and ends with a barrier, loads each thread's part of the first panels into
   a private buffer (``memref.alloca``) before the loop; each iteration stores those
   registers into workgroup memory, passes the barrier, then loads the next panels (``k +
   step``, clamped to the last panel: the last iteration reloads its own) into the registers,
   whose global latency the iteration's compute hides. The barriers between the copies go
   (each copy writes its own buffer; the barrier after them orders all). Applies to a loop
   computing a matmul annotated :data:`~mlc_mlir.schedule.rules.gpu_rules.PREFETCH` = 1 (a
   decision of the GPU matmul rule) whose copied buffers the kernel does not write.

After ``gpu-kernel-outlining`` (:func:`annotate_kernels`, on each ``gpu.func``):

3. every memref argument that each launch passes from a function argument or an allocation
   (through view ops only) gets ``llvm.align`` = :data:`~mlc_mlir.runtime.cuda.DEVICE_ALIGNMENT`
   on the pointers of its descriptor. Those buffers are ``cuMemAlloc`` allocations (256-byte
   aligned: the copies of the host arguments, the temporaries between kernels,
   :class:`~mlc_mlir.runtime.device_array.DeviceArray`) or foreign device pointers that
   :func:`~mlc_mlir.runtime.device_array.as_device_array` accepts only when aligned; a
   descriptor's aligned pointer is its buffer's start also for a view (the view's offset is
   a separate field). LLVM then proves a cooperative copy's 4-element row 16-byte aligned
   (the panel offsets are multiples of 4 elements) and NVPTX emits ``ld.global.v4`` instead
   of four ``ld.global.b32``; nothing is claimed where LLVM cannot prove it (a row of 1029
   floats). ``memref.assume_alignment`` would say the same in the kernel body, but
   ``expand-strided-metadata`` drops it (the subviews read the descriptor around it). Each
   workgroup attribution (a ``.shared`` array, which vector accesses read and write) is
   aligned to as many bytes.
4. every kernel gets ``nvvm.maxnreg`` (PTX ``.maxnreg``, nvcc's ``-maxrregcount``):
   :func:`max_registers` per thread for its block size, so ``ptxas`` keeps a 256-thread
   CUDA-core matmul within 128 registers (two blocks per SM) instead of spending 150 on
   scheduling freedom (one block: half the warps to hide latency with); a tensor-core kernel
   keeps ``ptxas``'s own allocation (its warp tiles' accumulators and fragments).
"""

from __future__ import annotations

from typing import Dict, List, Optional

from .._mlir import arith_d, ir, memref_d
from ..ir.module import Module
from ..ir.walk import defining_op, find_ops
from ..runtime.cuda import DEVICE_ALIGNMENT
from ..schedule.rules.gpu_rules import PREFETCH
from ..target import CudaArch, max_private_elements
from .cuda_buffers import in_workgroup, view_root


def panel_pad(elem_bytes: int) -> int:
    """Elements appended to each ``k`` row of a transposed panel (rewrite 1): 16 bytes, one
    4-bank step of the 32 four-byte banks, keeping the rows ``ld.shared.v4`` aligned."""
    return max(1, 16 // elem_bytes)


def _workgroup_arg(v: ir.Value, launch: ir.Operation):
    """The index of ``v`` among ``launch``'s block arguments when it is a workgroup
    attribution, else None."""
    body = launch.regions[0].blocks[0]
    if not isinstance(v.owner, ir.Block) or v.owner != body:
        return None
    i = ir.BlockArgument(v).arg_number
    n = ir.IntegerAttr(launch.attributes["workgroup_attributions"]).value \
        if "workgroup_attributions" in launch.attributes else 0
    return i if 12 <= i < 12 + n else None


def _row_panel(launch: ir.Operation, mm: ir.Operation):
    """The workgroup buffer of ``mm``'s ``A`` operand when rewrite 1 applies to it: every use
    a static-stride ``memref.subview``, ``mm`` reading ``ly > 1`` rows of one column."""
    a = mm.operands[0]
    view = a.owner.operation if not isinstance(a.owner, ir.Block) else None
    if view is None or view.name != "memref.subview":
        return None
    buf = view.operands[0]
    if _workgroup_arg(buf, launch) is None:
        return None
    t = ir.MemRefType(buf.type)
    shape = ir.MemRefType(a.type).shape
    if t.rank != 2 or not t.has_static_shape or len(shape) != 2 or shape[0] < 2 or shape[1] != 1:
        return None
    for use in buf.uses:
        op = use.owner.operation if hasattr(use.owner, "operation") else use.owner
        if op.name != "memref.subview" or \
                list(ir.DenseI64ArrayAttr(op.attributes["static_strides"])) != [1, 1]:
            return None
    return buf


def transpose_row_panels(launch: ir.Operation) -> int:
    """Rewrite 1 of the module docstring on one ``gpu.launch``; returns how many panels were
    transposed."""
    done = []
    for mm in find_ops(launch, "linalg.matmul"):
        buf = _row_panel(launch, mm)
        if buf is None or buf in done:
            continue
        t = ir.MemRefType(buf.type)
        (m, k), elem, space = t.shape, t.element_type, t.memory_space
        row = m + panel_pad(ir.FloatType(elem).width // 8 if isinstance(elem, ir.FloatType) else 4)
        dyn = ir.ShapedType.get_dynamic_stride_or_offset()
        views = [use.owner.operation if hasattr(use.owner, "operation") else use.owner
                 for use in buf.uses]
        body = launch.regions[0].blocks[0]
        with ir.InsertionPoint.at_block_begin(body), launch.location:
            buf.set_type(ir.MemRefType.get([k, row], elem, memory_space=space))
            layout = ir.StridedLayoutAttr.get(0, [1, row])
            mk = memref_d.ReinterpretCastOp(ir.MemRefType.get([m, k], elem, layout, space), buf,
                                            [], [], [], [0], [m, k], [1, row]).result
            for view in views:
                view.operands[0] = mk
                res = view.results[0]
                res.set_type(ir.MemRefType.get(ir.MemRefType(res.type).shape, elem,
                                               ir.StridedLayoutAttr.get(dyn, [1, row]), space))
        done.append(buf)
    return len(done)


#: Ops a panel's index computation may consist of (no side effects: cloned for the prefetch),
#: besides the ``arith`` dialect's.
_PURE = ("affine.apply", "affine.min", "affine.max", "memref.subview", "memref.cast")


def _pure(op: ir.Operation) -> bool:
    return op.name in _PURE or op.name.startswith("arith.")


def _op(user) -> ir.Operation:
    return user.operation if hasattr(user, "operation") else user


def _written(launch: ir.Operation, root: ir.Value) -> bool:
    """Whether an op in ``launch`` may write ``root`` (a destination of a linalg op, a
    ``memref.store``, or any other non-view op taking a view of it)."""
    hits = []

    def visit(op):
        op = op.operation
        for i, v in enumerate(op.operands):
            if not isinstance(v.type, ir.MemRefType) or op.name in ("memref.subview", "memref.cast") \
                    or view_root(v) != root:
                continue
            if op.name.startswith("linalg.") and i < len(op.operands) - len(op.opview.outputs):
                continue
            if op.name == "memref.load":
                continue
            hits.append(op)
        return ir.WalkResult.ADVANCE

    launch.walk(visit, ir.WalkOrder.PRE_ORDER)
    return bool(hits)


def _clone_slice(v: ir.Value, body: List[ir.Operation], mapping: Dict, ip) -> ir.Value:
    """``v`` recomputed at ``ip`` with the values of ``mapping`` substituted: the ops of
    ``body`` (pure, :data:`_PURE`) it depends on are cloned; values from outside ``body``
    are used as they are. Raises ``ValueError`` on an impure op in the slice."""
    for k, new in mapping.items():
        if k == v:
            return new
    op = defining_op(v)
    if op is None or op not in body:
        return v
    if not _pure(op):
        raise ValueError(op.name)
    operands = [_clone_slice(o, body, mapping, ip) for o in op.operands]
    new = op.clone(ip=ip)
    for i, o in enumerate(operands):
        new.operands[i] = o
    for old, res in zip(op.results, new.results):
        mapping[old] = res
    return mapping[v]


def _staging_copy(op: ir.Operation) -> Optional[ir.Operation]:
    """The cooperative copy ``op`` is or guards: a ``linalg.copy`` from global into workgroup
    memory, or an ``scf.if`` without results or else-branch whose body is one such copy and
    its index computations (``map_nested_forall_to_threads`` guards a copy with fewer vectors
    than the block has threads)."""
    if op.name == "linalg.copy":
        ok = not in_workgroup(op.operands[0]) and in_workgroup(op.operands[1]) and \
            ir.MemRefType(op.operands[0].type).has_static_shape
        return op if ok else None
    if op.name != "scf.if" or len(op.results) or len(op.regions[1].blocks):
        return None
    inner = [_op(o) for o in op.regions[0].blocks[0].operations]
    rest = [o for o in inner if not _pure(o) and o.name != "scf.yield"]
    return _staging_copy(rest[0]) if len(rest) == 1 and rest[0].name == "linalg.copy" else None


def _staging(loop: ir.Operation, launch: ir.Operation):
    """The cooperative copies heading ``loop``'s body and the barrier after them, when rewrite
    2 applies: ``(units: [(op, its copy)], barriers between them, barrier after)`` or None."""
    ops = [_op(o) for o in loop.regions[0].blocks[0].operations]
    units, barriers = [], []
    for op in ops:
        if _pure(op):
            continue
        copy = _staging_copy(op)
        if copy is not None:
            units.append((op, copy))
        elif op.name == "gpu.barrier" and units:
            barriers.append(op)
        else:
            break
    last = ops.index(units[-1][0]) if units else -1
    after = [b for b in barriers if ops.index(b) > last]
    if not after:
        return None
    tail = [o for o in ops if o.name != "scf.yield"]
    if tail[-1].name != "gpu.barrier" or tail[-1] == after[0]:
        return None   # nothing orders the next iteration's stores after this one's reads
    if any(_written(launch, view_root(c.operands[0])) for _, c in units):
        return None
    return units, [b for b in barriers if ops.index(b) < last], after[0]


def _clone_unit(unit: ir.Operation, body: List[ir.Operation], mapping: Dict, ip) -> ir.Operation:
    """A clone of ``unit`` (an op of the loop body ``body``, maybe with regions) at ``ip``,
    the values it uses from the loop body recomputed with ``mapping`` substituted
    (:func:`_clone_slice`)."""
    outside: List[ir.Value] = []

    def used(op):
        for v in op.operation.operands:
            owner = defining_op(v)
            owner = owner if owner is not None else _op(v.owner.owner)
            if not _within(owner, unit) and v not in outside:
                outside.append(v)
        return ir.WalkResult.ADVANCE

    unit.walk(used, ir.WalkOrder.PRE_ORDER)
    repl = [(v, _clone_slice(v, body, mapping, ip)) for v in outside]
    new = unit.clone(ip=ip)

    def substitute(op):
        op = op.operation
        for i, v in enumerate(op.operands):
            for old, value in repl:
                if v == old:
                    op.operands[i] = value
                    break
        return ir.WalkResult.ADVANCE

    new.walk(substitute, ir.WalkOrder.PRE_ORDER)
    return new


def _copy_in(unit: ir.Operation) -> ir.Operation:
    """The ``linalg.copy`` of a staging unit (the unit itself or the one its ``scf.if``
    guards)."""
    return unit if unit.name == "linalg.copy" else \
        next(o for o in map(_op, unit.regions[0].blocks[0].operations) if o.name == "linalg.copy")


def _within(op: ir.Operation, ancestor: ir.Operation) -> bool:
    while op is not None:
        if op == ancestor:
            return True
        op = op.parent
    return False


def prefetch_panels(launch: ir.Operation) -> int:
    """Rewrite 2 of the module docstring on one ``gpu.launch``; returns how many loops now
    prefetch."""
    n = 0
    for loop in find_ops(launch, "scf.for"):
        if not any(PREFETCH in mm.attributes and ir.IntegerAttr(mm.attributes[PREFETCH]).value
                   for mm in find_ops(loop, "linalg.matmul")):
            continue
        found = _staging(loop, launch)
        if found is None:
            continue
        units, between, after = found
        body = [_op(o) for o in loop.regions[0].blocks[0].operations]
        iv = loop.regions[0].blocks[0].arguments[0]
        lb, ub, step = loop.operands[0], loop.operands[1], loop.operands[2]
        try:
            with loop.location:
                before = ir.InsertionPoint(loop)
                later = ir.InsertionPoint(_next(after))
                last = arith_d.SubIOp(ub, step, ip=before).result
                nxt = arith_d.MinSIOp(arith_d.AddIOp(iv, step, ip=later).result, last, ip=later).result
                firsts = [_clone_unit(u, body, {iv: lb}, before) for u, _ in units]
                nexts = [_clone_unit(u, body, {iv: nxt}, later) for u, _ in units]
        except ValueError:
            continue
        with loop.location:
            for (_, copy), first, nxt_unit in zip(units, firsts, nexts):
                t = ir.MemRefType(copy.operands[0].type)
                with ir.InsertionPoint(firsts[0]):
                    reg = memref_d.AllocaOp(ir.MemRefType.get(t.shape, t.element_type), [], []).result
                _copy_in(first).operands[1] = reg
                _copy_in(nxt_unit).operands[1] = reg
                copy.operands[0] = reg
        for b in between:
            b.erase()
        n += 1
    return n


def _next(op: ir.Operation) -> ir.Operation:
    ops = [_op(o) for o in op.block.operations]
    return ops[ops.index(op) + 1]


def max_registers(arch: CudaArch, threads: int) -> int:
    """Registers per thread a CUDA-core kernel of ``threads`` per block may use (rewrite 4):
    twice :func:`~mlc_mlir.target.max_private_elements` (128 of 255 on every architecture so
    far: a GPU matmul's 8 x 8 accumulators and as many for operands and addresses; two blocks
    of 256 threads per SM), at most the register file's share of one thread of a full block
    (``.maxnreg`` overrides the bound ``ptxas`` derives from ``.maxntid``: 1024 threads of
    more than 64 registers could not launch), in the allocation unit of 8.

    A tensor-core kernel (``mma.sync``) gets no ``.maxnreg``: ``ptxas`` allocates under the
    bound of its ``.maxntid``. A warp's ``64 x 64`` f16 tile (the default,
    :func:`~mlc_mlir.schedule.rules.gpu_mma.mma_tile_defaults`) keeps 64 registers of
    accumulators and the ``ldmatrix`` fragments of two ``k`` steps: ``ptxas`` takes 164 for
    it at ``kt = 32`` (three blocks of 2 x 2 warps per SM); held to 128 it spills 116 bytes
    in the ``k`` loop. A ``64 x 32`` tile takes 106-122 either way."""
    share = arch.registers_per_sm // max(threads, 1) // 8 * 8
    return max(8, min(2 * max_private_elements(arch), share))


#: Host ops whose result is a whole buffer from ``cuMemAlloc`` (or a function argument, the
#: caller's device buffer) or keeps its operand's aligned pointer (the view ops: a view's
#: offset is a separate descriptor field), for rewrite 3.
_ALIGNED_ROOTS = ("memref.alloc", "gpu.alloc")
_POINTER_KEEPING = ("memref.subview", "memref.cast", "memref.reinterpret_cast",
                    "memref.expand_shape", "memref.collapse_shape", "memref.transpose")


def _aligned_on_host(v: ir.Value) -> bool:
    """Whether the host value ``v`` (a kernel launch's memref argument) has a
    ``DEVICE_ALIGNMENT``-aligned pointer: a function argument or an allocation, through view
    ops only (``memref.view``, which moves the pointer by a byte shift, is not one)."""
    while True:
        op = defining_op(v)
        if op is None:
            return _op(v.owner.owner).name == "func.func"
        if op.name in _ALIGNED_ROOTS:
            return True
        if op.name not in _POINTER_KEEPING:
            return False
        v = op.operands[0]


def _kernel_arguments(module: Module) -> Dict[tuple, List[List[ir.Value]]]:
    """``{(gpu.module, kernel): [the arguments of each launch]}`` of the host code."""
    out: Dict[tuple, List[List[ir.Value]]] = {}
    for launch in find_ops(module, "gpu.launch_func"):
        key = tuple(ir.SymbolRefAttr(launch.attributes["kernel"]).value)
        out.setdefault(key, []).append(list(launch.opview.kernelOperands))
    return out


def annotate_kernels(module: Module, arch: CudaArch) -> Module:
    """Rewrites 3 and 4 of the module docstring on every ``gpu.func`` of ``module`` for the
    chip ``arch`` (in place on a copy; an argument that a launch passes through another op,
    or a kernel no launch of the module names, keeps no alignment); returns the copy,
    verified."""
    out = module.clone()
    with out.context:
        i32, i64 = ir.IntegerType.get_signless(32), ir.IntegerType.get_signless(64)
        align = ir.IntegerAttr.get(i64, DEVICE_ALIGNMENT)
        launches = _kernel_arguments(out)
        for f in find_ops(out, "gpu.func"):
            inputs = ir.FunctionType(ir.TypeAttr(f.attributes["function_type"]).value).inputs
            old = list(ir.ArrayAttr(f.attributes["arg_attrs"])) if "arg_attrs" in f.attributes \
                else [ir.DictAttr.get({}) for _ in inputs]
            key = (ir.StringAttr(f.parent.attributes["sym_name"]).value,
                   ir.StringAttr(f.attributes["sym_name"]).value)
            calls = launches.get(key, [])
            new = []
            for i, (t, attrs) in enumerate(zip(inputs, old)):
                d = {a.name: a.attr for a in ir.DictAttr(attrs)}
                if isinstance(t, ir.MemRefType) and ir.MemRefType(t).memory_space is None and \
                        calls and all(_aligned_on_host(args[i]) for args in calls):
                    d["llvm.align"] = align
                new.append(ir.DictAttr.get(d))
            f.attributes["arg_attrs"] = ir.ArrayAttr.get(new)
            threads = 1
            for d in ir.DenseI32ArrayAttr(f.attributes["known_block_size"]) \
                    if "known_block_size" in f.attributes else [arch.max_threads_per_block]:
                threads *= d
            if not find_ops(f, "nvgpu.mma.sync"):
                f.attributes["nvvm.maxnreg"] = ir.IntegerAttr.get(i32, max_registers(arch, threads))
            if "workgroup_attributions" in f.attributes:   # the .shared arrays
                n = ir.IntegerAttr(f.attributes["workgroup_attributions"]).value
                f.attributes["workgroup_attrib_attrs"] = ir.ArrayAttr.get(
                    [ir.DictAttr.get({"llvm.align": align})] * n)
    return out.verify()


def rewrite_panels(module: Module) -> Module:
    """Rewrites 1 and 2 of the module docstring on every ``gpu.launch`` of ``module`` (in place on a
    copy); returns the copy, verified."""
    out = module.clone()
    with out.context:
        for launch in find_ops(out, "gpu.launch"):
            transpose_row_panels(launch)
            prefetch_panels(launch)
    return out.verify()
