"""``scatter_elements``: write or reduce ``updates`` into ``x`` at the positions an index tensor
names along one axis (ONNX ``ScatterElements``, PyTorch ``scatter`` / ``scatter_add`` /
``scatter_reduce``, TOPI ``scatter_elements``).

::

    out = x.copy()
    for every position p of indices:         # p[axis] ranges over indices.shape[axis]
        q = p with q[axis] = indices[p]
        out[q] = reduce(out[q], updates[p])

Emitted as one ``linalg.generic`` over the output positions and a reduction dim ``k`` running
over ``indices.shape[axis]``: for output position ``q``, every ``k`` whose index
``indices[q with axis -> k]`` equals ``q[axis]`` contributes ``updates[q with axis -> k]``,
in increasing ``k`` (so for ``reduction="none"`` the last write wins, PyTorch's order on one
thread; duplicates of ``"add"`` sum). The work is ``x.size * indices.shape[axis]``
comparisons: linear in the output for the common scatters (one-hot labels, a KV cache row, an
index of extent 1 along the axis), quadratic only when one axis scatters a long index into a
long output. Positions of ``x`` beyond ``indices.shape`` on the other axes are untouched: the
generic runs on the slice ``x[:indices.shape]`` (whole along ``axis``) and the result is
written back into ``x`` (:func:`~mlc_mlir.builder.indexing.update_slice`). Indices are checked
at run time (``[0, n)``, or ``[-n, n)`` wrapped with ``negative_indices``) as :func:`take`
checks them.

Source: ONNX ``ScatterElements`` (``reduction`` none/add/mul/max/min); PyTorch
``scatter_reduce`` (``include_self``, ``mean``); the dense (comparison) formulation of a scatter
as a reduction, as XLA's scatter expander emits on targets without atomics.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from .._mlir import arith_d, ir, linalg_d
from ..errors import BuildError, format_shape
from ..ir import dtypes, emitters
from . import linalg_emit as emit
from .indexing import update_slice
from .shape import slice as shape_slice
from .take import _check_indices, _index_args
from .tensor import Tensor

#: ``reduction`` values: ``none`` replaces, the others combine with the current value.
REDUCTIONS = ("none", "add", "mul", "max", "min", "mean")


def _combine(reduction: str, acc: ir.Value, v: ir.Value, dt: str) -> ir.Value:
    is_float = dtypes.is_float(dt)
    if reduction == "none":
        return v
    if reduction in ("add", "mean"):
        return arith_d.addf(acc, v) if is_float else arith_d.addi(acc, v)
    if reduction == "mul":
        return arith_d.mulf(acc, v) if is_float else arith_d.muli(acc, v)
    if reduction == "max":
        return arith_d.maximumf(acc, v) if is_float else arith_d.maxsi(acc, v)
    return arith_d.minimumf(acc, v) if is_float else arith_d.minsi(acc, v)


def scatter_elements(x, indices, updates, axis: int = 0, reduction: str = "none",
                     include_self: bool = True, negative_indices: bool = False,
                     name: Optional[str] = None) -> Tensor:
    """Scatter ``updates`` into ``x`` along ``axis`` at ``indices`` (see the module docstring).

    Parameters
    ----------
    x : Tensor, rank >= 1, any float or int dtype
    indices : Tensor or numpy.ndarray of int32/int64, rank of x
        ``indices.shape[d] <= x.shape[d]`` for ``d != axis`` (static sizes).
    updates : Tensor, numpy.ndarray or scalar of x's dtype
        A tensor at least ``indices.shape`` on every axis (only ``updates[:indices.shape]`` is
        read), or a scalar written everywhere (PyTorch ``scatter.value``).
    axis : int
    reduction : str
        One of :data:`REDUCTIONS`; ``mean`` divides each reduced position by its count (plus one
        with ``include_self``).
    include_self : bool
        Whether the reduction starts from ``x``'s value at a written position (PyTorch
        ``scatter_reduce``); False starts from the first update. ``none`` ignores it.
    negative_indices : bool
        Accept ``[-n, 0)`` as counting from the end (ONNX); PyTorch's scatter does not.

    Returns
    -------
    Tensor of x's shape and dtype.

    Raises
    ------
    BuildError
        For ranks or shapes that disagree, a symbolic shape, an unknown reduction, dtypes that
        differ, or a constant index out of range (Tensor indices: ``ExecutionError`` at run time).
    """
    op = "scatter_elements"
    fn, x, indices, ax = _index_args(op, x, indices, axis)
    if reduction not in REDUCTIONS:
        raise BuildError(f"{op}: argument 'reduction' is {reduction!r}; expected one of {REDUCTIONS}")
    dt = x.dtype
    if dt == "bool" or dt not in dtypes.ALL_DTYPES:
        raise BuildError(f"{op}: argument 'x' has dtype {dt}; expected a float or int dtype")
    shapes = (tuple(x.shape), tuple(indices.shape))
    if any(not isinstance(d, int) for s in shapes for d in s):
        raise BuildError(f"{op}: x {format_shape(x.shape)} / indices {format_shape(indices.shape)}: expected "
                         "static shapes")
    if indices.ndim != x.ndim or any(i > n for d, (i, n) in enumerate(zip(indices.shape, x.shape)) if d != ax):
        raise BuildError(f"{op}: argument 'indices' has shape {format_shape(indices.shape)}; expected rank "
                         f"{x.ndim} and sizes <= those of x {format_shape(x.shape)} off axis {ax}")
    nm = emit.op_name(fn, op, name)
    scalar_update = not isinstance(updates, Tensor) and np.ndim(updates) == 0
    if scalar_update:
        updates = updates.item() if hasattr(updates, "item") else updates
    if not scalar_update:
        updates = emit.as_tensor(op, "updates", fn, updates, dt)
        if updates.ndim != x.ndim or any(u < i for u, i in zip(updates.shape, indices.shape)):
            raise BuildError(f"{op}: argument 'updates' has shape {format_shape(updates.shape)}; expected at "
                             f"least {format_shape(indices.shape)} (indices) on every axis")
        if tuple(updates.shape) != tuple(indices.shape):
            updates = shape_slice(updates, [0] * x.ndim, list(indices.shape))
    _check_indices(op, nm, x, indices, ax, negative_indices)

    n = x.shape[ax]
    region_shape = [n if d == ax else i for d, i in enumerate(indices.shape)]
    region = x if region_shape == list(x.shape) else shape_slice(x, [0] * x.ndim, region_shape)
    rank = x.ndim
    k = rank  # the reduction dim, after the output dims
    out_map = ir.AffineMap.get(rank + 1, 0, [ir.AffineDimExpr.get(d) for d in range(rank)])
    idx_map = ir.AffineMap.get(rank + 1, 0, [ir.AffineDimExpr.get(k if d == ax else d) for d in range(rank)])
    counted = reduction == "mean" or (not include_self and reduction != "none")
    inputs, maps = [indices.value], [idx_map]
    if not scalar_update:
        inputs.append(updates.value)
        maps.append(idx_map)
    outs = [region.value]
    if counted:
        outs.append(emitters.filled(region_shape, "int64", 0, f"{nm}.count"))

    def body(*args):
        i, v = args[0], (args[1] if not scalar_update else emitters.scalar(updates, dt))
        acc = args[-2] if counted else args[-1]
        j = arith_d.index_cast(ir.IndexType.get(), i)
        if negative_indices:
            zero = emitters.index_constant(0)
            j = arith_d.select(arith_d.cmpi(arith_d.CmpIPredicate.slt, j, zero),
                               arith_d.addi(j, emitters.index_constant(n)), j)
        hit = arith_d.cmpi(arith_d.CmpIPredicate.eq, j, linalg_d.IndexOp(ax).result)
        if not counted:
            return [arith_d.select(hit, _combine(reduction, acc, v, dt), acc)]
        cnt = args[-1]
        first = arith_d.cmpi(arith_d.CmpIPredicate.eq, cnt, emitters.scalar(0, "int64"))
        merged = _combine(reduction, acc, v, dt)
        if not include_self:  # the first hit replaces x's value
            merged = arith_d.select(first, v, merged)
        return [arith_d.select(hit, merged, acc),
                arith_d.select(hit, arith_d.addi(cnt, emitters.scalar(1, "int64")), cnt)]

    res = emitters.generic(nm, inputs, maps, outs, [out_map] * len(outs),
                           ["parallel"] * rank + ["reduction"], body)
    y = Tensor(res[0], fn)
    if reduction == "mean":
        y = _mean(fn, y, Tensor(res[1], fn), include_self, f"{nm}.mean")
    if region is not x:
        y = update_slice(x, y, [0] * rank)
    return y


def _mean(fn, total: Tensor, count: Tensor, include_self: bool, name: str) -> Tensor:
    """``total / (count + include_self)`` where ``count > 0`` (ints: floor division, PyTorch's
    ``scatter_reduce`` mean of integers), else ``total`` (the untouched value)."""
    dt = total.dtype
    rank = total.ndim
    ident = emit.identity_map(rank)

    def body(t, c, _out):
        hit = arith_d.cmpi(arith_d.CmpIPredicate.sgt, c, emitters.scalar(0, "int64"))
        c = arith_d.addi(c, emitters.scalar(1, "int64")) if include_self else c
        c = arith_d.select(hit, c, emitters.scalar(1, "int64"))
        if dtypes.is_float(dt):
            return [arith_d.divf(t, arith_d.sitofp(dtypes.to_ir_type(dt), c))]
        c = c if dt == "int64" else arith_d.trunci(dtypes.to_ir_type(dt), c)
        return [arith_d.floordivsi(t, c)]

    res = emitters.generic(name, [total.value, count.value], [ident, ident], [emitters.empty(total.shape, dt)],
                           [ident], ["parallel"] * rank, body)
    return Tensor(res[0], fn)
