"""Converters of core ATen tensor-creation and copy ops: ``full``, ``scalar_tensor``, ``empty``
(``memory_format`` / ``strided``), ``fill.Scalar``, ``arange.start_step``, ``copy``, and
``native_dropout`` in inference. Conventions as in :mod:`.torch_converters`.

Creation ops whose arguments are all static are computed by PyTorch at import time (the
importer folds nodes without graph inputs); these converters serve the ones with symbolic
sizes (``torch.full((seq, seq), ...)``, ``torch.arange(seq)`` of a model exported with a
dynamic sequence length) and graphs without fake values (``from_fx``). ``empty`` is a fill of
zeros: its contents are undefined in PyTorch, so any value is correct, and zeros keep runs
reproducible. Source: PyTorch ``native_functions.yaml``; TVM Relax's torch frontend (``full``,
``arange``, ``empty`` as ``zeros``).
"""

from __future__ import annotations

from .. import ops
from ..builder import Tensor
from ..builder.linalg_emit import function_of, size_tensor
from ..errors import BuildError
from ..ir.symbolic import SymDim
from .torch_converters import _ints, _tensor, arg, out_dtype, promote, register_converter, torch_dtype


def _dtype(ctx, node, op: str, default: str = "float32") -> str:
    """The ``dtype=`` keyword, else the fake value's dtype, else ``default``."""
    dt = ctx.kwargs.get("dtype")
    if dt is not None:
        return torch_dtype(op, dt)
    return out_dtype(node) or default


@register_converter("aten.full.default", dtypes="any")
def _full(ctx, node, args):
    """``ops.full(size, fill_value)`` in the ``dtype=`` keyword (else PyTorch's default)."""
    return ops.full(_ints(args[0]), args[1], _dtype(ctx, node, "aten.full"))


@register_converter("aten.scalar_tensor.default", dtypes="any")
def _scalar_tensor(ctx, node, args):
    """A 0-d ``ops.full``; a symbolic size as its run-time value (``size_tensor``)."""
    dt = _dtype(ctx, node, "aten.scalar_tensor")
    if isinstance(args[0], SymDim):
        v = size_tensor(function_of("aten.scalar_tensor"), args[0], "float64")
        return ops.cast(v, dt)
    return ops.full([], args[0], dt)


@register_converter("aten.empty.memory_format", "aten.empty_strided.default", dtypes="any")
def _empty(ctx, node, args):
    """Zeros of ``size`` (an ``empty`` tensor's contents are undefined; ``stride`` is ignored:
    every tensor of the graph is contiguous)."""
    return ops.full(_ints(args[0]), 0, _dtype(ctx, node, str(node.target)))


@register_converter("aten.fill.Scalar", dtypes="any")
def _fill(ctx, node, args):
    """``ops.full`` of ``self``'s shape and dtype (the functional ``fill_``)."""
    x = _tensor("aten.fill", "self", args[0])
    return ops.full(x.shape, args[1], out_dtype(node) or x.dtype)


@register_converter("aten.arange.start_step", "aten.arange.start", "aten.arange.default", dtypes="any")
def _arange(ctx, node, args):
    """``ops.arange(start, end, step)``: a constant for static bounds, a run-time index sequence
    for symbolic ones (``arange(seq)``)."""
    name = str(node.target)
    if name.endswith(".default"):
        start, end, step = 0, args[0], 1
    else:
        start, end = args[0], args[1]
        step = arg(ctx, args, 2, "step", 1) if name.endswith("start_step") else 1
    return ops.arange(start, end, step, _dtype(ctx, node, name, "int64"))


@register_converter("aten.copy.default", dtypes="any")
def _copy(ctx, node, args):
    """``src`` broadcast to ``self``'s shape in ``self``'s dtype (the functional ``copy_``)."""
    x = _tensor("aten.copy", "self", args[0])
    src, = promote(x.dtype, args[1])
    if not isinstance(src, Tensor):
        return ops.full(x.shape, src, x.dtype)
    return src if tuple(src.shape) == tuple(x.shape) else ops.broadcast_to(src, x.shape)


@register_converter("aten.native_dropout.default")
def _native_dropout(ctx, node, args):
    """Inference (``train`` False) or ``p == 0``: ``(input, all-true mask)``; training dropout
    draws random numbers and is refused."""
    x = _tensor("aten.native_dropout", "input", args[0])
    p, train = args[1], arg(ctx, args, 2, "train", True)
    if train and p > 0:
        raise BuildError(f"aten.native_dropout: train=True with p={p} draws random numbers; expected "
                         "a model in eval() mode (model.eval() before export)")
    return x, ops.full(x.shape, 1, "bool")
