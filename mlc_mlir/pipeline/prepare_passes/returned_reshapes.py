"""``SinkReturnedReshapes`` (``mlc-sink-returned-reshapes``): a private function that returns a
reshape (``tensor.collapse_shape`` / ``tensor.expand_shape``) of a value it computes returns the
value itself, and each of its calls reshapes the call's result instead.

A unit of the model (a ``FuseOps`` primitive function) often ends in such a reshape: the
Winograd input transform computes a ``4x4x1x28x28x64`` tensor and returns it as the
``16x784x64`` operand of the batch matmul; an output transform returns its ``1x56x56x64``
result as the ``3136x64x1x1`` A operand of the next packed GEMM. ``buffer-results-to-out-params
{hoist-static-allocs}`` turns a returned buffer into an out-param by replacing its allocation,
which it can only do when the returned value is that allocation; a reshape of it is copied into
the out-param instead (a ``memcpy`` of the whole result, serial, outside the threaded loops).
Light ResNet-50 copied about 23 MB per inference that way: ``memmove`` 1.8% of the samples on
one thread and 4% of the calling thread's with two (perf, 2-core AMD EPYC znver3). With the
reshape in the caller, the allocation is returned (the out-param itself) and the caller's
reshape is a view of it.

Before::

    func.func private @unit(%a: tensor<4x1x28x58x64xf32>) -> tensor<16x784x64xf32> {
      %t = scf.forall ... -> tensor<4x4x1x28x28x64xf32>
      %r = tensor.collapse_shape %t [[0, 1], [2, 3, 4], [5]] : ... into tensor<16x784x64xf32>
      return %r : tensor<16x784x64xf32>
    }
    %y = call @unit(%x) : (tensor<4x1x28x58x64xf32>) -> tensor<16x784x64xf32>

After::

    func.func private @unit(%a: tensor<4x1x28x58x64xf32>) -> tensor<4x4x1x28x28x64xf32> {
      %t = scf.forall ... -> tensor<4x4x1x28x28x64xf32>
      return %t : tensor<4x4x1x28x28x64xf32>
    }
    %t = call @unit(%x) : (tensor<4x1x28x58x64xf32>) -> tensor<4x4x1x28x28x64xf32>
    %y = tensor.collapse_shape %t [[0, 1], [2, 3, 4], [5]] : ... into tensor<16x784x64xf32>

Only static reshapes of values defined in the function body (not arguments: a returned argument
is copied all the same, see ``compile._distinct_results``), in private functions whose every
use is a ``func.call`` of this module, are moved; public functions keep their signatures.

Source: MLIR's ``buffer-results-to-out-params`` (``hoist-static-allocs``: an out-param replaces
a returned allocation only) and its reshape folding in the caller (IREE moves ``flow.tensor.
reshape`` ops out of dispatch regions for the same reason: a reshape outside is a view).
"""

from __future__ import annotations

from typing import Dict, List

from ..._mlir import ir, tensor_d
from ...graph.pass_manager import Pass, register_pass
from ...ir.module import Module
from ...ir.walk import find_ops

_RESHAPES = ("tensor.collapse_shape", "tensor.expand_shape")


def _static(value) -> bool:
    return isinstance(value.type, ir.RankedTensorType) and ir.RankedTensorType(value.type).has_static_shape


def _sinkable(ret: ir.Operation, i: int):
    """The reshape op returned as ``ret``'s operand ``i``, or None when it may not move."""
    owner = ret.operands[i].owner
    if isinstance(owner, ir.Block):
        return None
    op = owner.operation
    if op.name not in _RESHAPES or not (_static(op.operands[0]) and _static(op.results[0])):
        return None
    if isinstance(op.operands[0].owner, ir.Block):   # a reshaped argument: copied either way
        return None
    return op


def _reshape_like(kind: str, t: ir.Type, reassoc: ir.Attribute, value) -> ir.Value:
    """A reshape ``kind`` (a name of :data:`_RESHAPES`) of ``value`` to the static type ``t``
    with the reassociation ``reassoc``, at the insertion point."""
    if kind == "tensor.collapse_shape":
        return tensor_d.CollapseShapeOp(t, value, reassoc).result
    return tensor_d.ExpandShapeOp(t, value, reassoc, [], list(ir.RankedTensorType(t).shape)).result


def _calls(mod: Module) -> Dict[str, List[ir.Operation]]:
    out: Dict[str, List[ir.Operation]] = {}
    for call in find_ops(mod, "func.call"):
        out.setdefault(ir.FlatSymbolRefAttr(call.attributes["callee"]).value, []).append(call)
    return out


def _sink(func, calls: List[ir.Operation]) -> bool:
    """Move the returned reshapes of ``func`` (one block, one ``func.return``) into ``calls``;
    whether any moved."""
    blocks = list(func.regions[0].blocks)
    if len(blocks) != 1:
        return False
    ret = blocks[0].operations[len(blocks[0].operations) - 1].operation
    if ret.name != "func.return":
        return False
    moved = {i: op for i in range(len(ret.operands)) if (op := _sinkable(ret, i)) is not None}
    if not moved:
        return False
    how = {i: (op.name, op.results[0].type, op.attributes["reassociation"]) for i, op in moved.items()}
    for i, op in moved.items():
        ret.operands[i] = op.operands[0]
        if not list(op.results[0].uses):
            op.erase()
    ftype = ir.FunctionType(ir.TypeAttr(func.attributes["function_type"]).value)
    results = [v.type for v in ret.operands]
    func.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(list(ftype.inputs), results))
    for call in calls:
        for i in moved:
            res = call.results[i]
            old_uses = list(res.uses)
            res.set_type(results[i])
            with ir.InsertionPoint.after(call), call.location:
                new = _reshape_like(*how[i], res)
            for use in old_uses:
                use.owner.operands[use.operand_number] = new
    return True


@register_pass
class SinkReturnedReshapes(Pass):
    """Move each static reshape a private function returns into its callers (see the module
    docstring), until none is left (a reshape of a reshape moves in two rounds). Values and
    their layouts are unchanged; the module is verified after
    (:class:`~mlc_mlir.graph.pass_manager.Pass`)."""

    name = "mlc-sink-returned-reshapes"

    def transform(self, mod: Module) -> Module:
        for _ in range(4):
            calls = _calls(mod)
            changed = False
            for f in mod.func_ops():
                name = f.sym_name.value
                private = "sym_visibility" in f.attributes and \
                    ir.StringAttr(f.attributes["sym_visibility"]).value == "private"
                if f.is_external or not private or name not in calls:
                    continue
                changed |= _sink(f.operation if hasattr(f, "operation") else f, calls[name])
            if not changed:
                break
        return mod
