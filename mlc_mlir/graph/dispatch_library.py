"""Library dispatch: ``DispatchLibrary`` (``mlc-dispatch-library``) replaces chosen ops by
``mlc.call_library``; ``LowerCallLibrary`` (``mlc-lower-call-library``, run by ``compile``
before bufferization) turns each into a call of a C-ABI symbol.

Keys of the mapping name ops as the builder does: an op's exact ``mlc.name`` (``dense_1``),
that name without its ``_N`` suffix (``relu``, ``dense``: every repeat) or its linalg op name
(``matmul`` for ``linalg.matmul``). A
``dense`` op takes its ``<name>.bias_add`` consumer along for a Python kernel (which gets
``x, W, b`` as the op reads them: ``W`` is ``(N, K)`` for a parameter, the stored ``W^T`` for a
constant); ``openblas.sgemm`` replaces the matmul only.

Before::

    %0 = linalg.matmul {mlc.name = "matmul"} ins(%a, %b ...) outs(%init ...)

After ``DispatchLibrary({"matmul": "openblas.sgemm"})``::

    %e = tensor.empty() : tensor<4x16xf32>
    %0 = "mlc.call_library"(%a, %b, %e) {callee = "openblas.sgemm", operandSegmentSizes = ...}

After ``LowerCallLibrary``: ``openblas.sgemm`` becomes ``func.call @scipy_cblas_sgemm`` on the
buffers' aligned pointers (no Python in the loop); a Python kernel ``env.*`` becomes
``func.call @mlc_cb_<n>`` of an external function with the C interface, bound by the
Executable to a ctypes callback (``mlc.callback`` attribute names the kernel).
"""

from __future__ import annotations

from typing import Dict, List

from .._mlir import arith_d, bufferization_d, func_d, ir, llvm_d, memref_d, tensor_d
from ..errors import BuildError
from ..ir import dtypes
from ..ir.module import OP_NAME_ATTR, Module
from ..runtime import registry
from .dce import DeadCodeElimination
from .linalg_attrs import indexing_maps, matmul_maps
from .use_def import op_name
from .pass_manager import Pass, register_pass

CALLBACK_ATTR = "mlc.callback"
NATIVE_ATTR = "mlc.native_library"
_SEGMENTS = 7  # in0..in5, init (dialects/mlc.irdl.mlir)


def _kind_names(op) -> List[str]:
    """Keys an op answers to, most specific first: its mlc.name, that name without the ``_N``
    the builder appends to repeats, its linalg op name."""
    names = [op.name.split(".", 1)[-1]]
    if OP_NAME_ATTR in op.attributes:
        n = ir.StringAttr(op.attributes[OP_NAME_ATTR]).value
        base, sep, tail = n.rpartition("_")
        names[:0] = [n, base if sep and tail.isdigit() else n]
    return names


def _dispatchable(op) -> bool:
    return op.name.startswith("linalg.") and bool(op.results)


@register_pass
class DispatchLibrary(Pass):
    """Replace ops by ``mlc.call_library @callee`` (see module docstring).

    Parameters
    ----------
    mapping : dict
        op key -> kernel name (``openblas.sgemm`` or a name given to ``mlc.register_func``).

    Raises
    ------
    BuildError
        If a kernel is unknown (the message lists the registered kernels and native
        providers), a key matches no op of the module (the message lists the keys the ops
        answer to), or ``openblas.sgemm`` is asked for a non-f32, non-2-D or transposed matmul
        (read from the op's ``indexing_maps`` attribute).
    """

    name = "mlc-dispatch-library"

    def __init__(self, mapping: Dict[str, str]):
        if not isinstance(mapping, dict) or not mapping:
            raise BuildError("DispatchLibrary: mapping must be a non-empty dict of op -> kernel")
        for k, v in mapping.items():
            if not registry.is_known(v):
                raise BuildError(f"DispatchLibrary: kernel '{v}' (for '{k}') is not registered; "
                                 f"registered kernels: {registry.registered_names()}, native "
                                 f"providers: {sorted(registry.NATIVE)} (mlc.register_func adds one)")
        self.mapping = dict(mapping)

    def transform(self, mod: Module) -> Module:
        with mod.context, ir.Location.unknown():
            targets, known = [], set()
            for f in mod.defined_functions():
                for o in f.regions[0].blocks[0].operations:
                    op = o.operation
                    if not _dispatchable(op):
                        continue
                    known.update(_kind_names(op))
                    key = next((k for k in _kind_names(op) if k in self.mapping), None)
                    if key is not None:
                        targets.append((op, key))
            unmatched = sorted(set(self.mapping) - {k for _, k in targets})
            if unmatched:
                raise BuildError(f"DispatchLibrary: no op matches {unmatched}; ops in the module "
                                 f"answer to {sorted(known)}")
            for op, key in targets:
                self._replace(op, self.mapping[key])
        return DeadCodeElimination().transform(mod)  # the replaced ops' inits

    def _replace(self, op, callee: str) -> None:
        n_in = len(op.operands) - len(op.results)
        ins = list(op.operands)[:n_in]
        last, result = op, op.results[0]
        name = op_name(op) if OP_NAME_ATTR in op.attributes else ""
        users = list(result.uses)
        if name and len(users) == 1 and callee not in registry.NATIVE:
            user = users[0].owner.operation
            if OP_NAME_ATTR in user.attributes and \
                    ir.StringAttr(user.attributes[OP_NAME_ATTR]).value == f"{name}.bias_add":
                ins += [v for v in user.operands[:len(user.operands) - 1] if v != result]
                last, result = user, user.results[0]
        if callee == "openblas.sgemm":
            t = result.type
            if op.name != "linalg.matmul" or len(ins) != 2 or t.rank != 2 or not isinstance(t.element_type, ir.F32Type):
                raise BuildError(f"DispatchLibrary: openblas.sgemm needs a 2-D f32 linalg.matmul without "
                                 f"transposed maps; '{name or op.name}' is {op.name} -> {t}")
            maps = indexing_maps(op)
            if maps is not None and maps != matmul_maps(op.context):
                raise BuildError(f"DispatchLibrary: openblas.sgemm: '{name}' reads a transposed operand")
        if len(ins) > _SEGMENTS - 1:
            raise BuildError(f"DispatchLibrary: '{name or op.name}' has {len(ins)} inputs; "
                             f"mlc.call_library takes at most {_SEGMENTS - 1}")
        with ir.InsertionPoint(last):
            init = tensor_d.EmptyOp(list(result.type.shape), result.type.element_type).result
            segs = [1] * len(ins) + [0] * (_SEGMENTS - 1 - len(ins)) + [1]
            call = ir.Operation.create(
                "mlc.call_library", results=[result.type], operands=ins + [init],
                attributes={"callee": ir.StringAttr.get(callee),
                            "operandSegmentSizes": ir.DenseI32ArrayAttr.get(segs),
                            OP_NAME_ATTR: ir.StringAttr.get(name or callee)})
        result.replace_all_uses_with(call.results[0])
        if last is not op:
            last.erase()
        op.erase()


@register_pass
class LowerCallLibrary(Pass):
    """Lower ``mlc.call_library`` to calls of C-ABI symbols, before bufferization (see module
    docstring). Inputs are read through ``bufferization.to_buffer``; the result is a fresh
    buffer wrapped by ``bufferization.to_tensor restrict``."""

    name = "mlc-lower-call-library"

    def transform(self, mod: Module) -> Module:
        with mod.context, ir.Location.unknown():
            counter = [0]
            for f in mod.defined_functions():
                for o in list(f.regions[0].blocks[0].operations):
                    if o.operation.name == "mlc.call_library":
                        self._lower(mod, f, o.operation, counter)
        return mod

    def _lower(self, mod: Module, f, op, counter) -> None:
        callee = ir.StringAttr(op.attributes["callee"]).value
        ins = list(op.operands)[:-1]
        rtype = op.results[0].type
        with ir.InsertionPoint(op):
            bufs = [bufferization_d.ToBufferOp(ir.MemRefType.get(v.type.shape, v.type.element_type), v,
                                               read_only=True).result for v in ins]
            out = memref_d.AllocOp(ir.MemRefType.get(rtype.shape, rtype.element_type), [], []).result
            if callee in registry.NATIVE:
                self._call_sgemm(mod, f, bufs, out)
            else:
                sym = f"mlc_cb_{counter[0]}"
                counter[0] += 1
                with ir.InsertionPoint(f):
                    decl = func_d.FuncOp(sym, ir.FunctionType.get([b.type for b in bufs] + [out.type], []),
                                         visibility="private")
                decl.attributes["llvm.emit_c_interface"] = ir.UnitAttr.get()
                decl.attributes[CALLBACK_ATTR] = ir.StringAttr.get(callee)
                func_d.CallOp([], ir.FlatSymbolRefAttr.get(sym), bufs + [out])
            res = bufferization_d.ToTensorOp(rtype, out, restrict=True, writable=True).result
        op.results[0].replace_all_uses_with(res)
        op.erase()

    def _call_sgemm(self, mod: Module, f, bufs, out) -> None:
        sym = registry.NATIVE["openblas.sgemm"]
        i32, f32 = ir.IntegerType.get_signless(32), ir.F32Type.get()
        ptr = llvm_d.PointerType.get()
        m, k = bufs[0].type.shape
        n = bufs[1].type.shape[1]
        if not any(g.sym_name.value == sym for g in mod.func_ops()):
            with ir.InsertionPoint(mod.ir_module.body):
                decl = func_d.FuncOp(sym, ir.FunctionType.get(
                    [i32] * 6 + [f32, ptr, i32, ptr, i32, f32, ptr, i32], []), visibility="private")
            decl.attributes[NATIVE_ATTR] = ir.StringAttr.get("openblas.sgemm")

        def c(v, t=i32):
            return arith_d.ConstantOp(t, ir.FloatAttr.get(t, v) if t == f32 else ir.IntegerAttr.get(t, v)).result

        def pointer(buf):
            idx = memref_d.ExtractAlignedPointerAsIndexOp(buf).result
            return llvm_d.IntToPtrOp(ptr, arith_d.IndexCastOp(ir.IntegerType.get_signless(64), idx).result).result

        # cblas_sgemm(RowMajor=101, NoTrans=111, NoTrans, M, N, K, 1, A, K, B, N, 0, C, N)
        func_d.CallOp([], ir.FlatSymbolRefAttr.get(sym),
                      [c(101), c(111), c(111), c(m), c(n), c(k), c(1.0, f32), pointer(bufs[0]), c(k),
                       pointer(bufs[1]), c(n), c(0.0, f32), pointer(out), c(n)])


def runtime_bindings(mod: Module):
    """What an engine for ``mod`` needs: ``(native library paths, [(symbol, kernel, specs)])``
    where specs are the (shape, dtype) of each memref argument of a callback."""
    libs, callbacks = set(), []
    for f in mod.func_ops():
        if NATIVE_ATTR in f.attributes:
            libs.add(registry.library_path(ir.StringAttr(f.attributes[NATIVE_ATTR]).value))
        if CALLBACK_ATTR in f.attributes:
            ftype = ir.FunctionType(ir.TypeAttr(f.attributes["function_type"]).value)
            specs = [(tuple(t.shape), dtypes.from_ir_type(t.element_type)) for t in ftype.inputs]
            callbacks.append((f.sym_name.value, ir.StringAttr(f.attributes[CALLBACK_ATTR]).value, specs))
    return sorted(libs), callbacks
