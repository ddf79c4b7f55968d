"""ONNX converters of index-driven selection: Hardmax, OneHot, ScatterND, Compress,
ReverseSequence, EyeLike. Conventions as in :mod:`.onnx_ops`.

* ``Hardmax``: 1 at the first maximum along ``axis`` (``argmax`` compared with an ``arange``),
  0 elsewhere; before opset 13 the input is coerced to 2-D at ``axis``.
* ``OneHot``: ``values[1]`` where ``arange(depth) == indices`` (negative indices count from
  ``depth``; float indices are truncated), ``values[0]`` elsewhere; ``depth`` is static.
* ``ScatterND``: data (d0..dr-1), indices (..., k), updates ``indices.shape[:-1] +
  data.shape[k:]``: the data is viewed as (d0*..*dk-1, rest), each index tuple becomes a row
  number, and ``ops.scatter_elements`` writes whole rows along axis 0 (reduction none, add,
  mul, max, min).
* ``Compress``: ``numpy.compress``; the output size is the number of true entries of
  ``condition``, so ``condition`` must be known at import time (an initializer, a Constant or
  an input bound with ``from_onnx(input_values=...)``; the ONNX backend binds it per distinct
  value): its true positions become a constant index of ``ops.take``. A condition computed at
  run time is refused (the compiled code has no data-dependent output shapes).
* ``ReverseSequence``: ``ops.gather_elements`` along the time axis with the source position
  ``len[b] - 1 - t`` for ``t < len[b]`` and ``t`` beyond (``sequence_lens`` may be computed at
  run time).
* ``EyeLike``: the constant ``numpy.eye`` of the input's (static) 2-D shape, diagonal ``k``.

Source: ONNX operator spec (Operators.md); ``onnx.reference.ops.op_scatternd``.
"""

from __future__ import annotations

from typing import List

import numpy as np

from .. import ops
from ..builder import Tensor
from .onnx_registry import ONNX_DTYPES, NodeInputs, dtype_of, np_dtype, register, shape_of


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


@register("Compress", opsets=(9, 28))
def _compress(n: NodeInputs) -> List[object]:
    x = n.t(0)
    if n.has(1) and isinstance(n.values[1], Tensor):
        raise n.fail("input 'condition' is computed at run time; expected a constant (an initializer, a Constant, "
                     "or a graph input bound with from_onnx(input_values=...)): the output size is its count of "
                     "true entries")
    cond = np.asarray(n.np(1, "condition")).reshape(-1).astype(bool)
    axis = n.attr("axis")
    if axis is None:
        x, axis = ops.reshape(x, (int(np.prod(shape_of(x))),)), 0
    rank = len(shape_of(x))
    if not -rank <= int(axis) < rank:
        raise n.fail(f"attribute 'axis' is {axis}; expected in [{-rank}, {rank})")
    axis = int(axis) % rank
    if cond.size > shape_of(x)[axis]:
        raise n.fail(f"input 'condition' has {cond.size} entries; expected at most {shape_of(x)[axis]} "
                     f"(the size of axis {axis})")
    return [ops.take(x, np.nonzero(cond)[0].astype(np.int64), axis=axis)]


@register("ReverseSequence", opsets=(10, 28))
def _reverse_sequence(n: NodeInputs) -> List[object]:
    x, lens = n.t(0), n.t(1)
    shape = shape_of(x)
    t_ax, b_ax = int(n.attr("time_axis", 0)), int(n.attr("batch_axis", 1))
    if len(shape) < 2 or {t_ax, b_ax} != {0, 1}:
        raise n.fail(f"input 'input' has shape {shape} with time_axis {t_ax}, batch_axis {b_ax}; expected rank "
                     ">= 2 and the axes 0 and 1 in either order")
    if shape_of(lens) != (shape[b_ax],):
        raise n.fail(f"input 'sequence_lens' has shape {shape_of(lens)}; expected ({shape[b_ax]},)")
    lens = ops.cast(lens, "int64") if dtype_of(lens) != "int64" else lens
    view = [1] * len(shape)
    view[b_ax] = shape[b_ax]
    lens = ops.reshape(lens, tuple(view))
    t = _axis_iota(shape[:2] + (1,) * (len(shape) - 2), t_ax)
    src = ops.where(ops.less(t, lens), ops.subtract(ops.subtract(lens, np.int64(1)), t), t)
    return [ops.gather_elements(x, ops.expand(src, shape), axis=t_ax)]


@register("EyeLike", opsets=(9, 28))
def _eye_like(n: NodeInputs) -> List[object]:
    shape = shape_of(n.values[0])
    if len(shape) != 2:
        raise n.fail(f"input 'input' has shape {shape}; expected rank 2")
    to = n.attr("dtype")
    if to is None:
        dt = np_dtype(n.values[0])
    elif int(to) in ONNX_DTYPES and ONNX_DTYPES[int(to)] != "bfloat16":
        dt = np.dtype(ONNX_DTYPES[int(to)])
    else:
        raise n.fail(f"attribute 'dtype' is element type {to}; expected one of "
                     f"{sorted(k for k, v in ONNX_DTYPES.items() if v != 'bfloat16')}")
    return [np.eye(shape[0], shape[1], int(n.attr("k", 0)), dtype=dt)]
