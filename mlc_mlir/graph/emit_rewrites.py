"""Emitting the replacement ops of graph rewrites at the current insertion point: transposes
and reshapes named after the rewritten op, the accumulator of a contraction rewritten to another
rank (keeping its named ``linalg.fill``), replacing the contraction, an elementwise generic
moved to other operands and shape, and the constant value of a ``tensor.pad`` usable outside
its body.
"""

from __future__ import annotations

from typing import Optional, Sequence

from .._mlir import arith_d, ir, linalg_d, tensor_d
from ..ir import dtypes, emitters
from ..ir.module import OP_NAME_ATTR
from .linalg_attrs import tensor_shape
from .use_def import producer


def emit_transpose(v, perm: Sequence[int], name: str, init=None) -> ir.Value:
    """Emit ``linalg.transpose`` (named ``name``) of the tensor ``v`` by ``perm`` into ``init``
    (default: a new ``tensor.empty`` of the permuted shape) at the current insertion point."""
    shape = tensor_shape(v)
    if init is None:
        et = ir.RankedTensorType(v.type).element_type
        init = emitters.empty([shape[p] for p in perm], dtypes.from_ir_type(et), name)
    op = linalg_d.transpose(v, outs=[init], permutation=list(perm))
    op = getattr(op, "owner", op)      # the builder returns the op (no results on memrefs)
    emitters.set_name(op, name)
    return op.results[0]


def reshape(v, groups: Sequence[Sequence[int]], shape: Sequence[int], name: str) -> ir.Value:
    """``tensor.expand_shape`` (to a higher rank) or ``tensor.collapse_shape`` (to a lower one)
    of ``v`` to static ``shape`` with reassociation ``groups``, named ``name``."""
    t = ir.RankedTensorType.get(list(shape), ir.RankedTensorType(v.type).element_type)
    if len(shape) > ir.RankedTensorType(v.type).rank:
        r = tensor_d.ExpandShapeOp(t, v, groups, [], list(shape)).result
    else:
        r = tensor_d.CollapseShapeOp(t, v, groups).result
    emitters.set_name(r.owner, name)
    return r


def copy_attrs(src: ir.Operation, dst: ir.Operation, skip: Sequence[str]) -> None:
    """Copy ``src``'s attributes (``mlc.name``, ...) onto ``dst``, except those in ``skip``."""
    for i in range(len(src.attributes)):
        named = src.attributes[i]
        if named.name not in skip:
            dst.attributes[named.name] = named.attr


def moved_elementwise(op: ir.Operation, ins: Sequence[ir.Value], in_maps: Sequence[ir.AffineMap],
                      shape: Sequence[int]) -> ir.Value:
    """The all-parallel ``linalg.generic`` ``op`` (one result, written through the identity
    map, its init not read) rebuilt on inputs ``ins`` read through ``in_maps`` into a new
    ``tensor.empty`` of ``shape``: its body moved over, its attributes (``mlc.name``) kept;
    returns the new result (the caller replaces ``op``'s uses). Source: the generic rewrites of
    MLIR's data-layout propagation (``linalg::populateDataLayoutPropagationPatterns``)."""
    name = ir.StringAttr(op.attributes[OP_NAME_ATTR]).value if OP_NAME_ATTR in op.attributes else "elementwise"
    out = emitters.empty(list(shape), dtypes.from_ir_type(ir.RankedTensorType(op.results[0].type).element_type), name)
    ident = ir.AffineMap.get_identity(len(shape))
    maps = ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m in list(in_maps) + [ident]])
    iters = ir.ArrayAttr.get([ir.Attribute.parse("#linalg.iterator_type<parallel>")] * len(shape))
    g = linalg_d.GenericOp([out.type], list(ins), [out], maps, iters)
    copy_attrs(op, g.operation, ("indexing_maps", "iterator_types", "operandSegmentSizes"))
    op.regions[0].blocks[0].append_to(g.regions[0])
    return g.results[0]


def named_fill(init) -> Optional[ir.Operation]:
    """The named ``linalg.fill`` producing ``init`` with no other use, or None."""
    fill = producer(init)
    if fill is None or fill.name != "linalg.fill" or OP_NAME_ATTR not in fill.attributes \
            or len(list(fill.results[0].uses)) != 1:
        return None
    return fill


def reshaped_accumulator(init, groups: Sequence[Sequence[int]], shape: Sequence[int], name: str) -> ir.Value:
    """The accumulator of a contraction rewritten to another rank (the layout stage's ``ConvToIm2col``,
    ``PackMatmulWeights``): a new fill of ``shape`` keeping the name of the fill that
    produced ``init`` (:func:`named_fill`; the caller erases it with the old op), else ``init``
    reshaped (``groups``, named ``<name>.init_<rank>d``)."""
    fill = named_fill(init)
    if fill is None:
        return reshape(init, groups, shape, f"{name}.init_{len(shape)}d")
    dtype = dtypes.from_ir_type(ir.RankedTensorType(init.type).element_type)
    acc = linalg_d.fill(fill.operands[0], outs=[emitters.empty(list(shape), dtype, name)])
    emitters.set_name(acc.owner, ir.StringAttr(fill.attributes[OP_NAME_ATTR]).value)
    return acc


def replace_contraction(op: ir.Operation, result: ir.Value) -> None:
    """Replace ``op``'s result with ``result`` and erase ``op`` and the fill of its init
    (:func:`named_fill`) when the op was its only user."""
    fill = named_fill(op.operands[-1])
    op.results[0].replace_all_uses_with(result)
    op.erase()
    if fill is not None:
        fill.erase()


def constant_pad_value(pad: ir.Operation) -> Optional[ir.Value]:
    """The value a ``tensor.pad`` yields, usable outside the pad: an ``arith.constant`` in its
    body is re-created at the current insertion point, a value defined above is returned as is;
    None when the body computes the value (from the indices). Needs an insertion point and a
    location."""
    if not has_constant_pad_value(pad):
        return None
    value = _pad_yield(pad)
    owner = value.owner
    if not isinstance(owner, ir.Block) and owner.parent.operation == pad.operation:
        return arith_d.ConstantOp(value.type, owner.attributes["value"]).result
    return value


def has_constant_pad_value(pad: ir.Operation) -> bool:
    """Whether :func:`constant_pad_value` finds a value for ``pad`` (creates nothing)."""
    owner = _pad_yield(pad).owner
    if isinstance(owner, ir.Block):
        return owner.owner.operation != pad.operation
    return owner.parent.operation != pad.operation or owner.name == "arith.constant"


def _pad_yield(pad: ir.Operation) -> ir.Value:
    """The value the ``tensor.yield`` of a ``tensor.pad``'s body yields."""
    return list(pad.regions[0].blocks[0].operations)[-1].operands[0]
