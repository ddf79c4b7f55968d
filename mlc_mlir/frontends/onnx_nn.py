"""ONNX converters, nn family: MatMul/Gemm, Conv, pooling, normalization (BatchNormalization,
LayerNormalization, LRN), Softmax/LogSoftmax. Conventions as in :mod:`.onnx_ops`.

Source: ONNX operator spec (Operators.md), TVM Relax ``onnx_frontend.py``.
"""

from __future__ import annotations

from typing import List

import numpy as np

from .. import ops
from ..builder import Tensor
from .onnx_registry import (  # noqa: F401
    ONNX_BOOL, ONNX_DTYPES, NodeInputs, axes_input, dtype_of, np_dtype, register, same_dtype, shape_of,
)


# ---------------------------------------------------------------------------------- linear
def _matmul(n: NodeInputs, a, b):
    sa, sb = shape_of(a), shape_of(b)
    if len(sa) == 1:
        return ops.squeeze(_matmul(n, ops.unsqueeze(a, [0]), b), [len(sb) - 2])
    if len(sb) == 1:
        return ops.squeeze(_matmul(n, a, ops.unsqueeze(b, [1])), [-1])
    if len(sa) == 2 and len(sb) == 2:
        return ops.matmul(a, b)
    if len(sb) == 2:  # (..., M, K) @ (K, N): fold the batch into M
        y = ops.matmul(ops.reshape(a, (-1, sa[-1])), b)
        return ops.reshape(y, sa[:-1] + (sb[-1],))
    batch = tuple(np.broadcast_shapes(sa[:-2], sb[:-2]))
    a = ops.reshape(ops.expand(a, batch + sa[-2:]), (-1,) + sa[-2:])
    b = ops.reshape(ops.expand(b, batch + sb[-2:]), (-1,) + sb[-2:])
    return ops.reshape(ops.batch_matmul(a, b), batch + (sa[-2], sb[-1]))


@register("MatMul")
def _matmul_op(n: NodeInputs) -> List[object]:
    a, b = same_dtype(n, n.t(0), n.t(1))
    return [_matmul(n, a, b)]


@register("Gemm")
def _gemm(n: NodeInputs) -> List[object]:
    a, b = same_dtype(n, n.t(0), n.t(1))
    if n.attr("transA", 0):
        a = ops.transpose(a)
    if n.attr("transB", 0):
        b = ops.transpose(b)
    y = ops.matmul(a, b)
    alpha, beta = float(n.attr("alpha", 1.0)), float(n.attr("beta", 1.0))
    if alpha != 1.0:
        y = ops.multiply(y, alpha)
    if n.has(2):
        c = same_dtype(n, y, n.t(2))[1]
        y = ops.add(y, c if beta == 1.0 else ops.multiply(c, beta))
    return [y]


# ------------------------------------------------------------------------------ conv / pool
def _pads2d(n: NodeInputs, in_hw, k_hw, strides, dilations) -> tuple:
    """ONNX pads (h_begin, w_begin, h_end, w_end) -> (top, left, bottom, right), auto_pad too."""
    auto = n.attr("auto_pad", b"NOTSET").decode()
    if auto in ("NOTSET",):
        p = list(n.attr("pads", [0, 0, 0, 0]))
        return (p[0], p[1], p[2], p[3])
    if auto == "VALID":
        return (0, 0, 0, 0)
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pads = []
        for size, k, s, d in zip(in_hw, k_hw, strides, dilations):
            out = -(-size // s)
            total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
            small, big = total // 2, total - total // 2
            pads.append((small, big) if auto == "SAME_UPPER" else (big, small))
        return (pads[0][0], pads[1][0], pads[0][1], pads[1][1])
    raise n.fail(f"attribute 'auto_pad' is {auto!r}; expected NOTSET, VALID, SAME_UPPER or SAME_LOWER")


def _check_2d(n: NodeInputs, x) -> None:
    if len(shape_of(x)) != 4:
        raise n.fail(f"input 'X' has shape {shape_of(x)}; expected a 4-D NCHW tensor (2-D spatial only)")


@register("Conv")
def _conv(n: NodeInputs) -> List[object]:
    x, w = n.t(0), n.t(1)
    _check_2d(n, x)
    k = shape_of(w)[2:]
    strides = tuple(n.attr("strides", [1, 1]))
    dil = tuple(n.attr("dilations", [1, 1]))
    pads = _pads2d(n, shape_of(x)[2:], k, strides, dil)
    bias = n.t(2) if n.has(2) else None
    return [ops.conv2d(x, w, bias, strides=strides, padding=pads, dilation=dil,
                       groups=int(n.attr("group", 1)))]


def _pool_args(n: NodeInputs, x):
    _check_2d(n, x)
    if n.attr("ceil_mode", 0):
        raise n.fail("attribute 'ceil_mode' is 1; expected 0")
    k = tuple(n.attr("kernel_shape"))
    strides = tuple(n.attr("strides", [1, 1]))
    dil = tuple(n.attr("dilations", [1, 1]))
    return k, strides, _pads2d(n, shape_of(x)[2:], k, strides, dil), dil


@register("MaxPool")
def _max_pool(n: NodeInputs) -> List[object]:
    x = n.t(0)
    if len(n.node.output) > 1 and n.node.output[1]:
        raise n.fail("output 'Indices' is requested; expected only 'Y'")
    if n.attr("storage_order", 0):
        raise n.fail("attribute 'storage_order' is 1; expected 0")
    k, s, p, d = _pool_args(n, x)
    return [ops.max_pool2d(x, k, strides=s, padding=p, dilation=d)]


@register("AveragePool")
def _avg_pool(n: NodeInputs) -> List[object]:
    x = n.t(0)
    k, s, p, d = _pool_args(n, x)
    if d != (1, 1):
        raise n.fail(f"attribute 'dilations' is {d}; expected (1, 1)")
    return [ops.avg_pool2d(x, k, strides=s, padding=p, count_include_pad=bool(n.attr("count_include_pad", 0)))]


@register("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(n: NodeInputs) -> List[object]:
    x = n.t(0)
    axes = tuple(range(2, len(shape_of(x))))
    if n.node.op_type == "GlobalMaxPool":
        return [ops.max(x, axis=axes, keepdims=True)]
    return [ops.mean(x, axis=axes, keepdims=True)]


# ---------------------------------------------------------------------------- normalization
@register("BatchNormalization")
def _batch_norm(n: NodeInputs) -> List[object]:
    if n.attr("training_mode", 0):
        raise n.fail("attribute 'training_mode' is 1; expected 0 (inference)")
    x = n.t(0)
    args = [same_dtype(n, x, n.t(i))[1] for i in range(1, 5)]
    return [ops.batch_norm(x, *args, eps=float(n.attr("epsilon", 1e-5)), axis=1)]


@register("LayerNormalization", opsets=(17, 21))
def _layer_norm(n: NodeInputs) -> List[object]:
    if len(n.node.output) > 1 and any(n.node.output[1:]):
        raise n.fail("outputs 'Mean'/'InvStdDev' are requested; expected only 'Y'")
    x = n.t(0)
    rank = len(shape_of(x))
    axis = int(n.attr("axis", -1)) % rank
    axes = tuple(range(axis - rank, 0))
    gamma = ops.broadcast_to(n.t(1), shape_of(x)[axis:]) if shape_of(n.t(1)) != shape_of(x)[axis:] else n.t(1)
    beta = n.t(2) if n.has(2) else None
    if beta is not None and shape_of(beta) != shape_of(x)[axis:]:
        beta = ops.broadcast_to(beta, shape_of(x)[axis:])
    return [ops.layer_norm(x, gamma, beta, axis=axes, eps=float(n.attr("epsilon", 1e-5)))]


@register("Softmax", "LogSoftmax")
def _softmax(n: NodeInputs) -> List[object]:
    x = n.t(0)
    fn = ops.softmax if n.node.op_type == "Softmax" else ops.log_softmax
    shape = shape_of(x)
    if n.opset >= 13:
        return [fn(x, axis=int(n.attr("axis", -1)))]
    axis = int(n.attr("axis", 1)) % max(len(shape), 1)
    flat = ops.reshape(x, (int(np.prod(shape[:axis])), int(np.prod(shape[axis:]))))
    return [ops.reshape(fn(flat, axis=-1), shape)]


@register("LRN")
def _lrn(n: NodeInputs) -> List[object]:
    """``y = x / (bias + alpha / size * sum_{c' in window(c)} x[c']^2) ^ beta``: the window sum
    is an average pool over channels (``(N, 1, C, H*W)``, kernel ``(size, 1)``, padding
    ``floor((size-1)/2)`` before and ``ceil((size-1)/2)`` after, counting pads) times ``size``."""
    x = n.t(0)
    shape = shape_of(x)
    if len(shape) < 3:
        raise n.fail(f"input 'X' has shape {shape}; expected (N, C, D1, ...)")
    size = int(n.attr("size"))
    alpha, beta, bias = float(n.attr("alpha", 1e-4)), float(n.attr("beta", 0.75)), float(n.attr("bias", 1.0))
    lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
    sq = ops.reshape(ops.multiply(x, x), (shape[0], 1, shape[1], int(np.prod(shape[2:]))))
    window = ops.avg_pool2d(sq, (size, 1), strides=(1, 1), padding=(lo, 0, hi, 0), count_include_pad=True)
    scale = ops.add(ops.multiply(ops.reshape(window, shape), alpha), bias)
    return [ops.divide(x, ops.power(scale, beta))]
