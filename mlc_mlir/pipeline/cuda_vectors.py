"""Vector memory access in CUDA kernels: what turns a vectorized thread tile (``sch.vectorize``
inside a bound loop: ``vector.transfer_read``/``transfer_write`` after bufferization) into
128-bit ``ld.global.v4.f32`` / ``st.global.v4.f32``.

1. :func:`lower_transfers` -- unit dims of the vectors go (a thread's ``1 x V`` tile of a 2-D
   op becomes a ``V`` vector), transfers of a higher rank are unrolled to 1-D ones, transfers
   with a broadcast or permutation map become minor-identity transfers and a
   ``vector.broadcast`` / ``vector.transpose``; in-bounds 1-D transfers become ``vector.load`` /
   ``vector.store``, out-of-bounds ones masked loads and stores (NVVM lowers no transfer op).
2. :func:`assume_alignment` -- NVPTX emits a vector access only where it can prove the address
   a multiple of the vector's size (a misaligned ``ld.v4`` traps); otherwise it splits the
   access into scalar ones. ``vector.load`` carries only the element's alignment, so each
   buffer a kernel receives gets ``memref.assume_alignment`` to :data:`DEVICE_ALIGNMENT` bytes
   (``llvm.assume`` with an ``align`` bundle in the kernel) and LLVM's alignment inference
   (``InferAlignment`` in the O2 pipeline ``gpu-module-to-binary`` runs) derives each access's
   alignment from the index arithmetic: where the offset of a thread's vector is a multiple of
   its lanes, the access is a single 128-bit one; where it is not (an odd row length, a slice
   at an odd offset) it stays correct, as scalar accesses.

Source: MLIR ``transform.apply_patterns.vector.lower_transfer`` /
``transfer_permutation_patterns``, ``memref.assume_alignment``; the vectorized global loads of
TVM's CUDA codegen (``float4``) and of Triton (``ld.global.v4.b32``).
"""

from __future__ import annotations

from typing import List, Optional

from .._mlir import (ir, memref_d, memref_transform_d, structured_transform_d, transform_d,
                     vector_transform_d)
from ..ir.module import Module
from ..ir.transform_values import any_op
from ..ir.walk import find_ops
from ..runtime.cuda import DEVICE_ALIGNMENT

#: Ops whose result views the same buffer as their first operand (offset read from the type).
_VIEWS = ("memref.subview", "memref.cast", "memref.collapse_shape", "memref.expand_shape",
          "memref.reinterpret_cast")

#: Ops whose result is a fresh device buffer (``cuMemAlloc``: 256-byte aligned) or a buffer
#: the kernel's caller passes (a function argument: checked by the runtime,
#: :func:`mlc_mlir.runtime.device_array.as_device_array`).
_ALLOCATIONS = ("gpu.alloc", "memref.alloc")


def _drop_unit_dims() -> None:
    # a thread's tile of a 2-D op is a vector<1xV>: its unit dims go first
    vector_transform_d.ApplyCastAwayVectorLeadingOneDimPatternsOp()
    vector_transform_d.ApplyDropUnitDimWithShapeCastPatternsOp()
    vector_transform_d.ApplyTransferPermutationPatternsOp()


def _unroll_to_rank_1() -> None:
    # what is left of rank > 1 (a vectorized 2-D tile) becomes 1-D transfers
    vector_transform_d.ApplyTransferToScfPatternsOp(max_transfer_rank=1, full_unroll=True)


def _to_loads_and_stores() -> None:
    vector_transform_d.ApplyTransferPermutationPatternsOp()
    vector_transform_d.ApplyLowerTransferPatternsOp(max_transfer_rank=1)
    vector_transform_d.ApplyLowerShapeCastPatternsOp()
    vector_transform_d.ApplyLowerBroadcastPatternsOp()   # a vector<1xT> splat over the lanes


def lower_transfers(module: Module, apply) -> Module:
    """Rewrite 1 of the module docstring on every function of ``module``; ``apply(module,
    build, stage)`` applies a transform script (:func:`mlc_mlir.pipeline.cuda._apply`).
    Returns ``module`` when it has no transfer."""
    if not find_ops(module, "vector.transfer_read") and not find_ops(module, "vector.transfer_write"):
        return module

    def build(root):
        for stage in (_drop_unit_dims, _unroll_to_rank_1, _to_loads_and_stores):
            p = transform_d.ApplyPatternsOp(root)
            with ir.InsertionPoint(p.patterns):
                stage()
                transform_d.ApplyCanonicalizationPatternsOp()

    return apply(module, build, "vector transfers")


def _defining_op(v: ir.Value) -> Optional[ir.Operation]:
    owner = v.owner
    return owner.operation if isinstance(owner, (ir.OpView, ir.Operation)) else None


def _nested_in(op: Optional[ir.Operation], launch: ir.Operation) -> bool:
    """Whether ``op`` is ``launch`` or nested in it."""
    while op is not None:
        if op == launch:
            return True
        op = op.parent
    return False


def _defined_inside(v: ir.Value, launch: ir.Operation) -> bool:
    """Whether ``v`` is defined in ``launch`` (by an op nested in it, or as an argument of a
    block of its regions)."""
    owner = v.owner
    op = owner.owner if isinstance(owner, ir.Block) else _defining_op(v)
    return _nested_in(op.operation if op is not None else None, launch)


def _first_element_aligned(v: ir.Value) -> bool:
    """Whether the first element of memref ``v`` is :data:`DEVICE_ALIGNMENT`-byte aligned: ``v``
    is a function argument or a fresh allocation, or a view of one at a static byte offset that
    is a multiple of the alignment."""
    t = ir.MemRefType(v.type)
    offset = t.get_strides_and_offset()[1]
    width = getattr(t.element_type, "width", None)
    if width is None or width % 8 or offset < 0 or offset * (width // 8) % DEVICE_ALIGNMENT:
        return False   # a dynamic offset is negative (ShapedType.kDynamic)
    while True:
        op = _defining_op(v)
        if op is None:
            parent = v.owner.owner
            return parent is not None and parent.operation.name == "func.func"
        if op.name in _ALLOCATIONS:
            return True
        if op.name not in _VIEWS:
            return False
        v = op.operands[0]


def _captured_memrefs(launch: ir.Operation) -> List[ir.Value]:
    """The memrefs defined outside ``launch`` that ops inside it use, in first-use order."""
    found: List[ir.Value] = []

    def visit(op):
        for v in op.operation.operands:
            if isinstance(v.type, ir.MemRefType) and v not in found and \
                    not _defined_inside(v, launch):
                found.append(v)
        return ir.WalkResult.ADVANCE

    for region in launch.regions:
        for block in region.blocks:
            for op in block.operations:
                op.operation.walk(visit, ir.WalkOrder.PRE_ORDER)
    return found


#: Marks the kernels :func:`assume_alignment` rewrites (removed again).
_VECTOR_KERNEL = "mlc.vector_kernel"


def assume_alignment(module: Module, apply) -> Module:
    """Rewrite 2 of the module docstring: at the top of each ``gpu.launch`` with a vector load
    or store, one ``memref.assume_alignment`` (:data:`DEVICE_ALIGNMENT` bytes) per buffer
    defined outside it whose first element is provably aligned (:func:`_first_element_aligned`);
    the kernel's uses read the assumed value. Loads and stores of a view of such a buffer (a
    thread's tile: a ``memref.subview``) in those kernels are first rewritten to index the
    buffer itself (``apply_patterns.memref.fold_memref_alias_ops``): ``expand-strided-metadata``
    reads a view's base pointer past the assumption, which would then be dropped. ``apply``: as
    in :func:`lower_transfers`. Returns ``module`` when no kernel has a vector access, else a
    verified copy."""
    with module.context:
        marked = [launch for launch in find_ops(module, "gpu.launch")
                  if find_ops(launch, "vector.load") or find_ops(launch, "vector.store")]
        if not marked:
            return module
        module = module.clone()
        for launch in find_ops(module, "gpu.launch"):
            if find_ops(launch, "vector.load") or find_ops(launch, "vector.store"):
                launch.attributes[_VECTOR_KERNEL] = ir.UnitAttr.get()

    def build(root):
        kernels = structured_transform_d.MatchOp(
            any_op(), root, ops=ir.ArrayAttr.get([ir.StringAttr.get("gpu.launch")]),
            op_attrs=ir.DictAttr.get({_VECTOR_KERNEL: ir.UnitAttr.get()})).result
        p = transform_d.ApplyPatternsOp(kernels)
        with ir.InsertionPoint(p.patterns):
            memref_transform_d.ApplyFoldMemrefAliasOpsPatternsOp()

    out = apply(module, build, "cuda alignment")
    with out.context, ir.Location.unknown():
        for launch in find_ops(out, "gpu.launch"):
            if _VECTOR_KERNEL not in launch.attributes:
                continue
            del launch.attributes[_VECTOR_KERNEL]
            first = launch.regions[0].blocks[0].operations[0]
            for v in _captured_memrefs(launch):
                if not _first_element_aligned(v):
                    continue
                with ir.InsertionPoint(first):
                    assumed = memref_d.AssumeAlignmentOp(v, DEVICE_ALIGNMENT)
                for use in list(v.uses):
                    user = use.owner.operation if hasattr(use.owner, "operation") else use.owner
                    if user != assumed.operation and _nested_in(user, launch):
                        user.operands[use.operand_number] = assumed.result
    return out.verify()
