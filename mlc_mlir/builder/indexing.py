"""ONNX-style shape/indexing ops: ``gather`` (ONNX's name for :func:`~.take.take`), ``squeeze``,
``unsqueeze``, ``expand``, ``split``, ``pad`` (numpy's modes: reflect/edge/wrap as index maps);
each composes :mod:`.shape` / :mod:`.take` ops; and ``update_slice``, a ``tensor.insert_slice``
at offsets read from tensors at run time; ``arange`` over a static or symbolic length;
``size_array``, symbolic sizes as a tensor of values.

Source: ONNX operator spec (Gather, Squeeze, Unsqueeze, Expand, Split), numpy
``take``/``squeeze``/``expand_dims``/``split``, TVM Relax ``expand_dims``/``squeeze``/``split``;
XLA ``DynamicUpdateSlice`` (``jax.lax.dynamic_update_slice``) for ``update_slice``; ONNX
``Range`` / ``numpy.arange`` / TVM Relax ``arange`` (a ``PrimExpr`` length) for ``arange``.
"""

from __future__ import annotations

from typing import List, Optional, Sequence

import math

import numpy as np

from .._mlir import arith_d, ir, linalg_d, tensor_d
from ..errors import BuildError, format_shape
from ..ir import dtypes, emitters
from ..ir.symbolic import SymDim
from . import linalg_emit as emit
from .shape import broadcast_to, reshape
from .shape import pad as shape_pad
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
    ``broadcast(x.shape, shape)``, so a 1 in ``shape`` keeps x's dim); ``shape`` may hold
    symbolic sizes.

    Raises BuildError when the shapes do not broadcast.
    """
    x = emit.tensor_arg("expand", "x", x)
    out = emit.broadcast_shapes("expand", tuple(x.shape),
                                tuple(d if isinstance(d, SymDim) else int(d) for d in shape))
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


#: numpy ``pad`` modes other than ``constant``: each padded position reads the source index
#: ``numpy.pad(arange(n), (before, after), mode)``.
INDEXED_PAD_MODES = ("reflect", "edge", "wrap")


def pad(x, pad_width, constant_value=0, mode: str = "constant", name: Optional[str] = None) -> Tensor:
    """numpy ``pad`` with ``mode`` ``constant`` (:func:`~mlc_mlir.builder.shape.pad`, a
    ``tensor.pad``), ``reflect`` (mirror without the edge: PyTorch ``reflection_pad``), ``edge``
    (repeat the edge: PyTorch ``replication_pad``) or ``wrap`` (circular): for the last three,
    one :func:`take` per padded axis of the positions ``numpy.pad(arange(n), (b, a), mode)``.

    Parameters
    ----------
    x : Tensor, any shape and dtype
    pad_width : as :func:`~mlc_mlir.builder.shape.pad` (``(before, after)`` per axis, >= 0)
    constant_value : int or float
        Only for ``mode="constant"``.
    mode : str

    Returns
    -------
    Tensor of shape ``x.shape[i] + before_i + after_i``, x's dtype.

    Raises
    ------
    BuildError
        For an unknown mode, widths as :func:`~mlc_mlir.builder.shape.pad` rejects them, a
        padded symbolic axis, ``reflect`` widths not below the axis length (numpy and PyTorch
        refuse them too) or a padded axis of length 0.
    """
    if mode == "constant":
        return shape_pad(x, pad_width, constant_value, name=name)
    x = emit.tensor_arg("pad", "x", x)
    if mode not in INDEXED_PAD_MODES:
        raise BuildError(f"pad: argument 'mode' is {mode!r}; expected 'constant' or one of {INDEXED_PAD_MODES}")
    try:
        pw = np.broadcast_to(np.asarray(pad_width, dtype=np.int64).reshape(-1, 2), (x.ndim, 2))
    except ValueError:
        raise BuildError(f"pad: argument 'pad_width' is {pad_width!r}; expected (before, after) for each of "
                         f"the {x.ndim} axes of x {format_shape(x.shape)}") from None
    if (pw < 0).any():
        raise BuildError(f"pad: argument 'pad_width' is {pad_width!r}; expected widths >= 0")
    for ax, (b, a) in enumerate(pw.tolist()):
        if b == 0 and a == 0:
            continue
        n = x.shape[ax]
        if not isinstance(n, int) or n == 0 or (mode == "reflect" and max(b, a) >= n):
            raise BuildError(f"pad: {mode} widths ({b}, {a}) on axis {ax} of x {format_shape(x.shape)}; "
                             f"expected a static nonempty axis{' longer than each width' if mode == 'reflect' else ''}")
        x = take(x, np.pad(np.arange(n, dtype=np.int64), (b, a), mode=mode), axis=ax, name=name)
    return x


def arange(start, limit, delta=1, dtype: Optional[str] = None, name: Optional[str] = None) -> Tensor:
    """``numpy.arange(start, limit, delta)`` (ONNX ``Range``) whose bounds may be symbolic sizes:
    ``out[i] = start + i * delta`` for ``i < max(ceil((limit - start) / delta), 0)``.

    Emits one ``linalg.generic`` with no inputs computing each element from ``linalg.index``
    (and ``start``'s ``index`` value when it is symbolic), not a stored constant.

    Parameters
    ----------
    start, limit : int, float or SymDim
        A SymDim (a dynamic size, e.g. ``x.shape[1]``) needs int ``start``/``limit``/``delta``;
        the length is then ``(limit - start + delta - 1) // delta`` (``delta > 0``), a size
        the caller guarantees non-negative (as a dim of a tensor is).
    delta : int or float, static, non-zero
    dtype : str, optional
        An int or float dtype; default float32 when a bound or ``delta`` is a float, else int64.

    Returns
    -------
    Tensor of shape ``(length,)``, ``dtype``.

    Raises
    ------
    BuildError
        For a zero or symbolic ``delta``, a float bound next to a symbolic one, or a dtype that
        is not int/float.
    """
    op = "arange"
    fn = emit.function_of(op)
    if dtype is None:
        dtype = "float32" if any(isinstance(v, float) for v in (start, limit, delta)) else "int64"
    sym = isinstance(start, SymDim) or isinstance(limit, SymDim)
    if isinstance(delta, SymDim) or not delta or (sym and not all(
            isinstance(v, (int, SymDim)) for v in (start, limit, delta))) or dtype not in dtypes.ALL_DTYPES:
        raise BuildError(f"{op}: start {start}, limit {limit}, delta {delta}, dtype {dtype}; expected a "
                         "static non-zero delta, int bounds where one is symbolic, and an int or float dtype")
    if sym:
        length = (limit - start + delta - 1) // delta if delta > 0 else (start - limit - delta - 1) // (-delta)
    else:
        length = max(int(math.ceil((limit - start) / delta)), 0)
    first = start.materialize() if isinstance(start, SymDim) else start
    i64 = ir.IntegerType.get_signless(64)
    et = dtypes.to_ir_type(dtype)
    is_float = dtypes.is_float(dtype)

    def body(_out):
        i = arith_d.index_cast(i64, linalg_d.IndexOp(0).result)
        if isinstance(first, ir.Value):
            base = arith_d.index_cast(i64, first)
            v = arith_d.addi(base, arith_d.muli(i, emitters.scalar(delta, "int64")))
            return [arith_d.sitofp(et, v) if is_float else arith_d.trunci(et, v) if dtype != "int64" else v]
        if is_float:
            return [arith_d.addf(arith_d.mulf(arith_d.sitofp(et, i), emitters.scalar(delta, dtype)),
                                 emitters.scalar(first, dtype))]
        v = arith_d.addi(arith_d.muli(i, emitters.scalar(delta, "int64")), emitters.scalar(first, "int64"))
        return [v if dtype == "int64" else arith_d.trunci(et, v)]

    (r,) = emit.generic(emit.op_name(fn, op, name), [], [], [emit.empty((length,), dtype)],
                        [emit.identity_map(1)], ["parallel"], body)
    return Tensor(r, fn)


def size_array(values, dtype: str = "int64", name: Optional[str] = None) -> Tensor:
    """Sizes (ints and symbolic sizes, e.g. a numpy object array from ONNX ``Shape``) as a
    tensor of their run-time values: ``tensor.from_elements`` of the sizes' ``index`` values
    (:meth:`~mlc_mlir.ir.symbolic.SymDim.materialize`) cast to ``dtype``, row-major. How a size
    enters arithmetic on tensors (``arange(seq) + past``). Source: TVM Relax
    ``R.shape_to_tensor``.

    Parameters
    ----------
    values : array-like of int / SymDim, any static shape (0-d allowed)
    dtype : str
        int8/16/32/64 or a float dtype.

    Returns
    -------
    Tensor of ``values``' shape, ``dtype``.

    Raises
    ------
    BuildError
        For an element that is neither an int nor a SymDim, or a dtype that is not int/float.
    """
    op = "size_array"
    arr = np.asarray(values, dtype=object)
    if dtype not in dtypes.ALL_DTYPES or dtype == "bool" or not all(
            isinstance(v, (int, np.integer, SymDim)) and not isinstance(v, bool) for v in arr.flat):
        raise BuildError(f"{op}: values {arr.tolist()}, dtype {dtype}; expected ints and symbolic sizes "
                         "and an int or float dtype")
    fn = emit.function_of(op)
    et = dtypes.to_ir_type(dtype)
    i64 = ir.IntegerType.get_signless(64)
    elems = []
    for v in arr.flat:
        if isinstance(v, SymDim):
            x = arith_d.index_cast(i64, v.materialize())
            x = arith_d.sitofp(et, x) if dtypes.is_float(dtype) else x if dtype == "int64" else arith_d.trunci(et, x)
        else:
            x = emitters.scalar(int(v), dtype)
        elems.append(x)
    r = tensor_d.from_elements(ir.RankedTensorType.get(list(arr.shape), et), elems)
    emit.set_name(r.owner, emit.op_name(fn, op, name))
    return Tensor(r, fn)
