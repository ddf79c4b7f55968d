"""Reductions (TOPI's ``reduction`` category): sum, mean, max, min, argmax over axes, each a
``linalg.generic`` with ``reduction`` iterators accumulating into a ``linalg.fill``-ed init;
``keepdims`` reshapes the result with ``tensor.expand_shape``.

Semantics follow numpy: ``axis=None`` reduces every axis; negative axes count from the end;
``argmax`` returns int64 indices of the first maximum.
"""

from __future__ import annotations

import builtins
from typing import Optional, Sequence, Tuple, Union

import numpy as np

from .._mlir import arith_d, ir, linalg_d
from ..errors import BuildError
from ..ir import dtypes
from . import emit
from .graph_builder import Tensor

Axis = Union[None, int, Sequence[int]]


def normalize_axes(op: str, axis: Axis, ndim: int) -> Tuple[int, ...]:
    """Sorted unique non-negative axes (all axes for None).

    Raises
    ------
    BuildError
        For an out-of-range or repeated axis.
    """
    if axis is None:
        return tuple(range(ndim))
    axes = [axis] if isinstance(axis, (int, np.integer)) else list(axis)
    out = [emit.normalize_axis(op, a, ndim) for a in axes]
    if len(set(out)) != len(out):
        raise BuildError(f"{op}: argument 'axis' {axis!r} repeats an axis")
    return tuple(sorted(out))


def _lowest(dtype: str):
    if dtypes.is_float(dtype):
        return -float("inf")
    return int(np.iinfo(np.dtype(dtype)).min) if dtype != "bool" else 0


def _highest(dtype: str):
    if dtypes.is_float(dtype):
        return float("inf")
    return int(np.iinfo(np.dtype(dtype)).max) if dtype != "bool" else 1


def keep_dims(t: Tensor, axes: Tuple[int, ...], name: str) -> Tensor:
    """Re-insert reduced ``axes`` as size-1 dims (``tensor.expand_shape``)."""
    from .shape import reshape

    shape = list(t.shape)
    for a in axes:
        shape.insert(a, 1)
    return reshape(t, shape, name=name)


def reduce(op: str, x, axis: Axis, keepdims: bool, init, combine, name: Optional[str],
           out_dtype: Optional[str] = None) -> Tensor:
    """Emit a reduction of ``x`` over ``axis``: ``acc = combine(x_elem, acc, dtype)``."""
    fn = emit.function_of(op, x)
    if not isinstance(x, Tensor):
        raise BuildError(f"{op}: argument 'x' is {type(x).__name__}; expected a Tensor")
    axes = normalize_axes(op, axis, x.ndim)
    nm = emit.op_name(fn, op, name)
    dt = out_dtype or x.dtype
    out_shape = [d for i, d in enumerate(x.shape) if i not in axes]
    init_v = emit.filled(out_shape, dt, init, f"{nm}.init")
    rank = x.ndim
    out_map = ir.AffineMap.get(rank, 0, [ir.AffineDimExpr.get(i) for i in range(rank) if i not in axes])
    its = ["reduction" if i in axes else "parallel" for i in range(rank)]
    res = emit.generic(nm, [x.value], [emit.identity_map(rank)], [init_v], [out_map], its,
                       lambda a, acc: [combine(a, acc, dt)])[0]
    out = Tensor(res, fn)
    return keep_dims(out, axes, f"{nm}.keepdims") if keepdims else out


def _add(a, b, dt):
    return arith_d.addf(a, b) if dtypes.is_float(dt) else arith_d.addi(a, b)


def sum(x, axis: Axis = None, keepdims: bool = False, name: Optional[str] = None) -> Tensor:  # noqa: A001
    """Sum over ``axis`` (numpy ``sum``). x: any shape, float*/int*; result dtype = x's."""
    return reduce("sum", x, axis, keepdims, 0, _add, name)


def mean(x, axis: Axis = None, keepdims: bool = False, name: Optional[str] = None) -> Tensor:
    """Mean over ``axis`` (numpy ``mean``): the sum times 1/count; float Tensors only.

    Raises
    ------
    BuildError
        For integer inputs (numpy would return float64; cast first).
    """
    if isinstance(x, Tensor) and not dtypes.is_float(x.dtype):
        raise BuildError(f"mean: argument 'x' has dtype {x.dtype}; expected a float dtype (use ops.cast)")
    from .elementwise import multiply

    fn = emit.function_of("mean", x)
    nm = emit.op_name(fn, "mean", name)
    axes = normalize_axes("mean", axis, x.ndim)
    count = int(np.prod([x.shape[a] for a in axes])) if axes else 1
    s = reduce("sum", x, axes, keepdims, 0, _add, f"{nm}.sum")
    return multiply(s, 1.0 / builtins.max(count, 1), name=nm)


def max(x, axis: Axis = None, keepdims: bool = False, name: Optional[str] = None) -> Tensor:  # noqa: A001
    """Maximum over ``axis`` (numpy ``max``; NaN propagates like numpy)."""
    def comb(a, acc, dt):
        return arith_d.maximumf(a, acc) if dtypes.is_float(dt) else arith_d.maxsi(a, acc)
    return reduce("max", x, axis, keepdims, _lowest(x.dtype) if isinstance(x, Tensor) else 0, comb, name)


def min(x, axis: Axis = None, keepdims: bool = False, name: Optional[str] = None) -> Tensor:  # noqa: A001
    """Minimum over ``axis`` (numpy ``min``)."""
    def comb(a, acc, dt):
        return arith_d.minimumf(a, acc) if dtypes.is_float(dt) else arith_d.minsi(a, acc)
    return reduce("min", x, axis, keepdims, _highest(x.dtype) if isinstance(x, Tensor) else 0, comb, name)


def argmax(x, axis: Optional[int] = None, keepdims: bool = False, name: Optional[str] = None) -> Tensor:
    """Index of the first maximum along ``axis`` (numpy ``argmax``), int64. ``axis=None``
    flattens first. One ``linalg.generic`` with two outputs (max value, index) and
    ``linalg.index`` for the position.

    Raises
    ------
    BuildError
        For a tuple axis or a non-Tensor input.
    """
    fn = emit.function_of("argmax", x)
    if not isinstance(x, Tensor):
        raise BuildError(f"argmax: argument 'x' is {type(x).__name__}; expected a Tensor")
    if axis is None:
        from .shape import reshape

        flat = reshape(x, (int(np.prod(x.shape)),), name=None)
        out = argmax(flat, 0, False, name)
        return reshape(out, (1,) * x.ndim) if keepdims else out
    if not isinstance(axis, (int, np.integer)):
        raise BuildError(f"argmax: argument 'axis' must be an int or None, got {axis!r}")
    ax = emit.normalize_axis("argmax", axis, x.ndim)
    nm = emit.op_name(fn, "argmax", name)
    out_shape = [d for i, d in enumerate(x.shape) if i != ax]
    vals = emit.filled(out_shape, x.dtype, _lowest(x.dtype), f"{nm}.init_value")
    idxs = emit.filled(out_shape, "int64", 0, f"{nm}.init")
    rank = x.ndim
    out_map = ir.AffineMap.get(rank, 0, [ir.AffineDimExpr.get(i) for i in range(rank) if i != ax])
    its = ["reduction" if i == ax else "parallel" for i in range(rank)]
    is_f = dtypes.is_float(x.dtype)

    def body(a, best, best_i):
        i = arith_d.index_cast(ir.IntegerType.get_signless(64), linalg_d.IndexOp(ax).result)
        gt = arith_d.cmpf(arith_d.CmpFPredicate.OGT, a, best) if is_f else \
            arith_d.cmpi(arith_d.CmpIPredicate.sgt, a, best)
        if is_f:  # numpy: the first NaN wins
            nan = arith_d.cmpf(arith_d.CmpFPredicate.UNO, a, a)
            best_nan = arith_d.cmpf(arith_d.CmpFPredicate.UNO, best, best)
            gt = arith_d.ori(arith_d.andi(nan, arith_d.xori(best_nan, emit.scalar(1, "bool"))), gt)
            gt = arith_d.andi(gt, arith_d.xori(best_nan, emit.scalar(1, "bool")))
        return [arith_d.select(gt, a, best), arith_d.select(gt, i, best_i)]

    res = emit.generic(nm, [x.value], [emit.identity_map(rank)], [vals, idxs], [out_map, out_map], its, body)
    out = Tensor(res[1], fn)
    return keep_dims(out, (ax,), f"{nm}.keepdims") if keepdims else out
