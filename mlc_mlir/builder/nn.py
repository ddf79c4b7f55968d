"""Neural-network ops (TOPI's ``nn`` category): matmul, batch_matmul, dense, conv2d, pooling
(normalization and softmax are in :mod:`.normalization`), emitted as linalg named ops where upstream has one
(``linalg.matmul``, ``linalg.batch_matmul``, ``linalg.conv_2d_nchw_fchw``, ``linalg.pooling_*``)
and as ``linalg.generic`` otherwise.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from .._mlir import ir, linalg_d, tensor_d
from ..errors import BuildError, format_shape
from ..ir import dtypes
from . import elementwise
from . import linalg_emit as emit
from .reduction import _lowest, mean
from .shape import pad_value, reshape
from .tensor import Tensor


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


def _operands(op: str, a, b, a_layout: str, b_layout: str):
    """``(fn, dtype, a, b)`` of a matmul-like op: both operands as Tensors of their common dtype,
    each of the rank of its layout (``"M, K"``: rank 2). Raises BuildError otherwise."""
    fn = emit.function_of(op, a, b)
    dtype = emit.common_dtype(op, a, b)
    a = emit.as_tensor(op, "a", fn, a, dtype)
    b = emit.as_tensor(op, "b", fn, b, dtype)
    _check_rank(op, "a", a, a_layout.count(",") + 1, a_layout)
    _check_rank(op, "b", b, b_layout.count(",") + 1, b_layout)
    return fn, dtype, a, b


def _contract(linalg_op, op: str, fn, a: Tensor, b: Tensor, out_shape, dtype: str,
              name: Optional[str]) -> Tensor:
    """``linalg_op`` (e.g. ``linalg_d.matmul``) of a and b into a zero ``linalg.fill`` of
    ``out_shape`` (``<name>.init``), named ``name``."""
    nm = emit.op_name(fn, op, name)
    init = emit.filled(out_shape, dtype, _zero(dtype), f"{nm}.init")
    r = linalg_op(a.value, b.value, outs=[init])
    emit.set_name(r.owner, nm)
    return Tensor(r, fn)


def matmul(a, b, name: Optional[str] = None) -> Tensor:
    """``a @ b`` for 2-D operands: ``linalg.matmul`` accumulating into a zero-filled init.

    a: (M, K), b: (K, N), same dtype (float* or int*); returns (M, N).

    Raises
    ------
    BuildError
        On ranks other than 2, mismatched inner dimensions or dtypes.
    """
    fn, dtype, a, b = _operands("matmul", a, b, "M, K", "K, N")
    if a.shape[1] != b.shape[0]:
        raise BuildError(f"matmul: argument 'b' has shape {format_shape(b.shape)}; expected "
                         f"({a.shape[1]}, N) to match a's inner dimension {a.shape[1]}")
    return _contract(linalg_d.matmul, "matmul", fn, a, b, (a.shape[0], b.shape[1]), dtype, name)


def batch_matmul(a, b, name: Optional[str] = None) -> Tensor:
    """Batched ``a @ b``: ``linalg.batch_matmul``. a: (B, M, K), b: (B, K, N) -> (B, M, N).

    Raises
    ------
    BuildError
        On ranks other than 3, or mismatched batch/inner dimensions or dtypes.
    """
    fn, dtype, a, b = _operands("batch_matmul", a, b, "B, M, K", "B, K, N")
    if a.shape[0] != b.shape[0] or a.shape[2] != b.shape[1]:
        raise BuildError(f"batch_matmul: argument 'b' has shape {format_shape(b.shape)}; expected "
                         f"({a.shape[0]}, {a.shape[2]}, N) to match a {format_shape(a.shape)}")
    return _contract(linalg_d.batch_matmul, "batch_matmul", fn, a, b, (a.shape[0], a.shape[1], b.shape[2]),
                     dtype, name)


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
    x = emit.tensor_arg("dense", "x", x)
    # a numpy weight is only checked here: it is stored once, transposed, below
    w = weight if isinstance(weight, np.ndarray) else emit.as_tensor("dense", "weight", fn, weight, x.dtype)
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
        wt = emit.constant(fn, np.ascontiguousarray(emit.converted("dense", "weight", weight, x.dtype).T),
                           name=f"{nm}.weight_t")
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


def _check_x(op: str, x, rank: Optional[int], layout: str, float_only: bool) -> Tensor:
    """The data argument ``x``: a Tensor of ``rank`` (if given) and a float (or, unless
    ``float_only``, int) dtype."""
    x = emit.tensor_arg(op, "x", x)
    if rank is not None:
        _check_rank(op, "x", x, rank, layout)
    if float_only and not dtypes.is_float(x.dtype):
        raise BuildError(f"{op}: argument 'x' has dtype {x.dtype}; expected one of "
                         f"{sorted(dtypes.FLOAT_DTYPES)} (use ops.cast)")
    if x.dtype == "bool":
        raise BuildError(f"{op}: argument 'x' has dtype bool; expected a float or int dtype")
    return x


def _padding4(op: str, padding) -> tuple:
    """(top, left, bottom, right) from an int, (ph, pw) or (top, left, bottom, right)."""
    expected = "expected an int, (ph, pw) or (top, left, bottom, right), each >= 0"
    try:
        p = emit.int_tuple(op, "padding", padding, 4 if isinstance(padding, (int, np.integer)) else None)
    except BuildError:
        raise BuildError(f"{op}: argument 'padding' is {padding!r}; {expected}") from None
    if len(p) not in (2, 4) or min(p) < 0:
        raise BuildError(f"{op}: argument 'padding' is {padding!r}; {expected}")
    return p if len(p) == 4 else (p[0], p[1], p[0], p[1])


def _window_out(op: str, size: int, k: int, stride: int, dil: int, axis: str) -> int:
    span = dil * (k - 1) + 1
    if span > size:
        raise BuildError(f"{op}: the {axis} window spans {span} (kernel {k}, dilation {dil}); expected at "
                         f"most the padded input {axis} {size}")
    return (size - span) // stride + 1


def _pad_nchw(x: Tensor, p: tuple, value, name: str) -> ir.Value:
    if not any(p):
        return x.value
    return pad_value(x.value, [0, 0, p[0], p[1]], [0, 0, p[2], p[3]], value, x.dtype, name)


def conv2d(x, weight, bias=None, strides=(1, 1), padding=(0, 0), dilation=(1, 1), groups: int = 1,
           name: Optional[str] = None) -> Tensor:
    """2-D convolution, NCHW input and FCHW weight (TOPI ``nn.conv2d``, PyTorch ``Conv2d``).

    Emits ``tensor.pad`` (``<name>.pad``, only with padding), a zero ``linalg.fill``
    (``<name>.init``) and ``linalg.conv_2d_nchw_fchw`` (``name``) for ``groups=1``;
    for ``groups>1`` the input and weight are split by ``tensor.expand_shape``
    (``<name>.expand_x``, ``<name>.expand_w``) into ``linalg.conv_2d_ngchw_gfchw`` and the result
    is merged by ``tensor.collapse_shape`` (``<name>.collapse``). A bias is added by a
    broadcasting ``linalg.generic`` (``<name>.bias_add``).

    Parameters
    ----------
    x : Tensor (N, C, H, W)
        dtype in {float16, bfloat16, float32, float64, int8, int16, int32, int64}.
    weight : Tensor or numpy.ndarray (F, C/groups, KH, KW)
        x's dtype (a numpy array is converted and becomes the constant ``<name>.weight``).
    bias : Tensor or numpy.ndarray (F,), optional
    strides, dilation : int or (int, int)
        >= 1.
    padding : int, (ph, pw) or (top, left, bottom, right)
        Zero padding, >= 0.
    groups : int
        Divides C and F; ``groups == C`` is a depthwise convolution.

    Returns
    -------
    Tensor (N, F, OH, OW)
        ``OH = (H + top + bottom - DH * (KH - 1) - 1) // SH + 1`` (same for OW); x's dtype,
        which is also the accumulator's (int8 sums wrap around).

    Raises
    ------
    BuildError
        ``conv2d: argument 'weight' has shape (8, 4, 3, 3); expected (F, 3, KH, KW) for 3 input
        channels and groups=1``; also for a wrong rank, dtype, bias shape, groups that do not
        divide C and F, strides/dilation < 1, negative padding or a window larger than the
        padded input.
    """
    op = "conv2d"
    fn = emit.function_of(op, x, weight, bias)
    x = _check_x(op, x, 4, "N, C, H, W", float_only=False)
    ws = emit.operand_shape(op, "weight", weight, x.dtype)
    if len(ws) != 4:
        raise BuildError(f"{op}: argument 'weight' has shape {format_shape(ws)}; expected rank 4 "
                         "(F, C/groups, KH, KW)")
    n, c, h, wd = x.shape
    f, cg, kh, kw = ws
    if not isinstance(groups, (int, np.integer)) or isinstance(groups, bool) or groups < 1:
        raise BuildError(f"{op}: argument 'groups' is {groups!r}; expected an int >= 1")
    groups = int(groups)
    if c % groups:
        raise BuildError(f"{op}: argument 'groups' is {groups}; expected a divisor of the {c} input channels "
                         f"of x {format_shape(x.shape)}")
    if cg != c // groups:
        raise BuildError(f"{op}: argument 'weight' has shape {format_shape(ws)}; expected "
                         f"(F, {c // groups}, KH, KW) for {c} input channels and groups={groups}")
    if f % groups:
        raise BuildError(f"{op}: argument 'weight' has shape {format_shape(ws)}; expected F a multiple of "
                         f"groups={groups}")
    if bias is not None:
        bs = emit.operand_shape(op, "bias", bias, x.dtype)
        if bs != (f,):
            raise BuildError(f"{op}: argument 'bias' has shape {format_shape(bs)}; expected ({f},) for "
                             f"{f} filters")
    sh, sw = emit.int_tuple(op, "strides", strides, 2, minimum=1)
    dh, dw = emit.int_tuple(op, "dilation", dilation, 2, minimum=1)
    p = _padding4(op, padding)
    oh = _window_out(op, h + p[0] + p[2], kh, sh, dh, "height")
    ow = _window_out(op, wd + p[1] + p[3], kw, sw, dw, "width")

    nm = emit.op_name(fn, op, name)
    w = emit.operand(op, "weight", fn, weight, x.dtype, f"{nm}.weight")
    xp = _pad_nchw(x, p, 0, f"{nm}.pad")
    st, dl = [sh, sw], [dh, dw]
    et = x.type.element_type
    if groups == 1:
        init = emit.filled((n, f, oh, ow), x.dtype, _zero(x.dtype), f"{nm}.init")
        r = linalg_d.conv_2d_nchw_fchw(xp, w.value, outs=[init], strides=st, dilations=dl)
        emit.set_name(r.owner, nm)
    else:
        g = groups
        hp, wp = h + p[0] + p[2], wd + p[1] + p[3]
        xg = tensor_d.ExpandShapeOp(ir.RankedTensorType.get([n, g, c // g, hp, wp], et), xp,
                                    [[0], [1, 2], [3], [4]], [], [n, g, c // g, hp, wp]).result
        emit.set_name(xg.owner, f"{nm}.expand_x")
        wg = tensor_d.ExpandShapeOp(ir.RankedTensorType.get([g, f // g, cg, kh, kw], et), w.value,
                                    [[0, 1], [2], [3], [4]], [], [g, f // g, cg, kh, kw]).result
        emit.set_name(wg.owner, f"{nm}.expand_w")
        init = emit.filled((n, g, f // g, oh, ow), x.dtype, _zero(x.dtype), f"{nm}.init")
        rg = linalg_d.conv_2d_ngchw_gfchw(xg, wg, outs=[init], strides=st, dilations=dl)
        emit.set_name(rg.owner, nm)
        r = tensor_d.CollapseShapeOp(ir.RankedTensorType.get([n, f, oh, ow], et), rg,
                                     [[0], [1, 2], [3], [4]]).result
        emit.set_name(r.owner, f"{nm}.collapse")
    y = Tensor(r, fn)
    if bias is not None:
        if isinstance(bias, np.ndarray):  # a constant bias is stored as (F, 1, 1)
            b = emit.operand(op, "bias", fn, bias.reshape(f, 1, 1), x.dtype, f"{nm}.bias")
        else:
            b = reshape(bias, (f, 1, 1), name=f"{nm}.bias_reshape")
        y = elementwise.add(y, b, name=f"{nm}.bias_add")
    return y


def _pool(op: str, kind: str, x, kernel_size, strides, padding, dilation, name):
    """Emit pad + fill + ``linalg.pooling_nchw_{max,sum}``; returns the pooled Tensor, the
    window geometry and the op's name."""
    emit.function_of(op, x)
    x = _check_x(op, x, 4, "N, C, H, W", float_only=kind == "sum")
    fn = x.fn
    kh, kw = emit.int_tuple(op, "kernel_size", kernel_size, 2, minimum=1)
    sh, sw = (kh, kw) if strides is None else emit.int_tuple(op, "strides", strides, 2, minimum=1)
    dh, dw = emit.int_tuple(op, "dilation", dilation, 2, minimum=1)
    p = _padding4(op, padding)
    n, c, h, w = x.shape
    oh = _window_out(op, h + p[0] + p[2], kh, sh, dh, "height")
    ow = _window_out(op, w + p[1] + p[3], kw, sw, dw, "width")
    nm = emit.op_name(fn, op, name)
    pad_val = _lowest(x.dtype) if kind == "max" else _zero(x.dtype)
    xp = _pad_nchw(x, p, pad_val, f"{nm}.pad")
    init = emit.filled((n, c, oh, ow), x.dtype, pad_val, f"{nm}.init")
    window = emit.empty((kh, kw), x.dtype)  # only its shape matters
    pool = linalg_d.pooling_nchw_max if kind == "max" else linalg_d.pooling_nchw_sum
    r = pool(xp, window, outs=[init], strides=[sh, sw], dilations=[dh, dw])
    emit.set_name(r.owner, nm if kind == "max" else f"{nm}.sum")
    return Tensor(r, fn), (kh, kw, sh, sw, p, oh, ow), nm


def max_pool2d(x, kernel_size, strides=None, padding=(0, 0), dilation=(1, 1),
               name: Optional[str] = None) -> Tensor:
    """2-D max pooling, NCHW (TOPI ``nn.pool2d`` with ``pool_type="max"``, PyTorch ``MaxPool2d``).

    Emits ``tensor.pad`` with the dtype's lowest value (-inf, or the int minimum;
    ``<name>.pad``), a ``linalg.fill`` of that value (``<name>.init``) and
    ``linalg.pooling_nchw_max`` (``name``).

    Parameters
    ----------
    x : Tensor (N, C, H, W)
        dtype in {float16, bfloat16, float32, float64, int8, int16, int32, int64}.
    kernel_size : int or (int, int)
    strides : int or (int, int), optional
        Defaults to ``kernel_size``.
    padding : int, (ph, pw) or (top, left, bottom, right)
    dilation : int or (int, int)

    Returns
    -------
    Tensor (N, C, OH, OW)
        ``OH = (H + top + bottom - DH * (KH - 1) - 1) // SH + 1`` (floor mode); x's dtype.

    Raises
    ------
    BuildError
        For a non-4-D or bool input, kernel/strides/dilation < 1, negative padding, or a window
        larger than the padded input.
    """
    return _pool("max_pool2d", "max", x, kernel_size, strides, padding, dilation, name)[0]


def avg_pool2d(x, kernel_size, strides=None, padding=(0, 0), count_include_pad: bool = True,
               name: Optional[str] = None) -> Tensor:
    """2-D average pooling, NCHW (TOPI ``nn.pool2d`` with ``pool_type="avg"``, PyTorch
    ``AvgPool2d``).

    Emits zero ``tensor.pad`` (``<name>.pad``), ``linalg.pooling_nchw_sum`` (``<name>.sum``)
    and a divide (``name``): by ``KH * KW`` when ``count_include_pad``, otherwise by the number
    of real (unpadded) elements of each window, a (OH, OW) constant computed with numpy at build
    time (``<name>.count``).

    Parameters
    ----------
    x : Tensor (N, C, H, W)
        dtype in {float16, bfloat16, float32, float64}.
    kernel_size : int or (int, int)
    strides : int or (int, int), optional
        Defaults to ``kernel_size``.
    padding : int, (ph, pw) or (top, left, bottom, right)
    count_include_pad : bool

    Returns
    -------
    Tensor (N, C, OH, OW)

    Raises
    ------
    BuildError
        For a non-float or non-4-D input, bad kernel/strides/padding, or (with
        ``count_include_pad=False``) a window made only of padding.
    """
    op = "avg_pool2d"
    s, (kh, kw, sh, sw, p, oh, ow), nm = _pool(op, "sum", x, kernel_size, strides, padding, (1, 1), name)
    if count_include_pad or not any(p):
        return elementwise.divide(s, float(kh * kw), name=nm)
    h, w = x.shape[2:]
    real = np.pad(np.ones((h, w)), ((p[0], p[2]), (p[1], p[3])))
    cnt = np.zeros((oh, ow))
    for i in range(kh):
        for j in range(kw):
            cnt += real[i:i + sh * (oh - 1) + 1:sh, j:j + sw * (ow - 1) + 1:sw]
    if cnt.min() == 0:
        raise BuildError(f"{op}: argument 'padding' is {padding!r}; some windows hold only padding (expected "
                         f"padding at most half the kernel {kh, kw})")
    count = emit.operand(op, "count", x.fn, cnt.astype(dtypes.to_numpy_dtype(x.dtype)), x.dtype, f"{nm}.count")
    return elementwise.divide(s, count, name=nm)


def global_avg_pool2d(x, name: Optional[str] = None) -> Tensor:
    """Mean over H and W keeping them (TOPI ``nn.global_pool`` with ``pool_type="avg"``).

    Emits the :func:`~mlc_mlir.builder.reduction.mean` pieces: a ``linalg.generic`` sum
    (``<name>.sum``), ``tensor.expand_shape`` (``<name>.sum.keepdims``) and a scale (``name``).

    Parameters
    ----------
    x : Tensor (N, C, H, W)
        dtype in {float16, bfloat16, float32, float64}.

    Returns
    -------
    Tensor (N, C, 1, 1)

    Raises
    ------
    BuildError
        For a non-4-D or non-float input.
    """
    op = "global_avg_pool2d"
    emit.function_of(op, x)
    x = _check_x(op, x, 4, "N, C, H, W", float_only=True)
    return mean(x, axis=(2, 3), keepdims=True, name=emit.op_name(x.fn, op, name))


Tensor.install_operators(matmul=matmul)
