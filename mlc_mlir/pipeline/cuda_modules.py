"""CUDA kernels loaded by ordinary host functions: each ``gpu.binary`` and the
``gpu.launch_func`` ops that name it rewritten into the LLVM dialect before the JIT.

MLIR's translation of a ``gpu.binary`` (offloading handler ``#gpu.select_object``) makes a
global constructor that loads the embedded cubin (``mgpuModuleLoad``) and a global destructor
that unloads it, both in the section ``.text.startup``; the rest of the host code goes to
``.ltext`` (x86-64 large code model). The JIT (RuntimeDyld) maps each code section on its own,
and the two can land far apart (the small one in a hole that an earlier engine left): the
object's unwind information then covers a PC range that contains other JIT objects and shared
libraries. ``libgcc`` from GCC 13 on keeps such registered frames
in a b-tree that assumes non-overlapping ranges (``unwind-dw2-btree.h``; GCC PR119151); with an
overlapping one, destroying the engine leaves a stale entry, and the next C++ exception thrown
by a library whose code lies in that range (the MLIR bindings end every op iteration with
one) dies in ``_Unwind_Find_FDE`` with SIGSEGV.

:func:`load_gpu_binaries` emits what that translation emits, as ``llvm`` dialect ops in the
host module: per binary an internal constant with the cubin and an internal global with its
``CUmodule``; one load function (global constructor: ``mgpuModuleLoad`` of each binary) and one
unload function (global destructor: ``mgpuModuleUnload``), both without a section; per launch
``mgpuModuleGetFunction`` and ``mgpuLaunchKernel`` with an array of pointers to the kernel
arguments. The host object then has one code section.

Source: ``mlir/lib/Target/LLVMIR/Dialect/GPU/SelectObjectAttr.cpp`` (the same globals, calls
and kernel-argument array), ``mlir/lib/ExecutionEngine/CudaRuntimeWrappers.cpp`` (the
``mgpu*`` signatures).
"""

from __future__ import annotations

from typing import Dict, List, Tuple

from .._mlir import gpu_d, ir, llvm_d
from ..errors import PipelineError
from ..ir.module import Module

#: The load function (global constructor) and the unload function (global destructor).
LOAD, UNLOAD = "__mlc_cuda_modules_load", "__mlc_cuda_modules_unload"

#: Constructor priority: before the resident weights' (``cuda_host.PRIORITY``), as MLIR's own.
PRIORITY = 123


def _ptr() -> ir.Type:
    return llvm_d.PointerType.get()


def _int(width: int) -> ir.Type:
    return ir.IntegerType.get_signless(width)


def _array(n: int, element: ir.Type) -> ir.Type:
    return ir.Type.parse(f"!llvm.array<{n} x {element}>")   # debt: the bindings have no builder


def _function_type(result, inputs: List[ir.Type]) -> ir.Type:
    """``!llvm.func<result (inputs)>``; ``result`` None for void."""
    return ir.Type.parse(f"!llvm.func<{result or 'void'} ({', '.join(map(str, inputs))})>")


def _internal() -> ir.Attribute:
    return ir.Attribute.parse("#llvm.linkage<internal>")


def _call(name: str, args: List[ir.Value], result=None):
    """``llvm.call @name(args)``; its result when ``result`` (a type) is given."""
    op = llvm_d.CallOp(result, args, [], [], callee=ir.FlatSymbolRefAttr.get(name))
    return op.result if result is not None else None


def _declare(module: ir.Module, known: set, name: str, result, inputs: List[ir.Type]) -> None:
    """Declare the external ``llvm.func @name`` unless the module has that symbol."""
    if name in known:
        return
    with ir.InsertionPoint(module.body):
        llvm_d.LLVMFuncOp(name, ir.TypeAttr.get(_function_type(result, inputs)))
    known.add(name)


def internal_global(module: ir.Module, name: str, t: ir.Type, value=None,
                    constant: bool = False) -> None:
    """Add ``llvm.mlir.global internal @name`` of type ``t`` at the start of ``module``: its
    initializer ``value`` (an attribute), or zeros (an initializer region); ``constant`` for
    read-only data. Call with the module's context and a location active."""
    with ir.InsertionPoint.at_block_begin(module.body):
        g = llvm_d.GlobalOp(ir.TypeAttr.get(t), name, _internal(), value=value,
                            constant=constant)
    if value is None:
        with ir.InsertionPoint(g.regions[0].blocks.append()):
            llvm_d.ReturnOp(arg=llvm_d.ZeroOp(t).result)


def _cubin(binary: ir.Operation) -> bytes:
    """The single cubin (``bin`` or ``fatbin`` object) of ``binary``."""
    name = ir.StringAttr(binary.attributes["sym_name"]).value
    objects = ir.ArrayAttr(binary.attributes["objects"])
    if len(objects) != 1:
        raise PipelineError(f"cuda modules: gpu.binary @{name} has {len(objects)} objects; "
                            "expected one (a single nvvm target)")
    obj = gpu_d.ObjectAttr(objects[0])
    if obj.format not in (gpu_d.CompilationTarget.Binary, gpu_d.CompilationTarget.Fatbin):
        kind = gpu_d.CompilationTarget(obj.format).name.lower()
        raise PipelineError(f"cuda modules: gpu.binary @{name} holds {kind} code, not a cubin "
                            "(gpu-module-to-binary format=bin or fatbin)")
    return obj.object


def _kernel_ref(launch: ir.Operation) -> Tuple[str, str]:
    """(binary, kernel) of a ``gpu.launch_func`` (its ``@binary::@kernel``)."""
    binary, kernel = ir.SymbolRefAttr(launch.opview.kernel).value
    return binary, kernel


def _launches(module: ir.Module) -> List[ir.Operation]:
    found: List[ir.Operation] = []

    def visit(op):
        if op.name == "gpu.launch_func":
            found.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return found


def _lower_launch(op: ir.Operation, modules: Dict[str, str], names: Dict[Tuple[str, str], str],
                  entry: ir.Block) -> None:
    """Replace ``gpu.launch_func`` ``op`` by ``mgpuModuleGetFunction`` and ``mgpuLaunchKernel``;
    the argument slots are allocas at the start of the function's ``entry`` block."""
    launch = op.opview
    if launch.clusterSizeX is not None:
        raise PipelineError("cuda modules: gpu.launch_func with a cluster size is not supported")
    if launch.asyncObject is None or len(launch.asyncDependencies) or launch.asyncToken is not None:
        raise PipelineError("cuda modules: gpu.launch_func without its stream "
                            "(<%stream : !llvm.ptr>); gpu-to-llvm leaves one on every launch")
    binary, kernel = _kernel_ref(op)
    args = list(launch.kernelOperands)
    with ir.InsertionPoint.at_block_begin(entry), op.location:
        one = llvm_d.ConstantOp(_int(64), ir.IntegerAttr.get(_int(64), 1)).result
        slots = [llvm_d.AllocaOp(_ptr(), one, ir.TypeAttr.get(a.type)).result for a in args]
        params = llvm_d.AllocaOp(_ptr(), one, ir.TypeAttr.get(
            _array(len(args), _ptr()))).result
    with ir.InsertionPoint(op), op.location:
        for i, (a, slot) in enumerate(zip(args, slots)):
            llvm_d.StoreOp(a, slot)
            at = llvm_d.GEPOp(_ptr(), params, [], ir.DenseI32ArrayAttr.get([0, i]),
                              ir.TypeAttr.get(_array(len(args), _ptr())),
                              ir.IntegerAttr.get(_int(32), 0)).result
            llvm_d.StoreOp(slot, at)
        handle = llvm_d.LoadOp(_ptr(), llvm_d.AddressOfOp(_ptr(), modules[binary]).result).result
        name = llvm_d.AddressOfOp(_ptr(), names[(binary, kernel)]).result
        fn = _call("mgpuModuleGetFunction", [handle, name], _ptr())
        smem = launch.dynamicSharedMemorySize
        if smem is None:
            smem = llvm_d.ConstantOp(_int(32), ir.IntegerAttr.get(_int(32), 0)).result
        null = llvm_d.ZeroOp(_ptr()).result
        count = llvm_d.ConstantOp(_int(64), ir.IntegerAttr.get(_int(64), len(args))).result
        _call("mgpuLaunchKernel", [fn, launch.gridSizeX, launch.gridSizeY, launch.gridSizeZ,
                                   launch.blockSizeX, launch.blockSizeY, launch.blockSizeZ,
                                   smem, launch.asyncObject, params, null, count])
    op.erase()


def _register(module: ir.Module) -> None:
    """Put :data:`LOAD`/:data:`UNLOAD` first in ``llvm.mlir.global_ctors``/``dtors`` (one op
    each, merged with those the module has: their functions, priorities and data kept)."""
    prio, zero = ir.IntegerAttr.get(_int(32), PRIORITY), ir.Attribute.parse("#llvm.zero")
    entries = {"llvm.mlir.global_ctors": ([ir.FlatSymbolRefAttr.get(LOAD)], [prio], [zero]),
               "llvm.mlir.global_dtors": ([ir.FlatSymbolRefAttr.get(UNLOAD)], [prio], [zero])}
    for op in list(module.body.operations):
        if op.operation.name in entries:
            key = "ctors" if op.operation.name.endswith("ctors") else "dtors"
            for into, name in zip(entries[op.operation.name], (key, "priorities", "data")):
                into += list(ir.ArrayAttr(op.attributes[name]))
            op.operation.erase()
    for lists, build in zip(entries.values(), (llvm_d.GlobalCtorsOp, llvm_d.GlobalDtorsOp)):
        with ir.InsertionPoint(module.body):
            build(*(ir.ArrayAttr.get(items) for items in lists))


def load_gpu_binaries(lowered: Module) -> Module:
    """``lowered`` (the host module in the LLVM dialect, with ``gpu.binary`` ops and the
    ``gpu.launch_func`` ops that launch their kernels) with both rewritten into ``llvm`` ops
    (see the module docstring): a copy, or ``lowered`` itself when it has no ``gpu.binary``.

    Raises
    ------
    PipelineError
        A binary with several objects or with PTX instead of a cubin; a launch with a cluster
        size or without its stream.
    """
    with lowered.context:
        if not any(op.operation.name == "gpu.binary" for op in lowered.ir_module.body.operations):
            return lowered
    lowered = lowered.clone()
    with lowered.context, ir.Location.unknown():
        body = lowered.ir_module.body
        binaries = [op for op in body.operations if op.operation.name == "gpu.binary"]
        known = {ir.StringAttr(op.operation.attributes["sym_name"]).value
                 for op in body.operations if "sym_name" in op.operation.attributes}
        modules: Dict[str, str] = {}
        cubins: Dict[str, Tuple[str, int]] = {}
        for b in binaries:
            name = ir.StringAttr(b.operation.attributes["sym_name"]).value
            cubin = _cubin(b.operation)
            cubins[name] = (f"{name}_binary", len(cubin))
            internal_global(lowered.ir_module, cubins[name][0], _array(len(cubin), _int(8)),
                            ir.StringAttr.get(cubin), constant=True)
            modules[name] = f"{name}_module"
            internal_global(lowered.ir_module, modules[name], _ptr())
            b.operation.erase()
        launches = _launches(lowered.ir_module)
        names: Dict[Tuple[str, str], str] = {}
        for op in launches:
            key = _kernel_ref(op)
            if key[0] not in modules:
                raise PipelineError(f"cuda modules: gpu.launch_func names @{key[0]}, which is "
                                    "not a gpu.binary of the module")
            if key not in names:
                names[key] = f"{key[0]}_{key[1]}_name"
                text = key[1] + "\0"
                internal_global(lowered.ir_module, names[key], _array(len(text), _int(8)),
                                ir.StringAttr.get(text), constant=True)
        for name, inputs, result in (
                ("mgpuModuleLoad", [_ptr(), _int(64)], _ptr()), ("mgpuModuleUnload", [_ptr()], None),
                ("mgpuModuleGetFunction", [_ptr(), _ptr()], _ptr()),
                ("mgpuLaunchKernel", [_ptr()] + [_int(64)] * 6 + [_int(32), _ptr(), _ptr(), _ptr(),
                                                                  _int(64)], None)):
            _declare(lowered.ir_module, known, name, result, inputs)
        for op in launches:
            func = op.parent
            while func.name != "llvm.func":
                func = func.parent
            _lower_launch(op, modules, names, func.regions[0].blocks[0])
        for fname, unload in ((LOAD, False), (UNLOAD, True)):
            with ir.InsertionPoint(body):
                f = llvm_d.LLVMFuncOp(fname, ir.TypeAttr.get(_function_type(None, [])),
                                      linkage=_internal())
            with ir.InsertionPoint(f.body.blocks.append()):
                for binary, module_global in modules.items():
                    slot = llvm_d.AddressOfOp(_ptr(), module_global).result
                    if unload:
                        _call("mgpuModuleUnload", [llvm_d.LoadOp(_ptr(), slot).result])
                    else:
                        data = llvm_d.AddressOfOp(_ptr(), cubins[binary][0]).result
                        size = llvm_d.ConstantOp(_int(64), ir.IntegerAttr.get(
                            _int(64), cubins[binary][1])).result
                        llvm_d.StoreOp(_call("mgpuModuleLoad", [data, size], _ptr()), slot)
                llvm_d.ReturnOp()
        _register(lowered.ir_module)
    return lowered.verify()
