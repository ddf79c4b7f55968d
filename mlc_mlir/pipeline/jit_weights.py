"""Weights that the JIT links instead of compiling: large ``dense_resource`` globals become
external declarations bound to the numpy buffers that already hold their bytes.

A weight constant reaches the LLVM dialect as ``llvm.mlir.global private constant
@__constant_..(dense_resource<w>)``. Compiled as it is, LLVM's code generator writes its
initializer into the object file one element at a time (``AsmPrinter::emitGlobalConstantFP``
per float: ~80% of the JIT time of GPT-2 124M, 500 MB of weights). For the JIT, each global of
at least :data:`LINK_MIN_BYTES` bytes becomes ``llvm.mlir.global external constant @..()`` (no
initializer) and the engine binds the symbol to the address of the weight's buffer
(``ExecutionEngine.raw_register_runtime``): no copy, no code generation for data. The JIT
generates code for the large code model (absolute 64-bit relocations, checked on x86-64), so a
buffer anywhere in the address space is reachable. The declared alignment is the buffer's
own: a cache line for the blobs :meth:`~mlc_mlir.ir.constants.Blobs.constant` makes
(:func:`~mlc_mlir.ir.constants.line_aligned`), less for a buffer bound by other means. Each linked buffer is backed
by transparent huge pages where the system has them
(:func:`~mlc_mlir.runtime.huge_pages.advise_huge_pages`: a weight that is a view of a torch
tensor otherwise stays on 4 KiB pages). The AOT library keeps the initializers (its weights live
in the ``.so``).

Source: the ORC JIT's absolute symbols (``absoluteSymbols``), as a JIT links host data; TVM and
IREE likewise pass large constants to the compiled code as parameters instead of embedding them.
"""

from __future__ import annotations

import ctypes
from typing import List, Tuple

import numpy as np

from .._mlir import ir
from ..ir.constants import resource_name
from ..ir.module import Module
from ..runtime.huge_pages import advise_huge_pages

#: Globals of at least this many bytes are linked, not compiled. Smaller ones stay in the code,
#: where LLVM can fold loads from them (small tables, transform matrices).
LINK_MIN_BYTES = 16384

_MAX_ALIGN = 64


def _alignment(address: int) -> int:
    align = 1
    while align < _MAX_ALIGN and address % (2 * align) == 0:
        align *= 2
    return align


def link_weights(lowered: Module) -> Tuple[Module, List[Tuple[str, ctypes.c_void_p]], List[np.ndarray]]:
    """A copy of ``lowered`` (LLVM dialect) whose large weight globals are external declarations,
    the ``(symbol, address)`` pairs the engine must bind them to (``load_engine``'s
    ``native_symbols``) and the arrays at those addresses; ``lowered`` itself and empty lists
    when there is none. A global whose bytes this module does not know (an element type with no
    numpy dtype) keeps its initializer.

    The addresses point into the weights of ``lowered`` (:meth:`Module.constant_value`): whatever
    calls the engine must hold the returned arrays as long as the engine lives (the module and
    its context may be gone by then).
    """
    found = []
    with lowered.context:
        for op in lowered.ir_module.body.operations:
            op = op.operation
            if op.name == "llvm.mlir.global" and "value" in op.attributes and \
                    resource_name(op.attributes["value"]):
                found.append(ir.StringAttr(op.attributes["sym_name"]).value)
    if not found:
        return lowered, [], []
    out = lowered.clone()
    symbols: List[Tuple[str, ctypes.c_void_p]] = []
    arrays: List[np.ndarray] = []
    wanted = set(found)
    with out.context:
        external = ir.Attribute.parse("#llvm.linkage<external>")
        i64 = ir.IntegerType.get_signless(64)
        for op in out.ir_module.body.operations:
            op = op.operation
            if op.name != "llvm.mlir.global":
                continue
            name = ir.StringAttr(op.attributes["sym_name"]).value
            if name not in wanted:
                continue
            value = out.constant_value(op.attributes["value"])
            if value is None or value.nbytes < LINK_MIN_BYTES or not value.flags.c_contiguous:
                continue
            address = value.ctypes.data
            del op.attributes["value"]
            op.attributes["linkage"] = external
            op.attributes["alignment"] = ir.IntegerAttr.get(i64, _alignment(address))
            symbols.append((name, ctypes.c_void_p(address)))
            arrays.append(value)
            advise_huge_pages(value)   # streamed by every call: one TLB entry per huge page
    return (out, symbols, arrays) if symbols else (lowered, [], [])
