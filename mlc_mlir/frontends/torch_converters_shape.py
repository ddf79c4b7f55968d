"""Converters of core ATen shape and data-movement ops beyond :mod:`.torch_converters`:
``repeat``, ``flip``, ``index_select``, ``constant_pad_nd``, reflection/replication pads,
``diagonal``, ``as_strided``, ``select_scatter``, ``slice_scatter``, ``masked_scatter`` and the
``scatter`` family.
Conventions as in :mod:`.torch_converters`; views whose positions are computed at import time
(``diagonal``, ``as_strided``) need static shapes.

Source: PyTorch ``native_functions.yaml`` signatures; numpy ``tile`` / ``flip`` / ``take`` /
``pad``.
"""

from __future__ import annotations

import numpy as np

from .. import ops
from ..builder import Tensor
from ..errors import BuildError
from .torch_converters import _ints, _tensor, arg, register_converter


@register_converter("aten.repeat.default", dtypes="any")
def _repeat(ctx, node, args):
    """``torch.Tensor.repeat`` (numpy ``tile``): x viewed as ``(1, s0, 1, s1, ...)``, broadcast to
    ``(r0, s0, r1, s1, ...)`` and merged pairwise."""
    x = _tensor("aten.repeat", "self", args[0])
    reps = [int(r) for r in args[1]]
    if len(reps) < x.ndim:
        raise BuildError(f"aten.repeat: argument 'repeats' is {reps}; expected at least {x.ndim} entries")
    shape = [1] * (len(reps) - x.ndim) + list(x.shape)
    inter = [d for s in shape for d in (1, s)]
    full = [d for r, s in zip(reps, shape) for d in (r, s)]
    y = ops.broadcast_to(ops.reshape(x, inter), full)
    return ops.reshape(y, [r * s for r, s in zip(reps, shape)])



@register_converter("aten.flip.default", dtypes="any")
def _flip(ctx, node, args):
    """``ops.take`` of the reversed positions along each dim in ``dims``."""
    x = _tensor("aten.flip", "self", args[0])
    for d in _ints(args[1]):
        n = x.shape[d % x.ndim]
        x = ops.take(x, np.arange(n - 1, -1, -1, dtype=np.int64), axis=d % x.ndim)
    return x


@register_converter("aten.index_select.default", dtypes="any")
def _index_select(ctx, node, args):
    """``ops.take`` along ``dim`` (negative indices wrap once, as numpy)."""
    x = _tensor("aten.index_select", "self", args[0])
    if x.ndim == 0:
        return x
    return ops.take(x, args[2], axis=int(args[1]) % x.ndim)


@register_converter("aten.constant_pad_nd.default", dtypes="any")
def _constant_pad_nd(ctx, node, args):
    """``ops.pad`` with ``(before, after)`` pairs from the last dim backwards; negative pads crop
    (``ops.slice``)."""
    x = _tensor("aten.constant_pad_nd", "self", args[0])
    pad = _ints(args[1])
    value = arg(ctx, args, 2, "value", 0)
    if len(pad) % 2 or len(pad) // 2 > x.ndim:
        raise BuildError(f"aten.constant_pad_nd: argument 'pad' is {pad}; expected pairs for at most {x.ndim} dims")
    widths = _padding_pairs("aten.constant_pad_nd", x, pad, len(pad) // 2)
    crop = [(max(-b, 0), x.shape[d] - max(-a, 0)) for d, (b, a) in enumerate(widths)]
    if any(b or e != x.shape[d] for d, (b, e) in enumerate(crop)):
        x = ops.slice(x, [b for b, _ in crop], [e for _, e in crop])
    grow = [(max(b, 0), max(a, 0)) for b, a in widths]
    if not any(b or a for b, a in grow):
        return x
    return ops.pad(x, grow, value if not isinstance(value, bool) else int(value))


def _padding_pairs(op: str, x, padding, dims: int):
    """ATen ``padding`` (``(left, right, top, bottom, ...)``: last dim first) as one (before,
    after) pair per dim of ``x``."""
    p = _ints(padding)
    if len(p) != 2 * dims or x.ndim < dims:
        raise BuildError(f"{op}: argument 'padding' is {p}; expected {2 * dims} ints for the last {dims} "
                         f"dims of a tensor of rank {x.ndim}")
    widths = [(0, 0)] * x.ndim
    for i in range(dims):
        widths[x.ndim - 1 - i] = (p[2 * i], p[2 * i + 1])
    return widths


def _register_mode_pad(name: str, dims: int, mode: str) -> None:
    def convert(ctx, node, args):
        x = _tensor(name, "self", args[0])
        return ops.pad(x, _padding_pairs(name, x, args[1], dims), mode=mode)
    convert.__doc__ = f"``ops.pad(mode='{mode}')`` of the last {dims} dims."
    register_converter(name, dtypes="any")(convert)


for _d in (1, 2, 3):
    _register_mode_pad(f"aten.reflection_pad{_d}d.default", _d, "reflect")
for _d in (1, 2, 3):
    _register_mode_pad(f"aten.replication_pad{_d}d.default", _d, "edge")


def _static(op: str, x) -> None:
    if not all(isinstance(d, int) for d in x.shape):
        raise BuildError(f"{op}: argument 'self' has symbolic shape {tuple(x.shape)}; expected static sizes")


@register_converter("aten.diagonal.default", dtypes="any")
def _diagonal(ctx, node, args):
    """``dim1``/``dim2`` moved last and merged, then ``ops.take`` of the flat positions
    ``(r0 + i) * n2 + c0 + i`` (``r0 = max(0, -offset)``, ``c0 = max(0, offset)``); the
    diagonal is the last dim of the result, as in PyTorch."""
    x = _tensor("aten.diagonal", "self", args[0])
    _static("aten.diagonal", x)
    off, d1, d2 = (int(arg(ctx, args, i, k, v)) for i, k, v in ((1, "offset", 0), (2, "dim1", 0), (3, "dim2", 1)))
    d1, d2 = d1 % x.ndim, d2 % x.ndim
    if d1 == d2:
        raise BuildError(f"aten.diagonal: dim1 and dim2 are both {d1}; expected two different dims")
    rest = [d for d in range(x.ndim) if d not in (d1, d2)]
    n1, n2 = x.shape[d1], x.shape[d2]
    r0, c0 = max(0, -off), max(0, off)
    length = max(0, min(n1 - r0, n2 - c0))
    y = ops.reshape(ops.permute(x, rest + [d1, d2]), [x.shape[d] for d in rest] + [n1 * n2])
    i = np.arange(length, dtype=np.int64)
    return ops.take(y, (r0 + i) * n2 + c0 + i, axis=len(rest))


@register_converter("aten.as_strided.default", dtypes="any")
def _as_strided(ctx, node, args):
    """``ops.take`` of the flat (contiguous) input at ``storage_offset + sum(i_k * stride_k)``
    for every index of ``size``: any view of a contiguous tensor."""
    x = _tensor("aten.as_strided", "self", args[0])
    _static("aten.as_strided", x)
    size, stride = _ints(args[1]), _ints(args[2])
    offset = int(arg(ctx, args, 3, "storage_offset", 0) or 0)
    if len(size) != len(stride):
        raise BuildError(f"aten.as_strided: size {size} and stride {stride} differ in length")
    pos = np.full(size, offset, dtype=np.int64)
    for k, (n, s) in enumerate(zip(size, stride)):
        pos = pos + (np.arange(n, dtype=np.int64) * s).reshape([n if j == k else 1 for j in range(len(size))])
    return ops.take(ops.reshape(x, [int(np.prod(x.shape))]), pos, axis=0)


@register_converter("aten.select_scatter.default", dtypes="any")
def _select_scatter(ctx, node, args):
    """``self`` with ``src`` written at ``index`` of ``dim``: ``ops.update_slice``."""
    x = _tensor("aten.select_scatter", "self", args[0])
    src = _tensor("aten.select_scatter", "src", args[1])
    dim = int(args[2]) % x.ndim
    index = int(args[3]) % x.shape[dim]
    offsets = [index if d == dim else 0 for d in range(x.ndim)]
    return ops.update_slice(x, ops.unsqueeze(ops.cast(src, x.dtype), [dim]), offsets)


@register_converter("aten.slice_scatter.default", dtypes="any")
def _slice_scatter(ctx, node, args):
    """``self`` with ``src`` written at ``start:end:step`` of ``dim``: ``ops.update_slice`` for
    step 1, else ``where(mask, take(src, k), self)`` with ``k`` the source row of each position."""
    x = _tensor("aten.slice_scatter", "self", args[0])
    src = ops.cast(_tensor("aten.slice_scatter", "src", args[1]), x.dtype)
    dim = int(arg(ctx, args, 2, "dim", 0)) % x.ndim
    n = x.shape[dim]
    start, end = arg(ctx, args, 3, "start", None), arg(ctx, args, 4, "end", None)
    step = int(arg(ctx, args, 5, "step", 1))
    rows = range(*slice(start, end, step).indices(n))
    if len(rows) != src.shape[dim]:
        raise BuildError(f"aten.slice_scatter: src has {src.shape[dim]} rows along dim {dim}; expected "
                         f"{len(rows)} ({start}:{end}:{step} of {n})")
    if step == 1:
        return ops.update_slice(x, src, [rows.start if d == dim else 0 for d in range(x.ndim)]) if len(rows) else x
    k = np.zeros(n, np.int64)
    mask = np.zeros([n if d == dim else 1 for d in range(x.ndim)], np.int8)
    for j, r in enumerate(rows):
        k[r] = j
        mask.reshape(-1)[r] = 1
    return ops.where(mask, ops.take(src, k, axis=dim), x)


@register_converter("aten.masked_scatter.default", dtypes="any")
def _masked_scatter(ctx, node, args):
    """``where(mask, source.flat[exclusive_cumsum(mask)], self)``: the true positions of ``mask``
    (``self`` and ``mask`` broadcast together) take ``source``'s elements in row-major order (a run-time check
    raises when ``source`` has fewer elements than ``mask`` has true ones)."""
    x = _tensor("aten.masked_scatter", "self", args[0])
    m = _tensor("aten.masked_scatter", "mask", args[1])
    _static("aten.masked_scatter", x)
    _static("aten.masked_scatter", m)
    shape = np.broadcast_shapes(tuple(x.shape), tuple(m.shape))
    x = x if tuple(x.shape) == shape else ops.broadcast_to(x, shape)
    mask = ops.broadcast_to(ops.not_equal(m, 0), shape)
    src = ops.cast(_tensor("aten.masked_scatter", "source", args[2]), x.dtype)
    numel = int(np.prod(x.shape))
    flat = ops.reshape(ops.cast(mask, "int64"), [numel])
    pos = ops.cumsum(flat, 0, exclusive=True)
    picked = ops.take(ops.reshape(src, [int(np.prod(src.shape))]), pos, axis=0)
    return ops.where(mask, ops.reshape(picked, x.shape), x)


_SCATTER_REDUCE = {"sum": "add", "prod": "mul", "amax": "max", "amin": "min", "mean": "mean"}


@register_converter("aten.scatter.src", "aten.scatter.value", "aten.scatter.reduce", "aten.scatter.value_reduce",
                    "aten.scatter_add.default", "aten.scatter_reduce.two", dtypes="float, int")
def _scatter(ctx, node, args):
    """``ops.scatter_elements`` along ``dim``: ``scatter`` replaces (``reduce=`` ``add`` /
    ``multiply`` as the deprecated keyword asks), ``scatter_add`` adds, ``scatter_reduce``
    reduces by ``sum``/``prod``/``amax``/``amin``/``mean`` with ``include_self``."""
    name = str(node.target)
    x = _tensor(name, "self", args[0])
    dim, index, src = int(args[1]), args[2], args[3]
    if isinstance(src, Tensor):
        src = ops.cast(src, x.dtype) if src.dtype != x.dtype else src
    if name == "aten.scatter_add.default":
        return ops.scatter_elements(x, index, src, axis=dim, reduction="add")
    if name == "aten.scatter_reduce.two":
        how = arg(ctx, args, 4, "reduce")
        if how not in _SCATTER_REDUCE:
            raise BuildError(f"{name}: argument 'reduce' is {how!r}; expected one of {sorted(_SCATTER_REDUCE)}")
        return ops.scatter_elements(x, index, src, axis=dim, reduction=_SCATTER_REDUCE[how],
                                    include_self=bool(arg(ctx, args, 5, "include_self", True)))
    how = arg(ctx, args, 4, "reduce")
    reduction = {None: "none", "add": "add", "multiply": "mul"}.get(how)
    if reduction is None:
        raise BuildError(f"{name}: argument 'reduce' is {how!r}; expected None, 'add' or 'multiply'")
    return ops.scatter_elements(x, index, src, axis=dim, reduction=reduction)
