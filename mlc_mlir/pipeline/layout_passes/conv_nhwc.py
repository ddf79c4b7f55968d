"""``ConvToNHWC`` (``mlc-conv-to-nhwc``): rewrite chosen ``linalg.conv_2d_nchw_fchw`` ops into
``linalg.conv_2d_nhwc_hwcf`` between layout transposes, one op at a time (no layout
propagation between ops). Source: TVM ``ConvertLayout`` (per-op layout rewrite with
``layout_transform`` around it), oneDNN's reorders into the layout its direct convolution wants.

Why: the structured vectorizer of MLIR 22 turns a 2-D convolution into 1-D ones whose vector
lanes run over the output channels (NWC form). In NHWC/HWCF the output-channel vector is
contiguous in the filter and in the output, so the register tile (several output columns x one
output-channel vector) needs no transposes or gathers; in NCHW/FCHW the same tile gathers the
filter and transposes the accumulators every reduction step (see
:mod:`mlc_mlir.schedule.rules.conv` for the measurements).

Before (``%x`` is the ``tensor.pad`` of ``%x_unpadded``)::

    %init = linalg.fill {mlc.name = "conv2d.init"} ins(%zero) outs(%e : tensor<1x64x56x56xf32>)
    %y = linalg.conv_2d_nchw_fchw {mlc.name = "conv2d"} ins(%x, %w) outs(%init)

After::

    %xp = linalg.fill {mlc.name = "conv2d.x_pad"} ins(%zero) outs(%e1 : tensor<1x58x58x64xf32>)
    %in = tensor.extract_slice %xp[0, 1, 1, 0] [1, 56, 56, 64] [1, 1, 1, 1]
    %xi = linalg.transpose {mlc.name = "conv2d.x_nhwc"} ins(%x_unpadded) outs(%in)
        permutation = [0, 2, 3, 1]
    %xt = tensor.insert_slice %xi into %xp[0, 1, 1, 0] [1, 56, 56, 64] [1, 1, 1, 1]
    %wt = linalg.transpose {mlc.name = "conv2d.w_hwcf"} ins(%w) permutation = [2, 3, 1, 0]
    %init = linalg.fill {mlc.name = "conv2d.init"} ins(%zero) outs(%e2 : tensor<1x56x56x64xf32>)
    %yt = linalg.conv_2d_nhwc_hwcf {mlc.name = "conv2d"} ins(%xt, %wt) outs(%init)
    %y = linalg.transpose {mlc.name = "conv2d.to_nchw"} ins(%yt) permutation = [0, 3, 1, 2]

A constant filter's transpose is a constant subgraph: ``graph.FoldConstant`` folds it
(``mlc.compile`` does so while scheduling). An output init that is not a named ``linalg.fill``
(an accumulating convolution) is transposed too (``<name>.out_nhwc``). The convolution's
elementwise epilogue chain (each link the single user of the previous one, other inputs only
broadcast, e.g. bias add and relu) moves before the transpose back, in NHWC, so the NHWC rule
fuses it into its tiles as the NCHW rule did; a full-size second input (a residual add) stops
the chain.
"""

from __future__ import annotations

from typing import Optional

from ..._mlir import ir, linalg_d, tensor_d
from ...ir import emitters
from ...ir.module import OP_NAME_ATTR
from ...graph.emit_rewrites import constant_pad_value, emit_transpose, has_constant_pad_value
from ...graph.linalg_attrs import is_projected_map, rename_dims, tensor_shape
from ...graph.pass_manager import register_pass
from .conv_select import ConvRewrite, conv_window

_TO_NHWC, _TO_HWCF, _TO_NCHW = [0, 2, 3, 1], [2, 3, 1, 0], [0, 3, 1, 2]



def _epilogue_user(op: ir.Operation) -> Optional[ir.Operation]:
    """The single user of ``op``'s result if it is an elementwise epilogue that can run in NHWC:
    a named all-parallel ``linalg.generic`` with one result of ``op``'s shape, reading ``op``'s
    result with the identity map and its other inputs broadcast (rank < 4, maps of dims and
    zeros: a ``(F, 1, 1)`` bias); its init an unused ``tensor.empty``. None otherwise."""
    uses = list(op.results[0].uses)
    if len(uses) != 1:
        return None
    u = uses[0].owner
    u = getattr(u, "operation", u)
    if u.name != "linalg.generic" or OP_NAME_ATTR not in u.attributes or len(u.results) != 1 \
            or u.block != op.block or tensor_shape(u.results[0]) != tensor_shape(op.results[0]):
        return None
    if any("parallel" not in str(a) for a in ir.ArrayAttr(u.attributes["iterator_types"])):
        return None
    maps = [ir.AffineMapAttr(a).value for a in ir.ArrayAttr(u.attributes["indexing_maps"])]
    n_in = len(u.operands) - 1
    ident = ir.AffineMap.get_identity(4)
    init = u.operands[n_in].owner
    if isinstance(init, ir.Block) or init.name != "tensor.empty" or maps[n_in] != ident:
        return None
    for v, m in zip(list(u.operands)[:n_in], maps[:n_in]):
        if v == op.results[0]:
            if m != ident:
                return None
        elif _rank(v) >= 4 or not is_projected_map(m):
            return None
    return u


def _rank(v) -> int:
    return ir.RankedTensorType(v.type).rank if isinstance(v.type, ir.RankedTensorType) else 0


def _to_nhwc_epilogue(u: ir.Operation, old_in, new_in, dtype: str):
    """An NHWC copy of the epilogue ``u`` reading ``new_in`` where it read ``old_in`` (the
    broadcast maps renumbered to the NHWC iteration order); ``u``'s body is moved into it."""
    n_in = len(u.operands) - 1
    maps = [ir.AffineMapAttr(a).value for a in ir.ArrayAttr(u.attributes["indexing_maps"])]
    ins, in_maps = [], []
    for v, m in zip(list(u.operands)[:n_in], maps[:n_in]):
        if v == old_in:
            ins.append(new_in)
            in_maps.append(ir.AffineMap.get_identity(4))
        else:
            ins.append(v)
            in_maps.append(rename_dims(m, _TO_NCHW, 4))  # NCHW dim k is NHWC dim _TO_NCHW[k]
    out = emitters.empty(tensor_shape(new_in), dtype, "epilogue")
    all_maps = ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m in in_maps + [ir.AffineMap.get_identity(4)]])
    g = linalg_d.GenericOp([out.type], ins, [out], all_maps, u.attributes["iterator_types"])
    g.operation.attributes[OP_NAME_ATTR] = u.attributes[OP_NAME_ATTR]
    u.regions[0].blocks[0].append_to(g.regions[0])
    return g.results[0]


def _nchw_pad(x) -> Optional[ir.Operation]:
    """The ``tensor.pad`` producing ``x`` when it pads only H and W by static amounts with a
    constant or a value defined outside it and ``x`` has no other use; None otherwise."""
    pad = x.owner
    if isinstance(pad, ir.Block) or pad.name != "tensor.pad" or len(list(x.uses)) != 1:
        return None
    low = list(ir.DenseI64ArrayAttr(pad.attributes["static_low"]))
    high = list(ir.DenseI64ArrayAttr(pad.attributes["static_high"]))
    if len(pad.operands) != 1 or low[:2] != [0, 0] or high[:2] != [0, 0] or min(low + high) < 0:
        return None
    return pad if has_constant_pad_value(pad) else None


def padded_nhwc(x, nm: str, dtype: str):
    """``x`` (N, C, H, W) in NHWC: a plain transpose, or, when ``x`` is a ``tensor.pad`` of H and
    W (:func:`_nchw_pad`), a fill of the padded NHWC tensor with the pad value and the transpose
    of the unpadded source written into its interior (``tensor.extract_slice`` as the
    transpose's destination, ``tensor.insert_slice`` back): one pass over the data instead of
    the pad's strided copy (``memrefCopy``, 2.2 ms for 1x64x56x56 against 0.2 ms) plus the
    transpose. Returns ``(value, pad op to erase or None)``."""
    pad = _nchw_pad(x)
    if pad is None:
        return emit_transpose(x, _TO_NHWC, f"{nm}.x_nhwc"), None
    n, c, h, w = tensor_shape(x)
    low = list(ir.DenseI64ArrayAttr(pad.attributes["static_low"]))
    src = pad.operands[0]
    _, _, sh, sw = tensor_shape(src)
    value = constant_pad_value(pad)
    full = linalg_d.fill(value, outs=[emitters.empty([n, h, w, c], dtype, nm)])
    emitters.set_name(full.owner, f"{nm}.x_pad")
    offsets, sizes, strides = [0, low[2], low[3], 0], [n, sh, sw, c], [1, 1, 1, 1]
    inner_t = ir.RankedTensorType.get(sizes, ir.RankedTensorType(x.type).element_type)
    inner = tensor_d.ExtractSliceOp(inner_t, full, [], [], [], offsets, sizes, strides).result
    t = emit_transpose(src, _TO_NHWC, f"{nm}.x_nhwc", init=inner)
    return tensor_d.InsertSliceOp(t, full, [], [], [], offsets, sizes, strides).result, pad


def move_epilogues_to_nhwc(last: ir.Operation, value, nm: str, dtype: str) -> None:
    """Replace the NCHW result of ``last`` by ``value`` (its NHWC equivalent) transposed back
    (``<nm>.to_nchw``), after moving ``last``'s elementwise epilogue chain
    (:func:`_epilogue_user`) into NHWC; the moved epilogues are erased, ``last`` is not."""
    moved = []
    while True:
        nxt = _epilogue_user(last)
        if nxt is None:
            break
        with ir.InsertionPoint(nxt):
            value = _to_nhwc_epilogue(nxt, last.results[0], value, dtype)
        moved.append(nxt)
        last = nxt
    with ir.InsertionPoint(last):
        y = emit_transpose(value, _TO_NCHW, f"{nm}.to_nchw")
    last.results[0].replace_all_uses_with(y)
    for o in reversed(moved):
        o.erase()


@register_pass
class ConvToNHWC(ConvRewrite):
    """Rewrite ``linalg.conv_2d_nchw_fchw`` ops into NHWC/HWCF convolutions between transposes
    (see the module docstring). Parameters as :class:`~.conv_select.ConvRewrite`: ``select``
    is given the padded input ``(N, C, H, W)``, the filter ``(F, C, KH, KW)`` and the output
    ``(N, F, OH, OW)``; the default schedule passes
    :func:`mlc_mlir.schedule.rules.conv_strategy.prefers_nhwc`.
    """

    name = "mlc-conv-to-nhwc"
    op_name = "linalg.conv_2d_nchw_fchw"

    def rewrite(self, op: ir.Operation) -> None:
        x, w, init = op.operands[0], op.operands[1], op.operands[2]
        strides, dilations, dtype, nm = conv_window(op)
        fill = init.owner if not isinstance(init.owner, ir.Block) else None
        is_fill = fill is not None and fill.name == "linalg.fill" and OP_NAME_ATTR in fill.attributes \
            and len(list(fill.results[0].uses)) == 1
        with ir.InsertionPoint(op):
            xt, pad = padded_nhwc(x, nm, dtype)
            wt = emit_transpose(w, _TO_HWCF, f"{nm}.w_hwcf")
            if is_fill:
                n, fo, oh, ow = tensor_shape(init)
                e = emitters.empty([n, oh, ow, fo], dtype, nm)
                it = linalg_d.fill(fill.operands[0], outs=[e])
                emitters.set_name(it.owner, ir.StringAttr(fill.attributes[OP_NAME_ATTR]).value)
            else:
                it = emit_transpose(init, _TO_NHWC, f"{nm}.out_nhwc")
            conv = linalg_d.conv_2d_nhwc_hwcf(xt, wt, outs=[it], strides=strides, dilations=dilations)
            emitters.set_name(conv.owner, nm)
        move_epilogues_to_nhwc(op, conv, nm, dtype)
        op.erase()
        if pad is not None:
            pad.erase()
        if is_fill and not any(True for _ in fill.results[0].uses):
            fill.erase()
