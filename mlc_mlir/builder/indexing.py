"""ONNX-style shape/indexing ops: ``gather`` (ONNX's name for :func:`~.take.take`), ``squeeze``,
``unsqueeze``, ``expand``, ``split``; each composes :mod:`.shape` / :mod:`.take` ops;
``update_slice``, a ``tensor.insert_slice`` at offsets read from tensors at run time; and
``arange`` (ONNX Range) whose length may be symbolic, computed by a ``linalg.generic`` from
``linalg.index``.

Source: ONNX operator spec (Gather, Squeeze, Unsqueeze, Expand, Split), numpy
``take``/``squeeze``/``expand_dims``/``split``, TVM Relax ``expand_dims``/``squeeze``/``split``;
XLA ``DynamicUpdateSlice`` (``jax.lax.dynamic_update_slice``) for ``update_slice``; numpy
``arange`` / TVM Relax ``arange`` (a ``PrimExpr`` length) for ``arange``.
"""

from __future__ import annotations

from typing import List, Optional, Sequence

from .._mlir import arith_d, ir, linalg_d, tensor_d
from ..ir import dtypes
from ..ir.symbolic import SymDim
from ..errors import BuildError, format_shape
from . import linalg_emit as emit
from .shape import broadcast_to, reshape
from .shape import slice as shape_slice
from .take import take
from .tensor import Tensor


def _axes(op: str, axes, ndim: int) -> List[int]:
    axes = [axes] if isinstance(axes, int) else list(axes)
    out = sorted(emit.normalize_axis(op, int(a), ndim, "axes") for a in axes)
    if len(set(out)) != len(out):
        raise BuildError(f"{op}: argument 'axes' is {axes}; expected distinct axes")
    return out


def gather(x, indices, axis: int = 0, name: Optional[str] = None) -> Tensor:
    """ONNX Gather / ``numpy.take(x, indices, axis)``: :func:`take` (result shape
    ``x.shape[:axis] + indices.shape + x.shape[axis+1:]``, x's dtype; int32/int64 indices)."""
    return take(x, indices, axis=axis, name=name)


def squeeze(x, axes: Optional[Sequence[int]] = None, name: Optional[str] = None) -> Tensor:
    """Drop size-1 axes (all of them when ``axes`` is None), like ``numpy.squeeze``
    (ONNX Squeeze); a :func:`~mlc_mlir.builder.shape.reshape`.

    x: Tensor (any dtype). Raises BuildError if a named axis is not of size 1.
    """
    x = emit.tensor_arg("squeeze", "x", x)
    ax = [i for i, d in enumerate(x.shape) if d == 1] if axes is None else _axes("squeeze", axes, x.ndim)
    for a in ax:
        if x.shape[a] != 1:
            raise BuildError(f"squeeze: axis {a} of x {format_shape(x.shape)} has size {x.shape[a]}; "
                             f"expected 1")
    return reshape(x, [d for i, d in enumerate(x.shape) if i not in ax], name=name)


def unsqueeze(x, axes: Sequence[int], name: Optional[str] = None) -> Tensor:
    """Insert size-1 axes at ``axes`` (positions in the result; ONNX Unsqueeze,
    ``numpy.expand_dims``). x: Tensor (any dtype); result rank ``x.ndim + len(axes)``."""
    x = emit.tensor_arg("unsqueeze", "x", x)
    n = x.ndim + (1 if isinstance(axes, int) else len(axes))
    ax = _axes("unsqueeze", axes, n)
    it = iter(x.shape)
    return reshape(x, [1 if i in ax else next(it) for i in range(n)], name=name)


def expand(x, shape: Sequence[int], name: Optional[str] = None) -> Tensor:
    """ONNX Expand: broadcast ``x`` against ``shape`` in both directions (result shape
    ``broadcast(x.shape, shape)``, so a 1 in ``shape`` keeps x's dim).

    Raises BuildError when the shapes do not broadcast.
    """
    x = emit.tensor_arg("expand", "x", x)
    out = emit.broadcast_shapes("expand", tuple(x.shape), tuple(int(d) for d in shape))
    return x if tuple(out) == tuple(x.shape) else broadcast_to(x, out, name=name)


def split(x, sizes: Sequence[int], axis: int = 0, name: Optional[str] = None) -> List[Tensor]:
    """Split ``x`` along ``axis`` into pieces of ``sizes`` (one ``tensor.extract_slice`` each;
    ONNX Split, ``numpy.split`` with sizes).

    Raises BuildError if ``sum(sizes) != x.shape[axis]`` or a size is negative.
    """
    x = emit.tensor_arg("split", "x", x)
    axis = emit.normalize_axis("split", axis, x.ndim)
    sizes = [int(s) for s in sizes]
    if sum(sizes) != x.shape[axis] or any(s < 0 for s in sizes):
        raise BuildError(f"split: argument 'sizes' is {sizes}; expected non-negative sizes summing to "
                         f"x.shape[{axis}] = {x.shape[axis]}")
    outs, start = [], 0
    for s in sizes:
        outs.append(shape_slice(x, [start], [start + s], axes=[axis]))
        start += s
    return outs


def _dynamic_offset(op: str, i: int, off, x: Tensor, update: Tensor) -> ir.Value:
    """Run-time offset ``i`` of :func:`update_slice` as an ``index`` value clamped to
    ``[0, x.shape[i] - update.shape[i]]``."""
    hi = x.shape[i] - update.shape[i]
    if not isinstance(off, Tensor) or off.dtype not in ("int32", "int64") or any(d != 1 for d in off.shape):
        got = f"{off.dtype}{format_shape(off.shape)}" if isinstance(off, Tensor) else type(off).__name__
        raise BuildError(f"{op}: offsets[{i}] is {got}; expected an int or a one-element int32/int64 Tensor")
    zero = arith_d.constant(ir.IndexType.get(), 0)
    v = tensor_d.extract(off.value, [zero] * off.ndim)
    v = arith_d.index_cast(ir.IndexType.get(), v)
    v = arith_d.maxsi(v, zero)
    return arith_d.minsi(v, hi.materialize() if isinstance(hi, SymDim) else arith_d.constant(ir.IndexType.get(), hi))


def _fits(u, s) -> bool:
    """Whether a dim of size ``u`` provably fits in one of size ``s``: equal sizes, or ``u``'s
    upper bound (its symbols' declared bounds) at most a static ``s``."""
    if u == s:
        return True
    hi = u.scope.upper_bound(u) if isinstance(u, SymDim) and u.scope is not None else u
    return isinstance(s, int) and isinstance(hi, int) and hi <= s


def update_slice(x, update, offsets: Sequence, name: Optional[str] = None) -> Tensor:
    """``x`` with ``update`` written at ``offsets`` (XLA ``DynamicUpdateSlice``): one
    ``tensor.insert_slice`` whose offsets may be read from tensors at run time, so a KV cache
    gets one new row per step without copying the rest (bufferized in place when ``x`` is
    writable and not read afterwards).

    Parameters
    ----------
    x : Tensor, rank >= 1, any dtype
    update : Tensor, same rank and dtype, ``update.shape[d] <= x.shape[d]``
        A symbolic dim of ``update`` (a prompt's length) must be bounded by ``x``'s static dim
        through its declared maximum.
    offsets : sequence of int or Tensor
        One per axis: a Python int, or a one-element int32/int64 Tensor read at run time. As in
        XLA, a run-time offset is clamped to ``[0, x.shape[d] - update.shape[d]]`` so the write
        stays inside ``x``.
    name : str, optional

    Returns
    -------
    Tensor, ``x``'s shape and dtype.

    Raises
    ------
    BuildError
        For ranks, dtypes or shapes that differ, a constant offset out of range, or an offset
        that is neither an int nor a one-element int Tensor.
    """
    op = "update_slice"
    x = emit.tensor_arg(op, "x", x)
    update = emit.tensor_arg(op, "update", update)
    if update.ndim != x.ndim or update.dtype != x.dtype or not all(map(_fits, update.shape, x.shape)):
        raise BuildError(f"{op}: argument 'update' is {update.dtype}{format_shape(update.shape)}; expected "
                         f"{x.dtype} of rank {x.ndim} with dims <= x {format_shape(x.shape)}")
    offsets = list(offsets)
    if len(offsets) != x.ndim:
        raise BuildError(f"{op}: argument 'offsets' has {len(offsets)} entries; expected {x.ndim}")
    nm = emit.op_name(x.fn, op, name)
    dyn = ir.ShapedType.get_dynamic_size()
    static, values = [], []
    for i, off in enumerate(offsets):
        if isinstance(off, int):
            if not (off == 0 or isinstance(update.shape[i], int) and 0 <= off <= x.shape[i] - update.shape[i]):
                raise BuildError(f"{op}: offsets[{i}] is {off}; expected 0..{x.shape[i] - update.shape[i]} "
                                 f"(x {format_shape(x.shape)}, update {format_shape(update.shape)})")
            static.append(off)
        else:
            static.append(dyn)
            values.append(_dynamic_offset(op, i, off, x, update))
    sizes, static_sizes = emit.mixed(update.shape)
    res = tensor_d.InsertSliceOp(update.value, x.value, values, sizes, [], static, static_sizes,
                                 [1] * x.ndim).result
    emit.set_name(res.owner, nm)
    return Tensor(res, x.fn)


def arange(start, end, step: int = 1, dtype: str = "int64", name: Optional[str] = None) -> Tensor:
    """``numpy.arange(start, end, step)`` as a 1-D tensor of ``dtype`` whose length may be
    symbolic (``end`` a :class:`~mlc_mlir.ir.symbolic.SymDim`, e.g. a prompt's length): a
    ``linalg.generic`` writing ``start + step * linalg.index(0)``, so nothing is stored.

    Parameters
    ----------
    start, end : int or SymDim
        With ``step == 1`` either may be symbolic (length ``end - start``); otherwise both are ints.
    step : int
        Non-zero.
    dtype : str
        An int or float dtype of the result.
    name : str, optional

    Returns
    -------
    Tensor, shape ``(n,)`` with ``n = max(0, ceil((end - start) / step))``.

    Raises
    ------
    BuildError
        For a zero or non-int step, a symbolic bound with ``step != 1``, a dtype that is not
        int or float, or no function open.
    """
    op = "arange"
    bounds_ok = all(isinstance(v, (int, SymDim)) and not isinstance(v, bool) for v in (start, end))
    if not isinstance(step, int) or step == 0 or not bounds_ok:
        raise BuildError(f"{op}: arguments (start, end, step) are ({start!r}, {end!r}, {step!r}); expected "
                         "ints or sizes and a non-zero int step")
    if dtype not in dtypes.FLOAT_DTYPES | dtypes.INT_DTYPES:
        raise BuildError(f"{op}: argument 'dtype' is {dtype!r}; expected an int or float dtype")
    if isinstance(start, int) and isinstance(end, int):
        n = max(0, -(-(end - start) // step))
    elif step == 1:
        n = end - start
    else:
        raise BuildError(f"{op}: a symbolic bound ({start!r}, {end!r}) needs step 1, got {step}")
    fn = emit.function_of(op)
    i64 = ir.IntegerType.get_signless(64)
    first = start if isinstance(start, int) else None

    def body(_):
        v = arith_d.index_cast(i64, linalg_d.IndexOp(0).result)
        if step != 1:
            v = arith_d.muli(v, arith_d.constant(i64, step))
        base = arith_d.constant(i64, first) if first is not None else \
            arith_d.index_cast(i64, start.materialize())
        v = arith_d.addi(v, base) if first != 0 else v
        if dtypes.is_float(dtype):
            return [arith_d.sitofp(dtypes.to_ir_type(dtype), v)]
        return [v if dtype == "int64" else arith_d.trunci(dtypes.to_ir_type(dtype), v)]

    (r,) = emit.generic(emit.op_name(fn, op, name), [], [], [emit.empty((n,), dtype)],
                        [emit.identity_map(1)], ["parallel"], body)
    return Tensor(r, fn)
