"""``PropagateReshapes`` (``mlc-propagate-reshapes``): run the elementwise consumers of a
reshaped contraction result in the contraction's result shape, so that they become its
epilogue.

An NHWC 1x1 convolution is a matmul on ``(N*H*W, C)`` whose result is reshaped back to
``(N, H, W, C)``; :class:`~.pack_matmul.PackMatmulWeights` makes it an ``linalg.mmt4d`` whose
``(M, N / NR, 1, NR)`` result is collapsed first. Its batch norm, residual add and relu then
read the reshape, and task formation (:mod:`mlc_mlir.graph.fuse_ops`) cannot fuse them into
the contraction: a separate unit reads the whole of C back from memory (ResNet-50's 1x1
layers: ~4 ms per inference on a 2-core Zen 3,
``benchmarks/results/models_cpu_2026-11-27_znver3_r50-perf.txt``).

Before (``%r`` an mmt4d result, ``%b`` a per-channel vector, ``%res`` a residual)::

    %c = tensor.collapse_shape %r [[0], [1, 2, 3]] : tensor<3136x16x1x16xf32> into tensor<3136x256xf32>
    %x = tensor.expand_shape %c [[0, 1, 2], [3]] : tensor<3136x256xf32> into tensor<1x56x56x256xf32>
    %y = linalg.generic {maps = [(n,h,w,c) -> (n,h,w,c), (n,h,w,c) -> (c), (n,h,w,c) -> (n,h,w,c), id]}
           ins(%x, %b, %res) outs(...)                                     // y = x * b + res

After::

    %b3 = tensor.expand_shape %b [[0, 1, 2]] : tensor<256xf32> into tensor<16x1x16xf32>
    %res4 = expand_shape(collapse_shape(%res)) : tensor<3136x16x1x16xf32>   // a view
    %y4 = linalg.generic {maps = [id, (m,p,o,v) -> (p,o,v), id, id]} ins(%r, %b3, %res4) outs(...)
    %y = expand_shape(collapse_shape(%y4)) : tensor<1x56x56x256xf32>

An all-parallel ``linalg.generic`` is rewritten when one of its full-rank inputs is a chain of
``collapse_shape`` / ``expand_shape`` ops of a value ``X`` that a ``linalg.matmul`` or
``linalg.mmt4d`` computes (directly or through generics this pass rewrote), its other full-rank
inputs are read in the identity order, the rest broadcast along the last (channel) dim only,
and a suffix of ``X``'s dims holds exactly that channel dim. Every reshape of a contiguous tensor
is a view: the rewrite moves no data. Applied in program order until nothing changes, so a
chain of epilogue ops follows the first one.

Source: MLIR's reshape propagation by expansion (``linalg::populateFoldReshapeOpsByExpansionPatterns``,
IREE's ``PropagateReshapesByExpansion``): here aimed at one consumer shape, the contraction's.
"""

from __future__ import annotations

from math import prod
from typing import List, Optional, Sequence, Tuple

from ..._mlir import ir
from ...ir.module import OP_NAME_ATTR, Module
from ...graph.emit_rewrites import moved_elementwise, reshape
from ...graph.dce import erase_dead_pure_ops
from ...graph.linalg_attrs import indexing_maps, is_elementwise_generic, tensor_shape
from ...graph.use_def import producer
from ...graph.pass_manager import ScopedPass, register_pass
from ...graph.rewrite import top_level_ops

#: The contractions whose result shape the epilogues move into.
CONTRACTIONS = ("linalg.matmul", "linalg.mmt4d")
_RESHAPES = ("tensor.collapse_shape", "tensor.expand_shape")


def _static(v) -> bool:
    return isinstance(v.type, ir.RankedTensorType) and ir.RankedTensorType(v.type).has_static_shape


def _rank(v) -> int:
    return ir.RankedTensorType(v.type).rank


def _elementwise(op: ir.Operation) -> bool:
    """An elementwise generic (:func:`~mlc_mlir.graph.linalg_attrs.is_elementwise_generic`) of a
    static result shape."""
    return is_elementwise_generic(op) and _static(op.results[0])


def _rooted(v, depth: int = 0) -> bool:
    """Whether ``v`` is a contraction's result, or an elementwise result with an identity-read
    full-rank input that is (the chain this pass builds)."""
    op = producer(v)
    if op is None or depth > 64:
        return False
    if op.name in CONTRACTIONS:
        return True
    if not _elementwise(op):
        return False
    ident = ir.AffineMap.get_identity(_rank(v))
    return any(m == ident and _rooted(x, depth + 1)
               for x, m in zip(list(op.operands)[:-1], indexing_maps(op)[:-1]))


def _unreshaped(v) -> Optional[ir.Value]:
    """The value under a chain of one or more collapse/expand reshapes of ``v``, or None."""
    op = producer(v)
    if op is None or op.name not in _RESHAPES:
        return None
    while op is not None and op.name in _RESHAPES:
        v = op.operands[0]
        op = producer(v)
    return v


def _channel_split(shape: Sequence[int], channels: int) -> Optional[int]:
    """``s`` such that ``prod(shape[s:]) == channels`` (the smallest such suffix start), or None."""
    for s in range(len(shape) - 1, 0, -1):
        if prod(shape[s:]) == channels:
            return s
        if prod(shape[s:]) > channels:
            return None
    return None


def _to_shape(v, src: Tuple[int, ...], dst: Tuple[int, ...], src_split: int, dst_split: int,
              name: str) -> ir.Value:
    """``v`` of shape ``src`` reshaped to ``dst`` through ``(rows, channels)``, where
    ``src[src_split:]`` and ``dst[dst_split:]`` are the channel dims (a view of contiguous data)."""
    if src == dst:
        return v
    rows, chans = prod(src[:src_split]), prod(src[src_split:])
    if len(src) != 2 or src_split != 1:
        v = reshape(v, [list(range(src_split)), list(range(src_split, len(src)))], (rows, chans), name)
    if len(dst) != 2 or dst_split != 1:
        v = reshape(v, [list(range(dst_split)), list(range(dst_split, len(dst)))], dst, name)
    return v


def _match(op: ir.Operation):
    """``(x, split, x_split)`` for a generic this pass rewrites (see the module docstring):
    ``x`` the contraction-rooted value, ``split``/``x_split`` where the channel dims start in
    the generic's and ``x``'s shapes; else None."""
    if not _elementwise(op):
        return None
    shape = tensor_shape(op.results[0])
    rank = len(shape)
    if rank < 2:
        return None
    maps = indexing_maps(op)
    ident = ir.AffineMap.get_identity(rank)
    last = ir.AffineMap.get(rank, 0, [ir.AffineDimExpr.get(rank - 1)])
    x = None
    for v, m in zip(list(op.operands)[:-1], maps[:-1]):
        if not isinstance(v.type, ir.RankedTensorType):
            continue                          # a scalar operand
        if not _static(v):
            return None
        if _rank(v) == rank:
            if m != ident:
                return None
            under = _unreshaped(v)
            if x is None and under is not None and _static(under) and _rooted(under) \
                    and tensor_shape(under) != shape:
                x = under
        elif not (m == last or (_rank(v) == 0 and len(m.results) == 0)):
            return None
    if x is None:
        return None
    x_split = _channel_split(tensor_shape(x), shape[-1])
    return None if x_split is None else (x, rank - 1, x_split)


def _rewrite(op: ir.Operation, x, split: int, x_split: int) -> None:
    shape, x_shape = tensor_shape(op.results[0]), tensor_shape(x)
    rank, x_rank = len(shape), len(x_shape)
    name = ir.StringAttr(op.attributes[OP_NAME_ATTR]).value if OP_NAME_ATTR in op.attributes else "elementwise"
    x_ident = ir.AffineMap.get_identity(x_rank)
    chan_map = ir.AffineMap.get(x_rank, 0, [ir.AffineDimExpr.get(d) for d in range(x_split, x_rank)])
    ins: List[ir.Value] = []
    in_maps: List[ir.AffineMap] = []
    for v, m in zip(list(op.operands)[:-1], indexing_maps(op)[:-1]):
        if not isinstance(v.type, ir.RankedTensorType) or _rank(v) == 0:
            ins.append(v)
            in_maps.append(ir.AffineMap.get(x_rank, 0, []))
        elif _rank(v) == rank:
            under = _unreshaped(v)
            ins.append(x if under is not None and under == x else
                       _to_shape(v, shape, x_shape, split, x_split, f"{name}.in_{x_rank}d"))
            in_maps.append(x_ident)
        else:                                 # the per-channel vector
            chans = tuple(x_shape[x_split:])
            ins.append(v if len(chans) == 1 else
                       reshape(v, [list(range(len(chans)))], chans, f"{name}.channels"))
            in_maps.append(chan_map)
    moved = moved_elementwise(op, ins, in_maps, x_shape)
    op.results[0].replace_all_uses_with(_to_shape(moved, x_shape, shape, x_split, split, f"{name}.out_{rank}d"))


@register_pass
class PropagateReshapes(ScopedPass):
    """Rewrite elementwise ``linalg.generic`` ops that read a reshaped ``linalg.matmul`` /
    ``linalg.mmt4d`` result into that result's shape (see the module docstring), so task
    formation fuses them into the contraction as its epilogue. Static shapes only; the
    numerics are unchanged (the same scalar ops on the same elements).

    Parameters
    ----------
    functions : sequence of str, optional
        As :class:`~.pass_manager.ScopedPass`.
    """

    name = "mlc-propagate-reshapes"

    def __init__(self, functions: Optional[Sequence[str]] = None):
        super().__init__(None, functions)

    def transform(self, mod: Module) -> Module:
        for f in self.scoped_functions(mod):
            changed = False
            for op in top_level_ops(f):
                found = _match(op)
                if found is not None:
                    with ir.InsertionPoint(op), op.location:
                        _rewrite(op, *found)
                    changed = True
            if changed:
                erase_dead_pure_ops(f.regions[0].blocks[0])
        return mod
