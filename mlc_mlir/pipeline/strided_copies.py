"""Strided buffer copies as loops: :func:`strided_copies_to_loops`.

One-Shot Bufferize and ``buffer-results-to-out-params`` leave ``memref.copy`` ops between
buffers (a unit's input read from the interior of a padded buffer and passed to a shared unit,
whose boundary takes identity-layout memrefs; a value kept apart from the padded buffer it is
also inserted into). ``finalize-memref-to-llvm`` lowers each to a call of the runtime's
``memrefCopy``, which copies a non-contiguous memref one element at a time (a ``memcpy`` of the
element size per element, with the index arithmetic of a generic rank): SqueezeNet spends about
a tenth of its time there (perf, one thread: ``memrefCopy`` plus the ``memmove`` it calls),
copying the interiors of its fire modules' padded squeeze outputs.

Run on the buffers before ``convert-linalg-to-loops``, this rewrites each ``memref.copy``

* of a buffer onto itself: erased (nothing to copy);
* between buffers of which one is not contiguous (strides other than the row-major ones of its
  shape, size-1 dims aside): a call of one private kernel per rank and element type (both sides
  ``memref.cast`` to fully dynamic sizes, strides and offset) whose body is a ``linalg.copy``,
  which ``convert-linalg-to-loops`` lowers to a loop nest whose innermost loop runs over the last
  dim (LLVM vectorizes it, versioned on a unit stride). One kernel for all sites, not a loop
  nest per site: DenseNet-121 has ~100 such copies, and LLVM optimized each nest on its own;

and leaves a copy between contiguous buffers to ``memrefCopy`` (one ``memcpy``).

With more than one thread, a copy at the top level of a function (not inside a loop or a
threads' loop) of at least ``threads`` L1d's worth of elements (the threshold of
:func:`~mlc_mlir.schedule.rules.common.worth_threads`, from the Target) calls a parallel kernel
instead: an ``scf.forall`` over leading dims (OpenMP, as the schedules' loops), each
iteration a ``linalg.copy`` of the rest (the fewest leading dims that give every thread an
iteration: an NHWC activation's 1 x H, each iteration a W x C slab). Light ResNet-50's pad units, which copy a 1x1
convolution's output into the interior of the next 3x3 convolution's padded input (56x56x64
floats and smaller), ran serially: ~1.7% of a 2-thread inference, alone on the main thread
(perf, 2-core AVX2 EPYC; ``benchmarks/results/models_cpu_2026-11-27_znver3_r50-2t.txt``).

Source: MLIR ``linalg.copy`` (One-Shot Bufferize's ``memcpy_op = "linalg.copy"`` option of the
transform op, which the pass form does not expose); the runtime's ``memrefCopy``
(``mlir/lib/ExecutionEngine/CRunnerUtils.cpp``).
"""

from __future__ import annotations

from typing import Dict, Tuple

from .._mlir import arith_d, func_d, ir, linalg_d, memref_d, scf_d
from ..ir.module import Module
from ..ir.walk import find_ops


def _index(v: int) -> ir.Value:
    """An ``index`` constant."""
    return arith_d.constant(ir.IndexType.get(), v)


def contiguous(t: ir.MemRefType) -> bool:
    """Whether the memref type ``t`` (static strides) lays its elements out row-major without
    gaps (the offset aside); a dynamic stride or size counts as not contiguous."""
    if not t.has_static_shape:
        return False
    strides, _ = t.get_strides_and_offset()
    expected = 1
    for size, stride in reversed(list(zip(t.shape, strides))):
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True


def _rewritten(op: ir.Operation) -> bool:
    """Whether :func:`strided_copies_to_loops` rewrites the ``memref.copy`` ``op``."""
    src, dst = op.operands[0], op.operands[1]
    if src == dst:
        return True
    ranked = all(isinstance(v.type, ir.MemRefType) for v in (src, dst))
    return ranked and not all(contiguous(ir.MemRefType(v.type)) for v in (src, dst))


def strided_copies_to_loops(module: Module, threads: int = 1, l1d_bytes: int = 0) -> Module:
    """``module`` (on buffers) with each ``memref.copy`` of a buffer onto itself erased and each
    one with a non-contiguous side a ``linalg.copy`` (see the module docstring), run by
    ``threads`` OpenMP threads where it is at the top level of its function and moves at least
    ``threads * l1d_bytes`` bytes (``l1d_bytes`` 0: 32 KiB); ``module`` itself when it has
    neither."""
    with module.context:
        if not any(_rewritten(op) for op in find_ops(module, "memref.copy")):
            return module
    out = module.clone()
    kernels: Dict[Tuple[int, str, int], Tuple[str, ir.Type]] = {}
    with out.context, ir.Location.unknown():
        names = set(out.function_names())
        for op in [op for op in find_ops(out, "memref.copy") if _rewritten(op)]:
            if op.operands[0] != op.operands[1]:
                t = ir.MemRefType(op.operands[0].type)
                name, dyn = _kernel(out, kernels, names, t, _threaded(op, t, threads, l1d_bytes))
                with ir.InsertionPoint(op), op.location:
                    args = [memref_d.cast(dyn, v) for v in op.operands]
                    func_d.CallOp([], ir.FlatSymbolRefAttr.get(name), args)
            op.erase()
    return out


def _threaded(op: ir.Operation, t: ir.MemRefType, threads: int, l1d_bytes: int) -> int:
    """How many leading dims of the copy ``op`` (type ``t``) the threads split: the fewest
    whose iterations number at least ``threads``, where there are more than one thread, a
    static shape of integers or floats with such dims (all but the last), at least ``threads`` L1d's worth of bytes,
    and the function body as the copy's parent (a copy inside a loop would fork the threads
    once per iteration; inside a threads' loop, OpenMP would nest); 0: the serial kernel."""
    width = getattr(t.element_type, "width", None)   # integer and float types (not index)
    if threads < 2 or len(t.shape) < 2 or not t.has_static_shape or width is None:
        return 0
    nbytes = max(1, width // 8)
    for d in t.shape:
        nbytes *= d
    parent = op.parent
    if nbytes < threads * (l1d_bytes or (32 << 10)) or parent is None or parent.name != "func.func":
        return 0
    rows = 1
    for k, d in enumerate(t.shape[:-1], 1):
        rows *= d
        if rows >= threads:
            return k
    return 0


def _kernel(module: Module, kernels: dict, names: set, t: ir.MemRefType,
            threaded: int = 0) -> Tuple[str, ir.Type]:
    """The copy kernel of ``t``'s rank and element type, serial or with its ``threaded``
    leading dims split over the threads (made at the end of ``module`` on first use):
    ``(symbol, its argument type)``, a memref of dynamic sizes, strides and offset."""
    rank, elt = len(t.shape), t.element_type
    key = (rank, str(elt), threaded)
    if key in kernels:
        return kernels[key]
    dyn_size = ir.ShapedType.get_dynamic_size()
    dyn_stride = ir.ShapedType.get_dynamic_stride_or_offset()
    layout = ir.StridedLayoutAttr.get(dyn_stride, [dyn_stride] * rank)
    dyn = ir.MemRefType.get([dyn_size] * rank, elt, layout, t.memory_space)
    base = f"mlc_strided_copy_{rank}d_{elt}" + (f"_threads{threaded}" if threaded else "")
    name, k = base, 0
    while name in names:
        k += 1
        name = f"{base}_{k}"
    names.add(name)
    with ir.InsertionPoint(module.ir_module.body), ir.Location.unknown():
        fn = func_d.FuncOp(name, ir.FunctionType.get([dyn, dyn], []), visibility="private")
        # one out-of-line kernel: LLVM would otherwise inline it back into every site
        fn.attributes["passthrough"] = ir.ArrayAttr.get([ir.StringAttr.get("noinline")])
        entry = fn.add_entry_block()
        with ir.InsertionPoint(entry):
            src, dst = entry.arguments
            if threaded:
                _slab_copies(src, dst, rank, threaded)
            else:
                linalg_d.copy(src, outs=[dst])
            func_d.ReturnOp([])
    kernels[key] = (name, dyn)
    return kernels[key]


def _slab_copies(src: ir.Value, dst: ir.Value, rank: int, lead: int) -> None:
    """``scf.forall`` over the ``lead`` leading dims of ``src`` (equal to ``dst``'s), each
    iteration a ``linalg.copy`` of the slab of the other dims of ``src`` into ``dst``."""
    sizes = [memref_d.dim(src, _index(d)) for d in range(rank)]
    loop = scf_d.ForallOp([0] * lead, sizes[:lead], [1] * lead)
    with ir.InsertionPoint(loop.body):
        ivs = list(loop.body.arguments)
        dyn = ir.ShapedType.get_dynamic_stride_or_offset()
        slab = ir.MemRefType.get([1] * lead + [ir.ShapedType.get_dynamic_size()] * (rank - lead),
                                 ir.MemRefType(src.type).element_type,
                                 ir.StridedLayoutAttr.get(dyn, [dyn] * rank))
        rows = [memref_d.subview(v, ivs + [0] * (rank - lead), [1] * lead + sizes[lead:], [1] * rank,
                                 result_type=slab) for v in (src, dst)]
        linalg_d.copy(rows[0], outs=[rows[1]])
        scf_d.InParallelOp()
