"""Shape ops (TOPI's ``transform`` category): reshape, transpose, flatten, concat, slice, pad,
broadcast_to — emitted as ``tensor`` ops (``collapse_shape``/``expand_shape``, slices,
``tensor.pad``) or ``linalg.transpose``/``linalg.generic``. Semantics follow numpy (``pad``,
``broadcast_to``, ``slice`` as basic indexing) and torch (``flatten``).
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from .._mlir import ir, linalg_d, tensor_d
from ..errors import BuildError, format_shape
from . import emit
from .graph_builder import Tensor

_py_slice = slice  # the builtin, before ops.slice shadows the name in this module


def _tensor(op: str, x) -> Tensor:
    if not isinstance(x, Tensor):
        raise BuildError(f"{op}: argument 'x' is {type(x).__name__}; expected a Tensor")
    emit.function_of(op, x)
    return x


def reshape(x, shape: Sequence[int], name: Optional[str] = None) -> Tensor:
    """numpy ``reshape`` (one dim may be -1): ``tensor.collapse_shape`` to 1-D then
    ``tensor.expand_shape`` (each skipped when not needed). Static shapes only.

    Raises
    ------
    BuildError
        ``reshape: cannot reshape (2, 3) into (4, 2)`` (element counts differ), or several -1.
    """
    x = _tensor("reshape", x)
    shape = [int(d) for d in shape]
    size = int(np.prod(x.shape))
    if shape.count(-1) > 1 or any(d < -1 for d in shape):
        raise BuildError(f"reshape: argument 'shape' {tuple(shape)} may contain one -1 and no other negatives")
    if -1 in shape:
        rest = int(np.prod([d for d in shape if d != -1]))
        if rest == 0 or size % rest:
            raise BuildError(f"reshape: cannot reshape {format_shape(x.shape)} into {tuple(shape)}")
        shape[shape.index(-1)] = size // rest
    if int(np.prod(shape)) != size:
        raise BuildError(f"reshape: cannot reshape {format_shape(x.shape)} into {format_shape(shape)}")
    if tuple(shape) == x.shape:
        return x
    fn = x.fn
    nm = emit.op_name(fn, "reshape", name)
    v = x.value
    et = x.type.element_type
    if x.ndim == 0 or not shape:  # to/from a scalar: every dim is 1, one op does it
        out_t = ir.RankedTensorType.get(shape, et)
        r = (tensor_d.ExpandShapeOp(out_t, v, [], [], shape) if x.ndim == 0
             else tensor_d.CollapseShapeOp(out_t, v, [])).result
        emit.set_name(r.owner, nm)
        return Tensor(r, fn)
    out_t = ir.RankedTensorType.get(shape, et)
    groups = _reassociation(x.shape, shape)
    if groups is not None:     # one collapse_shape (fewer dims) or expand_shape (more dims)
        r = (tensor_d.CollapseShapeOp(out_t, v, groups) if len(shape) < x.ndim
             else tensor_d.ExpandShapeOp(out_t, v, groups, [], shape)).result
        emit.set_name(r.owner, nm)
        return Tensor(r, fn)
    if x.ndim != 1:
        flat_t = ir.RankedTensorType.get([size], et)
        v = tensor_d.CollapseShapeOp(flat_t, v, [list(range(x.ndim))]).result
        emit.set_name(v.owner, f"{nm}.collapse" if len(shape) != 1 else nm)
    if len(shape) != 1:
        out_t = ir.RankedTensorType.get(shape, et)
        v = tensor_d.ExpandShapeOp(out_t, v, [list(range(len(shape)))], [], shape).result
        emit.set_name(v.owner, nm)
    return Tensor(v, fn)


def _reassociation(src, dst):
    """Groups of consecutive dims of the longer shape whose products are the dims of the shorter
    one (``(1, 4, 2, 2) -> (1, 16)``: ``[[0], [1, 2, 3]]``), or None if there is none."""
    long, short = (src, dst) if len(src) > len(dst) else (dst, src)
    if len(long) == len(short):
        return None
    groups, i = [], 0
    for d in short:
        g, p = [], 1
        while i < len(long) and (p < d or (p == d and not g)) or (i < len(long) and long[i] == 1 and p == d
                                                                   and len(groups) == len(short) - 1):
            p *= long[i]
            g.append(i)
            i += 1
        if p != d or not g:
            return None
        groups.append(g)
    while i < len(long) and long[i] == 1 and groups:   # trailing unit dims join the last group
        groups[-1].append(i)
        i += 1
    return groups if i == len(long) else None


def transpose(x, perm: Optional[Sequence[int]] = None, name: Optional[str] = None) -> Tensor:
    """numpy ``transpose`` (reversed axes when ``perm`` is None): ``linalg.transpose``.

    Raises
    ------
    BuildError
        If ``perm`` is not a permutation of ``range(x.ndim)``.
    """
    x = _tensor("transpose", x)
    perm = list(range(x.ndim))[::-1] if perm is None else [int(p) % max(x.ndim, 1) if -x.ndim <= int(p) < x.ndim else -99
                                                            for p in perm]
    if sorted(perm) != list(range(x.ndim)):
        raise BuildError(f"transpose: argument 'perm' must be a permutation of range({x.ndim}), got {perm}")
    fn = x.fn
    nm = emit.op_name(fn, "transpose", name)
    init = emit.empty([x.shape[p] for p in perm], x.dtype)
    op = linalg_d.transpose(x.value, outs=[init], permutation=perm)
    emit.set_name(op, nm)
    return Tensor(op.results[0], fn)


def flatten(x, start_dim: int = 0, end_dim: int = -1, name: Optional[str] = None) -> Tensor:
    """torch ``flatten``: merge dims ``start_dim..end_dim`` (inclusive) into one.

    Raises
    ------
    BuildError
        If the dims are out of range or ``start_dim > end_dim``.
    """
    x = _tensor("flatten", x)
    if x.ndim == 0:
        return reshape(x, (1,), name=name)
    s = emit.normalize_axis("flatten", start_dim, x.ndim, "start_dim")
    e = emit.normalize_axis("flatten", end_dim, x.ndim, "end_dim")
    if s > e:
        raise BuildError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim}")
    shape = list(x.shape[:s]) + [int(np.prod(x.shape[s:e + 1]))] + list(x.shape[e + 1:])
    return reshape(x, shape, name=name)


def concat(tensors: Sequence, axis: int = 0, name: Optional[str] = None) -> Tensor:
    """numpy ``concatenate``: ``tensor.empty`` + one ``tensor.insert_slice`` per input.

    Raises
    ------
    BuildError
        On ranks, dtypes or non-axis dims that differ (names the input index).
    """
    if not isinstance(tensors, (list, tuple)) or not tensors:
        raise BuildError("concat: argument 'tensors' must be a non-empty list")
    fn = emit.function_of("concat", *tensors)
    first = next(t for t in tensors if isinstance(t, Tensor))
    ts = [emit.as_tensor("concat", f"tensors[{i}]", fn, t, first.dtype) for i, t in enumerate(tensors)]
    ax = emit.normalize_axis("concat", axis, first.ndim)
    for i, t in enumerate(ts):
        if t.ndim != first.ndim or any(a != b for d, (a, b) in enumerate(zip(t.shape, first.shape)) if d != ax):
            raise BuildError(f"concat: argument 'tensors[{i}]' has shape {format_shape(t.shape)}; expected "
                             f"{format_shape(first.shape)} except along axis {ax}")
    nm = emit.op_name(fn, "concat", name)
    out_shape = list(first.shape)
    out_shape[ax] = sum(t.shape[ax] for t in ts)
    acc = emit.empty(out_shape, first.dtype)
    off = 0
    for i, t in enumerate(ts):
        offsets = [0] * first.ndim
        offsets[ax] = off
        acc = tensor_d.InsertSliceOp(t.value, acc, [], [], [], offsets, list(t.shape), [1] * first.ndim).result
        emit.set_name(acc.owner, nm if i == len(ts) - 1 else f"{nm}.part{i}")
        off += t.shape[ax]
    return Tensor(acc, fn)


def slice(x, begin: Sequence[int], end: Sequence[int], strides: Optional[Sequence[int]] = None,  # noqa: A001
          axes: Optional[Sequence[int]] = None, name: Optional[str] = None) -> Tensor:
    """Strided slice like ``x[b0:e0:s0, ...]`` (numpy basic indexing, negative indices count from
    the end, out-of-range bounds clamp): ``tensor.extract_slice``. ``axes`` selects which axes
    ``begin``/``end``/``strides`` refer to (default: the leading ones).

    Raises
    ------
    BuildError
        For negative or zero strides, mismatched lengths, or an empty result.
    """
    x = _tensor("slice", x)
    axes = list(range(len(begin))) if axes is None else [emit.normalize_axis("slice", a, x.ndim) for a in axes]
    strides = [1] * len(axes) if strides is None else list(strides)
    if not (len(begin) == len(end) == len(strides) == len(axes)):
        raise BuildError(f"slice: begin, end, strides and axes must have equal lengths, got "
                         f"{len(begin)}, {len(end)}, {len(strides)}, {len(axes)}")
    offs, sizes, steps = [0] * x.ndim, list(x.shape), [1] * x.ndim
    for a, b, e, s in zip(axes, begin, end, strides):
        if s <= 0:
            raise BuildError(f"slice: stride {s} on axis {a} is not supported (positive strides only)")
        start, stop, step = _py_slice(b, e, s).indices(x.shape[a])
        n = len(range(start, stop, step))
        if n == 0:
            raise BuildError(f"slice: axis {a} selects no element ({b}:{e}:{s} of {x.shape[a]})")
        offs[a], sizes[a], steps[a] = start, n, step
    fn = x.fn
    nm = emit.op_name(fn, "slice", name)
    t = ir.RankedTensorType.get(sizes, x.type.element_type)
    r = tensor_d.ExtractSliceOp(t, x.value, [], [], [], offs, sizes, steps).result
    emit.set_name(r.owner, nm)
    return Tensor(r, fn)


def pad(x, pad_width, constant_value=0, name: Optional[str] = None) -> Tensor:
    """numpy ``pad(mode="constant")``: ``pad_width`` is an int, ``(before, after)`` or one pair
    per axis; emitted as ``tensor.pad`` yielding ``constant_value``.

    Raises
    ------
    BuildError
        For negative widths or a wrong number of pairs.
    """
    x = _tensor("pad", x)
    pw = np.asarray(pad_width, dtype=np.int64)
    try:
        pw = np.broadcast_to(pw.reshape(-1, 2) if pw.ndim == 1 and pw.size == 2 else pw, (x.ndim, 2))
    except ValueError:
        raise BuildError(f"pad: argument 'pad_width' {pad_width!r} does not give (before, after) for "
                         f"{x.ndim} axes") from None
    if (pw < 0).any():
        raise BuildError(f"pad: argument 'pad_width' {pad_width!r} has negative widths")
    if not pw.any():
        return x
    fn = x.fn
    nm = emit.op_name(fn, "pad", name)
    return Tensor(pad_value(x.value, [int(a) for a in pw[:, 0]], [int(b) for b in pw[:, 1]], constant_value,
                            x.dtype, nm), fn)


def pad_value(v: ir.Value, low, high, value, dtype: str, name: str) -> ir.Value:
    """Emit ``tensor.pad`` of ``v`` by ``low``/``high`` per dim, yielding ``value``."""
    t = ir.RankedTensorType(v.type)
    out = ir.RankedTensorType.get([d + a + b for d, a, b in zip(t.shape, low, high)], t.element_type)
    op = tensor_d.PadOp(out, v, [], [], low, high)
    block = op.regions[0].blocks.append(*([ir.IndexType.get()] * t.rank))
    with ir.InsertionPoint(block):
        tensor_d.YieldOp(emit.scalar(value, dtype))
    emit.set_name(op, name)
    return op.result


def broadcast_to(x, shape: Sequence[int], name: Optional[str] = None) -> Tensor:
    """numpy ``broadcast_to``: a ``linalg.generic`` copy reading ``x`` through a broadcast map.

    Raises
    ------
    BuildError
        If ``x`` cannot be broadcast to ``shape`` by numpy rules.
    """
    x = _tensor("broadcast_to", x)
    shape = tuple(int(d) for d in shape)
    got = emit.broadcast_shapes("broadcast_to", x.shape, shape)
    if got != shape:
        raise BuildError(f"broadcast_to: cannot broadcast {format_shape(x.shape)} to {format_shape(shape)}")
    fn = x.fn
    nm = emit.op_name(fn, "broadcast_to", name)
    init = emit.empty(shape, x.dtype)
    res = emit.generic(nm, [x.value], [emit.broadcast_map(x.shape, shape)], [init],
                       [emit.identity_map(len(shape))], ["parallel"] * len(shape), lambda a, o: [a])
    return Tensor(res[0], fn)
