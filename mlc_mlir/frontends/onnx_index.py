"""ONNX converters of index-driven selection: Hardmax, OneHot, ScatterND. Conventions as in
:mod:`.onnx_ops`.

* ``Hardmax``: 1 at the first maximum along ``axis`` (``argmax`` compared with an ``arange``),
  0 elsewhere; before opset 13 the input is coerced to 2-D at ``axis``.
* ``OneHot``: ``values[1]`` where ``arange(depth) == indices`` (negative indices count from
  ``depth``; float indices are truncated), ``values[0]`` elsewhere; ``depth`` is static.
* ``ScatterND``: data (d0..dr-1), indices (..., k), updates ``indices.shape[:-1] +
  data.shape[k:]``: the data is viewed as (d0*..*dk-1, rest), each index tuple becomes a row
  number, and ``ops.scatter_elements`` writes whole rows along axis 0 (reduction none, add,
  mul, max, min).

Source: ONNX operator spec (Operators.md); ``onnx.reference.ops.op_scatternd``.
"""

from __future__ import annotations

from typing import List

import numpy as np

from .. import ops
from ..builder import Tensor
from .onnx_registry import NodeInputs, dtype_of, np_dtype, register, shape_of


def _axis_iota(shape: tuple, axis: int) -> np.ndarray:
    """int64 positions along ``axis``, shaped to broadcast against ``shape``."""
    view = [1] * len(shape)
    view[axis] = shape[axis]
    return np.arange(shape[axis], dtype=np.int64).reshape(view)


@register("Hardmax")
def _hardmax(n: NodeInputs) -> List[object]:
    x = n.t(0)
    shape = shape_of(x)
    rank = len(shape)
    axis = int(n.attr("axis", -1 if n.opset >= 13 else 1))
    if not -rank <= axis < rank:
        raise n.fail(f"attribute 'axis' is {axis}; expected in [{-rank}, {rank})")
    axis %= rank
    if n.opset < 13:  # coerce to (prod(shape[:axis]), prod(shape[axis:])), reduce axis 1
        x = ops.reshape(x, (int(np.prod(shape[:axis])), int(np.prod(shape[axis:]))))
    red = 1 if n.opset < 13 else axis
    i = ops.argmax(x, axis=red, keepdims=True)
    dt = np_dtype(x)
    y = ops.where(ops.equal(i, _axis_iota(shape_of(x), red)), np.ones((), dt), np.zeros((), dt))
    return [ops.reshape(y, shape) if n.opset < 13 else y]


@register("OneHot", opsets=(9, 28))
def _one_hot(n: NodeInputs) -> List[object]:
    idx = n.t(0)
    depth = int(np.asarray(n.np(1, "depth")).reshape(-1)[0])
    if depth < 1:
        raise n.fail(f"input 'depth' is {depth}; expected >= 1")
    values = n.t(2)
    if tuple(shape_of(values)) != (2,):
        raise n.fail(f"input 'values' has shape {shape_of(values)}; expected (2,)")
    if isinstance(values, Tensor):
        off, on = [ops.reshape(v, ()) for v in ops.split(values, [1, 1], axis=0)]
    else:
        off, on = np.asarray(values)[0], np.asarray(values)[1]
    rank = len(shape_of(idx)) + 1
    axis = int(n.attr("axis", -1))
    if not -rank <= axis < rank:
        raise n.fail(f"attribute 'axis' is {axis}; expected in [{-rank}, {rank})")
    axis %= rank
    idx = ops.cast(idx, "int64") if dtype_of(idx) != "int64" else idx
    idx = ops.where(ops.less(idx, np.int64(0)), ops.add(idx, np.int64(depth)), idx)
    idx = ops.unsqueeze(idx, [axis])
    out_shape = list(shape_of(idx))
    out_shape[axis] = depth
    return [ops.where(ops.equal(idx, _axis_iota(tuple(out_shape), axis)), on, off)]


@register("ScatterND", opsets=(11, 28))
def _scatter_nd(n: NodeInputs) -> List[object]:
    data, idx, upd = n.t(0), n.t(1), n.t(2)
    shape, ishape = shape_of(data), shape_of(idx)
    k = ishape[-1]
    if not 1 <= k <= len(shape):
        raise n.fail(f"input 'indices' has last dim {k}; expected in [1, {len(shape)}]")
    want = tuple(ishape[:-1]) + tuple(shape[k:])
    if shape_of(upd) != want:
        raise n.fail(f"input 'updates' has shape {shape_of(upd)}; expected {want}")
    reduction = n.str_attr("reduction", "none")
    if reduction not in ("none", "add", "mul", "max", "min"):
        raise n.fail(f"attribute 'reduction' is {reduction!r}; expected none, add, mul, max or min")
    rows, rest, count = int(np.prod(shape[:k])), int(np.prod(shape[k:])), int(np.prod(ishape[:-1]))
    dims = np.asarray(shape[:k], np.int64)
    strides = np.asarray([int(np.prod(shape[j + 1:k])) for j in range(k)], np.int64)
    if isinstance(idx, Tensor):
        idx = ops.cast(idx, "int64") if dtype_of(idx) != "int64" else idx
        idx = ops.where(ops.less(idx, np.int64(0)), ops.add(idx, dims), idx)
        row = ops.sum(ops.multiply(idx, strides), axis=(-1,), dtype="int64")
        row = ops.expand(ops.reshape(row, (count, 1)), (count, rest))
    else:
        i = np.asarray(idx).astype(np.int64)
        i = np.where(i < 0, i + dims, i)
        row = np.ascontiguousarray(np.broadcast_to((i * strides).sum(-1).reshape(count, 1), (count, rest)))
    y = ops.scatter_elements(ops.reshape(data, (rows, rest)), row, ops.reshape(upd, (count, rest)),
                             axis=0, reduction=reduction)
    return [ops.reshape(y, shape)]
