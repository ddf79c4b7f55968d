"""``DepthwiseToNHWC`` (``mlc-depthwise-to-nhwc``): rewrite chosen depthwise
``linalg.conv_2d_ngchw_gfchw`` ops (one input and one output channel per group, as
:func:`mlc_mlir.builder.nn.conv2d` emits ``groups == C``) into
``linalg.depthwise_conv_2d_nhwc_hwc`` between layout transposes, for the channel-vectorized
rule :func:`mlc_mlir.schedule.rules.depthwise.schedule_depthwise_nhwc`.

Before (``%xp`` the ``tensor.pad`` of ``%x``, ``%w`` the ``(C, 1, KH, KW)`` filter)::

    %xg = tensor.expand_shape %xp [[0], [1, 2], [3], [4]] : tensor<1x136x1x30x30xf32>
    %wg = tensor.expand_shape %w [[0, 1], [2], [3], [4]] : tensor<136x1x1x3x3xf32>
    %init = linalg.fill {mlc.name = "conv2d.init"} ... : tensor<1x136x1x28x28xf32>
    %yg = linalg.conv_2d_ngchw_gfchw {mlc.name = "conv2d"} ins(%xg, %wg) outs(%init)
    %y = tensor.collapse_shape %yg [[0], [1, 2], [3], [4]] : tensor<1x136x28x28xf32>

After::

    %xt = <fill of the padded NHWC input, x transposed into its interior>   // conv2d.x_nhwc
    %wt = linalg.transpose {mlc.name = "conv2d.w_hwcf"} ins(%w) permutation = [2, 3, 1, 0]
    %wc = tensor.collapse_shape %wt [[0], [1], [2, 3]] : tensor<3x3x136xf32>
    %init = linalg.fill {mlc.name = "conv2d.init"} ... : tensor<1x28x28x136xf32>
    %yt = linalg.depthwise_conv_2d_nhwc_hwc {mlc.name = "conv2d"} ins(%xt, %wc) outs(%init)
    %y = linalg.transpose {mlc.name = "conv2d.to_nchw"} ins(%yt) permutation = [0, 3, 1, 2]

The input pad and the epilogue chain after the collapse (bias, batch-norm scale and shift,
relu) are handled as :class:`~.conv_nhwc.ConvToNHWC` does (:func:`~.conv_nhwc.padded_nhwc`,
:func:`~.conv_nhwc.move_epilogues_to_nhwc`); ``graph.PropagateTransposes`` then cancels
transposes between neighbouring NHWC ops. A constant filter's transpose is folded.

Why: the grouped convolution has no 1-D decomposition in MLIR 22's structured vectorizer, so
its rule only parallelizes the loop nest (ShuffleNet's depthwise 3x3 convolutions ran at
7 GFLOP/s); ``linalg.depthwise_conv_2d_nhwc_hwc`` decomposes into
``linalg.depthwise_conv_1d_nwc_wc``, which the vectorizer handles with the lanes over the
channels. Source: TVM TOPI x86 ``depthwise_conv2d_NCHWc`` and XNNPACK's ``dwconv``
micro-kernels (channels in the vector, the window unrolled), TVM ``ConvertLayout``.
"""

from __future__ import annotations

from typing import Optional

from ..._mlir import ir, linalg_d
from ...ir import emitters
from ...ir.module import OP_NAME_ATTR
from ...graph.emit_rewrites import emit_transpose, named_fill, reshape
from ...graph.linalg_attrs import tensor_shape
from ...graph.use_def import producer
from .conv_nhwc import move_epilogues_to_nhwc, padded_nhwc
from .conv_select import ConvRewrite, conv_signature, conv_window
from ...graph.pass_manager import register_pass

_TO_HWCF = [2, 3, 1, 0]


def is_depthwise(w_shape) -> bool:
    """Whether a ``linalg.conv_2d_ngchw_gfchw`` filter ``(G, F, C, KH, KW)`` is depthwise with
    channel multiplier 1 (one output and one input channel per group)."""
    return w_shape[1] == 1 and w_shape[2] == 1


def _ungrouped(v, groups, shape, name: str):
    """The rank-4 source of ``v`` when ``v`` is a ``tensor.expand_shape`` of it with
    reassociation ``groups`` (the builder's ``.expand_x`` / ``.expand_w``), else ``v``
    collapsed by ``groups`` to ``shape``."""
    src = producer(v)
    if src is not None and src.name == "tensor.expand_shape" and tensor_shape(src.operands[0]) == tuple(shape):
        return src.operands[0]
    return reshape(v, groups, shape, name)


def _collapse_user(op: ir.Operation) -> Optional[ir.Operation]:
    """The single user of ``op``'s result when it is a ``tensor.collapse_shape`` of the group
    dims ``(N, G, 1, OH, OW) -> (N, G, OH, OW)``, else None."""
    uses = list(op.results[0].uses)
    if len(uses) != 1:
        return None
    u = uses[0].owner
    u = getattr(u, "operation", u)
    if u.name != "tensor.collapse_shape" or len(tensor_shape(u.results[0])) != 4:
        return None
    return u


def _rewrite(op: ir.Operation) -> None:
    x, w, init = op.operands[0], op.operands[1], op.operands[2]
    n, g, _, hp, wp = tensor_shape(x)
    _, _, _, kh, kw = tensor_shape(w)
    _, _, _, oh, ow = tensor_shape(init)
    strides, dilations, dtype, nm = conv_window(op)
    fill = named_fill(init)
    collapse = _collapse_user(op)
    with ir.InsertionPoint(op):
        x4 = _ungrouped(x, [[0], [1, 2], [3], [4]], (n, g, hp, wp), f"{nm}.x_4d")
        xt, pad = padded_nhwc(x4, nm, dtype)
        w4 = _ungrouped(w, [[0, 1], [2], [3], [4]], (g, 1, kh, kw), f"{nm}.w_4d")
        wt = reshape(emit_transpose(w4, _TO_HWCF, f"{nm}.w_hwcf"), [[0], [1], [2, 3]], (kh, kw, g),
                     f"{nm}.w_hwc")
        if fill is not None:
            it = linalg_d.fill(fill.operands[0], outs=[emitters.empty([n, oh, ow, g], dtype, nm)])
            emitters.set_name(it.owner, ir.StringAttr(fill.attributes[OP_NAME_ATTR]).value)
        else:
            it = emit_transpose(reshape(init, [[0], [1, 2], [3], [4]], (n, g, oh, ow), f"{nm}.init_4d"),
                                [0, 2, 3, 1], f"{nm}.out_nhwc")
        conv = linalg_d.depthwise_conv_2d_nhwc_hwc(xt, wt, outs=[it], strides=strides, dilations=dilations)
        emitters.set_name(conv.owner, nm)
    if collapse is not None:
        move_epilogues_to_nhwc(collapse, conv, nm, dtype)
        collapse.erase()
    else:
        with ir.InsertionPoint(op):
            y = reshape(emit_transpose(conv, [0, 3, 1, 2], f"{nm}.to_nchw"), [[0], [1, 2], [3], [4]],
                        (n, g, 1, oh, ow), f"{nm}.ngchw")
        op.results[0].replace_all_uses_with(y)
    expands = [p for p in (producer(x), producer(w)) if p is not None and p.name == "tensor.expand_shape"]
    op.erase()
    for e in expands:
        if not list(e.results[0].uses):
            e.erase()
    if pad is not None and not list(pad.results[0].uses):
        pad.erase()
    if fill is not None:
        fill.erase()


@register_pass
class DepthwiseToNHWC(ConvRewrite):
    """Rewrite depthwise ``linalg.conv_2d_ngchw_gfchw`` ops (:func:`is_depthwise`) into
    ``linalg.depthwise_conv_2d_nhwc_hwc`` between transposes (see the module docstring).

    Parameters as :class:`~.conv_select.ConvRewrite`: ``select`` is given the padded input
    ``(N, G, 1, H, W)``, the filter ``(G, 1, 1, KH, KW)`` and the output ``(N, G, 1, OH, OW)``
    of a depthwise convolution; the default schedule passes
    :func:`mlc_mlir.schedule.rules.depthwise.prefers_depthwise_nhwc` for its target.
    """

    name = "mlc-depthwise-to-nhwc"
    op_name = "linalg.conv_2d_ngchw_gfchw"

    def takes(self, op: ir.Operation) -> bool:
        return is_depthwise(conv_signature(op)[1]) and super().takes(op)

    def rewrite(self, op: ir.Operation) -> None:
        _rewrite(op)
