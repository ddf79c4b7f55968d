"""``PadToInsertSlice`` (``mlc-pad-to-insert-slice``): a ``tensor.pad`` with a constant pad value
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

Why: One-Shot Bufferize turns a ``tensor.pad`` into a new buffer, a fill and a ``memref.copy``
of the source into a strided subview, which lowers to the runtime's element-by-element
``memrefCopy`` (5.7 ms of the 15 ms ResNet-18 stem task for its 1x112x112x64 max-pool pad, on a
2-core AVX2 EPYC, one thread). In destination-passing form, ``eliminate-empty-tensors`` lets the
producer of ``%y`` (the conv tile loop with its fused batch norm and relu) write straight into
the interior of the padded buffer: no copy at all. When the source has no such producer (a
function argument), the copy stays as before.

Only pads at the top level of a function body are rewritten (after scheduling, the pads inside
tile loops belong to their schedules); pads whose body computes the value from the indices are
left alone. Source: IREE ``TensorPadToInsertSlice`` (``linalg.fill`` + ``tensor.insert_slice``);
MLIR ``transform.structured.rewrite_in_destination_passing_style`` and
``eliminate-empty-tensors``.
"""

from __future__ import annotations

from typing import List

from .._mlir import ir, linalg_d, tensor_d
from ..ir import emitters
from ..ir.module import OP_NAME_ATTR, Module
from .ir_utils import constant_pad_value, has_constant_pad_value, int_list
from .pass_manager import Pass, register_pass


def _static_pads(func) -> List[ir.Operation]:
    """The top-level ``tensor.pad`` ops of ``func`` with static low/high amounts, a static
    result type and a constant pad value."""
    out = []
    for o in func.regions[0].blocks[0].operations:
        op = o.operation
        if op.name != "tensor.pad" or len(op.operands) != 1:   # dynamic amounts are operands
            continue
        t = ir.RankedTensorType(op.results[0].type)
        if t.has_static_shape and has_constant_pad_value(op):
            out.append(op)
    return out


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
            if f.is_external:
                continue
            for pad in _static_pads(f):
                _rewrite(pad)
        return mod
