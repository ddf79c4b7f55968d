"""Reductions (TOPI's ``reduction`` category): sum, mean, max, min, argmax over axes, each a
``linalg.generic`` with ``reduction`` iterators accumulating into a ``linalg.fill``-ed init;
``keepdims`` reshapes the result with ``tensor.expand_shape``. Float sums (and the means,
variances and norms built on them) over more than :data:`SUM_DIRECT` elements accumulate in
levels of at most :data:`SUM_BLOCK` elements (blocked summation), so their error grows with the
logarithm of the length, as numpy's and PyTorch's pairwise sums.

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
from .shape import pad, reshape
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
    :func:`ops.cast`) before it is combined, and the result has that dtype. A float ``sum``
    over more than :data:`SUM_DIRECT` elements is a tree of short sums
    (:func:`_blocked_sum`), whose error does not grow linearly with the length.

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
    dt = acc_dtype or x.dtype
    static = all(not isinstance(x.shape[a], SymDim) for a in axes)   # symbolic: one sequential sum
    if op == "sum" and dtypes.is_float(dt) and static and _count(x, axes) > SUM_DIRECT:
        out = _blocked_sum(x, axes, dt, nm)
        return keep_dims(out, axes, f"{nm}.keepdims") if keepdims and axes else out
    out = _reduce_generic(x, axes, init, combine, nm, dt)
    return keep_dims(out, axes, f"{nm}.keepdims") if keepdims and axes else out


#: float sums over at most this many elements are one sequential accumulation; longer ones are
#: blocked (:func:`_blocked_sum`)
SUM_DIRECT = 4096
#: the longest block a level of a blocked sum adds up
SUM_BLOCK = 256


def _count(x: Tensor, axes: Tuple[int, ...]) -> int:
    return int(np.prod([x.shape[a] for a in axes])) if axes else 1


def _block_size(length: int) -> int:
    """The count of elements each output of one level of a blocked sum over ``length`` elements
    adds up: levels of about equal length ``length ** (1 / levels)`` (each at most
    :data:`SUM_BLOCK`), preferring the smallest divisor of ``length`` not below that (no
    padding), else that length."""
    levels = int(np.ceil(np.log(length) / np.log(SUM_BLOCK)))
    want = int(np.ceil(length ** (1.0 / levels)))
    for b in range(want, SUM_BLOCK + 1):
        if length % b == 0:
            return b
    return want


def _blocked_sum(x: Tensor, axes: Tuple[int, ...], dt: str, nm: str) -> Tensor:
    """The float sum of ``x`` over ``axes`` as a tree of short sequential sums: the axes are
    reduced one at a time from the last, and an axis longer than :data:`SUM_BLOCK` is viewed as
    ``(C, L / C)`` (``tensor.expand_shape``; zero padded when no count divides it, ``C`` at most
    :data:`SUM_BLOCK`) and summed over ``C`` first: ``L / C`` sums of ``C`` elements ``L / C``
    apart, then the ``L / C`` results (recursively). Each level is a ``linalg.generic``
    reduction (``<nm>.level<i>``, the last one ``nm``) of at most ``SUM_BLOCK`` elements per
    output, so the rounding error grows with the number of levels
    (``log(L) / log(SUM_BLOCK)``), not with ``L`` (pairwise summation's bound, Higham,
    "The accuracy of floating point summation", 1993; numpy and PyTorch sum this way). The
    first level's outputs are contiguous in ``x``'s reduced axis, so it is a column reduction:
    the input streams once in address order into vector accumulators, as PyTorch's
    ``cascade_sum`` keeps one accumulator per lane and level instead of reducing every block
    across lanes.

    ``x`` is converted to ``dt`` as its elements are read by the first level."""
    steps = []  # (axis of the current tensor, block count or None for the whole axis)
    shape = list(x.shape)
    for a in sorted(axes, reverse=True):
        length = shape[a]
        while length > SUM_BLOCK:
            c = _block_size(length)
            steps.append((a, c))
            length = -(-length // c)
        steps.append((a, None))
        shape[a:a + 1] = []
    y = x
    for i, (a, c) in enumerate(steps):
        name = nm if i == len(steps) - 1 else f"{nm}.level{i}"
        if c is None:
            y = _reduce_generic(y, (a,), 0, _add, name, dt)
            continue
        length = y.shape[a]
        b = -(-length // c)
        if c * b != length:
            y = pad(y, [(0, 0)] * a + [(0, c * b - length)] + [(0, 0)] * (y.ndim - a - 1), name=f"{name}.pad")
        y = reshape(y, list(y.shape[:a]) + [c, b] + list(y.shape[a + 1:]), name=f"{name}.blocks")
        y = _reduce_generic(y, (a,), 0, _add, name, dt)
    return y


def _reduce_generic(x: Tensor, axes: Tuple[int, ...], init, combine, nm: str, dt: str) -> Tensor:
    """One ``linalg.generic`` (``nm``) folding ``combine`` over ``axes`` of ``x`` from a
    ``linalg.fill`` of ``init`` (``<nm>.init``), elements converted to ``dt`` as read."""
    fn = x.fn
    src = x.dtype
    out_shape = [d for i, d in enumerate(x.shape) if i not in axes]
    init_v = emit.filled(out_shape, dt, init, f"{nm}.init")
    rank = x.ndim
    out_map = ir.AffineMap.get(rank, 0, [ir.AffineDimExpr.get(i) for i in range(rank) if i not in axes])
    its = ["reduction" if i in axes else "parallel" for i in range(rank)]
    res = emit.generic(nm, [x.value], [emit.identity_map(rank)], [init_v], [out_map], its,
                       lambda a, acc: [combine(_cast_value(a, src, dt) if dt != src else a, acc, dt)])[0]
    return Tensor(res, fn)


#: reductions with no identity: numpy raises on a zero-size reduced axis
_NEEDS_ELEMENTS = ("max", "min", "argmax", "argmin")


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
    axis, keepdims
        As :func:`sum`; the result has x's dtype.

    Raises
    ------
    BuildError
        For a non-Tensor or bool input or a bad axis.
    """
    x = _check_x("max", x)
    lowest = _lowest(x.dtype)
    return reduce("max", x, axis, keepdims, lowest, _max, name)


def min(x, axis: Axis = None, keepdims: bool = False, name: Optional[str] = None) -> Tensor:  # noqa: A001
    """Minimum over ``axis`` (numpy ``min``, TOPI ``min``): as :func:`max` with
    ``arith.minimumf`` (NaN propagates) or ``arith.minsi``, from a ``linalg.fill`` of +inf or the
    int maximum (``<name>.init``).

    Parameters, returns and errors as :func:`max`.
    """
    x = _check_x("min", x)
    highest = _highest(x.dtype)
    return reduce("min", x, axis, keepdims, highest, _min, name)


def _mul(a, b, dt):
    return arith_d.mulf(a, b) if dtypes.is_float(dt) else arith_d.muli(a, b)


def prod(x, axis: Axis = None, keepdims: bool = False, name: Optional[str] = None) -> Tensor:
    """Product over ``axis`` (numpy ``prod``, ``torch.prod``): a ``linalg.generic`` (``name``)
    of ``arith.mulf``/``muli`` from a ``linalg.fill`` of 1 (``<name>.init``); ints narrower than
    int64 are multiplied in int64 (numpy's and PyTorch's result dtype).

    Parameters
    ----------
    x : Tensor, any shape
        dtype in {float16, bfloat16, float32, float64, int8, int16, int32, int64}.
    axis : None, int or tuple of int
    keepdims : bool

    Returns
    -------
    Tensor
        x's shape without (or with size 1 at) the reduced axes; x's dtype (int64 for ints).

    Raises
    ------
    BuildError
        For a non-Tensor or bool input or a bad axis.
    """
    x = _check_x("prod", x)
    acc = "int64" if x.dtype in ("int8", "int16", "int32") else None
    return reduce("prod", x, axis, keepdims, 1, _mul, name, acc_dtype=acc)


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
    return _arg_extreme("argmax", x, axis, keepdims, name)


def argmin(x, axis: Optional[int] = None, keepdims: bool = False, name: Optional[str] = None) -> Tensor:
    """Index of the first minimum along ``axis`` (numpy ``argmin``, ``torch.argmin``): as
    :func:`argmax` with a strictly smaller element replacing the running minimum (init +inf or
    the int maximum); the first NaN wins and sticks (numpy).

    Parameters, returns and errors as :func:`argmax`.
    """
    return _arg_extreme("argmin", x, axis, keepdims, name)


def _arg_extreme(op: str, x, axis: Optional[int], keepdims: bool, name: Optional[str]) -> Tensor:
    x = _check_x(op, x)
    fn = x.fn
    if axis is not None and (not isinstance(axis, (int, np.integer)) or isinstance(axis, bool)):
        raise BuildError(f"{op}: argument 'axis' is {axis!r}; expected None or an int")
    if axis is None:
        nm = emit.op_name(fn, op, name)
        flat = reshape(x, (int(np.prod(x.shape)),), name=f"{nm}.flatten")
        out = _arg_extreme(op, flat, 0, False, nm)
        return reshape(out, (1,) * x.ndim, name=f"{nm}.keepdims") if keepdims else out
    (ax,) = normalize_axes(op, axis, x.ndim)
    _check_nonempty(op, x, (ax,))
    nm = emit.op_name(fn, op, name)
    largest = op == "argmax"
    out_shape = [d for i, d in enumerate(x.shape) if i != ax]
    start = _lowest(x.dtype) if largest else _highest(x.dtype)
    vals = emit.filled(out_shape, x.dtype, start, f"{nm}.init_value")
    idxs = emit.filled(out_shape, "int64", 0, f"{nm}.init")
    rank = x.ndim
    out_map = ir.AffineMap.get(rank, 0, [ir.AffineDimExpr.get(i) for i in range(rank) if i != ax])
    its = ["reduction" if i == ax else "parallel" for i in range(rank)]
    is_f = dtypes.is_float(x.dtype)
    fpred = arith_d.CmpFPredicate.OGT if largest else arith_d.CmpFPredicate.OLT
    ipred = arith_d.CmpIPredicate.sgt if largest else arith_d.CmpIPredicate.slt

    def body(a, best, best_i):
        i = arith_d.index_cast(ir.IntegerType.get_signless(64), linalg_d.IndexOp(ax).result)
        if is_f:
            # take a if it beats best, or a is the first NaN; once best is NaN it stays (numpy)
            better = arith_d.cmpf(fpred, a, best)
            a_nan = arith_d.cmpf(arith_d.CmpFPredicate.UNO, a, a)
            best_ok = arith_d.cmpf(arith_d.CmpFPredicate.ORD, best, best)
            take = arith_d.andi(arith_d.ori(better, a_nan), best_ok)
        else:
            take = arith_d.cmpi(ipred, a, best)
        return [arith_d.select(take, a, best), arith_d.select(take, i, best_i)]

    res = emit.generic(nm, [x.value], [emit.identity_map(rank)], [vals, idxs], [out_map, out_map], its, body)
    out = Tensor(res[1], fn)
    return keep_dims(out, (ax,), f"{nm}.keepdims") if keepdims else out
