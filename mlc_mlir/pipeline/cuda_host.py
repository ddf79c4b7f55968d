"""Host code that runs a module's CUDA kernels: weights resident in device memory, one slab of
device memory per function for the buffers between kernels, one stream per call.

:func:`host_memory` rewrites each function of a GPU-mapped module (memrefs and ``gpu.launch``
ops, before ``pipelines/cuda.pipeline``):

* **Resident weights.** The constants the kernels read (``memref.get_global`` of host globals,
  which a kernel cannot dereference) get one device copy, made when the code is loaded: a load
  function (global constructor, run by ``ExecutionEngine.initialize`` or by ``dlopen`` of an AOT
  library) allocates one slab of device memory, copies each constant to its offset, and stores
  the slab's memref descriptor in an internal global. A call loads the descriptor and views
  the constants in it (``memref.view``): no copy, no allocation. An unload function (global
  destructor: the engine destroyed, the library unloaded) frees the device memory.
* **One slab per function.** The buffers between kernels, and for the copying entry the
  device copies of its arguments, are views at fixed offsets of a slab allocated with the
  weights. Buffers whose live ranges in the entry block do not overlap share bytes (first fit:
  the kernels run in order on one stream, so a buffer's bytes are free once the last op that
  uses it was queued). A call takes its function's slab with an atomic exchange of a busy
  flag and gives it back after its last wait; a call that finds it busy (another thread runs
  the same function) allocates a slab for itself (:data:`ALLOC`/:data:`FREE`).
* **One stream.** Copies, kernels and allocations stay synchronous ops here;
  ``gpu-async-region`` in ``pipelines/cuda.pipeline`` chains them with async tokens on one
  stream per call and waits once, before the slab is given back. The host ops with side
  effects (the busy flag, the descriptor loads) come before the first GPU op, so that the
  pass does not cut the chain.

:func:`register_resident` adds the load and unload functions to ``llvm.global_ctors`` /
``llvm.global_dtors`` once the module is in the LLVM dialect.

Source: TVM's graph executor and Relax's static memory planning (parameters uploaded once, one
storage pool planned over buffer lifetimes), PyTorch's caching allocator (no ``cudaMalloc``
per call), MLIR's ``gpu-async-region``.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

from .._mlir import arith_d, func_d, gpu_d, ir, llvm_d, memref_d, scf_d
from ..errors import PipelineError
from ..ir import dtypes
from ..ir.emitters import index_constant
from ..ir.module import Module
from ..ir.walk import ancestor_in
from .cuda_modules import internal_global

#: Byte alignment of each buffer in a slab (``cuMemAlloc``'s; vector loads need 16).
ALIGN = 256

#: The load function (global constructor) and the unload function (global destructor).
LOAD, UNLOAD = "__mlc_cuda_resident_load", "__mlc_cuda_resident_unload"

#: What a call runs when its function's slab is busy: a slab of its own, freed after the call.
ALLOC, FREE = "__mlc_cuda_slab_alloc", "__mlc_cuda_slab_free"

#: The internal global holding the weights slab's descriptor.
WEIGHTS = "__mlc_cuda_weights"

#: Suffix of the private function holding a function's kernels (inlined into its entries).
KERNELS_SUFFIX = "__kernels"

#: Priority of the load/unload functions in ``llvm.global_ctors``/``dtors`` (the default).
PRIORITY = 65535


def _i8() -> ir.Type:
    return ir.IntegerType.get_signless(8)


def _ptr() -> ir.Type:
    return llvm_d.PointerType.get()


def _slab_type() -> ir.MemRefType:
    return ir.MemRefType.get([ir.ShapedType.get_dynamic_size()], _i8())


def _descriptor_type() -> ir.Type:
    """The LLVM struct of a rank-1 memref descriptor (``finalize-memref-to-llvm``'s): allocated
    and aligned pointers, offset, size, stride."""
    i64 = ir.IntegerType.get_signless(64)
    arr = ir.Type.parse("!llvm.array<1 x i64>")   # debt: the bindings have no ArrayType builder
    return llvm_d.StructType.get_literal([_ptr(), _ptr(), i64, arr, arr])


def _internal() -> ir.Attribute:
    return ir.Attribute.parse("#llvm.linkage<internal>")   # debt: no builder for the enum attr


def _buffer_bytes(t: ir.MemRefType) -> int:
    """Bytes of a static, identity-layout memref (rounded up to :data:`ALIGN`; an ``i1``
    element takes a byte, as the memref lowering stores it)."""
    n = max(1, dtypes.bit_width(dtypes.from_ir_type(t.element_type)) // 8)
    for d in t.shape:
        n *= d
    return -(-max(n, 1) // ALIGN) * ALIGN


def _static_identity(t: ir.Type) -> bool:
    t = ir.MemRefType(t)
    return t.has_static_shape and t.affine_map == ir.AffineMap.get_identity(t.rank)


def _cast(value: ir.Value, t: ir.Type) -> ir.Value:
    """``builtin.unrealized_conversion_cast`` (a memref and its LLVM descriptor: resolved by
    ``reconcile-unrealized-casts`` after the memref lowering)."""
    return ir.Operation.create("builtin.unrealized_conversion_cast", results=[t],
                               operands=[value]).results[0]


def _load_slab(name: str) -> ir.Value:
    """The ``memref<?xi8>`` whose descriptor the global ``name`` holds (host load, no copy)."""
    d = llvm_d.LoadOp(_descriptor_type(), llvm_d.AddressOfOp(_ptr(), name).result, alignment=8)
    return _cast(d.result, _slab_type())


def _store_slab(slab: ir.Value, name: str) -> None:
    llvm_d.StoreOp(_cast(slab, _descriptor_type()), llvm_d.AddressOfOp(_ptr(), name).result,
                   alignment=8)


def _view(slab: ir.Value, offset: int, t: ir.Type) -> ir.Value:
    return memref_d.ViewOp(t, slab, index_constant(offset), []).result


def _internal_function(name: str, inputs: List[ir.Type], results: List[ir.Type]):
    """A ``func.func`` of internal linkage that the inliner leaves alone (``no_inline``)."""
    f = func_d.FuncOp(name, ir.FunctionType.get(inputs, results))
    f.operation.attributes["llvm.linkage"] = _internal()
    f.operation.attributes["no_inline"] = ir.UnitAttr.get()
    return f, f.add_entry_block()


class _Resident:
    """The module's resident device memory: the weights slab (constant symbol -> byte offset,
    type) and one slab per function (descriptor global, bytes)."""

    def __init__(self, module: ir.Module):
        self.module = module
        self.weights: Dict[str, Tuple[int, ir.Type]] = {}
        self.weights_bytes = 0
        self.slabs: List[Tuple[str, int]] = []
        self._global(WEIGHTS, _descriptor_type())

    def _global(self, name: str, t: ir.Type, value: Optional[ir.Attribute] = None) -> None:
        """``llvm.mlir.global internal @name`` of type ``t``: ``value``, or zeros."""
        internal_global(self.module, name, t, value)

    def weight(self, symbol: str, t: ir.Type) -> int:
        """Byte offset of constant ``symbol`` (a static identity-layout memref ``t``) in the
        weights slab."""
        if symbol not in self.weights:
            self.weights[symbol] = (self.weights_bytes, t)
            self.weights_bytes += _buffer_bytes(ir.MemRefType(t))
        return self.weights[symbol][0]

    def slab(self, function: str, nbytes: int) -> str:
        """Declare the slab of ``function`` and its busy flag; returns the descriptor global."""
        name = f"__mlc_cuda_slab_{function}"
        self._global(name, _descriptor_type())
        self._global(name + "_busy", _i8(), ir.IntegerAttr.get(_i8(), 0))
        self.slabs.append((name, nbytes))
        return name

    def emit_functions(self) -> None:
        """The load and unload functions (of the slabs with a size) and the fallbacks of a
        busy slab."""
        slabs = [(name, n) for name, n in [(WEIGHTS, self.weights_bytes)] + self.slabs if n]
        with ir.InsertionPoint(self.module.body):
            _, entry = _internal_function(LOAD, [], [])
            with ir.InsertionPoint(entry):
                values = [gpu_d.AllocOp(_slab_type(), None, [], [index_constant(n)], []).result
                          for _, n in slabs]
                for symbol, (offset, t) in self.weights.items():
                    host = memref_d.GetGlobalOp(t, symbol).result
                    gpu_d.MemcpyOp(None, [], _view(values[0], offset, t), host)
                for (name, _), slab in zip(slabs, values):   # host stores after the GPU ops
                    _store_slab(slab, name)
                func_d.ReturnOp([])
            _, entry = _internal_function(UNLOAD, [], [])
            with ir.InsertionPoint(entry):
                values = [_load_slab(name) for name, _ in slabs]   # host loads before the GPU ops
                for slab in values:
                    gpu_d.DeallocOp(None, [], slab)
                func_d.ReturnOp([])
            _, entry = _internal_function(ALLOC, [ir.IndexType.get()], [_slab_type()])
            with ir.InsertionPoint(entry):
                func_d.ReturnOp([gpu_d.AllocOp(_slab_type(), None, [], [entry.arguments[0]],
                                               []).result])
            _, entry = _internal_function(FREE, [_slab_type()], [])
            with ir.InsertionPoint(entry):
                gpu_d.DeallocOp(None, [], entry.arguments[0])
                func_d.ReturnOp([])


def _live_ranges(block: ir.Block, allocs: List[ir.Operation]) -> List[Tuple[int, int]]:
    """Per allocation, the positions in ``block`` of the allocation and of the last op that
    uses the buffer or a view of it (any memref result of a user is taken for a view)."""
    pos = {}
    for i, op in enumerate(block.operations):
        pos[op.operation] = i
    out = []
    for a in allocs:
        last = pos[a]
        work, seen = [a.results[0]], set()
        while work:
            v = work.pop()
            for use in v.uses:
                user = use.owner.operation if hasattr(use.owner, "operation") else use.owner
                if user in seen:
                    continue
                seen.add(user)
                last = max(last, pos[ancestor_in(user, block)])
                work += [r for r in user.results if isinstance(r.type, ir.MemRefType)]
        out.append((pos[a], last))
    return out


def _first_fit(sizes: List[int], ranges: List[Tuple[int, int]]) -> Tuple[List[int], int]:
    """Byte offsets for buffers of ``sizes`` live over ``ranges`` (inclusive positions), in
    program order: the lowest offset not overlapping a buffer live at the same time; returns
    the offsets and the slab size."""
    placed: List[Tuple[int, int, int]] = []   # (offset, size, last position)
    order = sorted(range(len(sizes)), key=lambda i: ranges[i][0])
    offsets = [0] * len(sizes)
    for i in order:
        start, end = ranges[i]
        live = sorted((o, s) for o, s, e in placed if e >= start)
        off = 0
        for o, s in live:
            if off + sizes[i] <= o:
                break
            off = max(off, o + s)
        offsets[i] = off
        placed.append((off, sizes[i], end))
    return offsets, max((o + s for o, s, _ in placed), default=0)


def _take_slab(slab_name: str, nbytes: int) -> Tuple[ir.Value, ir.Value, ir.Value]:
    """Emit: take the slab of descriptor global ``slab_name`` (atomic exchange of its busy
    flag, acquire), or allocate ``nbytes`` for this call when another call holds it. Returns
    the slab, whether it was taken and the flag's address (for :func:`_give_slab`)."""
    flag = llvm_d.AddressOfOp(_ptr(), slab_name + "_busy").result
    old = llvm_d.AtomicRMWOp(llvm_d.AtomicBinOp.xchg, flag, arith_d.ConstantOp(_i8(), 1).result,
                             llvm_d.AtomicOrdering.acquire).result
    taken = arith_d.CmpIOp(arith_d.CmpIPredicate.eq, old, arith_d.ConstantOp(_i8(), 0).result).result
    choice = scf_d.IfOp(taken, [_slab_type()], has_else=True)
    with ir.InsertionPoint(choice.then_block):
        scf_d.YieldOp([_load_slab(slab_name)])
    with ir.InsertionPoint(choice.else_block):
        scf_d.YieldOp(func_d.CallOp([_slab_type()], ir.FlatSymbolRefAttr.get(ALLOC),
                                    [index_constant(nbytes)]).results)
    return choice.results[0], taken, flag


def _give_slab(slab: ir.Value, taken: ir.Value, flag: ir.Value) -> None:
    """Emit: clear the busy flag (release) of a taken slab, or free the call's own."""
    choice = scf_d.IfOp(taken, [], has_else=True)
    with ir.InsertionPoint(choice.then_block):
        llvm_d.StoreOp(arith_d.ConstantOp(_i8(), 0).result, flag, alignment=1,
                       ordering=llvm_d.AtomicOrdering.release)
        scf_d.YieldOp([])
    with ir.InsertionPoint(choice.else_block):
        func_d.CallOp([], ir.FlatSymbolRefAttr.get(FREE), [slab])
        scf_d.YieldOp([])


def _kernels_function(f: ir.Operation, resident: _Resident) -> int:
    """Make ``f`` (renamed by the caller) the kernels on device memory, private, with three
    trailing arguments: the weights slab, a slab and the byte offset of ``f``'s buffers in it.
    The constants it reads become views of the weights slab, its ``gpu.alloc`` buffers views
    of the slab (first-fit offsets over their live ranges). Returns the bytes its buffers need.

    Raises
    ------
    PipelineError
        If a buffer or a constant is not a static identity-layout memref.
    """
    entry = f.regions[0].blocks[0]
    constants = [op.operation for op in entry.operations if op.operation.name == "memref.get_global"]
    allocs = [op.operation for op in entry.operations if op.operation.name == "memref.alloc"]
    for op in constants + allocs:
        if list(op.operands) or not _static_identity(op.results[0].type):
            raise PipelineError(f"cuda host: a constant or a buffer between kernels of type "
                                f"{op.results[0].type}; expected a static identity-layout memref")
    sizes = [_buffer_bytes(ir.MemRefType(a.results[0].type)) for a in allocs]
    offsets, total = _first_fit(sizes, _live_ranges(entry, allocs))
    loc = ir.Location.unknown()
    weights, slab, base = (entry.add_argument(t, loc)
                           for t in (_slab_type(), _slab_type(), ir.IndexType.get()))
    ftype = ir.FunctionType(ir.TypeAttr(f.attributes["function_type"]).value)
    f.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(
        list(ftype.inputs) + [weights.type, slab.type, base.type], []))
    if "arg_attrs" in f.attributes:
        f.attributes["arg_attrs"] = ir.ArrayAttr.get(
            list(ir.ArrayAttr(f.attributes["arg_attrs"])) + [ir.DictAttr.get({})] * 3)
    if "llvm.emit_c_interface" in f.attributes:
        del f.attributes["llvm.emit_c_interface"]
    f.attributes["sym_visibility"] = ir.StringAttr.get("private")
    with ir.InsertionPoint.at_block_begin(entry):
        for op in constants:
            t = op.results[0].type
            symbol = ir.FlatSymbolRefAttr(op.attributes["name"]).value
            op.results[0].replace_all_uses_with(_view(weights, resident.weight(symbol, t), t))
        for a, offset in zip(allocs, offsets):
            shift = arith_d.AddIOp(base, index_constant(offset)).result
            a.results[0].replace_all_uses_with(
                memref_d.ViewOp(a.results[0].type, slab, shift, []).result)
    for op in constants + allocs:
        op.erase()
    return total


def _entry(kernels: ir.Operation, name: str, resident: _Resident, kernel_bytes: int,
           num_outputs: Optional[int]) -> None:
    """Emit before ``kernels`` the public function ``name`` of its original signature that
    calls it: on device memory (``num_outputs`` None), or on host memory (numpy): each argument
    copied into a device buffer (``gpu.memcpy`` host-to-device; the last ``num_outputs``
    arguments, the out-params, only allocated) and the out-params copied back. Its buffers
    and the kernels' (``kernel_bytes``) are one slab. Source: the copy-in/copy-out host code of
    TVM's CUDA ``Module``."""
    ftype = ir.FunctionType(ir.TypeAttr(kernels.attributes["function_type"]).value)
    inputs = list(ftype.inputs)[:-3]
    with ir.InsertionPoint(kernels):
        f = func_d.FuncOp(name, ir.FunctionType.get(inputs, []))
    if "arg_attrs" in kernels.attributes:
        f.operation.attributes["arg_attrs"] = ir.ArrayAttr.get(
            list(ir.ArrayAttr(kernels.attributes["arg_attrs"]))[:len(inputs)])
    f.operation.attributes["llvm.emit_c_interface"] = ir.UnitAttr.get()
    args = list(f.add_entry_block().arguments)
    sizes = [_buffer_bytes(ir.MemRefType(a.type)) for a in args] if num_outputs is not None else []
    with ir.InsertionPoint(f.entry_block):
        own = sum(sizes)
        if own + kernel_bytes:
            slab, taken, flag = _take_slab(resident.slab(name, own + kernel_bytes), own + kernel_bytes)
        weights = _load_slab(WEIGHTS)
        if not own + kernel_bytes:
            slab = weights   # no buffers: the kernels never read it
        bufs = args
        if num_outputs is not None:
            bufs = [_view(slab, sum(sizes[:i]), a.type) for i, a in enumerate(args)]
            first_out = len(args) - num_outputs
            for a, buf in zip(args[:first_out], bufs[:first_out]):
                gpu_d.MemcpyOp(None, [], buf, a)
        func_d.CallOp([], ir.FlatSymbolRefAttr.get(ir.StringAttr(kernels.attributes["sym_name"]).value),
                      bufs + [weights, slab, index_constant(own)])
        if num_outputs is not None:
            for a, buf in zip(args[first_out:], bufs[first_out:]):
                gpu_d.MemcpyOp(None, [], a, buf)
        if own + kernel_bytes:
            _give_slab(slab, taken, flag)
        func_d.ReturnOp([])


def host_memory(module: Module, num_outputs: Dict[str, int], device_suffix: str) -> Module:
    """Host code for running the kernels (module docstring): each function ``f`` becomes the
    kernels on device memory (``f__kernels``, private, inlined after kernel outlining by
    ``pipelines/cuda.pipeline``) called by ``f + device_suffix`` (device memory in and out)
    and, for a public ``f``, by ``f`` (numpy memory in and out: copies); a private ``f``
    keeps its name for the device entry. ``num_outputs``: the out-params (trailing arguments)
    per function.

    Raises
    ------
    PipelineError
        If a function has an argument that is not a statically shaped memref, a result, a
        dynamically sized temporary, or a constant of another layout.
    """
    out = module.clone()
    with out.context, ir.Location.unknown():
        resident = _Resident(out.ir_module)
        for f in list(out.func_ops()):
            if f.is_external:
                continue
            f = f.operation if hasattr(f, "operation") else f
            name = ir.StringAttr(f.attributes["sym_name"]).value
            bad = [str(a.type) for a in f.regions[0].blocks[0].arguments
                   if not isinstance(a.type, ir.MemRefType) or not ir.MemRefType(a.type).has_static_shape]
            if bad:
                raise PipelineError(f"cuda host: @{name} has arguments {bad}; expected statically "
                                    "shaped memrefs")
            results = ir.FunctionType(ir.TypeAttr(f.attributes["function_type"]).value).results
            if len(results):
                raise PipelineError(f"cuda host: @{name} returns {[str(t) for t in results]}; "
                                    "expected results as out-params (buffer-results-to-out-params)")
            public = not ("sym_visibility" in f.attributes and
                          ir.StringAttr(f.attributes["sym_visibility"]).value == "private")
            f.attributes["sym_name"] = ir.StringAttr.get(name + KERNELS_SUFFIX)
            kernel_bytes = _kernels_function(f, resident)
            _entry(f, name + device_suffix if public else name, resident, kernel_bytes, None)
            if public:
                _entry(f, name, resident, kernel_bytes, num_outputs.get(name, 0))
        resident.emit_functions()
    return out.verify()


def register_resident(lowered: Module) -> Module:
    """Run the load function as a global constructor and the unload function as a global
    destructor of ``lowered`` (LLVM dialect; ``llvm.mlir.global_ctors``/``dtors``); ``lowered``
    unchanged when it has none (no weights, no buffers between kernels)."""
    with lowered.context, ir.Location.unknown():
        names = {ir.StringAttr(op.operation.attributes["sym_name"]).value
                 for op in lowered.ir_module.body.operations
                 if op.operation.name == "llvm.func"}
        if LOAD not in names:
            return lowered
        for op in lowered.ir_module.body.operations:
            if op.operation.name in ("llvm.mlir.global_ctors", "llvm.mlir.global_dtors"):
                raise PipelineError("cuda host: the lowered module has its own "
                                    f"{op.operation.name}; expected none before registering "
                                    f"{LOAD}")
        prio = ir.ArrayAttr.get([ir.IntegerAttr.get(ir.IntegerType.get_signless(32), PRIORITY)])
        data = ir.ArrayAttr.get([ir.Attribute.parse("#llvm.zero")])
        with ir.InsertionPoint(lowered.ir_module.body):
            llvm_d.GlobalCtorsOp(ir.ArrayAttr.get([ir.FlatSymbolRefAttr.get(LOAD)]), prio, data)
            llvm_d.GlobalDtorsOp(ir.ArrayAttr.get([ir.FlatSymbolRefAttr.get(UNLOAD)]), prio, data)
    return lowered.verify()
