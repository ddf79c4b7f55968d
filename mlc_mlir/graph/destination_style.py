"""Destination-passing style for slices, so producers and copies write into the padded buffers
that read them instead of going through a strided ``memref.copy``: One-Shot Bufferize lowers
such a copy to the runtime's element-by-element ``memrefCopy``.

``PadToInsertSlice`` (``mlc-pad-to-insert-slice``): a ``tensor.pad`` with a constant pad value
becomes a ``linalg.fill`` of the padded shape and a ``tensor.insert_slice`` of the source into
its interior.

Before::

    %p = tensor.pad %y low[0, 1, 1, 0] high[0, 1, 1, 0] {
    ^bb0(%i: index, %j: index, %k: index, %l: index):
      tensor.yield %ninf : f32
    } : tensor<1x112x112x64xf32> to tensor<1x114x114x64xf32>

After::

    %e = tensor.empty() : tensor<1x114x114x64xf32>
    %f = linalg.fill ins(%ninf : f32) outs(%e : tensor<1x114x114x64xf32>) -> tensor<1x114x114x64xf32>
    %p = tensor.insert_slice %y into %f[0, 1, 1, 0] [1, 112, 112, 64] [1, 1, 1, 1]

One-Shot Bufferize turns a ``tensor.pad`` into a new buffer, a fill and a ``memref.copy`` of the
source into a strided subview (``memrefCopy``: 5.7 ms of the 15 ms ResNet-18 stem task for its
1x112x112x64 max-pool pad, on a 2-core AVX2 EPYC, one thread). In destination-passing form,
``eliminate-empty-tensors`` lets the producer of ``%y`` (the conv tile loop with its fused batch
norm and relu) write straight into the interior of the padded buffer. Only pads at the top
level of a function body are rewritten (after scheduling, the pads inside tile loops belong to
their schedules); pads whose body computes the value from the indices are left alone.

``CopyIntoSlices`` (``mlc-copy-into-slices``): a top-level ``tensor.insert_slice`` of a function
argument (no producer can write in place: the padded input of a fused conv task) becomes an
identity ``linalg.generic`` whose destination is the ``tensor.extract_slice`` of the same
region, inserted back: the insert bufferizes to nothing and the generic to plain loops, whose
contiguous inner loop LLVM vectorizes. It runs in the prepare stage, after scheduling (in the
layout rewrites, the conv rules' transform scripts lost track of the conv's rewritten input). ResNet-18's im2col task of a 1x14x14x256 input (padded,
then 49 x 2304 patches) took 0.24 ms with the strided copy and 0.04 ms with it (same EPYC,
one thread).

Source: IREE ``TensorPadToInsertSlice`` (``linalg.fill`` + ``tensor.insert_slice``); MLIR
``transform.structured.rewrite_in_destination_passing_style`` and ``eliminate-empty-tensors``.
"""

from __future__ import annotations

from typing import List

from .._mlir import ir, linalg_d, tensor_d
from ..ir import emitters
from ..ir.module import OP_NAME_ATTR, Module
from .ir_utils import constant_pad_value, has_constant_pad_value, int_list
from .pass_manager import Pass, register_pass
from .rewrite import top_level_ops


def _static_pads(func) -> List[ir.Operation]:
    """The top-level ``tensor.pad`` ops of ``func`` with static low/high amounts, a static
    result type and a constant pad value."""
    return [op for op in top_level_ops(func)
            if op.name == "tensor.pad" and len(op.operands) == 1   # dynamic amounts are operands
            and ir.RankedTensorType(op.results[0].type).has_static_shape and has_constant_pad_value(op)]


def _rewrite(pad: ir.Operation) -> None:
    """Replace ``pad`` by fill + insert_slice right before it (see the module docstring)."""
    src = pad.operands[0]
    low = int_list(pad.attributes["static_low"])
    t = ir.RankedTensorType(pad.results[0].type)
    src_shape = list(ir.RankedTensorType(src.type).shape)
    name = ir.StringAttr(pad.attributes[OP_NAME_ATTR]).value if OP_NAME_ATTR in pad.attributes else "pad"
    with ir.InsertionPoint(pad), pad.location:
        value = constant_pad_value(pad)
        empty = tensor_d.EmptyOp(list(t.shape), t.element_type).result
        full = linalg_d.fill(value, outs=[empty])
        emitters.set_name(full.owner, f"{name}.fill")
        new = tensor_d.InsertSliceOp(src, full, [], [], [], low, src_shape, [1] * t.rank).result
    pad.results[0].replace_all_uses_with(new)
    pad.erase()


@register_pass
class PadToInsertSlice(Pass):
    """Rewrite top-level constant ``tensor.pad`` ops as ``linalg.fill`` + ``tensor.insert_slice``
    (see the module docstring). Shapes and dtypes are unchanged; pads with dynamic amounts or an
    index-dependent value are kept.

    Raises
    ------
    IRError
        If the result does not verify (a bug of the pass).
    """

    name = "mlc-pad-to-insert-slice"

    def transform(self, mod: Module) -> Module:
        for f in mod.func_ops():
            if not f.is_external:
                for pad in _static_pads(f):
                    _rewrite(pad)
        return mod


def _argument_inserts(func) -> List[ir.Operation]:
    """Top-level ``tensor.insert_slice`` ops of ``func`` with static offsets, sizes and strides
    (dynamic ones have more operands), not rank-reducing, whose source is an argument of
    ``func``."""
    def from_argument(op) -> bool:
        owner = op.operands[0].owner
        return isinstance(owner, ir.Block) and owner.owner.operation == func.operation

    def whole_source(op) -> bool:
        return list(ir.RankedTensorType(op.operands[0].type).shape) == int_list(op.attributes["static_sizes"])

    return [op for op in top_level_ops(func)
            if op.name == "tensor.insert_slice" and len(op.operands) == 2 and from_argument(op)
            and whole_source(op)]


def _copy_into(ins: ir.Operation) -> None:
    """``insert_slice %arg into %d[o][s][t]`` -> ``extract_slice %d[o][s][t]``, an identity
    generic from ``%arg`` into it, and ``insert_slice`` of the copy back."""
    src, dest = ins.operands[0], ins.operands[1]
    offsets, sizes, strides = (int_list(ins.attributes[a])
                               for a in ("static_offsets", "static_sizes", "static_strides"))
    src_t = ir.RankedTensorType(src.type)
    rank = src_t.rank
    with ir.InsertionPoint(ins), ins.location:
        part = tensor_d.ExtractSliceOp(src_t, dest, [], [], [], offsets, sizes, strides).result
        ident = ir.AffineMap.get_identity(rank)
        (copy,) = emitters.generic("insert_slice.copy", [src], [ident], [part], [ident],
                                   ["parallel"] * rank, lambda a, _out: [a])
        new = tensor_d.InsertSliceOp(copy, dest, [], [], [], offsets, sizes, strides).result
    ins.results[0].replace_all_uses_with(new)
    ins.erase()


@register_pass
class CopyIntoSlices(Pass):
    """Rewrite top-level ``tensor.insert_slice`` ops of function arguments as an identity
    ``linalg.generic`` into the extracted destination slice (see the module docstring).

    Raises
    ------
    IRError
        If the result does not verify (a bug of the pass).
    """

    name = "mlc-copy-into-slices"

    def transform(self, mod: Module) -> Module:
        for f in mod.func_ops():
            if not f.is_external:
                for ins in _argument_inserts(f):
                    _copy_into(ins)
        return mod
