"""``FoldIdentitySlices`` (``mlc-fold-identity-slices``): a ``tensor.extract_slice`` or
``tensor.insert_slice`` that covers the whole of a dynamically shaped tensor is replaced by the
tensor it slices (the inserted one), so One-Shot Bufferize makes no copy for it.

Tiling a partial tile (an imperfect ``split``: sizes ``affine.min(NC, N - j)``) along another dim
slices the whole tile again, ``extract_slice %t[0, 0] [777, %n] [1, 1]`` of a ``tensor<777x?xf32>``
whose own size is ``%n``; ``transform.loop.hoist_loop_invariant_subsets`` then carries the slice
and its source as two ``iter_args`` of the reduction loop and inserts one into the other after
it. The upstream folders prove a slice whole from static sizes only, so the insert stays and
bufferizes to a ``memref.copy`` of the whole tile onto itself (the runtime's element-by-element
``memrefCopy``: matmul 777 x 513 x 1029 without padding, one thread, 20 ms against 3.5 ms).
Here a dynamic size counts as whole when it is the same SSA value as the source's size, found
through the ops that keep a tensor's shape: ``tensor.extract_slice`` (its sizes),
``tensor.insert_slice`` and ``vector.transfer_write`` (their destination), destination-style ops
(their init) and ``scf.for`` (the init of an ``iter_arg`` whose yielded value is written into that
``iter_arg``).

Before::

    %s = tensor.extract_slice %c[0, %j] [777, %n] [1, 1] : tensor<777x1029xf32> to tensor<777x?xf32>
    %w = tensor.extract_slice %s[0, 0] [777, %n] [1, 1] : tensor<777x?xf32> to tensor<777x?xf32>
    %r:2 = scf.for ... iter_args(%a = %s, %b = %w) ... { scf.yield %a, %x }
    %i = tensor.insert_slice %r#1 into %r#0[0, 0] [777, %n] [1, 1]

After: ``%w`` is ``%s`` and ``%i`` is ``%r#1``.

Source: MLIR ``foldIdentityOffsetSizeAndStrideOpInterface`` (the same fold, static sizes only)
and ``ReifyRankedShapedTypeOpInterface`` (a result's sizes from its operands).
"""

from __future__ import annotations

from typing import List, Optional, Union

from ..._mlir import ir, scf_d
from ...graph.pass_manager import Pass, register_pass
from ...graph.use_def import producer
from ...ir.module import Module

Size = Union[int, ir.Value]


def _slice_sizes(op: ir.Operation) -> List[Size]:
    """The sizes of a ``tensor.extract_slice``/``insert_slice`` (static ints, dynamic values)."""
    static = list(ir.DenseI64ArrayAttr(op.attributes["static_sizes"]))
    seg = list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]))
    start = sum(seg[:-2])              # source (, dest), dynamic offsets, then sizes
    dynamic = list(op.operands)[start:start + seg[-2]]
    out, k = [], 0
    for s in static:
        if s == ir.ShapedType.get_dynamic_size():
            out.append(dynamic[k])
            k += 1
        else:
            out.append(s)
    return out


def _writes_into(value, arg) -> bool:
    """Whether ``value`` is ``arg`` or written into it through shape-keeping destination ops."""
    for _ in range(64):
        if value == arg:
            return True
        op = producer(value)
        if op is None:
            return False
        if op.name == "tensor.insert_slice":
            value = op.operands[1]
        elif op.name == "vector.transfer_write":
            value = op.operands[1]
        elif op.name == "scf.for":
            n = ir.OpResult(value).result_number
            value = op.operands[3 + n]
        elif op.name.startswith("linalg.") and "operandSegmentSizes" in op.attributes:
            ins = list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]))[0]
            value = op.operands[ins + ir.OpResult(value).result_number]
        else:
            return False
    return False


def _sizes(value, depth: int = 0) -> Optional[List[Size]]:
    """The sizes of a ranked tensor ``value``: static ints, and for a dynamic dim the SSA value
    it was sliced with (None when unknown)."""
    t = ir.RankedTensorType(value.type)
    if t.has_static_shape:
        return list(t.shape)
    if depth > 64:
        return None
    owner = value.owner
    if isinstance(owner, ir.Block):
        loop = owner.owner
        if loop.name != "scf.for" or ir.BlockArgument(value).arg_number == 0:
            return None
        n = ir.BlockArgument(value).arg_number - 1
        yielded = owner.operations[len(owner.operations) - 1].operands[n]
        return _sizes(loop.operands[3 + n], depth + 1) if _writes_into(yielded, value) else None
    op = owner.operation
    if op.name == "tensor.extract_slice" and len(t.shape) == len(_slice_sizes(op)):
        return _slice_sizes(op)
    if op.name == "scf.for":
        n = ir.OpResult(value).result_number
        region = op.regions[0].blocks[0]
        return _sizes(region.arguments[1 + n], depth + 1)
    if op.name in ("tensor.insert_slice", "vector.transfer_write"):
        return _sizes(op.operands[1], depth + 1)
    return None


def _same(a: Size, b: Size) -> bool:
    return a == b if isinstance(a, int) == isinstance(b, int) else False


def _whole(op: ir.Operation, whole: ir.Value) -> bool:
    """Whether the static-offset, unit-stride slice ``op`` covers all of ``whole``."""
    if list(ir.DenseI64ArrayAttr(op.attributes["static_offsets"])) != [0] * ir.RankedTensorType(whole.type).rank:
        return False
    if set(ir.DenseI64ArrayAttr(op.attributes["static_strides"])) - {1}:
        return False
    mine, theirs = _slice_sizes(op), _sizes(whole)
    return theirs is not None and len(mine) == len(theirs) and all(map(_same, mine, theirs))


def _identity_slices(module: Module) -> List[ir.Operation]:
    found = []

    def visit(op):
        op = op.operation
        if op.name == "tensor.extract_slice":
            src, res = op.operands[0], op.results[0]
            if src.type == res.type and not ir.RankedTensorType(res.type).has_static_shape and _whole(op, src):
                found.append(op)
        elif op.name == "tensor.insert_slice":
            src, dest = op.operands[0], op.operands[1]
            if src.type == dest.type and not ir.RankedTensorType(dest.type).has_static_shape and _whole(op, dest):
                found.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit, ir.WalkOrder.PRE_ORDER)
    return found


@register_pass
class FoldIdentitySlices(Pass):
    """Replace whole-tensor ``tensor.extract_slice`` / ``tensor.insert_slice`` ops of dynamically
    shaped tensors by the tensor itself (see the module docstring). Shapes and dtypes are
    unchanged; the result is verified (:class:`~mlc_mlir.graph.pass_manager.Pass`)."""

    name = "mlc-fold-identity-slices"

    def transform(self, mod: Module) -> Module:
        _fold_slices(mod)
        for loop in _loops(mod):
            _drop_unchanged_iter_args(loop)
        _fold_slices(mod)
        return mod


def _fold_slices(mod: Module) -> None:
    for op in _identity_slices(mod):
        op.results[0].replace_all_uses_with(op.operands[0])
        op.erase()


def _is_tensor(value) -> bool:
    try:
        ir.RankedTensorType(value.type)
    except ValueError:
        return False
    return True


def _loops(module: Module) -> List[ir.Operation]:
    found = []

    def visit(op):
        if op.operation.name == "scf.for":
            found.append(op.operation)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit, ir.WalkOrder.POST_ORDER)
    return found


def _drop_unchanged_iter_args(loop: ir.Operation) -> None:
    """Rebuild ``loop`` without the tensor ``iter_args`` it yields unchanged (their results are
    their inits): two ``iter_args`` with one init, one of them written, make One-Shot Bufferize
    copy the init. Source: MLIR's ``scf.for`` canonicalization (``ForOpIterArgsFolder``)."""
    body = loop.regions[0].blocks[0]
    args = list(body.arguments)[1:]
    yield_op = body.operations[len(body.operations) - 1].operation
    inits = list(loop.operands)[3:]
    drop = [i for i, a in enumerate(args)
            if yield_op.operands[i] == a and _is_tensor(a)]
    if not drop:
        return
    keep = [i for i in range(len(args)) if i not in drop]
    with ir.InsertionPoint(loop), loop.location:
        new = scf_d.ForOp(loop.operands[0], loop.operands[1], loop.operands[2], [inits[i] for i in keep])
    new_body = new.body
    body.arguments[0].replace_all_uses_with(new.induction_variable)
    for i in drop:
        args[i].replace_all_uses_with(inits[i])
    for j, i in enumerate(keep):
        args[i].replace_all_uses_with(new.inner_iter_args[j])
    for op in list(body.operations)[:-1]:
        new_body.append(op.operation)
    with ir.InsertionPoint(new_body), loop.location:
        scf_d.YieldOp([yield_op.operands[i] for i in keep])
    for i in drop:
        loop.results[i].replace_all_uses_with(inits[i])
    for j, i in enumerate(keep):
        loop.results[i].replace_all_uses_with(new.results[j])
    for name in list(loop.attributes):
        new.operation.attributes[name] = loop.attributes[name]
    loop.erase()
