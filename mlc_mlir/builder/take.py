"""Indexing ops (TOPI's ``transform.take``, ``gather_elements``): gather along an axis by an
integer index tensor, emitted as a ``linalg.generic`` whose body reads the source with
``tensor.extract``.

Indices are checked: numpy index arrays when the op is built (``BuildError``), index Tensors at
run time by an elementwise generic whose result is a check of the function
(:meth:`~mlc_mlir.builder.graph_builder.FunctionBuilder.add_check`: the call raises
``ExecutionError`` naming the op, the argument, the offending value and the valid range). The
gather itself clamps, so an invalid index never reads outside the source.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from .._mlir import arith_d, ir, linalg_d, tensor_d
from ..errors import BuildError, format_shape
from ..ir import dtypes, emitters
from ..ir.module import CHECK_PASSED
from ..ir.symbolic import SymDim
from . import linalg_emit as emit
from .shape import slice as slice_
from .tensor import Tensor


def size_value(n):
    """An axis size as :func:`_wrap_and_clamp` and :func:`_check_indices` take it: an int as is,
    a :class:`~mlc_mlir.ir.symbolic.SymDim` as its ``index`` value, emitted at the current
    insertion point (call it before the generic whose body uses it)."""
    return n.materialize() if isinstance(n, SymDim) else n


def _index(n) -> ir.Value:
    """An ``index`` value of ``n`` (an int, or an ``index`` value from :func:`size_value`)."""
    return n if isinstance(n, ir.Value) else emitters.index_constant(n)


def _wrap_and_clamp(i: ir.Value, n) -> ir.Value:
    """An integer index as an ``index`` in ``[0, n)``: ``i + n`` if ``i < 0``, then clamped
    (``n``: an int or an ``index`` value from :func:`size_value`)."""
    idx_type = ir.IndexType.get()
    j = arith_d.index_cast(idx_type, i)
    zero = arith_d.ConstantOp(idx_type, 0).result
    nv = _index(n)
    j = arith_d.select(arith_d.cmpi(arith_d.CmpIPredicate.slt, j, zero), arith_d.addi(j, nv), j)
    return arith_d.maxsi(arith_d.minsi(j, arith_d.subi(nv, arith_d.ConstantOp(idx_type, 1).result)), zero)


def _check_indices(op: str, nm: str, x: Tensor, indices, ax: int, negative: bool, n=None):
    """Check that every index lies in ``[-n, n)`` (``[0, n)`` without ``negative``), ``n =
    x.shape[ax]`` unless given): a numpy array now, a Tensor at run time (an elementwise ``linalg.generic``
    mapping each index to INT64_MIN where valid, else to itself, registered with
    ``add_check``: elementwise, it is scheduled like the gather on every target).

    Raises
    ------
    BuildError
        For a numpy array holding an index out of range.
    """
    n = x.shape[ax] if n is None else n
    lo = -n if negative else 0
    where = (f"{op} '{nm}': argument 'indices' holds {{value}}, outside [{lo}, {n}) (axis {ax} of x "
             f"{format_shape(x.shape)})")
    if isinstance(indices, np.ndarray):
        if indices.dtype.kind in "iu" and indices.size and not isinstance(n, SymDim):
            bad = indices[(indices < lo) | (indices >= n)]
            if bad.size:
                raise BuildError(where.replace("{value}", str(int(bad.flat[0]))))
        return
    rank = indices.ndim
    i64 = ir.IntegerType.get_signless(64)
    if isinstance(indices, np.ndarray):  # checked at run time against a symbolic size
        indices = emit.tensor_arg(op, "indices", indices)
    nv = size_value(n)

    def body(i, _out):
        v = i if indices.dtype == "int64" else arith_d.extsi(i64, i)
        n_c = arith_d.index_cast(i64, _index(nv))
        lo_c = arith_d.subi(emitters.scalar(0, "int64"), n_c) if negative else emitters.scalar(0, "int64")
        bad = arith_d.ori(arith_d.cmpi(arith_d.CmpIPredicate.slt, v, lo_c),
                          arith_d.cmpi(arith_d.CmpIPredicate.sge, v, n_c))
        # INT64_MIN itself would read as "passed": reported as INT64_MIN + 1
        v = arith_d.maxsi(v, emitters.scalar(CHECK_PASSED + 1, "int64"))
        return [arith_d.select(bad, v, emitters.scalar(CHECK_PASSED, "int64"))]

    res = emitters.generic(f"{nm}.check", [indices.value], [emit.identity_map(rank)],
                           [emitters.empty(indices.shape, "int64")], [emit.identity_map(rank)],
                           ["parallel"] * rank, body)
    indices.fn.add_check(Tensor(res[0], indices.fn), where)


def _index_args(op: str, x, indices, axis: int):
    """``(fn, x, indices, axis)`` of an indexing op: Tensors, x of rank >= 1, integer indices, the
    axis normalized. Raises BuildError naming ``op`` and the argument otherwise."""
    fn = emit.function_of(op, x, indices)
    x = emit.tensor_arg(op, "x", x)
    indices = emit.tensor_arg(op, "indices", indices)
    if x.ndim < 1:
        raise BuildError(f"{op}: argument 'x' has shape {format_shape(x.shape)}; expected rank >= 1")
    if indices.dtype not in dtypes.INT_DTYPES:
        raise BuildError(f"{op}: argument 'indices' has dtype {indices.dtype}; expected one of "
                         f"{', '.join(sorted(dtypes.INT_DTYPES))}")
    return fn, x, indices, emit.normalize_axis(op, axis, x.ndim)


def _gather_axis(op: str, fn, x: Tensor, indices: Tensor, raw, ax: int, name: Optional[str],
                 negative: bool):
    """The op's name and the size of x's axis ``ax`` (a :func:`size_value`) once the indices are
    checked against it (:func:`_check_indices`; ``raw``: the ``indices`` argument as given, a numpy
    array is checked now).

    Raises
    ------
    BuildError
        For an empty axis with non-empty indices, or a numpy index out of range.
    """
    n = x.shape[ax]
    if n == 0 and 0 not in indices.shape:
        raise BuildError(f"{op}: axis {ax} of x {format_shape(x.shape)} has size 0; expected a "
                         f"non-empty axis to gather from")
    nm = emit.op_name(fn, op, name)
    _check_indices(op, nm, x, raw if isinstance(raw, np.ndarray) else indices, ax, negative)
    return nm, size_value(n)


def take(x, indices, axis: int = 0, name: Optional[str] = None, negative_indices: bool = True) -> Tensor:
    """numpy ``take(x, indices, axis)`` (TOPI ``take``, ONNX ``Gather``, PyTorch ``embedding``
    with ``axis=0`` and ``negative_indices=False``)::

        out[i0.., j0.., k0..] = x[i0.., wrap(indices[j0..]), k0..]

    Every index must lie in ``[-n, n)`` (``[0, n)`` without ``negative_indices``), ``n =
    x.shape[axis]``; a negative one reads ``i + n``. A numpy ``indices`` is checked when the op
    is built, a Tensor when the function runs (a check result, see the module docstring): an
    index out of range raises ``ExecutionError`` from the call.

    Emits one ``linalg.generic`` (``name``) with no inputs over the output's dims whose body
    reads ``indices`` and ``x`` with ``tensor.extract``: the index at
    ``linalg.index(axis .. axis+r-1)``, cast to ``index``, wrapped and clamped into ``[0, n)``
    (an invalid index reads a valid element before the call raises), then ``x`` at that row and
    the other ``linalg.index`` positions. Read through ``tensor.extract`` rather than an input
    map, the index is invariant along the trailing dims, so the linalg vectorizer
    (``vectorize_nd_extract``, the elementwise rule) turns a gather of rows (an embedding,
    ``axis`` not last) into contiguous ``vector.transfer_read`` s of each row, and any other
    gather into ``vector.gather``. Source: MLIR ``linalg::vectorize`` tensor.extract support
    (``vectorize-tensor-extract.mlir``), IREE's embedding lookups.

    Parameters
    ----------
    x : Tensor or numpy.ndarray, rank >= 1, any dtype in :data:`~mlc_mlir.ir.dtypes.ALL_DTYPES`
    indices : Tensor or numpy.ndarray, any shape (rank r, 0-d allowed)
        dtype in {int8, int16, int32, int64}.
    axis : int
        Axis of x to gather along; negative counts from the end.
    negative_indices : bool
        Whether ``-n <= i < 0`` is valid (numpy, ONNX) or an error (PyTorch's ``embedding``).

    Returns
    -------
    Tensor ``x.shape[:axis] + indices.shape + x.shape[axis+1:]``, x's dtype.

    Raises
    ------
    BuildError
        For a 0-d x, a bad axis, non-integer indices
        (``take: argument 'indices' has dtype float32; expected one of int8, int16, int32, int64``)
        or a numpy ``indices`` holding an index out of range.
    """
    op = "take"
    raw = indices
    fn, x, indices, ax = _index_args(op, x, indices, axis)
    r = indices.ndim
    nm, n = _gather_axis(op, fn, x, indices, raw, ax, name, negative_indices)
    out_shape = tuple(x.shape[:ax]) + tuple(indices.shape) + tuple(x.shape[ax + 1:])
    rank = len(out_shape)
    init = emit.empty(out_shape, x.dtype)

    def body(_out):
        i = tensor_d.ExtractOp(indices.value, [linalg_d.IndexOp(ax + k).result for k in range(r)]).result
        j = _wrap_and_clamp(i, n)
        pos = [linalg_d.IndexOp(d).result for d in range(ax)] + [j] + \
              [linalg_d.IndexOp(d).result for d in range(ax + r, rank)]
        return [tensor_d.ExtractOp(x.value, pos).result]

    res = emit.generic(nm, [], [], [init], [emit.identity_map(rank)], ["parallel"] * rank, body)
    return Tensor(res[0], fn)



def gather_elements(x, indices, axis: int = 0, name: Optional[str] = None) -> Tensor:
    """ONNX ``GatherElements`` / ``numpy.take_along_axis`` / ``torch.gather``: each output
    element reads ``x`` at its own position with the coordinate along ``axis`` replaced by the
    index there::

        out[i0, .., ir-1] = x[i0, .., wrap(indices[i0, .., ir-1]), .., ir-1]   (at position axis)

    Emits one ``linalg.generic`` (``name``) over ``indices``' shape that reads ``indices``
    through the identity map and ``x`` with ``tensor.extract`` at ``linalg.index`` positions
    plus the (``arith.index_cast``) index. An index ``i < 0`` becomes ``i + n`` (``n =
    x.shape[axis]``); one outside ``[-n, n)`` (undefined in ONNX, an error in PyTorch) raises:
    a numpy ``indices`` when the op is built (``BuildError``), a Tensor when the function runs
    (``ExecutionError``, see the module docstring).

    Parameters
    ----------
    x : Tensor or numpy.ndarray, shape (d0, .., d{r-1}), r >= 1
        Any dtype in :data:`~mlc_mlir.ir.dtypes.ALL_DTYPES`.
    indices : Tensor or numpy.ndarray, shape (e0, .., e{r-1})
        x's rank, ``e_k <= d_k`` for every ``k != axis`` (any ``e_axis >= 0``); dtype in
        {int8, int16, int32, int64}.
    axis : int
        Axis of x to gather along; negative counts from the end.

    Returns
    -------
    Tensor of ``indices``' shape, x's dtype.

    Raises
    ------
    BuildError
        For a 0-d x, a bad axis, non-integer indices, an ``indices`` shape that does not fit
        (``gather_elements: argument 'indices' has shape (2, 4); expected rank 2 with dims <= (3,
        3) except along axis 0``), or a numpy ``indices`` holding an index out of range.

    Source: ONNX operator spec (GatherElements-11/13), numpy ``take_along_axis``.
    """
    op = "gather_elements"
    raw = indices
    fn, x, indices, ax = _index_args(op, x, indices, axis)
    rank = x.ndim
    if indices.ndim != rank or any(e > d for k, (e, d) in enumerate(zip(indices.shape, x.shape)) if k != ax):
        raise BuildError(f"{op}: argument 'indices' has shape {format_shape(indices.shape)}; expected "
                         f"rank {rank} with dims <= {format_shape(x.shape)} except along axis {ax}")
    nm, n = _gather_axis(op, fn, x, indices, raw, ax, name, True)

    def body(i, _out):
        pos = [linalg_d.IndexOp(d).result for d in range(rank)]
        pos[ax] = _wrap_and_clamp(i, n)
        return [tensor_d.ExtractOp(x.value, pos).result]

    res = emit.generic(nm, [indices.value], [emit.identity_map(rank)], [emit.empty(indices.shape, x.dtype)],
                       [emit.identity_map(rank)], ["parallel"] * rank, body)
    return Tensor(res[0], fn)


def gather_nd(x, indices, batch_dims: int = 0, name: Optional[str] = None) -> Tensor:
    """ONNX ``GatherND`` / TOPI ``gather_nd``: the last axis of ``indices`` (length ``K``) holds
    coordinates into ``K`` axes of ``x`` after ``b = batch_dims`` shared batch axes::

        out[i0.., j0..] = x[i0..i{b-1}, wrap(indices[i0.., 0]), .., wrap(indices[i0.., K-1]), j0..]

    (``i`` over ``indices.shape[:-1]``, ``j`` over ``x.shape[b+K:]``). An index ``i < 0`` reads
    ``i + n``; one outside ``[-n, n)`` raises (a numpy ``indices`` when the op is built, a Tensor
    when the function runs, see the module docstring), ``n`` the size of its axis, static or
    symbolic.

    Emits one ``linalg.generic`` (``name``) over the output that reads ``indices`` ``K`` times,
    through maps ending in the constant ``k``, and ``x`` with ``tensor.extract``.

    Parameters
    ----------
    x : Tensor or numpy.ndarray, rank r >= 1, any dtype
    indices : Tensor or numpy.ndarray, rank q >= 1, int8/16/32/64
        ``indices.shape[:b] == x.shape[:b]``, ``1 <= K = indices.shape[-1] <= r - b`` (static).
    batch_dims : int
        Leading axes shared by ``x`` and ``indices``.

    Returns
    -------
    Tensor ``indices.shape[:-1] + x.shape[b+K:]``, x's dtype.

    Raises
    ------
    BuildError
        For a bad ``batch_dims``, a ``K`` out of range or symbolic, mismatched batch axes,
        non-integer indices, or a numpy ``indices`` holding an index out of range.

    Source: ONNX operator spec (GatherND-11/12/13), TVM TOPI ``gather_nd``.
    """
    op = "gather_nd"
    fn = emit.function_of(op, x, indices)
    x = emit.tensor_arg(op, "x", x)
    raw = indices
    idx = emit.tensor_arg(op, "indices", indices)
    if idx.dtype not in dtypes.INT_DTYPES:
        raise BuildError(f"{op}: argument 'indices' has dtype {idx.dtype}; expected one of "
                         f"{', '.join(sorted(dtypes.INT_DTYPES))}")
    b, q, r = int(batch_dims), idx.ndim, x.ndim
    k = idx.shape[-1] if q else None
    if not 0 <= b < min(q, r) or not isinstance(k, int) or not 1 <= k <= r - b or \
            tuple(idx.shape[:b]) != tuple(x.shape[:b]):
        raise BuildError(f"{op}: x {format_shape(x.shape)}, indices {format_shape(idx.shape)}, "
                         f"batch_dims {batch_dims}; expected 0 <= batch_dims < min(ranks), the "
                         f"batch axes equal and indices.shape[-1] a static int in [1, {r - b}]")
    nm = emit.op_name(fn, op, name)
    for c in range(k):  # each coordinate against its own axis
        col = raw[..., c] if isinstance(raw, np.ndarray) else \
            (idx if k == 1 else slice_(idx, [c], [c + 1], axes=[q - 1], name=f"{nm}.col{c}"))
        _check_indices(op, nm, x, col, b + c, True)
    sizes = [size_value(x.shape[b + c]) for c in range(k)]
    out_shape = tuple(idx.shape[:-1]) + tuple(x.shape[b + k:])
    rank = len(out_shape)
    maps = [ir.AffineMap.get(rank, 0, [ir.AffineDimExpr.get(d) for d in range(q - 1)] +
                             [ir.AffineConstantExpr.get(c)]) for c in range(k)]

    def body(*args):
        pos = [linalg_d.IndexOp(d).result for d in range(b)] + \
              [_wrap_and_clamp(v, n) for v, n in zip(args[:k], sizes)] + \
              [linalg_d.IndexOp(d).result for d in range(q - 1, rank)]
        return [tensor_d.ExtractOp(x.value, pos).result]

    res = emit.generic(nm, [idx.value] * k, maps, [emit.empty(out_shape, x.dtype)],
                       [emit.identity_map(rank)], ["parallel"] * rank, body)
    return Tensor(res[0], fn)


# ---------------------------------------------------------------- ONNX-style shape ops (squeeze,
# unsqueeze, expand, split) and ``gather`` (ONNX's name for :func:`take`).
