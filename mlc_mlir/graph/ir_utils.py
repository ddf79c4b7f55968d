"""IR helpers shared by the graph passes: producers, values an op reads (operands and values its
regions capture from above), cloning ops with their nested uses remapped, and reading linalg
iterator types and indexing maps as attributes (never as printed IR).

Source: MLIR ``getUsedValuesDefinedAbove`` / ``IRMapping`` + ``Operation::clone``.
"""

from __future__ import annotations

from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from .._mlir import arith_d, ir, linalg_d, tensor_d
from ..ir import dtypes, emitters
from ..ir.module import CONV_ALGORITHM_ATTR, OP_NAME_ATTR


def producer(value) -> Optional[ir.Operation]:
    """The operation defining ``value``, or None for a block argument.

    Parameters
    ----------
    value : ir.Value

    Returns
    -------
    ir.Operation or None
    """
    owner = value.owner
    return None if isinstance(owner, ir.Block) else owner.operation


def op_name(op) -> str:
    """The op's ``mlc.name`` (the builder's stable name), else the short op name
    (``matmul`` for ``linalg.matmul``)."""
    op = getattr(op, "operation", op)
    if OP_NAME_ATTR in op.attributes:
        return ir.StringAttr(op.attributes[OP_NAME_ATTR]).value
    return op.name.split(".")[-1]


def has_uses(op) -> bool:
    """True if any result of ``op`` is used."""
    op = getattr(op, "operation", op)
    return any(True for r in op.results for _ in r.uses)


def is_inside(op, root) -> bool:
    """True if ``op`` is ``root`` or nested in one of its regions."""
    root = getattr(root, "operation", root)
    o = getattr(op, "operation", op)
    while o is not None:
        if o == root:
            return True
        o = o.parent
        o = None if o is None else o.operation
    return False


def _defined_inside(value, root) -> bool:
    owner = value.owner
    if isinstance(owner, ir.Block):
        return owner.owner is not None and is_inside(owner.owner, root)
    return is_inside(owner, root)


def used_values(op) -> List[ir.Value]:
    """Values ``op`` reads from outside itself, in first-use order: its operands, then values
    its regions capture from above (e.g. a scalar ``arith.constant`` used in a
    ``linalg.generic`` body after ``canonicalize``/``cse``).

    Source: MLIR ``getUsedValuesDefinedAbove``.
    """
    op = getattr(op, "operation", op)
    out: List[ir.Value] = []

    def add(v):
        if all(v != x for x in out):
            out.append(v)

    for v in op.operands:
        add(v)
    if op.regions:
        nested: List[ir.Operation] = []

        def visit(o):
            if o != op:
                nested.append(o)
            return ir.WalkResult.ADVANCE

        op.walk(visit, ir.WalkOrder.PRE_ORDER)
        for o in nested:
            for v in o.operands:
                if not _defined_inside(v, op):
                    add(v)
    return out


def top_level(op, block) -> Optional[ir.Operation]:
    """The ancestor of ``op`` (itself included) that sits directly in ``block``."""
    o = getattr(op, "operation", op)
    while o is not None and o.block != block:
        o = o.parent
        o = None if o is None else o.operation
    return o


def users_in(value, block) -> List[ir.Operation]:
    """Top-level ops of ``block`` that use ``value`` (directly or inside their regions)."""
    out: List[ir.Operation] = []
    for u in value.uses:
        t = top_level(u.owner, block)
        if t is not None and all(t != x for x in out):
            out.append(t)
    return out


def clone_ops(ops: Iterable, mapping: Dict) -> None:
    """Clone ``ops`` (in order) at the current insertion point, replacing every use of a value in
    ``mapping`` (old value -> new value), in operands and inside the ops' regions, and adding each
    clone's results to ``mapping``.

    Source: MLIR ``Operation::clone(IRMapping&)``.
    """
    for op in ops:
        op = getattr(op, "operation", op)
        c = op.clone()

        def remap(o):
            for i, v in enumerate(o.operands):
                if v in mapping:
                    o.operands[i] = mapping[v]
            return ir.WalkResult.ADVANCE

        c.walk(remap, ir.WalkOrder.PRE_ORDER)
        for old, new in zip(op.results, c.results):
            mapping[old] = new


def tensor_shape(v) -> Tuple[int, ...]:
    """The static shape of a ranked tensor value."""
    return tuple(ir.RankedTensorType(v.type).shape)


#: ``select(x_shape, w_shape, out_shape, dtype) -> bool``: which convolutions a conv rewrite
#: (``graph.ConvToNHWC``, ``graph.ConvToIm2col``) takes, from :func:`conv_signature`.
ConvSelect = Callable[[Tuple[int, ...], Tuple[int, ...], Tuple[int, ...], str], bool]


def conv_signature(op) -> Tuple[Tuple[int, ...], Tuple[int, ...], Tuple[int, ...], str]:
    """``(input shape, filter shape, output shape, element dtype name)`` of a
    ``linalg.conv_2d_*`` op (operands 0, 1 and its init): what the conv rewrites' ``select``
    callbacks are given."""
    dtype = dtypes.from_ir_type(ir.RankedTensorType(op.operands[0].type).element_type)
    return tensor_shape(op.operands[0]), tensor_shape(op.operands[1]), tensor_shape(op.operands[2]), dtype


def static_slice(op) -> Tuple[List[int], List[int], List[int]]:
    """``(offsets, sizes, strides)`` of a static ``tensor.insert_slice``/``extract_slice``."""
    return tuple(int_list(op.attributes[a]) for a in ("static_offsets", "static_sizes", "static_strides"))


def int_list(attr) -> List[int]:
    """The ints of a ``DenseI64ArrayAttr`` (``permutation``, ``static_low``) or a
    ``DenseIntElementsAttr`` (a convolution's ``strides``)."""
    try:
        return list(ir.DenseI64ArrayAttr(attr))
    except ValueError:
        return [int(x) for x in ir.DenseIntElementsAttr(attr)]


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


def chosen_algorithm(op) -> Optional[int]:
    """The :data:`~mlc_mlir.ir.module.CONV_ALGORITHM_ATTR` of a convolution op, or None."""
    if CONV_ALGORITHM_ATTR not in op.attributes:
        return None
    return ir.IntegerAttr(op.attributes[CONV_ALGORITHM_ATTR]).value


def named_fill(init) -> Optional[ir.Operation]:
    """The named ``linalg.fill`` producing ``init`` with no other use, or None."""
    fill = producer(init)
    if fill is None or fill.name != "linalg.fill" or OP_NAME_ATTR not in fill.attributes \
            or len(list(fill.results[0].uses)) != 1:
        return None
    return fill


def reshaped_accumulator(init, groups: Sequence[Sequence[int]], shape: Sequence[int], name: str) -> ir.Value:
    """The accumulator of a contraction rewritten to another rank (``graph.ConvToIm2col``,
    ``graph.PackMatmulWeights``): a new fill of ``shape`` keeping the name of the fill that
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


def rename_dims(m: ir.AffineMap, new_of_old: Sequence[int], n_dims: int) -> ir.AffineMap:
    """``m`` with iteration dim ``d`` renamed ``new_of_old[d]``, as a map over ``n_dims`` dims
    (the maps of an op whose loops were permuted)."""
    return ir.AffineMap.get(n_dims, 0, [
        ir.AffineDimExpr.get(new_of_old[e.position]) if isinstance(e, ir.AffineDimExpr) else e
        for e in m.results])


def is_projected_map(m: ir.AffineMap) -> bool:
    """Whether every result of ``m`` is a dim or the constant 0 (a projected permutation, with
    zeros for broadcast unit dims: a ``(F, 1, 1)`` bias)."""
    return all(isinstance(e, ir.AffineDimExpr) or (isinstance(e, ir.AffineConstantExpr) and e.value == 0)
               for e in m.results)


def _iterator_attr(kind: str, context) -> ir.Attribute:
    return ir.AttrBuilder.get("IteratorTypeEnum")(getattr(linalg_d.IteratorType, kind), context)


def iterator_types(op) -> List[str]:
    """``"parallel"``/``"reduction"`` per loop of a ``linalg.generic`` (its ``iterator_types``
    attribute, compared as attributes)."""
    op = getattr(op, "operation", op)
    par, red = _iterator_attr("parallel", op.context), _iterator_attr("reduction", op.context)
    out = []
    for a in ir.ArrayAttr(op.attributes["iterator_types"]):
        out.append("parallel" if a == par else "reduction" if a == red else "other")
    return out


def indexing_maps(op) -> Optional[List[ir.AffineMap]]:
    """The ``indexing_maps`` of a linalg op as affine maps, or None if it has no such attribute
    (a named op using its default maps)."""
    op = getattr(op, "operation", op)
    if "indexing_maps" not in op.attributes:
        return None
    return [ir.AffineMapAttr(a).value for a in ir.ArrayAttr(op.attributes["indexing_maps"])]


def matmul_maps(context) -> List[ir.AffineMap]:
    """The default maps of ``linalg.matmul``: ``(m, n, k) -> (m, k), (k, n), (m, n)``."""
    d = [ir.AffineDimExpr.get(i, context=context) for i in range(3)]
    return [ir.AffineMap.get(3, 0, [d[0], d[2]], context=context),
            ir.AffineMap.get(3, 0, [d[2], d[1]], context=context),
            ir.AffineMap.get(3, 0, [d[0], d[1]], context=context)]


def named_ops(mod, op_name: str, functions=None) -> List:
    """The top-level ops named ``op_name`` (e.g. ``linalg.conv_2d_nhwc_hwcf``) that carry an
    ``mlc.name``, in the function bodies of ``mod`` (only ``functions`` when given), in
    program order: a list, safe to rewrite while iterating."""
    out = []
    for f in mod.func_ops():
        if f.is_external or (functions is not None and f.sym_name.value not in functions):
            continue
        out += [o.operation for o in f.regions[0].blocks[0].operations
                if o.operation.name == op_name and OP_NAME_ATTR in o.operation.attributes]
    return out


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
