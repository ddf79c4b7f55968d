"""Stage ``denormals``: run compiled x86 code with subnormal floats flushed to zero.

On many x86 cores (Intel in particular) an FMA with a subnormal operand or result takes a
microcode assist of ~100 cycles instead of 4: a weight matrix trained with weight decay often
holds a few subnormal values, and a matmul that reuses each of them hundreds of times slows down
by 2x or more. The usual answer is to set MXCSR's FTZ (flush-to-zero, bit 15) and DAZ
(denormals-are-zero, bit 6) bits while the kernel runs: ``torch.set_flush_denormal(True)``,
TensorFlow/XLA's ``ScopedFlushDenormal`` around every CPU op, ``-ffast-math``'s ``crtfastmath.o``.

This stage does it inside the compiled code, so it also holds in OpenMP worker threads and in
exported libraries: every public ``llvm.func`` saves MXCSR on entry, sets FTZ|DAZ and restores
the saved value before each ``llvm.return``; every ``omp.parallel`` region does the same for
the thread that runs it. MXCSR is read and written with LLVM's ``llvm.x86.sse.stmxcsr`` /
``llvm.x86.sse.ldmxcsr`` intrinsics (``llvm.call_intrinsic``), so it works on x86-64 only.
Numerics: values below 1.18e-38 (float32) are read and written as zero.
"""

from __future__ import annotations

import platform

from .._mlir import ir, llvm_d
from ..errors import PipelineError
from ..ir.module import Module

#: MXCSR bits: FTZ (bit 15) | DAZ (bit 6).
FTZ_DAZ = 0x8040


def _set_flush(ip: ir.InsertionPoint, loc: ir.Location) -> ir.Value:
    """Emit "saved = MXCSR; MXCSR = saved | FTZ | DAZ" at ``ip``; returns the pointer to the
    saved value (an ``llvm.alloca`` of i32)."""
    i32, i64 = ir.IntegerType.get_signless(32), ir.IntegerType.get_signless(64)
    ptr = llvm_d.PointerType.get()
    with ip, loc:
        one = llvm_d.mlir_constant(ir.IntegerAttr.get(i64, 1))
        saved = llvm_d.alloca(ptr, one, i32, alignment=4)
        flushed = llvm_d.alloca(ptr, one, i32, alignment=4)
        llvm_d.call_intrinsic(None, "llvm.x86.sse.stmxcsr", [saved], [], [])
        old = llvm_d.load(i32, saved)
        new = llvm_d.or_(old, llvm_d.mlir_constant(ir.IntegerAttr.get(i32, FTZ_DAZ)))
        llvm_d.store(new, flushed)
        llvm_d.call_intrinsic(None, "llvm.x86.sse.ldmxcsr", [flushed], [], [])
    return saved


def _restore(before: ir.Operation, saved: ir.Value) -> None:
    with ir.InsertionPoint(before), before.location:
        llvm_d.call_intrinsic(None, "llvm.x86.sse.ldmxcsr", [saved], [], [])


def _exits(region: ir.Region, names: tuple) -> list:
    """Terminators named ``names`` directly in ``region``'s blocks."""
    return [blk.operations[len(blk.operations) - 1] for blk in region.blocks
            if len(blk.operations) and blk.operations[len(blk.operations) - 1].name in names]


def _wrap(region: ir.Region, exit_names: tuple, loc: ir.Location) -> None:
    entry = region.blocks[0]
    saved = _set_flush(ir.InsertionPoint.at_block_begin(entry), loc)
    for term in _exits(region, exit_names):
        _restore(term, saved)


def _is_private(op: ir.Operation) -> bool:
    attrs = op.attributes
    if "sym_visibility" in attrs and ir.StringAttr(attrs["sym_visibility"]).value == "private":
        return True
    return "linkage" in attrs and str(attrs["linkage"]) in ("#llvm.linkage<private>", "#llvm.linkage<internal>")


def flush_denormals(lowered: Module) -> Module:
    """Copy of an LLVM-dialect module whose public functions and ``omp.parallel`` regions run
    with MXCSR's FTZ and DAZ bits set (see the module docstring).

    Raises
    ------
    PipelineError
        If the host is not x86-64 (the stage uses x86's MXCSR), or the module is not in the LLVM
        dialect (run it after the ``lower`` stage).
    """
    if platform.machine().lower() not in ("x86_64", "amd64"):
        raise PipelineError(f"compile: flush_denormals needs an x86-64 host (MXCSR); this host is "
                            f"{platform.machine()}")
    out = lowered.clone()
    with out.context:
        body = out.ir_module.body
        funcs = [op for op in body.operations if op.operation.name == "llvm.func"]
        if not funcs and any(op.operation.name == "func.func" for op in body.operations):
            raise PipelineError("compile: flush_denormals runs on the LLVM dialect (after the lower "
                                "stage); the module still has func.func")
        parallels = []

        def collect(op):
            if op.name == "omp.parallel":
                parallels.append(op)
            return ir.WalkResult.ADVANCE

        for f in funcs:
            op = f.operation
            region = op.regions[0]
            if not len(region.blocks):
                continue  # a declaration
            op.walk(collect)
            if not _is_private(op):
                _wrap(region, ("llvm.return",), op.location)
        for par in parallels:
            _wrap(par.regions[0], ("omp.terminator",), par.location)
    return out
