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

Before::

    %init = linalg.fill {mlc.name = "conv2d.init"} ins(%zero) outs(%e : tensor<1x64x56x56xf32>)
    %y = linalg.conv_2d_nchw_fchw {mlc.name = "conv2d"} ins(%x, %w) outs(%init)

After::

    %xt = linalg.transpose {mlc.name = "conv2d.x_nhwc"} ins(%x) permutation = [0, 2, 3, 1]
    %wt = linalg.transpose {mlc.name = "conv2d.w_hwcf"} ins(%w) permutation = [2, 3, 1, 0]
    %init = linalg.fill {mlc.name = "conv2d.init"} ins(%zero) outs(%e2 : tensor<1x56x56x64xf32>)
    %yt = linalg.conv_2d_nhwc_hwcf {mlc.name = "conv2d"} ins(%xt, %wt) outs(%init)
    %y = linalg.transpose {mlc.name = "conv2d.to_nchw"} ins(%yt) permutation = [0, 3, 1, 2]

A constant filter's transpose is a constant subgraph: ``graph.FoldConstant`` folds it
(``mlc.compile`` does so while scheduling). An output init that is not a named ``linalg.fill``
(an accumulating convolution) is transposed too (``<name>.out_nhwc``).
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence, Tuple

from .._mlir import ir, linalg_d
from ..ir import dtypes, emitters
from ..ir.module import OP_NAME_ATTR, Module
from .pass_manager import Pass, register_pass
from .rewrite import top_level_ops

#: ``select(x_shape, w_shape, out_shape, dtype) -> bool``: which convolutions to rewrite.
ConvSelect = Callable[[Tuple[int, ...], Tuple[int, ...], Tuple[int, ...], str], bool]

_TO_NHWC, _TO_HWCF, _TO_NCHW = [0, 2, 3, 1], [2, 3, 1, 0], [0, 3, 1, 2]


def _shape(v) -> Tuple[int, ...]:
    return tuple(ir.RankedTensorType(v.type).shape)


def _transpose(v, perm, name: str):
    shape = _shape(v)
    et = ir.RankedTensorType(v.type).element_type
    init = emitters.empty([shape[p] for p in perm], dtypes.from_ir_type(et), name)
    op = linalg_d.transpose(v, outs=[init], permutation=perm)
    op = getattr(op, "owner", op)      # the builder returns the op (no results on memrefs)
    emitters.set_name(op, name)
    return op.results[0]


def _ints(attr) -> list:
    return [int(x) for x in ir.DenseIntElementsAttr(attr)]


@register_pass
class ConvToNHWC(Pass):
    """Rewrite ``linalg.conv_2d_nchw_fchw`` ops into NHWC/HWCF convolutions between transposes
    (see the module docstring).

    Parameters
    ----------
    select : callable, optional
        ``select(x_shape, w_shape, out_shape, dtype) -> bool`` with the (padded) input
        ``(N, C, H, W)``, filter ``(F, C, KH, KW)`` and output ``(N, F, OH, OW)`` shapes and the
        element dtype name; default: every convolution. The default schedule passes
        :func:`mlc_mlir.schedule.rules.conv.prefers_nhwc` for its target.
    functions : sequence of str, optional
        Only rewrite in these functions (default: all).

    Raises
    ------
    IRError
        If the result does not verify (a bug of the pass).
    """

    name = "mlc-conv-to-nhwc"

    def __init__(self, select: Optional[ConvSelect] = None, functions: Optional[Sequence[str]] = None):
        self.select = select
        self.functions = None if functions is None else set(functions)

    def transform(self, mod: Module) -> Module:
        for f in mod.func_ops():
            if f.is_external or (self.functions is not None and f.sym_name.value not in self.functions):
                continue
            for op in top_level_ops(f):
                if op.name == "linalg.conv_2d_nchw_fchw" and OP_NAME_ATTR in op.attributes:
                    self._rewrite(op)
        return mod

    def _rewrite(self, op: ir.Operation) -> None:
        x, w, init = op.operands[0], op.operands[1], op.operands[2]
        dtype = dtypes.from_ir_type(ir.RankedTensorType(x.type).element_type)
        if self.select is not None and not self.select(_shape(x), _shape(w), _shape(init), dtype):
            return
        nm = ir.StringAttr(op.attributes[OP_NAME_ATTR]).value
        fill = init.owner if not isinstance(init.owner, ir.Block) else None
        is_fill = fill is not None and fill.name == "linalg.fill" and OP_NAME_ATTR in fill.attributes \
            and len(list(fill.results[0].uses)) == 1
        with ir.InsertionPoint(op):
            xt = _transpose(x, _TO_NHWC, f"{nm}.x_nhwc")
            wt = _transpose(w, _TO_HWCF, f"{nm}.w_hwcf")
            if is_fill:
                n, fo, oh, ow = _shape(init)
                e = emitters.empty([n, oh, ow, fo], dtype, nm)
                it = linalg_d.fill(fill.operands[0], outs=[e])
                emitters.set_name(it.owner, ir.StringAttr(fill.attributes[OP_NAME_ATTR]).value)
            else:
                it = _transpose(init, _TO_NHWC, f"{nm}.out_nhwc")
            conv = linalg_d.conv_2d_nhwc_hwcf(xt, wt, outs=[it], strides=_ints(op.attributes["strides"]),
                                              dilations=_ints(op.attributes["dilations"]))
            emitters.set_name(conv.owner, nm)
            y = _transpose(conv, _TO_NCHW, f"{nm}.to_nchw")
        op.results[0].replace_all_uses_with(y)
        op.erase()
        if is_fill and not any(True for _ in fill.results[0].uses):
            fill.erase()
