"""``ConvToIm2col`` (``mlc-conv-to-im2col``): rewrite chosen ``linalg.conv_2d_nhwc_hwcf`` ops
into an im2col copy and a ``linalg.matmul`` (GEMM), so the Goto matmul rule schedules them.

Before::

    %init = linalg.fill {mlc.name = "conv2d.init"} ins(%zero) outs(%e : tensor<1x7x7x512xf32>)
    %y = linalg.conv_2d_nhwc_hwcf {mlc.name = "conv2d", strides = dense<1>, ...}
           ins(%x, %w : tensor<1x9x9x512xf32>, tensor<3x3x512x512xf32>) outs(%init)

After (``n, oh, ow, kh, kw, c``; the collapses of contiguous dims are views)::

    %cols = linalg.generic {mlc.name = "conv2d.im2col"}   // cols[n,oh,ow,kh,kw,c] =
           ins(%x) outs(tensor<1x7x7x3x3x512xf32>)        //   x[n, oh*s+kh*d, ow*s+kw*d, c]
    %a = tensor.collapse_shape %cols [[0, 1, 2], [3, 4, 5]] : tensor<49x4608xf32>    // .im2col_2d
    %b = tensor.collapse_shape %w [[0, 1, 2], [3]] : tensor<4608x512xf32>           // .w_gemm
    %c = linalg.fill {mlc.name = "conv2d.init"} ... : tensor<49x512xf32>
    %m = linalg.matmul {mlc.name = "conv2d"} ins(%a, %b) outs(%c)
    %y = tensor.expand_shape %m [[0, 1, 2], [3]] output_shape [1, 7, 7, 512]

An NCHW convolution of one image (``linalg.conv_2d_nchw_fchw``, ``select_nchw``) becomes the
transposed product, output pixels in the GEMM's columns (its vector lanes)::

    %cols = linalg.generic {mlc.name = "conv2d.im2col"}   // cols[c,kh,kw,n,oh,ow] =
           ins(%x) outs(tensor<3x3x3x1x112x112xf32>)      //   x[n, c, oh*s+kh*d, ow*s+kw*d]
    %b = tensor.collapse_shape %cols [[0, 1, 2], [3, 4, 5]] : tensor<27x12544xf32>
    %a = tensor.collapse_shape %w [[0], [1, 2, 3]] : tensor<24x27xf32>
    %m = linalg.matmul {mlc.name = "conv2d"} ins(%a, %b) outs(%c : tensor<24x12544xf32>)
    %y = tensor.expand_shape %m [[0, 1], [2, 3]] output_shape [1, 24, 112, 112]

A pointwise convolution (1x1 window, unit strides, no padding: :func:`is_pointwise`) needs
no copy: its im2col matrix is the input collapsed to ``(N * H * W, C)``.
An accumulating convolution (its init not a named single-use ``linalg.fill``) accumulates into
the collapsed init instead. Why: the direct NHWC kernel keeps a ``WR x FR`` output tile in
registers with ``WR`` dividing the output width; on deep layers (7x7 maps, 512 channels) the
only divisors are 1 and 7 and the input rows, 2 KiB apart, fall into the same L1 sets. The GEMM
of the im2col matrix has neither problem: on a 2-core AVX2 EPYC (znver1), one thread, the
1x9x9x512 3x3 -> 512 convolution took 13.3 ms direct and 8.0 ms as a 49x4608x512 GEMM (plus a
0.9 MB copy). Source: Chellapilla et al., "High Performance Convolutional Neural Networks for
Document Processing" (2006, unrolling convolutions into matrix products); Caffe's and oneDNN's
``gemm:im2col`` convolutions; MLIR's ``transform.structured.convert_conv2d_to_img2col`` (which
produces a ``linalg.generic`` contraction, not the ``linalg.matmul`` the default rule needs).
"""

from __future__ import annotations

from typing import Optional, Sequence

from ..._mlir import ir, linalg_d
from ...ir import emitters
from ...ir.module import CONV_IM2COL, Module
from ...graph.emit_rewrites import replace_contraction, reshape, reshaped_accumulator
from ...graph.linalg_attrs import tensor_shape
from ...graph.pass_manager import register_pass
from ...graph.use_def import named_ops
from .conv_select import ConvRewrite, ConvSelect, conv_signature, conv_window

def is_pointwise(x_shape, window, out_shape, strides) -> bool:
    """Whether an NHWC convolution with input ``(N, H, W, C)``, window ``(KH, KW)``, output
    ``(N, OH, OW, F)`` and ``strides`` is a pointwise (1x1) one whose im2col matrix is its
    input: a 1x1 window, unit strides and ``(H, W) == (OH, OW)`` (no padding). Its GEMM then
    reads ``x`` collapsed to ``(N * H * W, C)``, a view, instead of a copy of it."""
    return tuple(window) == (1, 1) and tuple(strides) == (1, 1) and \
        tuple(x_shape[1:3]) == tuple(out_shape[1:3])


def _patches(x, shape, x_dims, nm: str, dtype: str) -> ir.Value:
    """The im2col copy ``cols[d0..d5] = x[x_dims]`` of shape ``shape`` (``<nm>.im2col``);
    ``x_dims`` maps the six dims (a list of ``AffineDimExpr``) to x's four indices."""
    d = [ir.AffineDimExpr.get(i) for i in range(6)]
    cols = emitters.empty(list(shape), dtype, nm)
    (patches,) = emitters.generic(f"{nm}.im2col", [x], [ir.AffineMap.get(6, 0, x_dims(d))], [cols],
                                  [ir.AffineMap.get_identity(6)], ["parallel"] * 6, lambda a, _out: [a])
    return patches


def _rewrite_nchw(op: ir.Operation) -> None:
    """The NCHW form (module docstring) of one image: ``W (F, C*KH*KW) x cols (C*KH*KW, OH*OW)``."""
    x, w, init = op.operands[0], op.operands[1], op.operands[2]
    n, c, _, _ = tensor_shape(x)
    f, _, kh, kw = tensor_shape(w)
    _, _, oh, ow = tensor_shape(init)
    (sh, sw), (dh, dw), dtype, nm = conv_window(op)
    k, p = c * kh * kw, n * oh * ow
    with ir.InsertionPoint(op):
        # dims c, kh, kw, n, oh, ow
        patches = _patches(x, (c, kh, kw, n, oh, ow),
                           lambda d: [d[3], d[0], d[4] * sh + d[1] * dh, d[5] * sw + d[2] * dw], nm, dtype)
        b = reshape(patches, [[0, 1, 2], [3, 4, 5]], (k, p), f"{nm}.im2col_2d")
        a = reshape(w, [[0], [1, 2, 3]], (f, k), f"{nm}.w_gemm")
        acc = reshaped_accumulator(init, [[0, 1], [2, 3]], (f, p), nm)
        mm = linalg_d.matmul(a, b, outs=[acc])
        emitters.set_name(mm.owner, nm)
        y = reshape(mm, [[0, 1], [2, 3]], (n, f, oh, ow), f"{nm}.nchw")
    replace_contraction(op, y)


def _rewrite(op: ir.Operation) -> None:
    x, w, init = op.operands[0], op.operands[1], op.operands[2]
    n, _, _, c = tensor_shape(x)
    kh, kw, _, f = tensor_shape(w)
    _, oh, ow, _ = tensor_shape(init)
    (sh, sw), (dh, dw), dtype, nm = conv_window(op)
    m, k = n * oh * ow, kh * kw * c
    with ir.InsertionPoint(op):
        if is_pointwise(tensor_shape(x), (kh, kw), tensor_shape(init), (sh, sw)):
            # the im2col matrix of a 1x1 stride-1 window is the input itself: a view
            a = reshape(x, [[0, 1, 2], [3]], (m, k), f"{nm}.im2col_2d")
        else:
            # dims n, oh, ow, kh, kw, c
            patches = _patches(x, (n, oh, ow, kh, kw, c),
                               lambda d: [d[0], d[1] * sh + d[3] * dh, d[2] * sw + d[4] * dw, d[5]], nm, dtype)
            a = reshape(patches, [[0, 1, 2], [3, 4, 5]], (m, k), f"{nm}.im2col_2d")
        b = reshape(w, [[0, 1, 2], [3]], (k, f), f"{nm}.w_gemm")
        acc = reshaped_accumulator(init, [[0, 1, 2], [3]], (m, f), nm)
        mm = linalg_d.matmul(a, b, outs=[acc])
        emitters.set_name(mm.owner, nm)
        y = reshape(mm, [[0, 1, 2], [3]], (n, oh, ow, f), f"{nm}.nhwc")
    replace_contraction(op, y)


@register_pass
class ConvToIm2col(ConvRewrite):
    """Rewrite ``linalg.conv_2d_nhwc_hwcf`` ops into an im2col ``linalg.generic`` and a
    ``linalg.matmul`` (see the module docstring). Numerically the same sums, in another order.
    Parameters as :class:`~.conv_select.ConvRewrite`: ``select`` is given the padded input
    ``(N, H, W, C)``, the filter ``(KH, KW, C, F)`` and the output ``(N, OH, OW, F)``; the
    default schedule passes :func:`mlc_mlir.schedule.rules.conv_strategy.prefers_im2col`; a tuned
    ``mlc.conv_algorithm`` of ``CONV_IM2COL`` takes the convolution whatever ``select`` says.
    One more parameter:

    select_nchw : ConvSelect, optional
        Which ``linalg.conv_2d_nchw_fchw`` ops of one image (``N == 1``) to rewrite into the
        NCHW form ``W (F, C*KH*KW) x cols (C*KH*KW, OH*OW)`` (given the padded input
        ``(N, C, H, W)``, the filter ``(F, C, KH, KW)`` and the output ``(N, F, OH, OW)``);
        default: none. The default schedule passes
        :func:`mlc_mlir.schedule.rules.conv_strategy.prefers_nchw_im2col`.
    """

    name = "mlc-conv-to-im2col"
    op_name = "linalg.conv_2d_nhwc_hwcf"
    algorithm = CONV_IM2COL
    select_nchw: Optional[ConvSelect]

    def __init__(self, select: Optional[ConvSelect] = None, functions: Optional[Sequence[str]] = None,
                 select_nchw: Optional[ConvSelect] = None):
        super().__init__(select, functions)
        self.select_nchw = select_nchw

    def transform(self, mod: Module) -> Module:
        if self.select_nchw is not None:
            for op in named_ops(mod, "linalg.conv_2d_nchw_fchw", self.functions):
                sig = conv_signature(op)
                if sig[0][0] == 1 and self.select_nchw(*sig):
                    _rewrite_nchw(op)
        return super().transform(mod)

    def rewrite(self, op: ir.Operation) -> None:
        _rewrite(op)
