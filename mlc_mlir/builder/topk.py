"""``topk``: the k largest (or smallest) elements along an axis and their indices (ONNX
``TopK``, PyTorch ``torch.topk``, TOPI ``topk``), built from ``argmax`` rounds.

linalg has no sort, so the selection is k rounds over the axis, each one ``argmax`` (the first
maximum: ties go to the lower index, as ONNX requires) of the elements not taken yet, a
``gather_elements`` of the value and an ``equal`` against the positions that marks it taken:
``O(k * n)`` work per row, for the small k of classification heads and detection post-processing.
Taken elements are masked with the dtype's lowest value; when every remaining element equals
that value (``-inf`` inputs), the round takes the first element not taken yet, so an input
``-inf`` is never confused with a masked one. The smallest elements are the largest of an
order-reversing key: ``-x`` for floats, ``-1 - x`` (bitwise not, no overflow) for integers.

Source: ONNX ``TopK`` (opset 11: ``largest``, ``sorted``; ties by lower index).
"""

from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

from .._mlir import arith_d, ir, linalg_d
from ..errors import BuildError, format_shape
from ..ir import dtypes
from .elementwise import maximum, negative, subtract
from . import linalg_emit as emit
from .math_ops import equal, where
from .reduction import argmax
from .reduction import max as reduce_max
from .shape import concat
from .take import gather_elements
from .tensor import Tensor


def _lowest(dtype: str):
    """The smallest value of ``dtype`` as a Python scalar (-inf for floats)."""
    return float("-inf") if dtypes.is_float(dtype) else int(np.iinfo(dtypes.to_numpy_dtype(dtype)).min)


def positions(shape, ax: int, fn, prefix: str = "topk") -> Tensor:
    """An int64 tensor of ``shape`` holding each element's index along ``ax`` (numpy
    ``arange`` reshaped), computed by a ``linalg.generic`` from ``linalg.index`` rather than
    stored: a constant would grow with the axis. The op is named ``<prefix>.positions``."""
    i64 = ir.IntegerType.get_signless(64)
    out = emit.empty(shape, "int64")
    (r,) = emit.generic(emit.op_name(fn, f"{prefix}.positions", None), [], [], [out],
                        [emit.identity_map(len(shape))], ["parallel"] * len(shape),
                        lambda _: [arith_d.index_cast(i64, linalg_d.IndexOp(ax).result)])
    return Tensor(r, fn)


def topk(x, k: int, axis: int = -1, largest: bool = True, sorted: bool = True,  # noqa: A002
         name: Optional[str] = None) -> Tuple[Tensor, Tensor]:
    """The ``k`` largest (``largest=False``: smallest) elements of ``x`` along ``axis``, in
    order, and their indices (see the module docstring for how it is emitted).

    Parameters
    ----------
    x : Tensor, rank >= 1
        dtype float16/bfloat16/float32/float64 or int8/16/32/64.
    k : int
        ``1 <= k <= x.shape[axis]``.
    axis : int
    largest : bool
    sorted : bool
        Accepted for ONNX; the result is always sorted (a valid order for ``sorted=False``).

    Returns
    -------
    (values, indices)
        ``x``'s shape with ``k`` along ``axis``; values in x's dtype, indices int64.

    Raises
    ------
    BuildError
        For a non-Tensor or 0-d x, an axis out of range, or k outside ``1..x.shape[axis]``.
    """
    op = name or "topk"
    if not isinstance(x, Tensor):
        raise BuildError(f"{op}: argument 'x' is {type(x).__name__}; expected a Tensor")
    rank = len(x.shape)
    if rank == 0 or not -rank <= axis < rank:
        raise BuildError(f"{op}: argument 'axis' is {axis}; expected an axis of x {format_shape(x.shape)}")
    ax = axis % rank
    n = x.shape[ax]
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= n:
        raise BuildError(f"{op}: argument 'k' is {k!r}; expected an int in 1..{n} (x {format_shape(x.shape)}, "
                         f"axis {axis})")
    if largest:
        key = x
    elif dtypes.is_float(x.dtype):
        key = negative(x)
    else:
        key = subtract(np.asarray(-1, dtypes.to_numpy_dtype(x.dtype)), x)
    low = _lowest(x.dtype)
    pos = positions([n if d == ax else 1 for d in range(rank)], ax, x.fn)
    values, indices, taken = [], [], None
    for _ in range(int(k)):
        if taken is None:
            idx = argmax(key, axis=ax, keepdims=True)
        else:
            masked = where(taken, low, key)
            idx = argmax(masked, axis=ax, keepdims=True)
            # every element left equals the mask value: take the first one not taken yet
            first_free = argmax(subtract(np.asarray(1, np.int8), taken), axis=ax, keepdims=True)
            idx = where(equal(reduce_max(masked, axis=ax, keepdims=True), low), first_free, idx)
        hit = equal(pos, idx)
        taken = hit if taken is None else maximum(taken, hit)
        values.append(gather_elements(x, idx, axis=ax))
        indices.append(idx)
    if len(values) == 1:
        return values[0], indices[0]
    return concat(values, axis=ax), concat(indices, axis=ax)
