"""Moving a contraction's elementwise epilogue chain across the reshape that follows the
contraction in a layout rewrite, onto the contraction's own shape, so that ``graph.FuseOps``
groups the chain with the contraction (a reshape between them keeps them apart) and the
contraction's rule fuses it into its tiles.

Before (``ConvToIm2col`` of a 1x1 convolution; ``%b`` a ``(F, 1, 1)`` bias)::

    %m = linalg.matmul ... -> tensor<784x64xf32>
    %y = tensor.expand_shape %m [[0, 1, 2], [3]] : tensor<1x28x28x64xf32>
    %z = linalg.generic {maps = [(n, h, w, f) -> (n, h, w, f), (n, h, w, f) -> (f, 0, 0), id]}
           ins(%y, %b) ...                                        // bias add
After::

    %b1 = tensor.collapse_shape %b [[0, 1, 2]] : tensor<64xf32>
    %z2 = linalg.generic {maps = [(i, f) -> (i, f), (i, f) -> (f), id]} ins(%m, %b1) ...
    %z = tensor.expand_shape %z2 [[0, 1, 2], [3]] : tensor<1x28x28x64xf32>

The channels (the reshaped value's last dim) are the contraction's ``channel_dims``: one dim
for a GEMM's ``(M, F)``, ``(F / NR, 1, NR)`` for an ``linalg.mmt4d``'s ``(M, F / NR, 1, NR)``;
a per-channel operand is reshaped to them. Source: MLIR's
``linalg::populateFoldReshapeOpsByCollapsingPatterns`` / ``ByExpansionPatterns`` (the reshape
moved through an elementwise ``linalg.generic``), limited to the single-user chains that
``graph.FuseOps`` groups with a contraction.
"""

from __future__ import annotations

import math
from typing import List, Optional, Sequence

from ..._mlir import ir, linalg_d
from ...ir import dtypes, emitters
from ...ir.module import OP_NAME_ATTR
from ...graph.emit_rewrites import reshape
from ...graph.linalg_attrs import is_projected_map, tensor_shape
from ...graph.use_def import producer

_RESHAPES = ("tensor.expand_shape", "tensor.collapse_shape")


def _groups(op: ir.Operation) -> List[List[int]]:
    return [[ir.IntegerAttr(i).value for i in ir.ArrayAttr(g)] for g in ir.ArrayAttr(op.attributes["reassociation"])]


def _reshaped_from(v, groups, src_type) -> Optional[ir.Value]:
    """The source of ``v`` when ``v`` is a reshape by ``groups`` of a ``src_type`` value."""
    op = producer(v)
    if op is None or op.name not in _RESHAPES or _groups(op) != groups or op.operands[0].type != src_type:
        return None
    return op.operands[0]


def _epilogue_user(y: ir.Value) -> Optional[ir.Operation]:
    """The single user of ``y`` when it is an all-parallel ``linalg.generic`` of ``y``'s rank
    with an identity output map whose inputs are read whole (identity map) or along the last
    dim and constant-zero dims only (a ``(F, 1, 1)`` bias); else None."""
    users = [u.owner for u in y.uses]
    if len(users) != 1 or users[0].name != "linalg.generic":
        return None
    u, rank = users[0], ir.RankedTensorType(y.type).rank
    its = [str(a) for a in ir.ArrayAttr(u.attributes["iterator_types"])]
    maps = [ir.AffineMapAttr(a).value for a in ir.ArrayAttr(u.attributes["indexing_maps"])]
    ident = ir.AffineMap.get_identity(rank)
    if len(its) != rank or any("parallel" not in t for t in its) or len(u.results) != 1 or maps[-1] != ident:
        return None
    for v, m in zip(list(u.operands)[:-1], maps[:-1]):
        per_channel = all(not isinstance(e, ir.AffineDimExpr) or e.position == rank - 1 for e in m.results)
        if not (m == ident or (is_projected_map(m) and per_channel and
                               math.prod(tensor_shape(v)) in (1, tensor_shape(y)[-1]))):
            return None
    return u


def epilogue_chain_end(y: ir.Value) -> Optional[ir.Value]:
    """The result of the chain of :func:`_epilogue_user` ops starting at ``y`` (each the single
    user of the previous one), or None when ``y`` has no such user."""
    end = y
    while (u := _epilogue_user(end)) is not None:
        end = u.results[0]
    return None if end == y else end


def _move_one(y: ir.Value, channel_dims: Sequence[int]) -> Optional[ir.Value]:
    op = producer(y)
    u = _epilogue_user(y) if op is not None and op.name in _RESHAPES else None
    if u is None:
        return None
    src, groups = op.operands[0], _groups(op)
    shape, rank = tensor_shape(src), ir.RankedTensorType(src.type).rank
    maps = [ir.AffineMapAttr(a).value for a in ir.ArrayAttr(u.attributes["indexing_maps"])]
    ident, ident_src = ir.AffineMap.get_identity(len(tensor_shape(y))), ir.AffineMap.get_identity(rank)
    channels = [shape[d] for d in channel_dims]
    nm = ir.StringAttr(u.attributes[OP_NAME_ATTR]).value if OP_NAME_ATTR in u.attributes else "epilogue"
    with ir.InsertionPoint(u), u.location:
        ins, in_maps = [], []
        for v, m in zip(list(u.operands)[:-1], maps[:-1]):
            if m == ident:
                ins.append(_reshaped_from(v, groups, src.type) or reshape(v, groups, shape, f"{nm}.reshaped"))
                in_maps.append(ident_src)
            elif math.prod(tensor_shape(v)) == 1 or not any(isinstance(e, ir.AffineDimExpr) for e in m.results):
                ins.append(v)   # a broadcast scalar: every result a constant zero
                in_maps.append(ir.AffineMap.get(rank, 0, list(m.results)))
            else:
                vshape = tensor_shape(v)
                if len(vshape) > 1:
                    v = reshape(v, [list(range(len(vshape)))], (math.prod(vshape),), f"{nm}.channels")
                if len(channels) > 1:
                    v = reshape(v, [list(range(len(channels)))], channels, f"{nm}.channels_{len(channels)}d")
                ins.append(v)
                in_maps.append(ir.AffineMap.get(rank, 0, [ir.AffineDimExpr.get(d) for d in channel_dims]))
        dtype = dtypes.from_ir_type(ir.RankedTensorType(u.results[0].type).element_type)
        out = emitters.empty(shape, dtype, nm)
        all_maps = ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m in in_maps + [ident_src]])
        parallel = ir.Attribute.parse("#linalg.iterator_type<parallel>")
        g = linalg_d.GenericOp([out.type], ins, [out], all_maps, ir.ArrayAttr.get([parallel] * rank))
        g.operation.attributes[OP_NAME_ATTR] = ir.StringAttr.get(nm)
        u.regions[0].blocks[0].append_to(g.regions[0])
        r = reshape(g.results[0], groups, tensor_shape(y), f"{nm}.reshaped_back")
    u.results[0].replace_all_uses_with(r)
    u.erase()
    op.erase()   # the reshape had no other user
    return r


def epilogue_movable(y: ir.Value) -> bool:
    """Whether :func:`move_epilogue_across_reshape` would move the elementwise chain reading
    ``y`` (once ``y`` is reshaped): ``y`` has a chain whose result is not padded."""
    end = epilogue_chain_end(y)
    return end is not None and not any(use.owner.name in ("tensor.pad", "tensor.insert_slice") for use in end.uses)


def move_epilogue_across_reshape(y: ir.Value, channel_dims: Sequence[int]) -> bool:
    """Move the elementwise chain reading ``y`` (a reshape, by a ``tensor.expand_shape`` or
    ``tensor.collapse_shape`` with no other user, of a contraction's result whose channel dims
    are ``channel_dims``) onto the contraction's shape (see the module docstring), unless the
    chain's result is padded (a ``tensor.pad`` or ``tensor.insert_slice`` into a larger
    tensor: the input of a padded convolution): a padding copy joins an elementwise chain's
    unit in ``graph.FuseOps`` but no contraction's, so moving the chain would leave the copy
    as a unit of its own. Returns whether the chain moved."""
    if not epilogue_movable(y):
        return False
    while y is not None:
        y = _move_one(y, channel_dims)
    return True
