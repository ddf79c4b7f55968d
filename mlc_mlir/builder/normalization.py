"""Normalization ops (TOPI's ``nn`` category, the part that normalizes): batch_norm,
layer_norm, softmax, log_softmax, each composed of ``linalg.generic`` reductions and
elementwise generics (see each op for the ``mlc.name`` of every emitted op).
"""

from __future__ import annotations

from typing import Optional

from .._mlir import arith_d, ir, math_d
from ..errors import BuildError, format_shape
from . import elementwise, reduction
from . import linalg_emit as emit
from .nn import _check_x
from .tensor import Tensor


def batch_norm(x, gamma, beta, moving_mean, moving_var, eps: float = 1e-5, axis: int = 1,
               name: Optional[str] = None) -> Tensor:
    """Inference batch normalization along ``axis`` (TOPI/Relay ``nn.batch_norm`` at inference,
    PyTorch ``BatchNorm2d.eval()``)::

        y = (x - moving_mean) * rsqrt(moving_var + eps) * gamma + beta

    computed as a per-channel scale and shift (the form ONNX Runtime and oneDNN fold into the
    preceding convolution)::

        scale = gamma * rsqrt(moving_var + eps)       # (C,), ``<name>.scale``
        shift = beta - moving_mean * scale            # (C,), ``<name>.shift``
        y = x * scale + shift                         # ``<name>``

    so the per-element work is one multiply-add; the ``rsqrt`` runs C times, not once per
    element (a ``vsqrtps`` + ``vdivps`` per vector of a ResNet's conv epilogue otherwise).
    The two (C,) ``linalg.generic`` ops are read by the main one through the map
    ``(d0, ..., dn) -> (d_axis)``; numpy vectors become constants ``<name>.gamma``, ...

    Parameters
    ----------
    x : Tensor, any rank >= 1
        dtype in {float16, bfloat16, float32, float64}.
    gamma, beta, moving_mean, moving_var : Tensor or numpy.ndarray (C,)
        ``C = x.shape[axis]``; x's dtype.
    eps : float
    axis : int
        The channel axis (1 for NCHW).

    Returns
    -------
    Tensor, x's shape and dtype.

    Raises
    ------
    BuildError
        For a non-float x, a bad axis, or a parameter whose shape is not (C,) or whose dtype
        differs.
    """
    op = "batch_norm"
    fn = emit.function_of(op, x, gamma, beta, moving_mean, moving_var)
    x = _check_x(op, x, None, "", float_only=True)
    ax = emit.normalize_axis(op, axis, x.ndim)
    c = x.shape[ax]
    args = (("gamma", gamma), ("beta", beta), ("moving_mean", moving_mean), ("moving_var", moving_var))
    for arg, v in args:
        s = emit.operand_shape(op, arg, v, x.dtype)
        if s != (c,):
            raise BuildError(f"{op}: argument '{arg}' has shape {format_shape(s)}; expected ({c},) for axis "
                             f"{axis} of x {format_shape(x.shape)}")
    nm = emit.op_name(fn, op, name)
    params = [emit.operand(op, arg, fn, v, x.dtype, f"{nm}.{arg}") for arg, v in args]
    rank, dt = x.ndim, x.dtype
    vec_map = ir.AffineMap.get(rank, 0, [ir.AffineDimExpr.get(ax)])

    g, b, m, var = (t.value for t in params)
    vec, vec_ids = emit.identity_map(1), ["parallel"]

    def scale_body(g, var, _out):
        return [arith_d.mulf(g, math_d.rsqrt(arith_d.addf(var, emit.scalar(eps, dt))))]

    def shift_body(b, m, s, _out):
        return [arith_d.subf(b, arith_d.mulf(m, s))]

    (scale,) = emit.generic(f"{nm}.scale", [g, var], [vec] * 2, [emit.empty((c,), dt)], [vec], vec_ids,
                            scale_body)
    (shift,) = emit.generic(f"{nm}.shift", [b, m, scale], [vec] * 3, [emit.empty((c,), dt)], [vec],
                            vec_ids, shift_body)

    def body(v, s, t, _out):
        return [arith_d.addf(arith_d.mulf(v, s), t)]

    res = emit.generic(nm, [x.value, scale, shift], [emit.identity_map(rank)] + [vec_map] * 2,
                       [emit.empty(x.shape, dt)], [emit.identity_map(rank)], ["parallel"] * rank, body)
    return Tensor(res[0], fn)


def layer_norm(x, gamma, beta, axis=-1, eps: float = 1e-5, name: Optional[str] = None) -> Tensor:
    """Layer normalization over the trailing ``axis`` (TOPI ``nn.layer_norm``, PyTorch
    ``LayerNorm``; biased variance)::

        y = (x - mean) * rsqrt(mean((x - mean)**2) + eps) * gamma + beta

    Emits ``linalg.generic`` reductions (``<name>.mean.sum``, ``<name>.var.sum``) and
    elementwise generics (``<name>.center``, ``<name>.square``, ``<name>.rsqrt``,
    ``<name>.normalize``, ``<name>.scale``); the last one (``+ beta``) is ``name``.

    Parameters
    ----------
    x : Tensor, rank >= 1
        dtype in {float16, bfloat16, float32, float64}.
    gamma, beta : Tensor or numpy.ndarray, or None
        Shape ``x.shape[axes]`` (the normalized shape); None skips the scale / shift.
    axis : int or tuple of int
        The last axes of x (e.g. ``-1`` or ``(-2, -1)``).
    eps : float

    Returns
    -------
    Tensor, x's shape and dtype.

    Raises
    ------
    BuildError
        For a non-float x, axes that are not the trailing ones, or gamma/beta of another shape
        or dtype.
    """
    op = "layer_norm"
    fn = emit.function_of(op, x, gamma, beta)
    x = _check_x(op, x, None, "", float_only=True)
    axes = reduction.normalize_axes(op, axis, x.ndim)
    if not axes or axes != tuple(range(x.ndim - len(axes), x.ndim)):
        raise BuildError(f"{op}: argument 'axis' is {axis!r}; expected the trailing axes of x "
                         f"{format_shape(x.shape)} (e.g. -1 or (-2, -1))")
    nshape = tuple(x.shape[a] for a in axes)
    for arg, v in (("gamma", gamma), ("beta", beta)):
        if v is not None and emit.operand_shape(op, arg, v, x.dtype) != nshape:
            raise BuildError(f"{op}: argument '{arg}' has shape {format_shape(emit.operand_shape(op, arg, v))}; "
                             f"expected {format_shape(nshape)}, the normalized shape of x {format_shape(x.shape)}")
    nm = emit.op_name(fn, op, name)
    g = None if gamma is None else emit.operand(op, "gamma", fn, gamma, x.dtype, f"{nm}.gamma")
    b = None if beta is None else emit.operand(op, "beta", fn, beta, x.dtype, f"{nm}.beta")
    mu = reduction.mean(x, axes, keepdims=True, name=f"{nm}.mean")
    centered = elementwise.subtract(x, mu, name=f"{nm}.center")
    var = reduction.mean(elementwise.multiply(centered, centered, name=f"{nm}.square"), axes, keepdims=True,
                         name=f"{nm}.var")
    inv = elementwise.rsqrt(elementwise.add(var, eps, name=f"{nm}.eps"), name=f"{nm}.rsqrt")
    last = "normalize" if g is None and b is None else ("scale" if b is None else "shift")
    y = elementwise.multiply(centered, inv, name=nm if last == "normalize" else f"{nm}.normalize")
    if g is not None:
        y = elementwise.multiply(y, g, name=nm if last == "scale" else f"{nm}.scale")
    if b is not None:
        y = elementwise.add(y, b, name=nm)
    return y


def _shifted_exp_sum(op: str, x, axis: int, name: Optional[str]):
    """The shared part of softmax and log_softmax: ``shifted = x - max(x)`` (``<name>.max``,
    ``<name>.shift``), ``e = exp(shifted)`` (``<name>.exp``) and ``s = sum(e)`` with keepdims
    (``<name>.sum``); returns ``(shifted, e, s, name)``."""
    emit.function_of(op, x)
    x = _check_x(op, x, None, "", float_only=True)
    ax = emit.normalize_axis(op, axis, x.ndim)
    nm = emit.op_name(x.fn, op, name)
    if x.shape[ax] == 0:  # an empty axis has no max; the result is empty like x (numpy, torch)
        shifted = x
    else:
        shifted = elementwise.subtract(x, reduction.max(x, ax, keepdims=True, name=f"{nm}.max"),
                                       name=f"{nm}.shift")
    e = elementwise.exp(shifted, name=f"{nm}.exp")
    return shifted, e, reduction.sum(e, ax, keepdims=True, name=f"{nm}.sum"), nm


def softmax(x, axis: int = -1, name: Optional[str] = None) -> Tensor:
    """Numerically stable softmax along ``axis`` (TOPI ``nn.softmax``)::

        y = exp(x - max(x)) / sum(exp(x - max(x)))

    Emits a ``linalg.generic`` max reduction (``<name>.max``), elementwise generics
    (``<name>.shift``, ``<name>.exp``), a sum reduction (``<name>.sum``), the keepdims
    ``tensor.expand_shape`` ops, and the divide (``name``).

    Parameters
    ----------
    x : Tensor, rank >= 1
        dtype in {float16, bfloat16, float32, float64}.
    axis : int

    Returns
    -------
    Tensor, x's shape and dtype.

    Raises
    ------
    BuildError
        For a non-float input or an axis out of range.
    """
    _, e, s, nm = _shifted_exp_sum("softmax", x, axis, name)
    return elementwise.divide(e, s, name=nm)


def log_softmax(x, axis: int = -1, name: Optional[str] = None) -> Tensor:
    """Numerically stable log-softmax along ``axis`` (TOPI ``nn.log_softmax``)::

        y = (x - max(x)) - log(sum(exp(x - max(x))))

    Emits the reductions ``<name>.max``, ``<name>.sum`` and the elementwise generics
    ``<name>.shift``, ``<name>.exp``, ``<name>.log``; the final subtract is ``name``.

    Parameters
    ----------
    x : Tensor, rank >= 1
        dtype in {float16, bfloat16, float32, float64}.
    axis : int

    Returns
    -------
    Tensor, x's shape and dtype.

    Raises
    ------
    BuildError
        For a non-float input or an axis out of range.
    """
    shifted, _, s, nm = _shifted_exp_sum("log_softmax", x, axis, name)
    return elementwise.subtract(shifted, elementwise.log(s, name=f"{nm}.log"), name=nm)
