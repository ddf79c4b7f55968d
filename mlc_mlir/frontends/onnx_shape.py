"""ONNX converters, shape family: Transpose, Reshape, Flatten, Concat, Squeeze/Unsqueeze,
Gather, GatherElements, GatherND, ScatterElements, Expand, Split, Slice, Pad, Shape, Size, Constant, ConstantOfShape,
Range, Trilu, CenterCropPad.
Conventions as in :mod:`.onnx_ops`; operands the converters need at import time (shapes, axes)
come from ``NodeInputs.np``.

Source: ONNX operator spec (Operators.md), TVM Relax ``onnx_frontend.py``.
"""

from __future__ import annotations

from typing import List

import numpy as np

from .. import ops
from ..builder import Tensor
from ..ir.symbolic import SymDim
from .onnx_registry import (
    OPSETS, NodeInputs, axes_input, np_dtype, register, same_dtype, shape_of,
)


# ---------------------------------------------------------------------------------- shapes
@register("Transpose")
def _transpose(n: NodeInputs) -> List[object]:
    x = n.t(0)
    perm = n.attr("perm")
    return [ops.transpose(x, list(perm) if perm is not None else None)]


@register("Reshape")
def _reshape(n: NodeInputs) -> List[object]:
    x = n.t(0)
    shape = [d if isinstance(d, SymDim) else int(d) for d in (n.np(1, "shape") if n.opset >= 5 else n.attr("shape"))]
    if not n.attr("allowzero", 0):
        shape = [shape_of(x)[i] if isinstance(d, int) and d == 0 else d for i, d in enumerate(shape)]
    return [ops.reshape(x, _infer_minus_one(shape_of(x), shape))]


def _infer_minus_one(src, shape):
    """``shape`` with a -1 replaced by its size when symbolic sizes are involved: the source
    dims left after cancelling the symbolic target dims equal to one of them, divided by the
    product of the target's static dims (``(batch, seq) -> (-1, seq)`` gives ``batch``).
    Static shapes and shapes this cannot resolve are returned as they are (``ops.reshape``
    infers or rejects them)."""
    if -1 not in [d for d in shape if isinstance(d, int)] or \
            not any(isinstance(d, SymDim) for d in list(src) + list(shape)):
        return shape
    left, static = list(src), 1
    for d in shape:
        if isinstance(d, SymDim):
            if d not in left:
                return shape
            left.remove(d)
        elif d != -1:
            static *= int(d)
    rest = 1
    for d in left:
        rest = rest * d
    if static == 0 or (isinstance(rest, int) and rest % static):
        return shape
    size = rest // static
    return [size if isinstance(d, int) and d == -1 else d for d in shape]


@register("Flatten")
def _flatten(n: NodeInputs) -> List[object]:
    x = n.t(0)
    shape = shape_of(x)
    axis = int(n.attr("axis", 1))
    axis = axis + len(shape) if axis < 0 else axis
    return [ops.reshape(x, (int(np.prod(shape[:axis])), int(np.prod(shape[axis:]))))]


@register("Concat")
def _concat(n: NodeInputs) -> List[object]:
    vals = [n.t(i) for i in range(len(n)) if n.has(i)]
    ref = next((v for v in vals if isinstance(v, Tensor)), vals[0])
    vals = [same_dtype(n, ref, v)[1] for v in vals]
    return [ops.concat(vals, axis=int(n.attr("axis")))]



@register("Squeeze")
def _squeeze(n: NodeInputs) -> List[object]:
    return [ops.squeeze(n.t(0), axes_input(n, 13))]


@register("Unsqueeze")
def _unsqueeze(n: NodeInputs) -> List[object]:
    return [ops.unsqueeze(n.t(0), axes_input(n, 13))]


def _indices(n: NodeInputs):
    """Input 1 of an index op (Gather, Scatter and their variants): a Tensor, or a constant as
    an int64 array (ONNX allows int32 and int64 indices)."""
    idx = n.t(1)
    return idx if isinstance(idx, Tensor) else np.asarray(idx).astype(np.int64)


@register("Gather")
def _gather(n: NodeInputs) -> List[object]:
    return [ops.gather(n.t(0), _indices(n), axis=int(n.attr("axis", 0)))]


@register("GatherElements", opsets=(11, OPSETS[1]))
def _gather_elements(n: NodeInputs) -> List[object]:
    return [ops.gather_elements(n.t(0), _indices(n), axis=int(n.attr("axis", 0)))]


@register("ScatterElements", opsets=(11, OPSETS[1]))
@register("Scatter", opsets=(9, 10))
def _scatter_elements(n: NodeInputs) -> List[object]:
    """``ops.scatter_elements`` (negative indices count from the end, as ONNX allows);
    ``reduction`` none/add/mul/max/min (opset 16/18). ``Scatter`` (opset 9-10, deprecated at
    11) is ScatterElements without ``reduction``."""
    idx = _indices(n)
    reduction = n.attr("reduction", b"none").decode()
    if reduction not in ("none", "add", "mul", "max", "min"):
        raise n.fail(f"attribute 'reduction' is {reduction!r}; expected none, add, mul, max or min")
    return [ops.scatter_elements(n.t(0), idx, n.t(2), axis=int(n.attr("axis", 0)), reduction=reduction,
                                 negative_indices=True)]


@register("GatherND", opsets=(11, OPSETS[1]))
def _gather_nd(n: NodeInputs) -> List[object]:
    return [ops.gather_nd(n.t(0), _indices(n), batch_dims=int(n.attr("batch_dims", 0)))]


@register("Expand")
def _expand(n: NodeInputs) -> List[object]:
    return [ops.expand(n.t(0), [d if isinstance(d, SymDim) else int(d) for d in n.np(1, "shape")])]


@register("Split")
def _split(n: NodeInputs) -> List[object]:
    x = n.t(0)
    axis = int(n.attr("axis", 0))
    size = shape_of(x)[axis]
    if n.opset >= 13 and n.has(1):
        sizes = [int(s) for s in n.np(1, "split")]
    elif n.opset < 13 and n.attr("split") is not None:
        sizes = list(n.attr("split"))
    else:
        parts = int(n.attr("num_outputs", len(n.node.output)))
        chunk = -(-size // parts)
        sizes = [min(chunk, size - i * chunk) for i in range(parts)]
    return ops.split(x, sizes, axis=axis)


@register("Slice")
def _slice(n: NodeInputs) -> List[object]:
    x = n.t(0)
    if n.opset < 10:
        starts, ends, axes, steps = n.attr("starts"), n.attr("ends"), n.attr("axes"), None
    else:
        starts, ends = n.np(1, "starts"), n.np(2, "ends")
        axes = n.np(3, "axes") if n.has(3) else None
        steps = n.np(4, "steps") if n.has(4) else None
    axes = list(range(len(starts))) if axes is None else [int(a) % len(shape_of(x)) for a in axes]
    steps = [1] * len(starts) if steps is None else [int(s) for s in steps]
    if any(s == 0 for s in steps):
        raise n.fail(f"input 'steps' is {steps}; expected non-zero steps")
    lim = lambda v: v if isinstance(v, SymDim) else int(max(min(int(v), 2**62), -2**62))  # noqa: E731
    starts, ends = [lim(b) for b in starts], [lim(e) for e in ends]
    back = [(a, b, e, s) for a, b, e, s in zip(axes, starts, ends, steps) if s < 0]
    fwd = [(a, b, e, s) for a, b, e, s in zip(axes, starts, ends, steps) if s > 0]
    if fwd:
        # an end at the int64 limits (INT64_MAX: "to the end") is None: no clamp left in the sizes
        x = ops.slice(x, [b for _, b, _, _ in fwd],
                      [_end_from(n, shape_of(x)[a], e) if isinstance(e, SymDim) else None if e == 2**62 else e
                       for a, _, e, _ in fwd], strides=[s for *_, s in fwd], axes=[a for a, *_ in fwd])
    for a, b, e, s in back:
        x = _reverse_slice(n, x, a, b, e, s)
    return [x]


def _reverse_slice(n: NodeInputs, x, axis: int, b, e, s: int):
    """``x[b:e:s]`` along ``axis`` for a negative step ``s`` (Python / ONNX Slice rules: a
    negative bound counts from the end; the start clamps to ``-1 .. size - 1``, the end to
    ``-1 .. size - 1``, INT64_MIN meaning before the first element), gathered with
    :func:`~mlc_mlir.ops.take` at ``arange(start, end, s)`` (a constant index array for a
    static size; for a symbolic one the bounds are size expressions with ``min``/``max``)."""
    size = shape_of(x)[axis]
    if not isinstance(size, SymDim):
        if isinstance(b, SymDim) or isinstance(e, SymDim):
            raise n.fail(f"a symbolic start/end {b}:{e} with the negative step {s}; expected int bounds")
        return ops.take(x, np.arange(*slice(b, e, s).indices(size)), axis=axis)
    sc = size.scope

    def bound(v, edge):
        if v == edge:                      # INT64_MAX start / INT64_MIN end: the far edges
            return size - 1 if edge > 0 else -1
        if isinstance(v, SymDim) or v >= 0:
            return sc.maximum(sc.minimum(v, size - 1), -1)
        return sc.maximum(size + v, -1)

    start, stop = bound(b, 2**62), bound(e, -2**62)
    return ops.take(x, ops.arange(start, sc.minimum(stop, start), s), axis=axis)


def _end_from(n: NodeInputs, size, end):
    """A symbolic Slice end as ``ops.slice`` takes it: None where it is the axis size (or
    provably beyond it by a constant), ``k < 0`` where it is ``size + k``, else the symbolic end
    itself (``ops.slice`` then proves it within the size from the dims' bounds)."""
    diff = end - size
    if not isinstance(diff, int):
        return end
    return None if diff >= 0 else diff


@register("CenterCropPad", opsets=(18, OPSETS[1]))
def _center_crop_pad(n: NodeInputs) -> List[object]:
    """Each of ``axes`` (default all) cropped or zero-padded to ``shape`` about its center: a
    crop starts at ``(in - out) // 2``, a pad puts ``(out - in) // 2`` before (ONNX spec)."""
    x = n.t(0)
    shape = shape_of(x)
    rank = len(shape)
    target = [int(v) for v in n.np(1, "shape").reshape(-1)]
    axes = [int(a) for a in n.attr("axes", range(rank))]
    if len(axes) != len(target) or any(not -rank <= a < rank for a in axes):
        raise n.fail(f"'axes' {axes} and 'shape' {target}; expected one size per axis in [{-rank}, {rank})")
    begin, end, widths = [None] * rank, [None] * rank, [(0, 0)] * rank
    for a, t in zip(axes, target):
        a %= rank
        if t < shape[a]:
            begin[a], end[a] = (shape[a] - t) // 2, (shape[a] - t) // 2 + t
        elif t > shape[a]:
            widths[a] = ((t - shape[a]) // 2, t - shape[a] - (t - shape[a]) // 2)
    if any(b is not None for b in begin):
        x = ops.slice(x, begin, end)
    return [ops.pad(x, widths) if any(w != (0, 0) for w in widths) else x]


@register("Pad")
def _pad(n: NodeInputs) -> List[object]:
    x = n.t(0)
    mode = n.attr("mode", b"constant").decode()
    if mode not in ("constant", "reflect", "edge", "wrap"):
        raise n.fail(f"attribute 'mode' is {mode!r}; expected constant, reflect, edge or wrap")
    rank = len(shape_of(x))
    if n.opset < 11:
        pads, value = list(n.attr("pads")), float(n.attr("value", 0.0))
    else:
        pads = [int(p) for p in n.np(1, "pads")]
        value = n.np(2, "constant_value").item() if n.has(2) else 0
        if n.has(3):
            axes = [int(a) % rank for a in n.np(3, "axes")]
            full = [0] * (2 * rank)
            for j, a in enumerate(axes):
                full[a], full[a + rank] = pads[j], pads[j + len(axes)]
            pads = full
    if min(pads) < 0:
        raise n.fail(f"input 'pads' is {pads}; expected non-negative pads")
    return [ops.pad(x, [(pads[i], pads[i + rank]) for i in range(rank)], constant_value=value, mode=mode)]


@register("Shape")
def _shape_op(n: NodeInputs) -> List[object]:
    """The shape as an int64 array; with symbolic sizes, an object array holding them (read by
    shape arguments such as Reshape's)."""
    dims = shape_of(n.values[0])
    static = all(isinstance(d, (int, np.integer)) for d in dims)
    shape = np.array(dims, np.int64) if static else np.array(list(dims), dtype=object)
    return [shape[n.attr("start", 0):n.attr("end", len(shape))]]


@register("Size")
def _size(n: NodeInputs) -> List[object]:
    return [np.array(int(np.prod(shape_of(n.values[0]))), np.int64)]


@register("Constant")
def _constant(n: NodeInputs) -> List[object]:
    from onnx import numpy_helper
    (name, v), = n.attrs.items()
    if name == "value":
        return [np.asarray(numpy_helper.to_array(v))]
    if name in ("value_float", "value_int"):
        return [np.array(v, np.float32 if name == "value_float" else np.int64)]
    if name in ("value_floats", "value_ints"):
        return [np.array(v, np.float32 if name == "value_floats" else np.int64)]
    raise n.fail(f"attribute {name!r} is not supported; expected value, value_float(s), value_int(s)")


@register("ConstantOfShape")
def _constant_of_shape(n: NodeInputs) -> List[object]:
    """A zero-stride numpy view (``np.broadcast_to``): it becomes a splat constant, never a
    materialized array (the light model zoo builds every weight this way)."""
    from onnx import numpy_helper
    shape = tuple(int(d) for d in n.np(0, "input"))
    if any(d < 0 for d in shape):
        raise n.fail(f"input 'input' is {list(shape)}; expected non-negative dims")
    v = n.attr("value")
    value = numpy_helper.to_array(v).reshape(()) if v is not None else np.zeros((), np.float32)
    return [np.broadcast_to(value, shape)]


@register("Tile")
def _tile(n: NodeInputs) -> List[object]:
    """numpy ``tile``: ``(d0, d1..)`` -> reshape ``(1, d0, 1, d1..)`` -> expand
    ``(r0, d0, r1, d1..)`` -> reshape ``(r0*d0, r1*d1..)``."""
    x = n.t(0)
    shape = shape_of(x)
    reps = [int(r) for r in n.np(1, "repeats").reshape(-1)]
    if len(reps) != len(shape) or min(reps, default=1) < 0:
        raise n.fail(f"input 'repeats' is {reps}; expected {len(shape)} non-negative counts")
    inter = tuple(v for d in shape for v in (1, d))
    big = tuple(v for r, d in zip(reps, shape) for v in (r, d))
    return [ops.reshape(ops.expand(ops.reshape(x, inter), big), tuple(r * d for r, d in zip(reps, shape)))]


@register("Range", opsets=(11, OPSETS[1]))
def _range(n: NodeInputs) -> List[object]:
    """``numpy.arange`` at import time; a symbolic bound (a size from Shape) gives
    :func:`ops.arange` over a symbolic length."""
    start, limit, delta = (n.np(i, a) for i, a in enumerate(("start", "limit", "delta")))
    vals = [v.reshape(()).item() if v.dtype == object else v.reshape(()) for v in (start, limit, delta)]
    if any(isinstance(v, SymDim) for v in vals):
        dtype = next(str(v.dtype) for v in (start, limit, delta) if v.dtype != object) \
            if any(v.dtype != object for v in (start, limit, delta)) else "int64"
        return [ops.arange(*[v if isinstance(v, SymDim) else v.item() for v in vals], dtype=dtype)]
    return [np.arange(start, limit, delta).astype(start.dtype)]


@register("Trilu", opsets=(14, OPSETS[1]))
def _trilu(n: NodeInputs) -> List[object]:
    """``where(mask, x, 0)`` with the numpy ``triu``/``tril`` mask of the last two dims."""
    x = n.t(0)
    shape = shape_of(x)
    if len(shape) < 2:
        raise n.fail(f"input 'input' has shape {shape}; expected at least 2-D")
    k = int(n.np(1, "k").reshape(-1)[0]) if n.has(1) else 0
    rows, cols = shape[-2:]
    ones = np.ones((rows, cols), np.int8)
    mask = np.triu(ones, k) if n.attr("upper", 1) else np.tril(ones, k)
    return [ops.where(mask, x, np.zeros((), np_dtype(x)))]
