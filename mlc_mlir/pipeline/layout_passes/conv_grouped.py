"""``GroupedConvToBatchMatmul`` (``mlc-grouped-conv-to-batch-matmul``): rewrite chosen
``linalg.conv_2d_ngchw_gfchw`` ops (grouped convolutions) into a per-group im2col and a
``linalg.batch_matmul`` over the groups, so the batch matmul rule schedules them.

Before (input ``(N, G, C, H, W)`` padded, filter ``(G, F, C, KH, KW)``)::

    %init = linalg.fill {mlc.name = "conv2d.init"} ins(%zero) outs(%e : tensor<1x4x68x14x14xf32>)
    %y = linalg.conv_2d_ngchw_gfchw {mlc.name = "conv2d", strides = dense<1>, ...}
           ins(%x, %w : tensor<1x4x68x14x14xf32>, tensor<4x68x68x1x1xf32>) outs(%init)

After, for a pointwise convolution of one image (1x1 window, unit strides, no padding: the
im2col matrix of each group is its input slice, so both operands are views)::

    %b = tensor.collapse_shape %x [[0, 1], [2], [3, 4]] : tensor<4x68x196xf32>   // .im2col_3d
    %a = tensor.collapse_shape %w [[0], [1], [2, 3, 4]] : tensor<4x68x68xf32>    // .w_gemm
    %c = linalg.fill {mlc.name = "conv2d.init"} ... : tensor<4x68x196xf32>
    %m = linalg.batch_matmul {mlc.name = "conv2d"} ins(%a, %b) outs(%c)
    %y = tensor.expand_shape %m [[0, 1], [2], [3, 4]] output_shape [1, 4, 68, 14, 14]

Otherwise the im2col matrix is a copy, ``cols[g, c, kh, kw, n, oh, ow] =
x[n, g, c, oh*s+kh*d, ow*s+kw*d]`` (``<name>.im2col``), collapsed to
``(G, C*KH*KW, N*OH*OW)``; with ``N > 1`` the ``(G, F, N, OH, OW)`` product is transposed back
to ``(N, G, F, OH, OW)`` (``<name>.to_ngchw``), and an accumulating init (not a named
single-use ``linalg.fill``) transposed to it (``<name>.init_gfn``). Numerically the same sums
in another order.

Why: the grouped convolution has no 1-D decomposition in MLIR 22's structured vectorizer, so its
default rule (:func:`~mlc_mlir.schedule.rules.conv.schedule_grouped_conv2d`) only parallelizes
the loop nest; ShuffleNet's grouped 1x1 convolutions ran at 6.5 GFLOP/s that way. Source:
Caffe's grouped ``im2col`` + one GEMM per group; oneDNN's grouped ``gemm:im2col``
convolution; MLIR's ``transform.structured.convert_conv2d_to_img2col`` (the per-group GEMM
as a batch over groups).
"""

from __future__ import annotations

from ..._mlir import ir, linalg_d
from ...ir import emitters
from ...graph.emit_rewrites import emit_transpose, named_fill, replace_contraction, reshape, reshaped_accumulator
from ...graph.linalg_attrs import tensor_shape
from ...graph.pass_manager import register_pass
from .conv_select import ConvRewrite, conv_window

_NGF_TO_GFN, _GFN_TO_NGF = [1, 2, 0, 3, 4], [2, 0, 1, 3, 4]


def _is_view(n, x_shape, window, out_shape, strides) -> bool:
    """Whether the per-group im2col matrices of a grouped convolution are views of its input:
    one image, a 1x1 window, unit strides and no padding (``(H, W) == (OH, OW)``)."""
    return n == 1 and tuple(window) == (1, 1) and tuple(strides) == (1, 1) and \
        tuple(x_shape[3:5]) == tuple(out_shape[3:5])


def _columns(x, nm, dtype, kh, kw, oh, ow, strides, dilations) -> ir.Value:
    """The im2col copy ``(G, C, KH, KW, N, OH, OW)`` of the grouped input ``x`` (module
    docstring)."""
    n, g, c, _, _ = tensor_shape(x)
    sh, sw = strides
    dh, dw = dilations
    d = [ir.AffineDimExpr.get(i) for i in range(7)]   # g, c, kh, kw, n, oh, ow
    x_map = ir.AffineMap.get(7, 0, [d[4], d[0], d[1], d[5] * sh + d[2] * dh, d[6] * sw + d[3] * dw])
    cols = emitters.empty([g, c, kh, kw, n, oh, ow], dtype, nm)
    (patches,) = emitters.generic(f"{nm}.im2col", [x], [x_map], [cols], [ir.AffineMap.get_identity(7)],
                                  ["parallel"] * 7, lambda a, _out: [a])
    return patches


def _rewrite(op: ir.Operation) -> None:
    x, w, init = op.operands[0], op.operands[1], op.operands[2]
    n, g, c, _, _ = tensor_shape(x)
    _, f, _, kh, kw = tensor_shape(w)
    _, _, _, oh, ow = tensor_shape(init)
    strides, dilations, dtype, nm = conv_window(op)
    k, p = c * kh * kw, n * oh * ow
    with ir.InsertionPoint(op):
        if _is_view(n, tensor_shape(x), (kh, kw), tensor_shape(init), strides):
            b = reshape(x, [[0, 1], [2], [3, 4]], (g, c, p), f"{nm}.im2col_3d")
        else:
            cols = _columns(x, nm, dtype, kh, kw, oh, ow, strides, dilations)
            b = reshape(cols, [[0], [1, 2, 3], [4, 5, 6]], (g, k, p), f"{nm}.im2col_3d")
        a = reshape(w, [[0], [1], [2, 3, 4]], (g, f, k), f"{nm}.w_gemm")
        if n == 1:
            acc = reshaped_accumulator(init, [[0, 1], [2], [3, 4]], (g, f, p), nm)
        elif named_fill(init) is not None:
            acc = reshaped_accumulator(init, [], (g, f, p), nm)
        else:
            acc = reshape(emit_transpose(init, _NGF_TO_GFN, f"{nm}.init_gfn"), [[0], [1], [2, 3, 4]],
                          (g, f, p), f"{nm}.init_3d")
        mm = linalg_d.batch_matmul(a, b, outs=[acc])
        emitters.set_name(mm.owner, nm)
        if n == 1:
            y = reshape(mm, [[0, 1], [2], [3, 4]], (n, g, f, oh, ow), f"{nm}.ngchw")
        else:
            y = emit_transpose(reshape(mm, [[0], [1], [2, 3, 4]], (g, f, n, oh, ow), f"{nm}.gfn"),
                               _GFN_TO_NGF, f"{nm}.to_ngchw")
    replace_contraction(op, y)


@register_pass
class GroupedConvToBatchMatmul(ConvRewrite):
    """Rewrite ``linalg.conv_2d_ngchw_gfchw`` ops into a per-group im2col and a
    ``linalg.batch_matmul`` over the groups (see the module docstring). Parameters as
    :class:`~.conv_select.ConvRewrite`: ``select`` is given the padded input
    ``(N, G, C, H, W)``, the filter ``(G, F, C, KH, KW)`` and the output ``(N, G, F, OH, OW)``;
    the default schedule passes :func:`mlc_mlir.schedule.rules.conv_strategy.prefers_grouped_gemm`.
    """

    name = "mlc-grouped-conv-to-batch-matmul"
    op_name = "linalg.conv_2d_ngchw_gfchw"

    def rewrite(self, op: ir.Operation) -> None:
        _rewrite(op)
