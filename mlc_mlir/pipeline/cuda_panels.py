"""Memory traffic of the shared-memory GPU matmul (the classic SGEMM kernel: Volkov & Demmel,
"Benchmarking GPUs to tune dense linear algebra", SC'08; the CUTLASS SIMT and MAGMA SGEMM
kernels), as rewrites of the mapped kernels:

1. ``align_kernel_arguments`` (after ``gpu-kernel-outlining``) -- every memref argument of a
   kernel (``gpu.func``) gets ``llvm.align`` = :data:`~mlc_mlir.runtime.cuda.DEVICE_ALIGNMENT`
   on the pointers of its descriptor. The buffers a kernel receives are ``cuMemAlloc``
   allocations (256-byte aligned: the copies of the host arguments, the temporaries between
   kernels, :class:`~mlc_mlir.runtime.device_array.DeviceArray`), or foreign device pointers
   that :func:`~mlc_mlir.runtime.device_array.as_device_array` accepts only when aligned; a
   descriptor's aligned pointer is its buffer's start also for a view (the view's offset is a
   separate field). LLVM then proves a cooperative copy's 4-element row 16-byte aligned (the
   panel offsets are multiples of 4 elements) and NVPTX emits ``ld.global.v4`` instead of four
   ``ld.global.b32``. ``memref.assume_alignment`` would say the same in the kernel body, but
   ``expand-strided-metadata`` drops it (the subviews read the descriptor around it).
2. ``transpose_row_panels`` (before outlining) -- the ``A`` panel of a thread's register tile
   (``M x K`` rows of ``A`` in workgroup memory, of which each thread reads ``ly > 1`` rows of
   one column per ``k`` step: ``ly`` loads ``kt`` elements apart) is stored ``K``-major: the
   workgroup buffer becomes ``K x (M + pad)`` and every view of it a view of its transpose
   (``memref.reinterpret_cast`` to strides ``[1, M + pad]``), so a thread's ``ly`` values of
   one ``k`` are contiguous (``ld.shared.v4``; the classic SGEMM layout). ``pad``
   (:func:`panel_pad`, 16 bytes) keeps each ``k`` row 16-byte aligned and moves the transposed
   stores of one warp (threads two rows apart writing the same ``k``) off one bank.
"""

from __future__ import annotations

from .._mlir import ir, memref_d
from ..errors import PipelineError
from ..ir.module import Module
from ..ir.walk import find_ops
from ..runtime.cuda import DEVICE_ALIGNMENT

#: The pass after which the CUDA pipeline's kernels are ``gpu.func`` ops (split point of
#: :func:`split_after_outlining`).
OUTLINING = "gpu-kernel-outlining"


def split_after_outlining(text: str):
    """``(head, tail)``: two pass pipelines, the passes of ``text`` (``builtin.module(a, b,
    ...)``) up to :data:`OUTLINING` and the rest.

    Raises
    ------
    PipelineError
        If ``text`` is not ``builtin.module(...)`` with a top-level ``gpu-kernel-outlining``
        followed by more passes.
    """
    body = text.strip()
    if not (body.startswith("builtin.module(") and body.endswith(")")):
        raise PipelineError(f"cuda lower: the pipeline is not builtin.module(...): {text!r}")
    marker = OUTLINING + ","
    if body.count(marker) != 1:
        raise PipelineError(f"cuda lower: the pipeline needs one '{marker}' followed by the "
                            f"lowering to NVVM; got {text!r}")
    head, tail = body.split(marker)
    return head + OUTLINING + ")", "builtin.module(" + tail


def panel_pad(elem_bytes: int) -> int:
    """Elements appended to each ``k`` row of a transposed panel (rewrite 2): 16 bytes, one
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
    """The workgroup buffer of ``mm``'s ``A`` operand when rewrite 2 applies to it: every use
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
    """Rewrite 2 of the module docstring on one ``gpu.launch``; returns how many panels were
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


def align_kernel_arguments(module: Module) -> Module:
    """Rewrite 1 of the module docstring on every ``gpu.func`` of ``module`` (in place on a
    copy); returns the copy, verified."""
    out = module.clone()
    with out.context:
        align = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), DEVICE_ALIGNMENT)
        for f in find_ops(out, "gpu.func"):
            inputs = ir.FunctionType(ir.TypeAttr(f.attributes["function_type"]).value).inputs
            old = list(ir.ArrayAttr(f.attributes["arg_attrs"])) if "arg_attrs" in f.attributes \
                else [ir.DictAttr.get({}) for _ in inputs]
            new = []
            for t, attrs in zip(inputs, old):
                d = {a.name: a.attr for a in ir.DictAttr(attrs)}
                if isinstance(t, ir.MemRefType) and ir.MemRefType(t).memory_space is None:
                    d["llvm.align"] = align
                new.append(ir.DictAttr.get(d))
            f.attributes["arg_attrs"] = ir.ArrayAttr.get(new)
    return out.verify()


def rewrite_panels(module: Module) -> Module:
    """Rewrite 2 of the module docstring on every ``gpu.launch`` of ``module`` (in place on a
    copy); returns the copy, verified."""
    out = module.clone()
    with out.context:
        for launch in find_ops(out, "gpu.launch"):
            transpose_row_panels(launch)
    return out.verify()
