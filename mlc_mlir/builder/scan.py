"""Scans: ``cumsum`` as blocked triangular matmuls.

An inclusive prefix sum of a row of length ``L <= B`` is the row times the 0/1 upper
triangular ``(L, L)`` matrix (one ``linalg.matmul``). A longer row is cut into ``ceil(L / B)``
blocks of ``B`` (zero padded): each block's prefix sum is one matmul with the ``(B, B)``
triangle, the block totals are scanned recursively and their exclusive prefix (the total before
each block) is added back. The work is ``O(L * B)`` multiply-adds and no level is longer than
``B``, so the float error grows with ``B`` and the number of levels, not with ``L``. A row of
symbolic length ``L`` is one matmul with an ``(L, L)`` triangle computed at run time (quadratic
work; the blocking needs a static ``L``).

Source: the blocked (two-level) parallel scan of Blelloch, "Prefix sums and their applications"
(1990); ONNX ``CumSum`` (``exclusive``, ``reverse``), ``numpy.cumsum``, ``torch.cumsum``.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from ..errors import BuildError
from .._mlir import arith_d, linalg_d
from ..ir import dtypes, emitters
from ..ir.symbolic import SymDim
from . import linalg_emit as emit
from .elementwise import add, cast, subtract
from .nn import matmul
from .shape import pad, permute, reshape, slice
from .take import take
from .tensor import Tensor

#: the longest row scanned by one triangular matmul (``B`` above)
SCAN_BLOCK = 256


def _scan_rows(x: Tensor) -> Tensor:
    """Inclusive prefix sums of the rows of ``x`` (R, L), float32/float64."""
    r, length = x.shape
    if isinstance(length, SymDim):  # one triangle of the run-time length (quadratic work)
        return matmul(x, _upper_triangle(x.fn, length, x.dtype))
    if length <= SCAN_BLOCK:
        tri = np.triu(np.ones((length, length), dtypes.to_numpy_dtype(x.dtype)))
        return matmul(x, tri)
    nb = -(-length // SCAN_BLOCK)
    xp = pad(x, [(0, 0), (0, nb * SCAN_BLOCK - length)]) if nb * SCAN_BLOCK != length else x
    blocks = reshape(_scan_rows(reshape(xp, (r * nb, SCAN_BLOCK))), (r, nb, SCAN_BLOCK))
    totals = reshape(slice(blocks, [SCAN_BLOCK - 1], [SCAN_BLOCK], axes=[2]), (r, nb))
    before = subtract(_scan_rows(totals), totals)  # exclusive prefix of the block totals
    y = reshape(add(blocks, reshape(before, (r, nb, 1))), (r, nb * SCAN_BLOCK))
    return slice(y, [0], [length], axes=[1]) if nb * SCAN_BLOCK != length else y


def _upper_triangle(fn, n, dtype: str) -> Tensor:
    """The ``(n, n)`` matrix ``t[j, i] = 1 if j <= i else 0`` of a symbolic ``n``, computed by a
    ``linalg.generic`` from ``linalg.index``."""
    def body(_out):
        le = arith_d.cmpi(arith_d.CmpIPredicate.ule, linalg_d.IndexOp(0).result, linalg_d.IndexOp(1).result)
        return [arith_d.select(le, emitters.scalar(1, dtype), emitters.scalar(0, dtype))]

    (t,) = emit.generic(emit.op_name(fn, "cumsum.triangle", None), [], [], [emit.empty((n, n), dtype)],
                        [emit.identity_map(2)], ["parallel", "parallel"], body)
    return Tensor(t, fn)


def cumsum(x, axis: int, dtype: Optional[str] = None, exclusive: bool = False, reverse: bool = False,
           name: Optional[str] = None) -> Tensor:
    """Cumulative sum along ``axis`` (``numpy.cumsum``, ``torch.cumsum``, ONNX ``CumSum``).

    The axis is moved last (``tensor`` transpose when it is not), rows are scanned with blocked
    triangular ``linalg.matmul`` ops (see the module docstring), and the axis is moved back.
    Integer inputs are summed in float64 and cast back: exact while partial sums stay below
    ``2**53``.

    Parameters
    ----------
    x : Tensor, rank >= 1
        dtype in {float16, bfloat16, float32, float64, int8, int16, int32, int64}.
    axis : int
        Negative counts from the end.
    dtype : str, optional
        Result dtype (default x's); x is converted to it first, as ``torch.cumsum(dtype=)``.
    exclusive : bool
        ``y[i] = sum(x[:i])`` instead of ``sum(x[:i + 1])``.
    reverse : bool
        Sum from the end: ``y[i] = sum(x[i:])``.

    Returns
    -------
    Tensor, x's shape, ``dtype``.

    Raises
    ------
    BuildError
        For a non-Tensor or bool input, or an axis out of range.
    """
    op = "cumsum"
    x = emit.tensor_arg(op, "x", x)
    out_dt = dtypes.canonical_dtype(dtype) if dtype is not None else x.dtype
    if x.dtype == "bool" or out_dt == "bool":
        raise BuildError(f"{op}: dtype bool is not supported; expected a float or int dtype (use ops.cast)")
    ax = emit.normalize_axis(op, axis, x.ndim)
    work = out_dt if out_dt in ("float32", "float64") else ("float32" if dtypes.is_float(out_dt) else "float64")
    xf = x if x.dtype == work else cast(x, work)
    length = x.shape[ax]
    if reverse and isinstance(length, SymDim):
        raise BuildError(f"{op}: reverse=True along the symbolic axis {ax} ({length}) is not supported; "
                         "expected a static axis")
    if reverse:
        xf = take(xf, np.arange(length - 1, -1, -1, dtype=np.int64), axis=ax)
    perm = [d for d in range(x.ndim) if d != ax] + [ax]
    xt = permute(xf, perm) if ax != x.ndim - 1 else xf
    y = reshape(_scan_rows(reshape(xt, (emit.prod(xt.shape[:-1]), length))), xt.shape)
    if exclusive:
        y = subtract(y, xt)
    if ax != x.ndim - 1:
        y = permute(y, list(np.argsort(perm)))
    if reverse:
        y = take(y, np.arange(length - 1, -1, -1, dtype=np.int64), axis=ax)
    return y if work == out_dt else cast(y, out_dt, name=name)
