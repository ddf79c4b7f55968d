"""The determinant of square matrices, ``det``: Gaussian elimination with partial pivoting
(the LU factorization LAPACK's ``getrf`` computes, which ``numpy.linalg.det`` and
``torch.linalg.det`` call), unrolled over the static order ``n`` as whole-matrix tensor ops.

Step ``k`` of ``n``, on the batch ``A`` (B, n, n): the pivot row ``p`` is the first row
``>= k`` with the largest ``|A[p, k]|`` (``argmax``); rows ``k`` and ``p`` swap (two ``where``
selects against the row iota; a swap flips the sign); the determinant takes the pivot as a
factor; rows below ``k`` subtract ``A[i, k] / pivot`` times the pivot row (a broadcast
multiply-subtract masked to ``i > k``). A zero pivot (a singular matrix) makes the
determinant 0 and is replaced by 1 in the division so that no NaN reaches later steps. Each
step is ~15 ops, so the graph grows linearly with ``n``: orders up to :data:`MAX_ORDER`.

Source: Golub and Van Loan, "Matrix Computations" (4th ed.), algorithm 3.4.1 (Gaussian
elimination with partial pivoting); ONNX ``Det``; ``numpy.linalg.det``.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from ..errors import BuildError
from ..ir import dtypes
from .elementwise import divide, multiply, subtract
from .generators import full
from .math_ops import abs as abs_
from .math_ops import equal, where
from .reduction import argmax, sum as sum_
from .shape import reshape, slice
from .tensor import Tensor

#: the largest matrix order ``det`` unrolls (its graph has ~15 ops per order)
MAX_ORDER = 64


def det(x, name: Optional[str] = None) -> Tensor:
    """Determinants of the square matrices in the last two axes of ``x``.

    Parameters
    ----------
    x : Tensor, shape (..., n, n), static, a float dtype, ``n <= MAX_ORDER``

    Returns
    -------
    Tensor
        Shape ``x.shape[:-2]`` (a 0-d tensor for one matrix), x's dtype; ``det`` of a 0 x 0
        matrix is 1.

    Raises
    ------
    BuildError
        If ``x`` is not a Tensor of rank >= 2 with equal static last two axes, its dtype is not
        a float dtype, or ``n > MAX_ORDER``.
    """
    nm = name or "det"
    if not isinstance(x, Tensor):
        raise BuildError(f"det: argument 'x' is {type(x).__name__}; expected a Tensor")
    shape = tuple(x.shape)
    if len(shape) < 2 or not all(isinstance(d, int) for d in shape) or shape[-1] != shape[-2]:
        raise BuildError(f"det: argument 'x' has shape {shape}; expected static (..., n, n)")
    if not dtypes.is_float(x.dtype):
        raise BuildError(f"det: argument 'x' has dtype {x.dtype}; expected a float dtype")
    n = shape[-1]
    if n > MAX_ORDER:
        raise BuildError(f"det: argument 'x' has order {n}; expected at most {MAX_ORDER} (the elimination is "
                         "unrolled over the order)")
    batch = int(np.prod(shape[:-2], dtype=np.int64))
    dt = dtypes.to_numpy_dtype(x.dtype)
    one, zero = np.asarray(1, dt), np.asarray(0, dt)
    if n == 0:
        return full(shape[:-2], 1.0, x.dtype, name=nm)
    a = reshape(x, (batch, n, n), name=f"{nm}.batch")
    rows = np.arange(n, dtype=np.int64).reshape(1, n, 1)
    result, sign = None, None
    for k in range(n):
        col = slice(a, [k], [k + 1], axes=[2])                                  # (B, n, 1)
        score = where((rows >= k).astype(np.int8), abs_(col), np.asarray(-1, dt))
        p = argmax(score, axis=1, keepdims=True)                                 # (B, 1, 1) int64
        at_p = equal(p, rows)                                                    # (B, n, 1)
        row_p = sum_(where(at_p, a, zero), axis=1, keepdims=True)                # (B, 1, n)
        row_k = slice(a, [k], [k + 1], axes=[1])
        a = where((rows == k).astype(np.int8), row_p, where(at_p, row_k, a))
        swapped = where(equal(p, np.int64(k)), one, np.asarray(-1, dt))        # (B, 1, 1)
        pivot = slice(row_p, [k], [k + 1], axes=[2])                             # (B, 1, 1)
        result = pivot if result is None else multiply(result, pivot)
        sign = swapped if sign is None else multiply(sign, swapped)
        if k + 1 < n:
            safe = where(equal(pivot, zero), one, pivot)
            below = where((rows > k).astype(np.int8), divide(slice(a, [k], [k + 1], axes=[2]), safe), zero)
            a = subtract(a, multiply(below, row_p))
    return reshape(multiply(result, sign), shape[:-2], name=nm)
