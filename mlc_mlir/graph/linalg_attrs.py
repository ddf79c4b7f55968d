"""Reading shapes, slices and linalg attributes as attributes (never as printed IR): static
tensor shapes, the static offsets/sizes/strides of a slice, integer arrays, a linalg op's
iterator types and indexing maps, and the affine maps of rewritten loop orders.
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

from .._mlir import ir, linalg_d


def int_list(attr) -> List[int]:
    """The ints of a ``DenseI64ArrayAttr`` (``permutation``, ``static_low``) or a
    ``DenseIntElementsAttr`` (a convolution's ``strides``)."""
    try:
        return list(ir.DenseI64ArrayAttr(attr))
    except ValueError:
        return [int(x) for x in ir.DenseIntElementsAttr(attr)]


def static_slice(op) -> Tuple[List[int], List[int], List[int]]:
    """``(offsets, sizes, strides)`` of a static ``tensor.insert_slice``/``extract_slice``."""
    return tuple(int_list(op.attributes[a]) for a in ("static_offsets", "static_sizes", "static_strides"))


def tensor_shape(v) -> Tuple[int, ...]:
    """The static shape of a ranked tensor value."""
    return tuple(ir.RankedTensorType(v.type).shape)


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


def is_elementwise_generic(op: ir.Operation) -> bool:
    """Whether ``op`` is a ``linalg.generic`` with one result, all-parallel iterators, its result
    written through the identity map, its init never read and no ``linalg.index`` (each output
    element a function of the inputs' elements at its maps' points: an op the layout rewrites
    may move to another shape or layout)."""
    if op.name != "linalg.generic" or len(op.results) != 1 or set(iterator_types(op)) != {"parallel"}:
        return False
    maps = indexing_maps(op)
    n_in = len(op.operands) - 1
    body = op.regions[0].blocks[0]
    return maps is not None and maps[n_in] == ir.AffineMap.get_identity(len(maps[n_in].results)) \
        and not any(True for _ in body.arguments[n_in].uses) \
        and not any(o.name == "linalg.index" for o in body.operations)
