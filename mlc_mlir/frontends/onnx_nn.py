"""ONNX converters, nn family: MatMul/Gemm/Einsum, Conv, pooling (Max, Average, Lp), normalization
(BatchNormalization, LayerNormalization, LRN), Softmax/LogSoftmax. Conventions as in
:mod:`.onnx_ops`.

Source: ONNX operator spec (Operators.md), TVM Relax ``onnx_frontend.py``.
"""

from __future__ import annotations

from typing import List

import numpy as np

from .. import ops
from ..builder import Tensor
from ..builder.linalg_emit import prod
from .onnx_registry import OPSETS, NodeInputs, np_dtype, register, same_dtype, shape_of


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
        y = ops.matmul(ops.reshape(a, (prod(sa[:-1]), sa[-1])), b)
        return ops.reshape(y, sa[:-1] + (sb[-1],))
    batch = _broadcast(n, sa[:-2], sb[:-2])
    a = ops.reshape(ops.expand(a, batch + sa[-2:]), (prod(batch),) + sa[-2:])
    b = ops.reshape(ops.expand(b, batch + sb[-2:]), (prod(batch),) + sb[-2:])
    return ops.reshape(ops.batch_matmul(a, b), batch + (sa[-2], sb[-1]))


def _broadcast(n: NodeInputs, sa, sb) -> tuple:
    """numpy broadcasting of two batch shapes whose sizes may be symbolic (a symbolic size
    broadcasts against 1 and itself)."""
    r = max(len(sa), len(sb))
    sa, sb = (1,) * (r - len(sa)) + tuple(sa), (1,) * (r - len(sb)) + tuple(sb)
    out = []
    for x, y in zip(sa, sb):
        if not (x == y or (isinstance(x, int) and x == 1) or (isinstance(y, int) and y == 1)):
            raise n.fail(f"batch dims {sa} and {sb} do not broadcast")
        out.append(y if isinstance(x, int) and x == 1 else x)
    return tuple(out)


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


@register("Einsum", opsets=(12, OPSETS[1]))
def _einsum(n: NodeInputs) -> List[object]:
    """``ops.einsum`` (one ``linalg.generic``); numpy operands take the first Tensor's dtype."""
    vals = [n.t(i) for i in range(len(n))]
    ref = next((v for v in vals if isinstance(v, Tensor)), vals[0])
    eq = n.attr("equation")
    if eq is None:
        raise n.fail("attribute 'equation' is missing; expected the einsum subscripts")
    return [ops.einsum(eq.decode() if isinstance(eq, bytes) else eq,
                       *[same_dtype(n, ref, v)[1] for v in vals])]


# ------------------------------------------------------------------------------ conv / pool
def _pads(n: NodeInputs, in_sp, k, strides, dilations) -> tuple:
    """ONNX ``pads`` (begins..., ends...) of an N-D window op, ``auto_pad`` resolved."""
    nd = len(in_sp)
    auto = n.attr("auto_pad", b"NOTSET").decode()
    if auto == "NOTSET":
        return tuple(int(p) for p in n.attr("pads", [0] * (2 * nd)))
    if auto == "VALID":
        return (0,) * (2 * nd)
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        begin, end = [], []
        for size, kk, s, d in zip(in_sp, k, strides, dilations):
            out = -(-size // s)
            total = max((out - 1) * s + (kk - 1) * d + 1 - size, 0)
            small, big = total // 2, total - total // 2
            begin.append(small if auto == "SAME_UPPER" else big)
            end.append(big if auto == "SAME_UPPER" else small)
        return tuple(begin + end)
    raise n.fail(f"attribute 'auto_pad' is {auto!r}; expected NOTSET, VALID, SAME_UPPER or SAME_LOWER")


class _Window:
    """A 1-D or 2-D window op (Conv, pooling) as the 2-D builder ops see it: a 1-D op
    ``(N, C, L)`` runs as ``(N, C, 1, L)`` with kernel ``(1, k)``, and :meth:`back` reshapes
    its result to 3-D. With ``volumetric``, a 3-D op ``(N, C, D, H, W)`` too (for the 3-D
    builder ops, unchanged)."""

    def __init__(self, n: NodeInputs, x, kernel, ceil_mode: bool = False, volumetric: bool = False):
        shape = shape_of(x)
        if len(shape) not in ((3, 4, 5) if volumetric else (3, 4)):
            raise n.fail(f"input 'X' has shape {shape}; expected (N, C, L) or (N, C, H, W)"
                         + (" or (N, C, D, H, W) (1-D, 2-D and 3-D spatial only)" if volumetric else
                            " (1-D and 2-D spatial only)"))
        nd = len(shape) - 2
        k = tuple(int(v) for v in kernel)
        strides = tuple(int(v) for v in n.attr("strides", [1] * nd))
        dil = tuple(int(v) for v in n.attr("dilations", [1] * nd))
        pads = list(_pads(n, shape[2:], k, strides, dil))
        explicit = tuple(pads)
        if ceil_mode:  # extra end padding so that the last partial window is produced
            for i in range(nd):
                span = shape[2 + i] + pads[i] + pads[nd + i] - ((k[i] - 1) * dil[i] + 1)
                out = -(-span // strides[i]) + 1
                if (out - 1) * strides[i] >= shape[2 + i] + pads[i]:  # a window must start inside
                    out -= 1
                pads[nd + i] += max((out - 1) * strides[i] + (k[i] - 1) * dil[i] + 1 - (shape[2 + i] + pads[i] + pads[nd + i]), 0)
        self.squeezed = nd == 1
        if self.squeezed:
            self.x = ops.reshape(x, shape[:2] + (1, shape[2]))
            self.k, self.strides, self.dil = (1,) + k, (1,) + strides, (1,) + dil
            self.pads, self.explicit_pads = (0, pads[0], 0, pads[1]), (0, explicit[0], 0, explicit[1])
        else:
            self.x, self.k, self.strides, self.dil, self.pads = x, k, strides, dil, tuple(pads)
            self.explicit_pads = explicit

    def window_sum(self, t):
        """The sum over each window of ``t`` (``self.x``'s shape): a depthwise convolution
        with a ones kernel over ``t`` zero-padded by :attr:`pads` (dilations and strides as
        the node's)."""
        c, nd = shape_of(t)[1], len(self.k)
        ones = np.ones((c, 1) + tuple(self.k), np_dtype(t))
        if nd == 3:  # conv3d pads symmetrically: the (possibly uneven) zero pads come first
            t = ops.pad(t, [(0, 0), (0, 0)] + list(zip(self.pads[:3], self.pads[3:])))
            return ops.conv3d(t, ones, None, strides=self.strides, padding=0, dilation=self.dil, groups=c)
        return ops.conv2d(t, ones, None, strides=self.strides, padding=self.pads, dilation=self.dil, groups=c)

    def window_counts(self, out_spatial, include_pad: bool) -> np.ndarray:
        """How many taps of each output window fall inside the input (or, with
        ``include_pad``, inside the input plus its explicit pads; the extra end padding of
        ``ceil_mode`` never counts), shape ``out_spatial``: the divisor of AveragePool, as
        the ONNX reference (``op_pool_common.pool``) and PyTorch count it."""
        nd, size = len(self.k), shape_of(self.x)[2:]
        counts = np.ones((), np.float64)
        for i in range(nd):
            lo = -self.explicit_pads[i] if include_pad else 0
            hi = size[i] + self.explicit_pads[nd + i] if include_pad else size[i]
            taps = (np.arange(out_spatial[i])[:, None] * self.strides[i] - self.pads[i]
                    + np.arange(self.k[i])[None, :] * self.dil[i])
            c = ((taps >= lo) & (taps < hi)).sum(axis=1)
            counts = np.multiply.outer(counts, c)
        return counts

    def back(self, y):
        s = shape_of(y)
        return ops.reshape(y, s[:2] + (s[3],)) if self.squeezed else y


@register("Conv")
def _conv(n: NodeInputs) -> List[object]:
    x, w = n.t(0), n.t(1)
    win = _Window(n, x, shape_of(w)[2:])
    if win.squeezed:
        ws = shape_of(w)
        w = ops.reshape(w, ws[:2] + (1, ws[2])) if isinstance(w, Tensor) else np.reshape(w, ws[:2] + (1, ws[2]))
    bias = n.t(2) if n.has(2) else None
    return [win.back(ops.conv2d(win.x, w, bias, strides=win.strides, padding=win.pads, dilation=win.dil,
                                groups=int(n.attr("group", 1))))]


@register("ConvTranspose")
def _conv_transpose(n: NodeInputs) -> List[object]:
    """ONNX ``ConvTranspose`` (1-D as 2-D with a unit height) with ``pads``, ``auto_pad`` or
    ``output_shape`` (the spec's ``total_padding`` split between begin and end)."""
    x, w = n.t(0), n.t(1)
    xs, ws = shape_of(x), shape_of(w)
    if len(xs) not in (3, 4) or len(ws) != len(xs):
        raise n.fail(f"inputs 'X' {xs} and 'W' {ws}; expected (N, C, L) or (N, C, H, W) with a weight "
                     "of the same rank (1-D and 2-D spatial only)")
    nd = len(xs) - 2
    k = tuple(int(v) for v in n.attr("kernel_shape", ws[2:]))
    strides = tuple(int(v) for v in n.attr("strides", [1] * nd))
    dil = tuple(int(v) for v in n.attr("dilations", [1] * nd))
    outpad = [int(v) for v in n.attr("output_padding", [0] * nd)]
    auto = n.attr("auto_pad", b"NOTSET").decode()
    out_shape = n.attr("output_shape", None)
    if out_shape is not None or auto in ("SAME_UPPER", "SAME_LOWER"):
        want = [int(v) for v in out_shape][-nd:] if out_shape is not None else \
            [xs[2 + i] * strides[i] for i in range(nd)]
        begin, end = [], []
        for i in range(nd):
            total = strides[i] * (xs[2 + i] - 1) + outpad[i] + (k[i] - 1) * dil[i] + 1 - want[i]
            small, big = total // 2, total - total // 2
            b, e = (small, big) if auto == "SAME_UPPER" else (big, small)
            if b < 0:
                raise n.fail(f"output_shape {want} needs {-b} extra leading rows on axis {2 + i}; "
                             "expected at most the full transposed convolution plus trailing rows")
            if e < 0:          # more output than the full convolution: trailing zeros
                outpad[i] -= e
                e = 0
            begin.append(b)
            end.append(e)
        pads = begin + end
    elif auto in ("NOTSET", "VALID"):
        pads = [int(p) for p in n.attr("pads", [0] * (2 * nd))] if auto == "NOTSET" else [0] * (2 * nd)
    else:
        raise n.fail(f"attribute 'auto_pad' is {auto!r}; expected NOTSET, VALID, SAME_UPPER or SAME_LOWER")
    bias = n.t(2) if n.has(2) else None
    if nd == 1:
        x = ops.reshape(x, xs[:2] + (1, xs[2]))
        w = ops.reshape(w, ws[:2] + (1, ws[2])) if isinstance(w, Tensor) else np.reshape(w, ws[:2] + (1, ws[2]))
        k, strides, dil, outpad, pads = (1,) + k, (1,) + strides, (1,) + dil, [0] + outpad, [0, pads[0], 0, pads[1]]
    y = ops.conv_transpose2d(x, w, bias, strides=strides, padding=tuple(pads), output_padding=tuple(outpad),
                             dilation=dil, groups=int(n.attr("group", 1)))
    if nd == 1:
        s = shape_of(y)
        y = ops.reshape(y, s[:2] + (s[3],))
    return [y]


@register("MaxPool")
def _max_pool(n: NodeInputs) -> List[object]:
    x = n.t(0)
    if len(n.node.output) > 1 and n.node.output[1]:
        raise n.fail("output 'Indices' is requested; expected only 'Y'")
    if n.attr("storage_order", 0):
        raise n.fail("attribute 'storage_order' is 1; expected 0")
    win = _Window(n, x, n.attr("kernel_shape"), ceil_mode=bool(n.attr("ceil_mode", 0)), volumetric=True)
    pool = ops.max_pool3d if len(win.k) == 3 else ops.max_pool2d
    return [win.back(pool(win.x, win.k, strides=win.strides, padding=win.pads, dilation=win.dil))]


@register("AveragePool")
def _avg_pool(n: NodeInputs) -> List[object]:
    """``ops.avg_pool2d`` / ``ops.avg_pool3d`` where they apply (unit dilations; 2-D without
    both ``ceil_mode`` and ``count_include_pad``; 3-D without pads or with counted symmetric
    pads); otherwise the window sum (:meth:`_Window.window_sum`) divided by the per-window
    tap counts (:meth:`_Window.window_counts`, a constant of the output's spatial shape)."""
    x = n.t(0)
    include = bool(n.attr("count_include_pad", 0))
    ceil = bool(n.attr("ceil_mode", 0))
    win = _Window(n, x, n.attr("kernel_shape"), ceil_mode=ceil, volumetric=True)
    nd = len(win.k)
    unit = all(d == 1 for d in win.dil)
    if unit and nd == 2 and not (ceil and include):
        return [win.back(ops.avg_pool2d(win.x, win.k, strides=win.strides, padding=win.pads,
                                        count_include_pad=include))]
    if unit and nd == 3 and (not any(win.pads) or (include and win.pads[:nd] == win.pads[nd:])):
        return [ops.avg_pool3d(win.x, win.k, strides=win.strides, padding=win.pads[:nd])]
    s = win.window_sum(win.x)
    counts = win.window_counts(shape_of(s)[2:], include)
    return [win.back(ops.divide(s, counts.astype(np_dtype(x))[None, None]))]


@register("LpPool")
def _lp_pool(n: NodeInputs) -> List[object]:
    """``(sum over the window of |x|^p)^(1/p)``: the window sum is a depthwise convolution
    with a ones kernel (:meth:`_Window.window_sum`: zero padding, dilations and ``ceil_mode``
    as for the other window ops)."""
    x = n.t(0)
    p = float(n.attr("p", 2))
    if p <= 0:
        raise n.fail(f"attribute 'p' is {p}; expected > 0")
    win = _Window(n, x, n.attr("kernel_shape"), ceil_mode=bool(n.attr("ceil_mode", 0)), volumetric=True)
    dt = np_dtype(x)
    a = ops.abs(win.x)
    xp = a if p == 1 else ops.multiply(a, a) if p == 2 else ops.power(a, np.asarray(p, dt))
    s = win.window_sum(xp)
    y = s if p == 1 else ops.sqrt(s) if p == 2 else ops.power(s, np.asarray(1.0 / p, dt))
    return [win.back(y)]


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
    """Inference: ``ops.batch_norm`` with the running statistics. ``training_mode`` (opset
    14+): normalized with the batch statistics over every axis but 1 (biased variance), and
    the running mean/variance outputs ``running * momentum + batch * (1 - momentum)``."""
    if n.attr("training_mode", 0):
        return _batch_norm_training(n)
    x = n.t(0)
    args = [same_dtype(n, x, n.t(i))[1] for i in range(1, 5)]
    return [ops.batch_norm(x, *args, eps=float(n.attr("epsilon", 1e-5)), axis=1)]


def _batch_norm_training(n: NodeInputs) -> List[object]:
    x = n.t(0)
    shape = shape_of(x)
    axes = tuple(a for a in range(len(shape)) if a != 1)
    mean = ops.mean(x, axis=axes, keepdims=True)
    d = ops.subtract(x, mean)
    var = ops.mean(ops.multiply(d, d), axis=axes, keepdims=True)
    dt = np_dtype(x)
    y = _channel_affine(n, x, ops.multiply(d, ops.rsqrt(ops.add(var, np.asarray(n.attr("epsilon", 1e-5), dt)))))
    m = np.asarray(n.attr("momentum", 0.9), dt)

    def running(i, batch):
        old = same_dtype(n, x, n.t(i))[1]
        return ops.add(ops.multiply(old, m), ops.multiply(ops.reshape(batch, (shape[1],)), np.asarray(1 - m, dt)))

    return [y, running(3, mean), running(4, var)][:max(1, len(n.node.output))]


def _standardize(x, axes, eps: float):
    """``(mean, x - mean, rsqrt(var + eps))`` of x over ``axes`` (biased variance, two passes),
    mean and inverse deviation with the reduced axes kept as size 1."""
    mean = ops.mean(x, axis=axes, keepdims=True)
    d = ops.subtract(x, mean)
    inv = ops.rsqrt(ops.add(ops.mean(ops.multiply(d, d), axis=axes, keepdims=True), eps))
    return mean, d, inv


def _channel_affine(n: NodeInputs, x, y):
    """``y * scale + B`` with the node's inputs 1 and 2 (shape (C,), x's dtype) on axis 1 of
    x's shape (N, C, ...)."""
    shape = shape_of(x)
    cshape = (shape[1],) + (1,) * (len(shape) - 2)
    scale, bias = (same_dtype(n, x, n.t(i))[1] for i in (1, 2))
    scale = ops.reshape(scale, cshape) if isinstance(scale, Tensor) else np.reshape(scale, cshape)
    bias = ops.reshape(bias, cshape) if isinstance(bias, Tensor) else np.reshape(bias, cshape)
    return ops.add(ops.multiply(y, scale), bias)


@register("LayerNormalization", opsets=(17, OPSETS[1]))
def _layer_norm(n: NodeInputs) -> List[object]:
    """``Y`` with ``ops.layer_norm``; the optional ``Mean`` and ``InvStdDev`` outputs (shape
    ``x.shape[:axis] + (1,) * (rank - axis)``) computed beside it when requested."""
    x = n.t(0)
    rank = len(shape_of(x))
    axis = int(n.attr("axis", -1)) % rank
    axes = tuple(range(axis - rank, 0))
    gamma = ops.broadcast_to(n.t(1), shape_of(x)[axis:]) if shape_of(n.t(1)) != shape_of(x)[axis:] else n.t(1)
    beta = n.t(2) if n.has(2) else None
    if beta is not None and shape_of(beta) != shape_of(x)[axis:]:
        beta = ops.broadcast_to(beta, shape_of(x)[axis:])
    eps = float(n.attr("epsilon", 1e-5))
    y = ops.layer_norm(x, gamma, beta, axis=axes, eps=eps)
    if len(n.node.output) == 1 or not any(n.node.output[1:]):
        return [y]
    mean, _, inv = _standardize(x, axes, eps)
    return [y, mean, inv]


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


@register("InstanceNormalization")
def _instance_norm(n: NodeInputs) -> List[object]:
    """``y = scale * (x - mean) / sqrt(var + epsilon) + B`` over the spatial axes of each
    ``(n, c)``; scale and B of shape (C,)."""
    x = n.t(0)
    shape = shape_of(x)
    if len(shape) < 3:
        raise n.fail(f"input 'input' has shape {shape}; expected (N, C, D1, ...)")
    _, d, inv = _standardize(x, tuple(range(2, len(shape))), float(n.attr("epsilon", 1e-5)))
    return [_channel_affine(n, x, ops.multiply(d, inv))]


@register("MeanVarianceNormalization", opsets=(9, OPSETS[1]))
def _mean_variance_norm(n: NodeInputs) -> List[object]:
    """``(x - mean) / (sqrt(var) + 1e-9)`` over ``axes`` (default ``[0, 2, 3]``; biased
    variance), the spec's function body (its ``1e-9`` added to the deviation); the variance is
    the mean of the squared deviation (two passes) rather than the body's ``E[x^2] - E[x]^2``."""
    x = n.t(0)
    rank = len(shape_of(x))
    axes = [int(a) for a in n.attr("axes", [0, 2, 3])]
    if any(not -rank <= a < rank for a in axes):
        raise n.fail(f"attribute 'axes' is {axes}; expected axes in [{-rank}, {rank})")
    axes = tuple(sorted({a % rank for a in axes}))
    d = ops.subtract(x, ops.mean(x, axis=axes, keepdims=True))
    std = ops.sqrt(ops.mean(ops.multiply(d, d), axis=axes, keepdims=True))
    return [ops.divide(d, ops.add(std, np.asarray(1e-9, np_dtype(x))))]


@register("RMSNormalization", opsets=(23, OPSETS[1]))
def _rms_norm(n: NodeInputs) -> List[object]:
    """``y = x / sqrt(mean(x^2 over axes axis..-1) + epsilon) * scale`` (scale broadcast onto
    those axes)."""
    x = n.t(0)
    rank = len(shape_of(x))
    axis = int(n.attr("axis", -1)) % rank
    axes = tuple(range(axis, rank))
    ms = ops.mean(ops.multiply(x, x), axis=axes, keepdims=True)
    y = ops.multiply(x, ops.rsqrt(ops.add(ms, float(n.attr("epsilon", 1e-5)))))
    return [ops.multiply(y, same_dtype(n, y, n.t(1))[1])]


@register("GroupNormalization", opsets=(21, OPSETS[1]))
def _group_norm(n: NodeInputs) -> List[object]:
    """``(N, C, ...)`` -> ``(N, G, C/G * ...)``, normalize the last axis, back, then per-channel
    ``scale`` and ``bias`` (shape (C,), opset 21)."""
    x = n.t(0)
    shape = shape_of(x)
    groups = int(n.attr("num_groups"))
    if len(shape) < 3 or shape[1] % groups:
        raise n.fail(f"input 'X' has shape {shape} and num_groups={groups}; expected (N, C, ...) "
                     f"with C divisible by num_groups")
    g = ops.reshape(x, (shape[0], groups, -1))
    _, d, inv = _standardize(g, -1, float(n.attr("epsilon", 1e-5)))
    return [_channel_affine(n, x, ops.reshape(ops.multiply(d, inv), shape))]


@register("Resize", opsets=(11, OPSETS[1]))
def _resize(n: NodeInputs) -> List[object]:
    """ONNX ``Resize`` (opset 11+: X, roi, scales, sizes; empty inputs mean absent) with static
    roi/scales/sizes, as :func:`mlc_mlir.ops.resize`."""
    def optional(i: int, arg: str):
        if not n.has(i):
            return None
        v = np.asarray(n.np(i, arg))
        return None if v.size == 0 else v.tolist()

    roi, scales, sizes = optional(1, "roi"), optional(2, "scales"), optional(3, "sizes")
    return [ops.resize(n.t(0), sizes=sizes, scales=scales, mode=n.str_attr("mode", "nearest"),
                       coordinate_transformation_mode=n.str_attr("coordinate_transformation_mode",
                                                                 "half_pixel"),
                       nearest_mode=n.str_attr("nearest_mode", "round_prefer_floor"),
                       cubic_coeff_a=n.attr("cubic_coeff_a", -0.75),
                       exclude_outside=bool(n.attr("exclude_outside", 0)),
                       extrapolation_value=n.attr("extrapolation_value", 0.0),
                       antialias=bool(n.attr("antialias", 0)), roi=roi, axes=n.attr("axes"),
                       keep_aspect_ratio_policy=n.str_attr("keep_aspect_ratio_policy", "stretch"))]


@register("Upsample", opsets=(7, 9))
def _upsample(n: NodeInputs) -> List[object]:
    """``Upsample`` (opset 7: ``scales`` attribute; 9: input; deprecated at 10) as
    :func:`mlc_mlir.ops.resize` with ``asymmetric`` coordinates (``x_in = x_out / scale``) and
    ``floor`` nearest rounding, the legacy op's sampling (onnxruntime's ``UpsampleBase``)."""
    scales = n.attr("scales") if n.opset < 9 else np.asarray(n.np(1, "scales")).tolist()
    mode = n.str_attr("mode", "nearest")
    if mode not in ("nearest", "linear", "bilinear"):
        raise n.fail(f"attribute 'mode' is {mode!r}; expected nearest, linear or bilinear")
    if scales is None or any(float(v) < 1 for v in scales):
        raise n.fail(f"scales {scales}; expected one scale >= 1 per axis")
    return [ops.resize(n.t(0), scales=[float(v) for v in scales], mode="nearest" if mode == "nearest" else "linear",
                       coordinate_transformation_mode="asymmetric", nearest_mode="floor")]


@register("TopK", opsets=(10, OPSETS[1]))
def _topk(n: NodeInputs) -> List[object]:
    """ONNX ``TopK`` (opset 10+: K a static input), as :func:`mlc_mlir.ops.topk`."""
    k = np.asarray(n.np(1, "K")).reshape(-1)
    if k.size != 1:
        raise n.fail(f"input 1 ('K') has shape {k.shape}; expected one value")
    values, indices = ops.topk(n.t(0), int(k[0]), axis=int(n.attr("axis", -1)),
                               largest=bool(n.attr("largest", 1)), sorted=bool(n.attr("sorted", 1)))
    return [values, indices]


@register("Det", opsets=(11, OPSETS[1]))
def _det(n: NodeInputs) -> List[object]:
    """``ops.det`` (Gaussian elimination with partial pivoting) over the last two axes."""
    return [ops.det(n.t(0))]
