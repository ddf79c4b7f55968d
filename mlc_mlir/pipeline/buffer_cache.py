"""The buffer cache linked into compiled code: intermediate buffers outlive a call.

:func:`link_buffer_cache` renames a lowered module's ``malloc``/``free`` calls (the
``memref.alloc``/``memref.dealloc`` of its intermediate buffers, after ``finalize-memref-to-llvm``)
to ``mlc_buffer_alloc``/``mlc_buffer_free`` and adds their definitions from
``_data/runtime/buffer_cache.mlir`` (LLVM dialect): a request of at least 64 KiB gets whole
pages mapped with ``mmap``, and a freed block is kept for the next request of the same page
count. The cache keeps one call's blocks: a call ends when the last of the module's entry points
in flight returns (each calls the cache on entry and before each return, :func:`_mark_entry_points`;
a call can free all its blocks midway and allocate others after), and a
request that no idle block fits first unmaps the idle blocks of earlier calls (the pages go
back to the OS). A module whose buffer sizes repeat (a decode step, a fixed-shape model) reuses
every block from its second call on and never unmaps one; one whose sizes change from call to
call (a prefill symbolic in the prompt length) holds the blocks of its latest call, not one set
of blocks per size seen. The JIT and the exported libraries run the
same code, so a call's allocations do not depend on how the code was loaded nor on the state
of glibc's allocator: glibc's mmap threshold rises to the largest mmapped block the process has
freed, and the same JIT code mapped and unmapped its buffers on every call (a 1x64x56x56 conv2d
at 3 ms) or not (0.6 ms) depending on whether ``dump_ir`` had freed a large string before.
Source: ONNX Runtime's arena, PyTorch's caching allocator (cached blocks freed when a request
does not fit); MLC-LLM's memory pool, sized by one step.
"""

from __future__ import annotations

import functools
import os

from .._data import RUNTIME_DIR
from .._mlir import ir, llvm_d
from ..ir.module import Module

#: The LLVM-dialect source of the cache.
BUFFER_CACHE_FILE = os.path.join(RUNTIME_DIR, "buffer_cache.mlir")

#: What the module's allocation calls become.
RENAMED = {"malloc": "mlc_buffer_alloc", "free": "mlc_buffer_free"}


@functools.lru_cache(maxsize=1)
def _source() -> str:
    with open(BUFFER_CACHE_FILE) as f:
        return f.read()


def _rename_calls(module: Module) -> int:
    """Point ``llvm.call @malloc``/``@free`` of ``module`` at the cache; returns how many."""
    renamed = []

    def visit(op):
        op = op.operation if hasattr(op, "operation") else op
        if op.name == "llvm.call" and "callee" in op.attributes:
            callee = ir.FlatSymbolRefAttr(op.attributes["callee"]).value
            if callee in RENAMED:
                renamed.append(op)
        return ir.WalkResult.ADVANCE

    with module.context:
        module.operation.walk(visit, ir.WalkOrder.PRE_ORDER)
        for op in renamed:
            callee = ir.FlatSymbolRefAttr(op.attributes["callee"]).value
            op.attributes["callee"] = ir.FlatSymbolRefAttr.get(RENAMED[callee])
    return len(renamed)


#: What the module's entry points call first and before each return (the cache's calls in flight).
CALL_MARKS = ("mlc_buffer_call_enter", "mlc_buffer_call_exit")


def _mark_entry_points(module: Module) -> int:
    """Make each defined ``llvm.func`` of ``module`` with ``llvm.emit_c_interface`` (the
    module's entry points and their C-interface wrappers: a wrapper's call of its function only
    counts deeper) call :data:`CALL_MARKS` on entry and before each ``llvm.return``; returns
    how many. Without such functions the cache falls back to its blocks in use."""
    marked = 0
    with module.context, ir.Location.unknown():
        for op in module.ir_module.body.operations:
            op = op.operation
            if op.name != "llvm.func" or not op.regions[0].blocks:
                continue
            if "llvm.emit_c_interface" not in op.attributes:
                continue
            returns = [inner.operation for block in op.regions[0].blocks for inner in block.operations
                       if inner.operation.name == "llvm.return"]
            points = [ir.InsertionPoint.at_block_begin(op.regions[0].blocks[0])] + [ir.InsertionPoint(r) for r in returns]
            for i, point in enumerate(points):
                llvm_d.CallOp(None, [], [], [], callee=ir.FlatSymbolRefAttr.get(CALL_MARKS[min(i, 1)]), ip=point)
            marked += 1
    return marked


def link_buffer_cache(lowered: Module) -> Module:
    """A copy of ``lowered`` (LLVM dialect) whose ``malloc``/``free`` calls go to the buffer
    cache, defined in it (internal symbols: each module has its own cache); ``lowered`` itself
    when it calls neither.

    A ``llvm.mlir.global_dtors`` already in ``lowered`` gets the cache's destructor appended."""
    out = lowered.clone()
    if not _rename_calls(out):
        return lowered
    _mark_entry_points(out)
    with out.context, ir.Location.unknown():
        cache = ir.Module.parse(_source())
        body = out.ir_module.body
        existing = {ir.StringAttr(op.operation.attributes["sym_name"]).value: op.operation
                    for op in body.operations if "sym_name" in op.operation.attributes}
        dtors = next((op.operation for op in body.operations
                      if op.operation.name == "llvm.mlir.global_dtors"), None)
        for op in list(cache.body.operations):
            op = op.operation
            if op.name == "llvm.mlir.global_dtors" and dtors is not None:
                for key in ("dtors", "priorities", "data"):
                    dtors.attributes[key] = ir.ArrayAttr.get(
                        list(ir.ArrayAttr(dtors.attributes[key])) + list(ir.ArrayAttr(op.attributes[key])))
                continue
            name = ir.StringAttr(op.attributes["sym_name"]).value if "sym_name" in op.attributes else None
            if name in existing:  # a declaration the module has too (malloc, free)
                continue
            op.detach_from_parent()
            body.append(op)
    return out
