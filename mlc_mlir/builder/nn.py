"""Neural-network ops (TOPI's ``nn`` category): matmul, batch_matmul, dense, conv2d, pooling,
normalization and softmax, emitted as linalg named ops where upstream has one
(``linalg.matmul``, ``linalg.batch_matmul``, ``linalg.conv_2d_nchw_fchw``, ``linalg.pooling_*``)
and as ``linalg.generic`` otherwise.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from .._mlir import ir, linalg_d
from ..errors import BuildError, format_shape
from ..ir import dtypes
from . import elementwise, emit
from .graph_builder import Tensor


def _check_rank(op: str, arg: str, t: Tensor, rank: int, layout: str) -> None:
    if t.ndim != rank:
        raise BuildError(f"{op}: argument '{arg}' has shape {format_shape(t.shape)}; expected rank "
                         f"{rank} ({layout})")


def _same_dtype(op: str, a: Tensor, b: Tensor, bname: str = "b", aname: str = "a") -> None:
    if a.dtype != b.dtype:
        raise BuildError(f"{op}: argument '{bname}' has dtype {b.dtype}; expected {a.dtype} like "
                         f"'{aname}' (use ops.cast)")


def _zero(dtype: str):
    return 0.0 if dtype.startswith(("float", "bfloat")) else 0


def matmul(a, b, name: Optional[str] = None) -> Tensor:
    """``a @ b`` for 2-D operands: ``linalg.matmul`` accumulating into a zero-filled init.

    a: (M, K), b: (K, N), same dtype (float* or int*); returns (M, N).

    Raises
    ------
    BuildError
        On ranks other than 2, mismatched inner dimensions or dtypes.
    """
    fn = emit.function_of("matmul", a, b)
    dtype = a.dtype if isinstance(a, Tensor) else b.dtype
    a = emit.as_tensor("matmul", "a", fn, a, dtype)
    b = emit.as_tensor("matmul", "b", fn, b, dtype)
    _check_rank("matmul", "a", a, 2, "M, K")
    _check_rank("matmul", "b", b, 2, "K, N")
    if a.shape[1] != b.shape[0]:
        raise BuildError(f"matmul: argument 'b' has shape {format_shape(b.shape)}; expected "
                         f"({a.shape[1]}, N) to match a's inner dimension {a.shape[1]}")
    nm = emit.op_name(fn, "matmul", name)
    init = emit.filled((a.shape[0], b.shape[1]), dtype, _zero(dtype), f"{nm}.init")
    r = linalg_d.matmul(a.value, b.value, outs=[init])
    emit.set_name(r.owner, nm)
    return Tensor(r, fn)


def batch_matmul(a, b, name: Optional[str] = None) -> Tensor:
    """Batched ``a @ b``: ``linalg.batch_matmul``. a: (B, M, K), b: (B, K, N) -> (B, M, N).

    Raises
    ------
    BuildError
        On ranks other than 3, or mismatched batch/inner dimensions or dtypes.
    """
    fn = emit.function_of("batch_matmul", a, b)
    dtype = a.dtype if isinstance(a, Tensor) else b.dtype
    a = emit.as_tensor("batch_matmul", "a", fn, a, dtype)
    b = emit.as_tensor("batch_matmul", "b", fn, b, dtype)
    _check_rank("batch_matmul", "a", a, 3, "B, M, K")
    _check_rank("batch_matmul", "b", b, 3, "B, K, N")
    if a.shape[0] != b.shape[0] or a.shape[2] != b.shape[1]:
        raise BuildError(f"batch_matmul: argument 'b' has shape {format_shape(b.shape)}; expected "
                         f"({a.shape[0]}, {a.shape[2]}, N) to match a {format_shape(a.shape)}")
    nm = emit.op_name(fn, "batch_matmul", name)
    init = emit.filled((a.shape[0], a.shape[1], b.shape[2]), dtype, _zero(dtype), f"{nm}.init")
    r = linalg_d.batch_matmul(a.value, b.value, outs=[init])
    emit.set_name(r.owner, nm)
    return Tensor(r, fn)


def dense(x, weight, bias=None, name: Optional[str] = None) -> Tensor:
    """Fully connected layer ``x @ weight.T + bias`` (TVM ``nn.dense``, PyTorch ``Linear``).

    x: (M, K); weight: (N, K); bias: (N,) or None; same dtype. Emits a ``linalg.matmul`` named
    ``name``: a numpy ``weight`` becomes the constant ``weight.T`` (K, N) (the layout transform
    is done at build time); a Tensor ``weight`` is read through transposed-B indexing maps (no
    transpose is materialized). The bias add is a broadcasting ``linalg.generic`` named
    ``<name>.bias_add``.

    Raises
    ------
    BuildError
        On rank or dimension mismatches: ``dense: argument 'weight' has shape (10, 65); expected
        (N, 64) to match x's last dimension 64``.
    """
    fn = emit.function_of("dense", x, weight, bias)
    if not isinstance(x, Tensor):
        raise BuildError(f"dense: argument 'x' is {type(x).__name__}; expected a Tensor")
    w = emit.as_tensor("dense", "weight", fn, weight, x.dtype)
    _check_rank("dense", "x", x, 2, "M, K")
    _check_rank("dense", "weight", w, 2, "N, K")
    if w.shape[1] != x.shape[1]:
        raise BuildError(f"dense: argument 'weight' has shape {format_shape(w.shape)}; expected "
                         f"(N, {x.shape[1]}) to match x's last dimension {x.shape[1]}")
    n = w.shape[0]
    b = None
    if bias is not None:
        b = emit.as_tensor("dense", "bias", fn, bias, x.dtype)
        if b.shape != (n,):
            raise BuildError(f"dense: argument 'bias' has shape {format_shape(b.shape)}; expected ({n},)")
    nm = emit.op_name(fn, "dense", name)
    init = emit.filled((x.shape[0], n), x.dtype, _zero(x.dtype), f"{nm}.init")
    if isinstance(weight, np.ndarray):
        # a constant weight is stored transposed (K, N): the layout transform happens at
        # build time and the op is a plain linalg.matmul (contiguous B rows for packing)
        wt = emit.constant(fn, np.ascontiguousarray(weight.T), name=f"{nm}.weight_t")
        r = linalg_d.matmul(x.value, wt.value, outs=[init])
    else:
        d0, d1, d2 = (ir.AffineDimExpr.get(i) for i in range(3))
        maps = [ir.AffineMap.get(3, 0, [d0, d2]), ir.AffineMap.get(3, 0, [d1, d2]),
                ir.AffineMap.get(3, 0, [d0, d1])]
        r = linalg_d.matmul(x.value, w.value, outs=[init], indexing_maps=maps)
    emit.set_name(r.owner, nm)
    y = Tensor(r, fn)
    if b is not None:
        y = elementwise.add(y, b, name=f"{nm}.bias_add")
    return y


def _pair(op: str, arg: str, v, n: int = 2) -> tuple:
    if isinstance(v, (int, np.integer)):
        return (int(v),) * n
    v = tuple(int(a) for a in v)
    if len(v) != n:
        raise BuildError(f"{op}: argument '{arg}' must be an int or {n} ints, got {v}")
    return v


def _padding4(op: str, padding) -> tuple:
    """(top, left, bottom, right) from an int, (ph, pw) or (top, left, bottom, right)."""
    if isinstance(padding, (int, np.integer)):
        p = (int(padding),) * 4
    else:
        p = tuple(int(a) for a in padding)
        if len(p) == 2:
            p = (p[0], p[1], p[0], p[1])
    if len(p) != 4 or min(p) < 0:
        raise BuildError(f"{op}: argument 'padding' must be an int, (ph, pw) or (top, left, bottom, right) "
                         f">= 0, got {padding!r}")
    return p


def _window_out(op, size, k, stride, dil, axis):
    out = (size - dil * (k - 1) - 1) // stride + 1
    if out < 1:
        raise BuildError(f"{op}: window {k} (dilation {dil}) does not fit the padded {axis} extent {size}")
    return out


def _pad_nchw(x: Tensor, p: tuple, value, name: str) -> ir.Value:
    from .shape import pad_value

    if not any(p):
        return x.value
    return pad_value(x.value, [0, 0, p[0], p[1]], [0, 0, p[2], p[3]], value, x.dtype, name)


def conv2d(x, weight, bias=None, strides=(1, 1), padding=(0, 0), dilation=(1, 1), groups: int = 1,
           name: Optional[str] = None) -> Tensor:
    """2-D convolution, NCHW input and FCHW weight (TVM ``nn.conv2d``, PyTorch ``Conv2d``).

    x: (N, C, H, W); weight: (F, C/groups, KH, KW); bias: (F,) or None; same float dtype.
    Emits ``tensor.pad`` (if padding) and ``linalg.conv_2d_nchw_fchw`` (groups=1) or
    ``linalg.conv_2d_ngchw_gfchw`` between ``tensor.expand_shape``/``collapse_shape`` (groups>1),
    then a bias add named ``<name>.bias_add``. Returns (N, F, OH, OW).

    Raises
    ------
    BuildError
        ``conv2d: argument 'weight' has shape (8, 4, 3, 3); expected (F, 3, KH, KW) for 3 input
        channels and groups=1``, and on strides/padding/dilation/groups that do not fit.
    """
    fn = emit.function_of("conv2d", x, weight, bias)
    if not isinstance(x, Tensor):
        raise BuildError(f"conv2d: argument 'x' is {type(x).__name__}; expected a Tensor")
    _check_rank("conv2d", "x", x, 4, "N, C, H, W")
    w = emit.as_tensor("conv2d", "weight", fn, weight, x.dtype)
    _check_rank("conv2d", "weight", w, 4, "F, C/groups, KH, KW")
    n, c, h, wd = x.shape
    f, cg, kh, kw = w.shape
    if not isinstance(groups, int) or groups < 1 or c % groups or f % groups:
        raise BuildError(f"conv2d: groups={groups} must divide the input channels {c} and filters {f}")
    if cg != c // groups:
        raise BuildError(f"conv2d: argument 'weight' has shape {format_shape(w.shape)}; expected "
                         f"(F, {c // groups}, KH, KW) for {c} input channels and groups={groups}")
    sh, sw = _pair("conv2d", "strides", strides)
    dh, dw = _pair("conv2d", "dilation", dilation)
    if min(sh, sw, dh, dw) < 1:
        raise BuildError(f"conv2d: strides {strides} and dilation {dilation} must be >= 1")
    p = _padding4("conv2d", padding)
    oh = _window_out("conv2d", h + p[0] + p[2], kh, sh, dh, "height")
    ow = _window_out("conv2d", wd + p[1] + p[3], kw, sw, dw, "width")
    nm = emit.op_name(fn, "conv2d", name)
    xp = _pad_nchw(x, p, 0, f"{nm}.pad")
    st, dl = [sh, sw], [dh, dw]
    et = x.type.element_type
    if groups == 1:
        init = emit.filled((n, f, oh, ow), x.dtype, _zero(x.dtype), f"{nm}.init")
        r = linalg_d.conv_2d_nchw_fchw(xp, w.value, outs=[init], strides=st, dilations=dl)
        emit.set_name(r.owner, nm)
    else:
        from .._mlir import tensor_d

        g = groups
        hp, wp = ir.RankedTensorType(xp.type).shape[2:]
        xg = tensor_d.ExpandShapeOp(ir.RankedTensorType.get([n, g, c // g, hp, wp], et), xp,
                                    [[0], [1, 2], [3], [4]], [], [n, g, c // g, hp, wp]).result
        wg = tensor_d.ExpandShapeOp(ir.RankedTensorType.get([g, f // g, cg, kh, kw], et), w.value,
                                    [[0, 1], [2], [3], [4]], [], [g, f // g, cg, kh, kw]).result
        init = emit.filled((n, g, f // g, oh, ow), x.dtype, _zero(x.dtype), f"{nm}.init")
        rg = linalg_d.conv_2d_ngchw_gfchw(xg, wg, outs=[init], strides=st, dilations=dl)
        emit.set_name(rg.owner, nm)
        r = tensor_d.CollapseShapeOp(ir.RankedTensorType.get([n, f, oh, ow], et), rg,
                                     [[0], [1, 2], [3], [4]]).result
        emit.set_name(r.owner, f"{nm}.collapse")
    y = Tensor(r, fn)
    if bias is not None:
        b = emit.as_tensor("conv2d", "bias", fn, bias, x.dtype)
        if b.shape != (f,):
            raise BuildError(f"conv2d: argument 'bias' has shape {format_shape(b.shape)}; expected ({f},)")
        from .shape import reshape

        y = elementwise.add(y, reshape(b, (f, 1, 1), name=f"{nm}.bias_reshape"), name=f"{nm}.bias_add")
    return y


def _pool(op: str, kind: str, x, kernel_size, strides, padding, dilation, name):
    fn = emit.function_of(op, x)
    if not isinstance(x, Tensor):
        raise BuildError(f"{op}: argument 'x' is {type(x).__name__}; expected a Tensor")
    _check_rank(op, "x", x, 4, "N, C, H, W")
    kh, kw = _pair(op, "kernel_size", kernel_size)
    sh, sw = _pair(op, "strides", kernel_size if strides is None else strides)
    dh, dw = _pair(op, "dilation", dilation)
    if min(kh, kw, sh, sw, dh, dw) < 1:
        raise BuildError(f"{op}: kernel_size, strides and dilation must be >= 1")
    p = _padding4(op, padding)
    n, c, h, w = x.shape
    oh = _window_out(op, h + p[0] + p[2], kh, sh, dh, "height")
    ow = _window_out(op, w + p[1] + p[3], kw, sw, dw, "width")
    nm = emit.op_name(fn, op, name)
    from .reduction import _lowest

    pad_val = _lowest(x.dtype) if kind == "max" else 0
    xp = _pad_nchw(x, p, pad_val, f"{nm}.pad")
    init = emit.filled((n, c, oh, ow), x.dtype, pad_val if kind == "max" else _zero(x.dtype), f"{nm}.init")
    window = emit.empty((kh, kw), x.dtype)
    st, dl = [sh, sw], [dh, dw]
    pool = linalg_d.pooling_nchw_max if kind == "max" else linalg_d.pooling_nchw_sum
    r = pool(xp, window, outs=[init], strides=st, dilations=dl)
    emit.set_name(r.owner, nm if kind == "max" else f"{nm}.sum")
    return Tensor(r, fn), (kh, kw, sh, sw, dh, dw, p, oh, ow), nm


def max_pool2d(x, kernel_size, strides=None, padding=(0, 0), dilation=(1, 1),
               name: Optional[str] = None) -> Tensor:
    """2-D max pooling, NCHW (``linalg.pooling_nchw_max``); ``strides`` defaults to
    ``kernel_size``; padding uses the dtype's lowest value. x: (N, C, H, W) -> (N, C, OH, OW).

    Raises
    ------
    BuildError
        On a non-4-D input or a window that does not fit.
    """
    return _pool("max_pool2d", "max", x, kernel_size, strides, padding, dilation, name)[0]


def avg_pool2d(x, kernel_size, strides=None, padding=(0, 0), count_include_pad: bool = True,
               name: Optional[str] = None) -> Tensor:
    """2-D average pooling, NCHW: ``linalg.pooling_nchw_sum`` then a divide. With
    ``count_include_pad=False`` the divisor counts only real elements (computed with numpy at
    build time, as PyTorch does). x: (N, C, H, W) float -> (N, C, OH, OW).

    Raises
    ------
    BuildError
        On a non-float or non-4-D input, or a window that does not fit.
    """
    if isinstance(x, Tensor) and not dtypes.is_float(x.dtype):
        raise BuildError(f"avg_pool2d: argument 'x' has dtype {x.dtype}; expected a float dtype")
    s, (kh, kw, sh, sw, dh, dw, p, oh, ow), nm = _pool("avg_pool2d", "sum", x, kernel_size, strides,
                                                       padding, (1, 1), name)
    if count_include_pad or not any(p):
        return elementwise.multiply(s, 1.0 / (kh * kw), name=nm)
    h, w = x.shape[2:]
    ones = np.pad(np.ones((h, w)), ((p[0], p[2]), (p[1], p[3])))
    cnt = np.zeros((oh, ow))
    for i in range(kh):
        for j in range(kw):
            cnt += ones[i:i + sh * (oh - 1) + 1:sh, j:j + sw * (ow - 1) + 1:sw]
    return elementwise.multiply(s, (1.0 / cnt).astype(dtypes.to_numpy_dtype(x.dtype)), name=nm)


def global_avg_pool2d(x, name: Optional[str] = None) -> Tensor:
    """Mean over H and W keeping them: (N, C, H, W) -> (N, C, 1, 1) (TVM ``global_avg_pool2d``)."""
    from .reduction import mean

    if not isinstance(x, Tensor):
        raise BuildError(f"global_avg_pool2d: argument 'x' is {type(x).__name__}; expected a Tensor")
    _check_rank("global_avg_pool2d", "x", x, 4, "N, C, H, W")
    return mean(x, axis=(2, 3), keepdims=True, name=name or "global_avg_pool2d")


def batch_norm(x, gamma, beta, moving_mean, moving_var, eps: float = 1e-5, axis: int = 1,
               name: Optional[str] = None) -> Tensor:
    """Inference batch normalization: ``(x - mean) / sqrt(var + eps) * gamma + beta`` along
    ``axis`` (TVM ``nn.batch_norm`` at inference). One ``linalg.generic`` over x with the four
    (C,) vectors broadcast. x: float, any rank; parameters: (C,) with C = x.shape[axis].

    Raises
    ------
    BuildError
        If a parameter's shape is not (C,) or dtypes differ.
    """
    from .._mlir import arith_d, math_d

    fn = emit.function_of("batch_norm", x, gamma, beta, moving_mean, moving_var)
    if not isinstance(x, Tensor) or not dtypes.is_float(x.dtype):
        raise BuildError("batch_norm: argument 'x' must be a float Tensor")
    ax = emit.normalize_axis("batch_norm", axis, x.ndim)
    c = x.shape[ax]
    params = []
    for arg, v in (("gamma", gamma), ("beta", beta), ("moving_mean", moving_mean), ("moving_var", moving_var)):
        t = emit.as_tensor("batch_norm", arg, fn, v, x.dtype)
        if t.shape != (c,):
            raise BuildError(f"batch_norm: argument '{arg}' has shape {format_shape(t.shape)}; expected ({c},) "
                             f"for axis {axis} of x {format_shape(x.shape)}")
        params.append(t)
    nm = emit.op_name(fn, "batch_norm", name)
    rank = x.ndim
    vec_map = ir.AffineMap.get(rank, 0, [ir.AffineDimExpr.get(ax)])
    init = emit.empty(x.shape, x.dtype)
    dt = x.dtype

    def body(v, g, b, m, var, _out):
        inv = math_d.rsqrt(arith_d.addf(var, emit.scalar(eps, dt)))
        return [arith_d.addf(arith_d.mulf(arith_d.mulf(arith_d.subf(v, m), inv), g), b)]

    res = emit.generic(nm, [x.value] + [t.value for t in params], [emit.identity_map(rank)] + [vec_map] * 4,
                       [init], [emit.identity_map(rank)], ["parallel"] * rank, body)
    return Tensor(res[0], fn)


def layer_norm(x, gamma, beta, axis=-1, eps: float = 1e-5, name: Optional[str] = None) -> Tensor:
    """Layer normalization over trailing ``axis`` (int or tuple of the last axes):
    ``(x - mean) / sqrt(var + eps) * gamma + beta`` (PyTorch ``LayerNorm``, biased variance).
    gamma, beta: shape ``x.shape[axes]``.

    Raises
    ------
    BuildError
        If the axes are not the trailing ones or gamma/beta shapes differ.
    """
    from . import reduction

    fn = emit.function_of("layer_norm", x, gamma, beta)
    if not isinstance(x, Tensor) or not dtypes.is_float(x.dtype):
        raise BuildError("layer_norm: argument 'x' must be a float Tensor")
    axes = reduction.normalize_axes("layer_norm", axis, x.ndim)
    if axes != tuple(range(x.ndim - len(axes), x.ndim)):
        raise BuildError(f"layer_norm: axis {axis} must be the trailing axes of x {format_shape(x.shape)}")
    nshape = tuple(x.shape[a] for a in axes)
    g = emit.as_tensor("layer_norm", "gamma", fn, gamma, x.dtype)
    b = emit.as_tensor("layer_norm", "beta", fn, beta, x.dtype)
    for arg, t in (("gamma", g), ("beta", b)):
        if t.shape != nshape:
            raise BuildError(f"layer_norm: argument '{arg}' has shape {format_shape(t.shape)}; expected "
                             f"{format_shape(nshape)}")
    nm = emit.op_name(fn, "layer_norm", name)
    mu = reduction.mean(x, axes, keepdims=True, name=f"{nm}.mean")
    centered = elementwise.subtract(x, mu, name=f"{nm}.center")
    var = reduction.mean(elementwise.multiply(centered, centered, name=f"{nm}.square"), axes, keepdims=True,
                         name=f"{nm}.var")
    inv = elementwise.rsqrt(elementwise.add(var, eps, name=f"{nm}.eps"), name=f"{nm}.rsqrt")
    return elementwise.add(elementwise.multiply(elementwise.multiply(centered, inv, name=f"{nm}.normalize"), g,
                                                name=f"{nm}.scale"), b, name=nm)


def softmax(x, axis: int = -1, name: Optional[str] = None) -> Tensor:
    """Numerically stable softmax along ``axis``: ``exp(x - max) / sum(exp(x - max))`` (max and
    sum are ``linalg.generic`` reductions). x: float Tensor.

    Raises
    ------
    BuildError
        For a non-float input or a bad axis.
    """
    from . import reduction

    fn = emit.function_of("softmax", x)
    if not isinstance(x, Tensor) or not dtypes.is_float(x.dtype):
        raise BuildError("softmax: argument 'x' must be a float Tensor")
    ax = emit.normalize_axis("softmax", axis, x.ndim)
    nm = emit.op_name(fn, "softmax", name)
    m = reduction.max(x, ax, keepdims=True, name=f"{nm}.max")
    e = elementwise.exp(elementwise.subtract(x, m, name=f"{nm}.shift"), name=f"{nm}.exp")
    s = reduction.sum(e, ax, keepdims=True, name=f"{nm}.sum")
    return elementwise.divide(e, s, name=nm)


def log_softmax(x, axis: int = -1, name: Optional[str] = None) -> Tensor:
    """``x - max - log(sum(exp(x - max)))`` along ``axis`` (stable log-softmax); float Tensor."""
    from . import reduction

    fn = emit.function_of("log_softmax", x)
    if not isinstance(x, Tensor) or not dtypes.is_float(x.dtype):
        raise BuildError("log_softmax: argument 'x' must be a float Tensor")
    ax = emit.normalize_axis("log_softmax", axis, x.ndim)
    nm = emit.op_name(fn, "log_softmax", name)
    m = reduction.max(x, ax, keepdims=True, name=f"{nm}.max")
    shifted = elementwise.subtract(x, m, name=f"{nm}.shift")
    lse = elementwise.log(reduction.sum(elementwise.exp(shifted, name=f"{nm}.exp"), ax, keepdims=True,
                                        name=f"{nm}.sum"), name=f"{nm}.log")
    return elementwise.subtract(shifted, lse, name=nm)
