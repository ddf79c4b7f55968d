"""Converters of core ATen shape and data-movement ops beyond :mod:`.torch_converters`:
``repeat``, ``flip``, ``index_select``, ``constant_pad_nd``. Conventions as in
:mod:`.torch_converters`.

Source: PyTorch ``native_functions.yaml`` signatures; numpy ``tile`` / ``flip`` / ``take`` /
``pad``.
"""

from __future__ import annotations

import numpy as np

from .. import ops
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
    widths = [[0, 0] for _ in range(x.ndim)]
    for i in range(len(pad) // 2):
        widths[x.ndim - 1 - i] = [pad[2 * i], pad[2 * i + 1]]
    crop = [(max(-b, 0), x.shape[d] - max(-a, 0)) for d, (b, a) in enumerate(widths)]
    if any(b or e != x.shape[d] for d, (b, e) in enumerate(crop)):
        x = ops.slice(x, [b for b, _ in crop], [e for _, e in crop])
    grow = [(max(b, 0), max(a, 0)) for b, a in widths]
    if not any(b or a for b, a in grow):
        return x
    return ops.pad(x, grow, value if not isinstance(value, bool) else int(value))
