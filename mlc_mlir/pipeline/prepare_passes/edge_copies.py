"""``CopyEdgeTiles`` (``mlc-copy-edge-tiles``): the copies into and out of a padded edge tile
inside tile loops are identity ``linalg.generic`` ops, whose contiguous inner loop LLVM
vectorizes, instead of ``memref.copy`` ops that lower to the runtime's element-by-element
``memrefCopy``.

A matmul whose N ends in a partial panel computes that panel's C tile padded to the full panel
width (``transform.structured.pad`` with ``copy_back_op =
"bufferization.materialize_in_destination"``, :mod:`mlc_mlir.schedule.partial_tiles`): One-Shot
Bufferize copies the tile into the padded buffer (``tensor.pad``: a fill and a ``memref.copy``)
and back (``materialize_in_destination`` of the slice of the padded result: a ``memref.copy``),
once per K block and M block.

* ``tensor.pad %x low[0, ..] high[..]`` with a constant value and an amount given at run time
  (a tile's edge), nested in a loop (the top-level ones are
  :class:`~.destination_style.PadToInsertSlice`'s) -> a ``linalg.fill`` of each padded
  dim's slab past ``%x``'s extent (the padding only: a thread's 160 x 900 slice of a
  dense's B padded by 20 rows fills 20 rows, not 160), an identity ``linalg.generic`` from
  ``%x`` into the leading slice, each inserted back;
* ``bufferization.materialize_in_destination %s in %d`` whose source is a
  ``tensor.extract_slice`` of a larger tensor (the padded tile: a real copy; a full tile is
  computed in place and left alone) -> an identity ``linalg.generic`` from ``%s`` into
  ``%d``.

Source: MLIR ``linalg::rewriteInDestinationPassingStyle`` (``tensor.pad`` as fill + copy);
IREE's ``TensorPadToInsertSlice``.
"""

from __future__ import annotations

from typing import List

from ..._mlir import ir, tensor_d
from ...graph.emit_rewrites import constant_pad_value, has_constant_pad_value
from ...graph.pass_manager import Pass, register_pass
from ...graph.use_def import producer
from ...ir import emitters
from ...ir.module import Module
from .destination_style import fill_slabs


def _copy(src: ir.Value, dest: ir.Value, name: str) -> ir.Value:
    rank = ir.RankedTensorType(src.type).rank
    ident = ir.AffineMap.get_identity(rank)
    (out,) = emitters.generic(name, [src], [ident], [dest], [ident], ["parallel"] * rank,
                              lambda a, _out: [a])
    return out


def _edge_ops(module: Module) -> List[ir.Operation]:
    found = []

    def visit(op):
        op = op.operation
        nested = op.parent is not None and op.parent.name not in ("func.func", "builtin.module")
        if op.name == "tensor.pad" and nested and len(op.operands) > 1 and has_constant_pad_value(op) and \
                set(ir.DenseI64ArrayAttr(op.attributes["static_low"])) <= {0} and \
                ir.RankedTensorType(op.results[0].type).has_static_shape:
            found.append(op)
        elif op.name == "bufferization.materialize_in_destination" and len(op.results) == 1:
            src = producer(op.operands[0])
            # a slice of a larger (padded) tile; a whole tile is already in place
            if src is not None and src.name == "tensor.extract_slice" and \
                    src.operands[0].type != src.results[0].type:
                found.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit, ir.WalkOrder.PRE_ORDER)
    return found


def _rewrite_pad(pad: ir.Operation) -> None:
    src = pad.operands[0]
    t = ir.RankedTensorType(pad.results[0].type)
    src_t = ir.RankedTensorType(src.type)
    with ir.InsertionPoint(pad), pad.location:
        extent = [tensor_d.DimOp(src, emitters.index_constant(d)).result
                  if src_t.is_dynamic_dim(d) else src_t.shape[d] for d in range(t.rank)]
        zeros = [0] * t.rank
        out = fill_slabs(tensor_d.EmptyOp(list(t.shape), t.element_type).result,
                         constant_pad_value(pad), zeros, extent, "pad.fill")
        copied = _copy(src, emitters.extract_slice(out, zeros, extent), "pad.copy")
        new = emitters.insert_slice(copied, out, zeros, extent)
    pad.results[0].replace_all_uses_with(new)
    pad.erase()


def _rewrite_materialize(op: ir.Operation) -> None:
    with ir.InsertionPoint(op), op.location:
        copied = _copy(op.operands[0], op.operands[1], "edge_tile.copy")
    op.results[0].replace_all_uses_with(copied)
    op.erase()


@register_pass
class CopyEdgeTiles(Pass):
    """Copies into and out of padded edge tiles as identity ``linalg.generic`` ops (see the
    module docstring). Shapes and dtypes are unchanged; the result is verified
    (:class:`~mlc_mlir.graph.pass_manager.Pass`)."""

    name = "mlc-copy-edge-tiles"

    def transform(self, mod: Module) -> Module:
        for op in _edge_ops(mod):
            if op.name == "tensor.pad":
                _rewrite_pad(op)
            else:
                _rewrite_materialize(op)
        return mod
