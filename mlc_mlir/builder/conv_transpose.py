"""Transposed 2-D convolution (PyTorch ``ConvTranspose2d``, ONNX ``ConvTranspose``, TOPI
``conv2d_transpose_nchw``) as an ordinary convolution: the input with ``stride - 1`` zeros
inserted between its elements (``tensor.insert_slice`` with strides into a zero tensor), padded
by ``dilation * (k - 1) - padding`` (cropped where that is negative), convolved with stride 1
by the filter flipped in space and with its in/out channels swapped per group (one
``linalg.generic`` that reads it with ``tensor.extract`` at ``k - 1 - d``). The convolution is the builder's
:func:`~mlc_mlir.builder.nn.conv2d`, so the default schedules and layout rewrites apply.
Source: TVM TOPI ``conv2d_transpose_nchw`` (dilate + pad + conv with the flipped kernel);
Dumoulin & Visin, "A guide to convolution arithmetic for deep learning" (2016), section 4.
"""

from __future__ import annotations

from typing import Optional

from .._mlir import arith_d, ir, linalg_d, tensor_d
from ..errors import BuildError, format_shape
from ..ir import emitters
from . import linalg_emit as emit
from .nn import _check_x, _padding4, conv2d
from .shape import pad, reshape, slice as slice_
from .tensor import Tensor


def conv_transpose2d(x, weight, bias=None, strides=1, padding=0, output_padding=0, dilation=1,
                     groups: int = 1, name: Optional[str] = None) -> Tensor:
    """Transposed convolution (the gradient of :func:`~mlc_mlir.builder.nn.conv2d` with
    respect to its input), NCHW input and ``(C, F/groups, KH, KW)`` weight.

    Parameters
    ----------
    x : Tensor (N, C, H, W), float dtype
    weight : Tensor or numpy.ndarray (C, F/groups, KH, KW)
        x's dtype.
    bias : Tensor or numpy.ndarray (F,), optional
    strides, dilation : int or (int, int)
        >= 1.
    padding : int, (ph, pw) or (top, left, bottom, right)
        Removed from the full output, >= 0.
    output_padding : int or (int, int)
        Extra rows/columns at the bottom/right, >= 0 (PyTorch keeps them below the stride or
        dilation; ONNX's ``output_shape`` may ask for more).
    groups : int
        Divides C and F.

    Returns
    -------
    Tensor (N, F, OH, OW)
        ``OH = (H - 1) * SH - top - bottom + DH * (KH - 1) + output_padding_h + 1`` (same for
        OW); x's dtype.

    Raises
    ------
    BuildError
        ``conv_transpose2d: argument 'weight' has shape (4, 2, 3, 3); expected (8, F/groups, KH,
        KW) for x (1, 8, 5, 5)``; also for wrong ranks, groups, strides or paddings.
    """
    op = "conv_transpose2d"
    fn = emit.function_of(op, x, weight, bias)
    x = _check_x(op, x, 4, "N, C, H, W", float_only=True)
    w = emit.as_tensor(op, "weight", fn, weight, x.dtype)
    n, c, h, wd = x.shape
    if w.ndim != 4 or w.shape[0] != c:
        raise BuildError(f"{op}: argument 'weight' has shape {format_shape(w.shape)}; expected "
                         f"({c}, F/groups, KH, KW) for x {format_shape(x.shape)}")
    if not isinstance(groups, int) or isinstance(groups, bool) or groups < 1 or c % groups:
        raise BuildError(f"{op}: argument 'groups' is {groups!r}; expected an int >= 1 dividing the "
                         f"{c} input channels")
    sh, sw = emit.int_tuple(op, "strides", strides, 2, minimum=1)
    dh, dw = emit.int_tuple(op, "dilation", dilation, 2, minimum=1)
    oph, opw = emit.int_tuple(op, "output_padding", output_padding, 2, minimum=0)
    top, left, bottom, right = _padding4(op, padding)
    _, fg, kh, kw = w.shape
    nm = emit.op_name(fn, op, name)
    cg = c // groups
    # 1. zeros between the input elements
    xz = x
    if sh > 1 or sw > 1:
        hz, wz = (h - 1) * sh + 1, (wd - 1) * sw + 1
        dest = emitters.filled([n, c, hz, wz], x.dtype, 0, f"{nm}.dilate")
        v = tensor_d.InsertSliceOp(x.value, dest, [], [], [], [0, 0, 0, 0], [n, c, h, wd], [1, 1, sh, sw]).result
        emitters.set_name(v.owner, f"{nm}.dilate")
        xz = Tensor(v, fn)
    # 2. the full convolution's padding minus ``padding`` (negative: cropped)
    lo = [dh * (kh - 1) - top, dw * (kw - 1) - left]
    hi = [dh * (kh - 1) - bottom + oph, dw * (kw - 1) - right + opw]
    if any(p > 0 for p in lo + hi):
        xz = pad(xz, [(0, 0), (0, 0), (max(lo[0], 0), max(hi[0], 0)), (max(lo[1], 0), max(hi[1], 0))],
                 0, name=f"{nm}.pad")
    if any(p < 0 for p in lo + hi):
        s = xz.shape
        xz = slice_(xz, [max(-lo[0], 0), max(-lo[1], 0)], [s[2] - max(-hi[0], 0), s[3] - max(-hi[1], 0)],
                    axes=[2, 3], name=f"{nm}.crop")
    # 3. the filter flipped in space, (C, F/g) swapped per group: (F, C/g, KH, KW); read with
    # tensor.extract at ``k - 1 - linalg.index`` (an indexing map with a negative coefficient
    # is one that linalg tiling cannot slice)
    we = reshape(w, [groups, cg, fg, kh, kw], name=f"{nm}.w_groups")
    idx_type = ir.IndexType.get()

    def flip(_o):
        i = [linalg_d.IndexOp(k).result for k in range(5)]
        last = [arith_d.ConstantOp(idx_type, e - 1).result for e in (kh, kw)]
        return [tensor_d.ExtractOp(we.value, [i[0], i[2], i[1], arith_d.subi(last[0], i[3]),
                                              arith_d.subi(last[1], i[4])]).result]

    out = emitters.empty([groups, fg, cg, kh, kw], x.dtype, f"{nm}.w_flip")
    flipped = emitters.generic(f"{nm}.w_flip", [], [], [out], [ir.AffineMap.get_identity(5)],
                               ["parallel"] * 5, flip)[0]
    wf = reshape(Tensor(flipped, fn), [groups * fg, cg, kh, kw], name=f"{nm}.w_conv")
    return conv2d(xz, wf, bias, strides=1, padding=0, dilation=(dh, dw), groups=groups, name=nm)
