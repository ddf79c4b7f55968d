"""Reductions (TOPI's ``reduction`` category): sum, mean, max, min, argmax over axes, each a
``linalg.generic`` with ``reduction`` iterators accumulating into a ``linalg.fill``-ed init;
``keepdims`` reshapes the result with ``tensor.expand_shape``.

Semantics follow numpy: ``axis=None`` reduces every axis, ``axis=()`` none; negative axes count
from the end; ``max``/``min`` propagate NaN; ``argmax`` returns int64 indices of the first
maximum (the first NaN if any); ``sum`` of ints narrower than int64 accumulates and returns
int64 (numpy's default; ``dtype=`` chooses another accumulator, e.g. ``"int32"`` for TOPI's
keep-the-dtype sum).
"""

from __future__ import annotations

from typing import Optional, Sequence, Tuple, Union

import numpy as np

from .._mlir import arith_d, ir, linalg_d
from ..errors import BuildError, format_shape
from ..ir import dtypes
from ..ir.symbolic import SymDim
from . import linalg_emit as emit
from .elementwise import _cast_value, divide, multiply
from .shape import reshape
from .tensor import Tensor

Axis = Union[None, int, Sequence[int]]


def normalize_axes(op: str, axis: Axis, ndim: int) -> Tuple[int, ...]:
    """Sorted unique non-negative axes (all axes for None, none for ``()``).

    Raises
    ------
    BuildError
        For an axis that is not an int, out of range or repeated.
    """
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, (int, np.integer)) and not isinstance(axis, bool):
        axes = [axis]
    elif isinstance(axis, (tuple, list)):
        axes = list(axis)
    else:
        raise BuildError(f"{op}: argument 'axis' is {axis!r}; expected None, an int or a tuple of ints")
    if ndim == 0 and axes:
        raise BuildError(f"{op}: argument 'axis' is {axis!r}; expected None or () for a 0-d tensor")
    out = [emit.normalize_axis(op, a, ndim) for a in axes]
    if len(set(out)) != len(out):
        raise BuildError(f"{op}: argument 'axis' {axis!r} repeats an axis")
    return tuple(sorted(out))


def _lowest(dtype: str):
    """The identity of max: -inf, or the int minimum."""
    if dtypes.is_float(dtype):
        return -float("inf")
    return int(np.iinfo(np.dtype(dtype)).min)


def _highest(dtype: str):
    """The identity of min: +inf, or the int maximum."""
    if dtypes.is_float(dtype):
        return float("inf")
    return int(np.iinfo(np.dtype(dtype)).max)


def _check_x(op: str, x) -> Tensor:
    x = emit.tensor_arg(op, "x", x)
    if x.dtype == "bool":
        raise BuildError(f"{op}: argument 'x' has dtype bool; expected a float or int dtype (use ops.cast)")
    return x


def keep_dims(t: Tensor, axes: Tuple[int, ...], name: str) -> Tensor:
    """Re-insert reduced ``axes`` as size-1 dims (``tensor.expand_shape`` named ``name``)."""
    shape = list(t.shape)
    for a in axes:
        shape.insert(a, 1)
    return reshape(t, shape, name=name)


def reduce(op: str, x, axis: Axis, keepdims: bool, init, combine, name: Optional[str],
           acc_dtype: Optional[str] = None) -> Tensor:
    """Emit a reduction of ``x`` over ``axis``: ``acc = combine(x_elem, acc, dtype)`` starting
    from ``init`` (``linalg.fill`` named ``<name>.init``; the generic is ``name``; keepdims adds
    ``<name>.keepdims``). With ``acc_dtype``, each element is converted to it (as
    :func:`ops.cast`) before it is combined, and the result has that dtype.

    Raises
    ------
    BuildError
        For a non-Tensor or bool x, or a bad axis.
    """
    x = _check_x(op, x)
    fn = x.fn
    axes = normalize_axes(op, axis, x.ndim)
    if op in _NEEDS_ELEMENTS:
        _check_nonempty(op, x, axes)
    nm = emit.op_name(fn, op, name)
    src = x.dtype
    dt = acc_dtype or src
    out_shape = [d for i, d in enumerate(x.shape) if i not in axes]
    init_v = emit.filled(out_shape, dt, init, f"{nm}.init")
    rank = x.ndim
    out_map = ir.AffineMap.get(rank, 0, [ir.AffineDimExpr.get(i) for i in range(rank) if i not in axes])
    its = ["reduction" if i in axes else "parallel" for i in range(rank)]
    res = emit.generic(nm, [x.value], [emit.identity_map(rank)], [init_v], [out_map], its,
                       lambda a, acc: [combine(_cast_value(a, src, dt) if dt != src else a, acc, dt)])[0]
    out = Tensor(res, fn)
    return keep_dims(out, axes, f"{nm}.keepdims") if keepdims and axes else out


#: reductions with no identity: numpy raises on a zero-size reduced axis
_NEEDS_ELEMENTS = ("max", "min", "argmax")


def _check_nonempty(op: str, x: Tensor, axes: Tuple[int, ...]) -> None:
    """numpy's ``zero-size array to reduction operation maximum which has no identity``.

    Raises
    ------
    BuildError
        If a reduced axis of ``x`` has size 0.
    """
    empty = [a for a in axes if x.shape[a] == 0]
    if empty:
        raise BuildError(f"{op}: axis {empty[0]} of x {format_shape(x.shape)} has size 0; expected a "
                         f"non-empty reduction ({op} has no identity; numpy raises ValueError)")


def _add(a, b, dt):
    return arith_d.addf(a, b) if dtypes.is_float(dt) else arith_d.addi(a, b)


def _max(a, b, dt):
    return arith_d.maximumf(a, b) if dtypes.is_float(dt) else arith_d.maxsi(a, b)


def _min(a, b, dt):
    return arith_d.minimumf(a, b) if dtypes.is_float(dt) else arith_d.minsi(a, b)


def sum(x, axis: Axis = None, keepdims: bool = False, dtype: Optional[str] = None,  # noqa: A001
        name: Optional[str] = None) -> Tensor:
    """Sum over ``axis`` (numpy ``sum``, TOPI ``sum``): a ``linalg.generic`` (``name``)
    accumulating ``arith.addf``/``addi`` into a zero ``linalg.fill`` (``<name>.init``).

    Parameters
    ----------
    x : Tensor, any shape
        dtype in {float16, bfloat16, float32, float64, int8, int16, int32, int64}.
    axis : None, int or tuple of int
        Axes to reduce (None: all, ``()``: none; negative counts from the end).
    keepdims : bool
        Keep the reduced axes as size 1 (``tensor.expand_shape`` ``<name>.keepdims``).
    dtype : str, optional
        Accumulator and result dtype (numpy's ``dtype=``); elements are converted to it before
        they are added. Default: int64 for int8/int16/int32 (as numpy), else x's dtype.

    Returns
    -------
    Tensor
        x's shape without (or with size 1 at) the reduced axes; ``dtype``.

    Raises
    ------
    BuildError
        For a non-Tensor or bool input, or an axis that is out of range, repeated or not an int
        (``sum: argument 'axis' is 3; expected an int in [-2, 2)``), or a ``dtype`` that is not
        a float or int dtype.
    """
    x = _check_x("sum", x)
    if dtype is None:
        dtype = "int64" if x.dtype in ("int8", "int16", "int32") else None
    else:
        try:
            canon = dtypes.canonical_dtype(dtype)
        except BuildError:
            canon = None
        if canon not in dtypes.FLOAT_DTYPES | dtypes.INT_DTYPES:
            raise BuildError(f"sum: argument 'dtype' is {dtype!r}; expected one of "
                             f"{sorted(dtypes.FLOAT_DTYPES | dtypes.INT_DTYPES)}")
        dtype = canon
    return reduce("sum", x, axis, keepdims, 0, _add, name, acc_dtype=dtype)


def mean(x, axis: Axis = None, keepdims: bool = False, name: Optional[str] = None) -> Tensor:
    """Mean over ``axis`` (numpy ``mean``, TOPI ``mean``): the sum (``<name>.sum``, see
    :func:`sum`) times ``1 / count`` (an elementwise ``linalg.generic``, ``name``).

    Parameters
    ----------
    x : Tensor, any shape
        dtype in {float16, bfloat16, float32, float64}.
    axis : None, int or tuple of int
    keepdims : bool

    Returns
    -------
    Tensor
        x's shape without (or with size 1 at) the reduced axes; x's dtype.

    Raises
    ------
    BuildError
        For a non-float input (numpy would return float64: cast first) or a bad axis.
    """
    op = "mean"
    x = _check_x(op, x)
    if not dtypes.is_float(x.dtype):
        raise BuildError(f"{op}: argument 'x' has dtype {x.dtype}; expected one of {sorted(dtypes.FLOAT_DTYPES)} "
                         "(numpy would return float64; use ops.cast)")
    axes = normalize_axes(op, axis, x.ndim)
    nm = emit.op_name(x.fn, op, name)
    count = emit.prod([x.shape[a] for a in axes])
    s = reduce("sum", x, axes, keepdims, 0, _add, f"{nm}.sum")
    if isinstance(count, SymDim):   # divided by the run-time count (0 / 0 is NaN, as numpy)
        return divide(s, emit.size_tensor(x.fn, count, x.dtype), name=nm)
    # numpy: the mean over zero elements is NaN (0 * NaN), not 0
    return multiply(s, 1.0 / count if count else float("nan"), name=nm)


def max(x, axis: Axis = None, keepdims: bool = False, name: Optional[str] = None) -> Tensor:  # noqa: A001
    """Maximum over ``axis`` (numpy ``max``, TOPI ``max``): a ``linalg.generic`` (``name``) of
    ``arith.maximumf`` (NaN propagates, as in numpy) or ``arith.maxsi``, from a ``linalg.fill``
    of -inf or the int minimum (``<name>.init``).

    Parameters
    ----------
    x : Tensor, any shape
        dtype in {float16, bfloat16, float32, float64, int8, int16, int32, int64}.
    axis : None, int or tuple of int
    keepdims : bool

    Returns
    -------
    Tensor
        x's shape without (or with size 1 at) the reduced axes; x's dtype.

    Raises
    ------
    BuildError
        For a non-Tensor or bool input or a bad axis.
    """
    x = _check_x("max", x)
    lowest = _lowest(x.dtype)
    return reduce("max", x, axis, keepdims, lowest, _max, name)


def min(x, axis: Axis = None, keepdims: bool = False, name: Optional[str] = None) -> Tensor:  # noqa: A001
    """Minimum over ``axis`` (numpy ``min``, TOPI ``min``): a ``linalg.generic`` (``name``) of
    ``arith.minimumf`` (NaN propagates) or ``arith.minsi``, from a ``linalg.fill`` of +inf or the
    int maximum (``<name>.init``).

    Parameters
    ----------
    x : Tensor, any shape
        dtype in {float16, bfloat16, float32, float64, int8, int16, int32, int64}.
    axis : None, int or tuple of int
    keepdims : bool

    Returns
    -------
    Tensor
        x's shape without (or with size 1 at) the reduced axes; x's dtype.

    Raises
    ------
    BuildError
        For a non-Tensor or bool input or a bad axis.
    """
    x = _check_x("min", x)
    highest = _highest(x.dtype)
    return reduce("min", x, axis, keepdims, highest, _min, name)


def argmax(x, axis: Optional[int] = None, keepdims: bool = False, name: Optional[str] = None) -> Tensor:
    """Index of the first maximum along ``axis`` (numpy ``argmax``, TOPI ``argmax``).

    Emits one ``linalg.generic`` (``name``) with two outputs, the running maximum (init
    ``<name>.init_value``: -inf or the int minimum) and its index (init ``<name>.init``: 0),
    reading the position with ``linalg.index``; a strictly greater element (or the first NaN,
    which then sticks, as in numpy) replaces both. ``axis=None`` first flattens x
    (``tensor.collapse_shape`` ``<name>.flatten``).

    Parameters
    ----------
    x : Tensor, any shape
        dtype in {float16, bfloat16, float32, float64, int8, int16, int32, int64}.
    axis : None or int
    keepdims : bool
        Keep the reduced axis (all axes for None) as size 1 (``<name>.keepdims``).

    Returns
    -------
    Tensor, int64
        x's shape without ``axis`` (a 0-d tensor for ``axis=None``).

    Raises
    ------
    BuildError
        For a non-Tensor or bool input, a tuple axis, or an axis out of range.
    """
    op = "argmax"
    x = _check_x(op, x)
    fn = x.fn
    if axis is not None and (not isinstance(axis, (int, np.integer)) or isinstance(axis, bool)):
        raise BuildError(f"{op}: argument 'axis' is {axis!r}; expected None or an int")
    if axis is None:
        nm = emit.op_name(fn, op, name)
        flat = reshape(x, (int(np.prod(x.shape)),), name=f"{nm}.flatten")
        out = argmax(flat, 0, False, nm)
        return reshape(out, (1,) * x.ndim, name=f"{nm}.keepdims") if keepdims else out
    (ax,) = normalize_axes(op, axis, x.ndim)
    _check_nonempty(op, x, (ax,))
    nm = emit.op_name(fn, op, name)
    out_shape = [d for i, d in enumerate(x.shape) if i != ax]
    vals = emit.filled(out_shape, x.dtype, _lowest(x.dtype), f"{nm}.init_value")
    idxs = emit.filled(out_shape, "int64", 0, f"{nm}.init")
    rank = x.ndim
    out_map = ir.AffineMap.get(rank, 0, [ir.AffineDimExpr.get(i) for i in range(rank) if i != ax])
    its = ["reduction" if i == ax else "parallel" for i in range(rank)]
    is_f = dtypes.is_float(x.dtype)

    def body(a, best, best_i):
        i = arith_d.index_cast(ir.IntegerType.get_signless(64), linalg_d.IndexOp(ax).result)
        if is_f:
            # take a if a > best, or a is the first NaN; once best is NaN it stays (numpy)
            gt = arith_d.cmpf(arith_d.CmpFPredicate.OGT, a, best)
            a_nan = arith_d.cmpf(arith_d.CmpFPredicate.UNO, a, a)
            best_ok = arith_d.cmpf(arith_d.CmpFPredicate.ORD, best, best)
            take = arith_d.andi(arith_d.ori(gt, a_nan), best_ok)
        else:
            take = arith_d.cmpi(arith_d.CmpIPredicate.sgt, a, best)
        return [arith_d.select(take, a, best), arith_d.select(take, i, best_i)]

    res = emit.generic(nm, [x.value], [emit.identity_map(rank)], [vals, idxs], [out_map, out_map], its, body)
    out = Tensor(res[1], fn)
    return keep_dims(out, (ax,), f"{nm}.keepdims") if keepdims else out
