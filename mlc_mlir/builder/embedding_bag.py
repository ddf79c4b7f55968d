"""``embedding_bag``: sums, means or maxima of bags of embedding rows (PyTorch
``EmbeddingBag`` / ``aten._embedding_bag``, TOPI-style composition of :func:`~.take.take` and a
masked reduction).

Bag ``b`` holds the positions ``i`` of ``indices`` with ``starts[b] <= i < ends[b]`` (from
``offsets``, read at run time). The op gathers the rows ``weight[indices]`` ``(L, D)`` once and
reduces them per bag through the membership mask ``M (B, L)`` (positions whose index is
``padding_idx`` masked out): ``sum`` is ``M_w @ rows`` (``M`` times ``per_sample_weights``; a
``matmul``, scheduled as one), ``mean`` divides by the bag's size, ``max`` takes the maximum of
``rows`` where ``M`` is set. The work is ``B L D`` (the dense formulation of a segment
reduction, as :func:`~.scatter.scatter_elements` and XLA's scatter expander use); an empty
bag gives zeros, as in PyTorch.

Source: PyTorch ``aten/src/ATen/native/EmbeddingBag.cpp`` (``_embedding_bag`` modes 0/1/2,
``include_last_offset``, ``padding_idx``, ``per_sample_weights``).
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from ..errors import BuildError, format_shape
from ..ir import dtypes
from . import linalg_emit as emit
from .elementwise import cast, divide, maximum, multiply
from .generators import full
from .math_ops import greater, less, less_equal, not_equal, where
from .nn import matmul
from .reduction import max as max_, sum as sum_
from .shape import concat, reshape, slice
from .take import take
from .tensor import Tensor

MODES = ("sum", "mean", "max")


def embedding_bag(weight, indices, offsets, mode: str = "sum", per_sample_weights=None,
                  include_last_offset: bool = False, padding_idx: Optional[int] = None,
                  name: Optional[str] = None) -> Tensor:
    """Reduce the rows of ``weight`` named by ``indices`` per bag (see the module docstring).

    Parameters
    ----------
    weight : Tensor or numpy.ndarray (V, D), float dtype
    indices : Tensor or numpy.ndarray (L,), int32/int64, each in ``[0, V)`` (checked at run time)
    offsets : Tensor or numpy.ndarray (B,) (``(B + 1,)`` with ``include_last_offset``), int32/int64
        Start of each bag in ``indices``, non-decreasing; the last bag ends at ``L`` (or at the
        extra last offset).
    mode : str
        ``sum``, ``mean`` or ``max``.
    per_sample_weights : Tensor or numpy.ndarray (L,), weight's dtype, optional
        Scales each row (``sum`` only).
    include_last_offset : bool
    padding_idx : int, optional
        Rows with this index are left out of their bag (and of its size for ``mean``).

    Returns
    -------
    Tensor (B, D), weight's dtype.

    Raises
    ------
    BuildError
        For an unknown mode, per-sample weights with ``mean``/``max`` or of the wrong shape, a
        non-float weight, indices or offsets that are not 1-D integer tensors (2-D indices are
        flattened by ``torch.nn.functional.embedding_bag`` before this op), or no bag.
    """
    op = "embedding_bag"
    fn = emit.function_of(op, weight, indices, offsets, per_sample_weights)
    weight = emit.tensor_arg(op, "weight", weight)
    if mode not in MODES:
        raise BuildError(f"{op}: argument 'mode' is {mode!r}; expected one of {list(MODES)}")
    if weight.ndim != 2 or not dtypes.is_float(weight.dtype):
        raise BuildError(f"{op}: argument 'weight' has shape {format_shape(weight.shape)} and dtype {weight.dtype}; "
                         "expected (V, D) of a float dtype")
    for arg, v in (("indices", indices), ("offsets", offsets)):
        dt = v.dtype if isinstance(v, Tensor) else str(np.asarray(v).dtype)
        if len(v.shape) != 1 or dt not in ("int32", "int64"):
            raise BuildError(f"{op}: argument '{arg}' has shape {format_shape(tuple(v.shape))} and dtype {dt}; "
                             "expected 1-D int32 or int64")
    n_len, n_off = indices.shape[0], offsets.shape[0]
    bags = n_off - 1 if include_last_offset else n_off
    if not isinstance(n_len, int) or not isinstance(n_off, int) or bags < 1:
        raise BuildError(f"{op}: arguments 'indices' {format_shape(tuple(indices.shape))} and 'offsets' "
                         f"{format_shape(tuple(offsets.shape))}; expected static lengths and at least one bag")
    if per_sample_weights is not None and (mode != "sum" or tuple(per_sample_weights.shape) != (n_len,)):
        raise BuildError(f"{op}: argument 'per_sample_weights' has shape "
                         f"{format_shape(tuple(per_sample_weights.shape))} with mode {mode!r}; expected ({n_len},) "
                         "with mode 'sum'")
    nm = emit.op_name(fn, op, name)
    dim = weight.shape[1]
    if n_len == 0:
        return full((bags, dim), 0, weight.dtype, name=nm)
    if isinstance(offsets, Tensor):
        offsets = cast(offsets, "int64")
        starts = slice(offsets, [0], [bags])
        ends = slice(offsets, [1], [bags + 1]) if include_last_offset else \
            concat([slice(offsets, [1], [bags]), np.array([n_len], np.int64)]) if bags > 1 else np.array([n_len])
    else:
        offsets = np.asarray(offsets, np.int64)
        starts = offsets[:bags]
        ends = offsets[1:bags + 1] if include_last_offset else np.append(offsets[1:bags], n_len)
    pos = np.arange(n_len, dtype=np.int64).reshape(1, n_len)
    col = (bags, 1)
    member = multiply(less_equal(reshape(starts, col), pos), less(pos, reshape(ends, col)))  # (B, L) int8
    if padding_idx is not None:
        member = multiply(member, reshape(not_equal(indices, np.asarray(padding_idx, indices.dtype)), (1, n_len)))
    rows = take(weight, indices, axis=0, negative_indices=False, name=f"{nm}.rows")
    mask = cast(member, weight.dtype)
    if mode == "max":
        picked = where(reshape(member, (bags, n_len, 1)), reshape(rows, (1, n_len, dim)), -np.inf)
        filled = greater(sum_(mask, axis=1, keepdims=True), 0.0)
        return where(filled, max_(picked, axis=1), 0.0, name=nm)
    if per_sample_weights is not None:
        mask = multiply(mask, reshape(per_sample_weights, (1, n_len)))
    total = matmul(mask, rows)
    if mode == "sum":
        return total
    return divide(total, maximum(sum_(mask, axis=1, keepdims=True), 1.0), name=nm)
