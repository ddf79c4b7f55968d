"""Normalization ops (TOPI's ``nn`` category, the part that normalizes): batch_norm,
layer_norm, softmax, log_softmax, each composed of ``linalg.generic`` reductions and
elementwise generics (see each op for the ``mlc.name`` of every emitted op).
"""

from __future__ import annotations

from typing import Optional

from .._mlir import arith_d, ir, math_d
from ..errors import BuildError, format_shape
from ..ir.symbolic import SymDim
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

    Emitted as row ops (:func:`_row_reduce`, :func:`_row_map`): the reductions
    ``<name>.mean.sum`` (of x) and ``<name>.var.sum`` (of ``(x - mean)**2``, two-pass variance,
    read from x), the per-row ops ``<name>.mean``, ``<name>.var``, ``<name>.eps``,
    ``<name>.rsqrt``, and ``name``: ``(x - mean) * rsqrt * gamma + beta`` in one elementwise op.

    Parameters
    ----------
    x : Tensor, rank >= 1
        dtype in {float16, bfloat16, float32, float64}.
    gamma, beta : Tensor or numpy.ndarray, or None
        Shape ``x.shape[axes]`` (the normalized shape); None skips the scale / shift.
    axis : int or tuple of int
        The last axes of x (e.g. ``-1`` or ``(-2, -1)``).
    eps : float
        Added to the variance before the ``rsqrt``.

    Returns
    -------
    Tensor
        x's shape and dtype.

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
    count = emit.prod(nshape)
    msum = _row_reduce(f"{nm}.mean.sum", x, [], axes, 0.0, lambda a, acc: arith_d.addf(acc, a))
    mu = _per_row_mean(msum, count, f"{nm}.mean")
    sq = _row_reduce(f"{nm}.var.sum", x, [mu], axes, 0.0,
                     lambda a, m, acc: arith_d.addf(acc, _square(arith_d.subf(a, m))))
    var = _per_row_mean(sq, count, f"{nm}.var")
    inv = elementwise.rsqrt(elementwise.add(var, eps, name=f"{nm}.eps"), name=f"{nm}.rsqrt")
    rank, k = x.ndim, len(axes)
    norm_map = ir.AffineMap.get(rank, 0, [ir.AffineDimExpr.get(i) for i in range(rank - k, rank)])
    extra = [(t.value, norm_map) for t in (g, b) if t is not None]

    def body(a, m, r, *rest):
        y = arith_d.mulf(arith_d.subf(a, m), r)
        if g is not None:
            y = arith_d.mulf(y, rest[0])
        if b is not None:
            y = arith_d.addf(y, rest[-1])
        return y

    return _row_map(nm, x, [mu, inv], axes, body, extra)


def _row_reduce(nm: str, x: Tensor, stats, axes, init: float, body) -> Tensor:
    """One ``linalg.generic`` (``nm``) reducing ``body(x, *stats, acc)`` over ``axes`` of x from
    a ``linalg.fill`` of ``init`` (``<nm>.init``); each of ``stats`` has x's shape without
    ``axes`` (one value per row, read through the map that drops them). The elementwise part
    runs inside the reduction, so a row is read once and nothing of x's size is written.
    Sums accumulate sequentially per element of the vector tile the schedule gives the row
    (rows longer than ``reduction.SUM_DIRECT`` are not blocked: the error of a sum of ``C``
    elements over ``V`` lanes grows with ``C / V``)."""
    rank = x.ndim
    row = ir.AffineMap.get(rank, 0, [ir.AffineDimExpr.get(i) for i in range(rank) if i not in axes])
    out_shape = [d for i, d in enumerate(x.shape) if i not in axes]
    init_v = emit.filled(out_shape, x.dtype, init, f"{nm}.init")
    its = ["reduction" if i in axes else "parallel" for i in range(rank)]
    res = emit.generic(nm, [x.value] + [t.value for t in stats], [emit.identity_map(rank)] + [row] * len(stats),
                       [init_v], [row], its, lambda *args: [body(*args)])[0]
    return Tensor(res, x.fn)


def _row_map(nm: str, x: Tensor, stats, axes, body, extra=(), own_buffer: bool = False) -> Tensor:
    """One elementwise ``linalg.generic`` (``nm``) of x's shape: ``body(x, *stats, *extra)``,
    each of ``stats`` read per row (x's shape without ``axes``), ``extra`` given as
    ``(value, map)`` pairs. ``own_buffer``: its ``tensor.empty`` is marked ``mlc.buffer = nm``,
    so CSE does not merge it with the output's: a row of it fused into the output's row loop
    then has a buffer of its own instead of the output's row, which the output overwrites
    while it still reads it (bufferization would copy)."""
    rank = x.ndim
    row = ir.AffineMap.get(rank, 0, [ir.AffineDimExpr.get(i) for i in range(rank) if i not in axes])
    ins = [x.value] + [t.value for t in stats] + [v for v, _ in extra]
    maps = [emit.identity_map(rank)] + [row] * len(stats) + [m for _, m in extra]
    init = emit.empty(x.shape, x.dtype)
    if own_buffer:
        init.owner.attributes["mlc.buffer"] = ir.StringAttr.get(nm)
    res = emit.generic(nm, ins, maps, [init], [emit.identity_map(rank)],
                       ["parallel"] * rank, lambda *args: [body(*args[:-1])])[0]
    return Tensor(res, x.fn)


def _per_row_mean(total: Tensor, count, nm: str) -> Tensor:
    """``total / count`` per row (``nm``); a symbolic count is read at run time, and a mean
    over no elements is NaN (numpy)."""
    if isinstance(count, SymDim):
        return elementwise.divide(total, emit.size_tensor(total.fn, count, total.dtype), name=nm)
    return elementwise.multiply(total, 1.0 / count if count else float("nan"), name=nm)


def _square(v):
    return arith_d.mulf(v, v)


def _row_max(op: str, x, axis: int, name: Optional[str]):
    """The shared part of softmax and log_softmax: the row max ``m`` (``<name>.max``); returns
    ``(x, m, axes, name)``, or ``(x, None, axes, name)`` for an empty axis. The max ignores
    NaN (``arith.maxnumf``: 3 instructions per vector on x86-64 against 5 for the NaN
    propagation of ``maximumf``); a row holding a NaN still gives NaN everywhere, through
    ``exp(NaN - m)`` in its sum, as PyTorch's."""
    emit.function_of(op, x)
    x = _check_x(op, x, None, "", float_only=True)
    ax = emit.normalize_axis(op, axis, x.ndim)
    nm = emit.op_name(x.fn, op, name)
    if x.shape[ax] == 0:  # an empty axis has no max; the result is empty like x (numpy, torch)
        return x, None, (ax,), nm
    m = _row_reduce(f"{nm}.max", x, [], (ax,), -float("inf"), lambda a, acc: arith_d.maxnumf(acc, a))
    return x, m, (ax,), nm


def softmax(x, axis: int = -1, name: Optional[str] = None) -> Tensor:
    """Numerically stable softmax along ``axis`` (TOPI ``nn.softmax``)::

        y = exp(x - max(x)) / sum(exp(x - max(x)))

    Emitted as row ops: the reduction ``<name>.max``, the elementwise ``<name>.exp``
    (``e = exp(x - max)``), the reduction ``<name>.sum`` of ``e``, the per-row ``<name>.inv``
    (``1 / sum``) and ``name``: ``e * inv`` (a multiply per element, not a division). The
    exponential is computed once per element and stored, as PyTorch's CPU kernel does; the row
    chain schedule (``schedule.rules.row_fused``) computes ``e`` a row at a time into a buffer
    of one row that the sum and the output read while it is in the cache.

    Parameters
    ----------
    x : Tensor, rank >= 1
        dtype in {float16, bfloat16, float32, float64}.
    axis : int

    Returns
    -------
    Tensor, x's shape and dtype; each slice along ``axis`` sums to 1.

    Raises
    ------
    BuildError
        For a non-float input or an axis out of range.
    """
    x, m, axes, nm = _row_max("softmax", x, axis, name)
    if m is None:
        return elementwise.exp(x, name=nm)
    e = _row_map(f"{nm}.exp", x, [m], axes, lambda a, mx: math_d.exp(arith_d.subf(a, mx)),
                 own_buffer=True)
    s = _row_reduce(f"{nm}.sum", e, [], axes, 0.0, lambda a, acc: arith_d.addf(acc, a))
    inv = elementwise.divide(1.0, s, name=f"{nm}.inv")
    return _row_map(nm, e, [inv], axes, lambda a, r: arith_d.mulf(a, r))


def log_softmax(x, axis: int = -1, name: Optional[str] = None) -> Tensor:
    """Numerically stable log-softmax along ``axis`` (TOPI ``nn.log_softmax``)::

        y = (x - max(x)) - log(sum(exp(x - max(x))))

    Emitted as row ops: the reductions ``<name>.max`` and ``<name>.sum`` (of ``exp(x - max)``),
    the per-row ``<name>.log`` (``log(sum)``) and ``name``: ``(x - max) - <name>.log``.

    Parameters, returns and errors as :func:`softmax`.
    """
    x, m, axes, nm = _row_max("log_softmax", x, axis, name)
    if m is None:
        return elementwise.negative(x, name=nm)
    s = _row_reduce(f"{nm}.sum", x, [m], axes, 0.0,
                    lambda a, mx, acc: arith_d.addf(acc, math_d.exp(arith_d.subf(a, mx))))
    ls = elementwise.log(s, name=f"{nm}.log")
    return _row_map(nm, x, [m, ls], axes, lambda a, mx, c: arith_d.subf(arith_d.subf(a, mx), c))
