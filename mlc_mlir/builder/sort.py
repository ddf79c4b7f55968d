"""``sort``: a stable sort along an axis and the permutation it applies (``torch.sort``,
``numpy.sort(kind="stable")`` / ``argsort``), as a bitonic sorting network.

linalg has no sort op. The axis is padded to ``P = 2**ceil(log2(n))`` and each row is sorted by
Batcher's bitonic network: ``log2(P) * (log2(P) + 1) / 2`` compare-exchange stages, each one
``linalg.generic`` over the padded shape in which position ``i`` reads its partner ``i ^ j``
(``tensor.extract``) and keeps the smaller or the larger of the pair. The network carries
``(value, position)`` pairs and compares them lexicographically, so equal values keep their
input order (a stable sort, whatever the network's order of exchanges) and every padded
element (position ``>= n``) sorts after every real one. Work is ``O(n log^2 n)`` per row and the
IR holds ``O(log^2 n)`` ops (8000 elements: 91 stages), where a selection by ``argmax`` rounds
(:func:`~mlc_mlir.builder.topk.topk` with ``k = n``) is ``O(n^2)`` work in ``O(n)`` ops.
NaN sorts as the largest value (after ``+inf`` ascending, first descending), as in PyTorch and
numpy.

Source: K. E. Batcher, "Sorting networks and their applications" (AFIPS 1968); the bitonic
sort of GPU libraries (CUB's block sort, ``torch.sort``'s CUDA kernels for short rows).
"""

from __future__ import annotations

from typing import Optional, Tuple

from .._mlir import arith_d, ir, linalg_d, tensor_d
from ..errors import BuildError, format_shape
from ..ir import dtypes
from . import linalg_emit as emit
from .shape import pad_value, slice as slice_
from .tensor import Tensor
from .topk import positions


def _key_before(a, b, dtype: str, descending: bool):
    """i1: value ``a`` sorts strictly before value ``b``, and i1: they are equal (NaNs equal)."""
    if dtypes.is_float(dtype):
        pred = arith_d.CmpFPredicate
        nan_a = arith_d.cmpf(pred.UNO, a, a)
        nan_b = arith_d.cmpf(pred.UNO, b, b)
        if descending:  # NaN first, then the larger value
            lt = arith_d.ori(arith_d.cmpf(pred.OGT, a, b), arith_d.andi(nan_a, arith_d.cmpf(pred.ORD, b, b)))
        else:  # the smaller value, NaN last
            lt = arith_d.ori(arith_d.cmpf(pred.OLT, a, b), arith_d.andi(nan_b, arith_d.cmpf(pred.ORD, a, a)))
        eq = arith_d.ori(arith_d.cmpf(pred.OEQ, a, b), arith_d.andi(nan_a, nan_b))
        return lt, eq
    pred = arith_d.CmpIPredicate
    unsigned = dtype.startswith("uint")
    if descending:
        lt = arith_d.cmpi(pred.ugt if unsigned else pred.sgt, a, b)
    else:
        lt = arith_d.cmpi(pred.ult if unsigned else pred.slt, a, b)
    return lt, arith_d.cmpi(pred.eq, a, b)


def _stage(v: Tensor, idx: Tensor, ax: int, n: int, k: int, j: int, descending: bool, name: str):
    """One compare-exchange stage of the bitonic network (block size ``k``, distance ``j``):
    position ``i`` and its partner ``i ^ j`` keep the pair in order, ascending where
    ``i & k == 0``, descending elsewhere; ``(value, position)`` pairs compare lexicographically
    and positions ``>= n`` (padding) compare after every real element."""
    rank = len(v.shape)
    index = ir.IndexType.get()
    i64 = ir.IntegerType.get_signless(64)

    def body(va, ia, _ov, _oi):
        pos = [linalg_d.IndexOp(d).result for d in range(rank)]
        i = pos[ax]
        partner = list(pos)
        partner[ax] = arith_d.xori(i, arith_d.constant(index, j))
        vb = tensor_d.ExtractOp(v.value, partner).result
        ib = tensor_d.ExtractOp(idx.value, partner).result
        zero = arith_d.constant(index, 0)
        up = arith_d.cmpi(arith_d.CmpIPredicate.eq, arith_d.andi(i, arith_d.constant(index, k)), zero)
        lower = arith_d.cmpi(arith_d.CmpIPredicate.eq, arith_d.andi(i, arith_d.constant(index, j)), zero)
        lt, eq = _key_before(va, vb, v.dtype, descending)
        pos_lt = arith_d.cmpi(arith_d.CmpIPredicate.slt, ia, ib)
        key_before = arith_d.ori(lt, arith_d.andi(eq, pos_lt))
        n_c = arith_d.constant(i64, n)
        real_a = arith_d.cmpi(arith_d.CmpIPredicate.slt, ia, n_c)
        real_b = arith_d.cmpi(arith_d.CmpIPredicate.slt, ib, n_c)
        same = arith_d.cmpi(arith_d.CmpIPredicate.eq, real_a, real_b)
        # both real: by value then position; both padding: by position; else the real one first
        before = arith_d.select(arith_d.andi(real_a, real_b), key_before, arith_d.select(same, pos_lt, real_a))
        # the lower position of an ascending pair (or the upper of a descending one) keeps the first
        keep_first = arith_d.cmpi(arith_d.CmpIPredicate.eq, up, lower)
        keep = arith_d.cmpi(arith_d.CmpIPredicate.eq, before, keep_first)
        return [arith_d.select(keep, va, vb), arith_d.select(keep, ia, ib)]

    ident = emit.identity_map(rank)
    out_v, out_i = emit.generic(name, [v.value, idx.value], [ident, ident],
                                [emit.empty(v.shape, v.dtype), emit.empty(v.shape, "int64")],
                                [ident, ident], ["parallel"] * rank, body)
    return Tensor(out_v, v.fn), Tensor(out_i, v.fn)


def sort(x, axis: int = -1, descending: bool = False, name: Optional[str] = None) -> Tuple[Tensor, Tensor]:
    """``x`` sorted along ``axis`` (stable: equal values keep their order) and the int64
    positions the sorted elements come from (``torch.sort(x, dim, descending, stable=True)``);
    see the module docstring for the network.

    Parameters
    ----------
    x : Tensor, rank >= 1, static extent along ``axis``
        dtype float16/bfloat16/float32/float64 or an integer dtype.
    axis : int
    descending : bool
        Largest first (NaN first); default smallest first (NaN last).
    name : str, optional
        Prefix of the ops' names (default ``sort``).

    Returns
    -------
    (values, indices)
        ``x``'s shape; values in x's dtype, indices int64.

    Raises
    ------
    BuildError
        For a non-Tensor or 0-d x, an axis out of range, a dynamic extent along the axis or a
        dtype that is neither float nor integer.
    """
    op = name or "sort"
    if not isinstance(x, Tensor):
        raise BuildError(f"{op}: argument 'x' is {type(x).__name__}; expected a Tensor")
    rank = len(x.shape)
    if rank == 0 or isinstance(axis, bool) or not isinstance(axis, int) or not -rank <= axis < rank:
        raise BuildError(f"{op}: argument 'axis' is {axis!r}; expected an axis of x {format_shape(x.shape)}")
    ax = axis % rank
    n = x.shape[ax]
    if not isinstance(n, int):
        raise BuildError(f"{op}: x {format_shape(x.shape)} has a dynamic extent along axis {axis}; expected "
                         "a static one")
    if not (dtypes.is_float(x.dtype) or x.dtype.startswith(("int", "uint"))):
        raise BuildError(f"{op}: x has dtype {x.dtype}; expected a float or integer dtype")
    size = 1 << max(n - 1, 0).bit_length()   # the padded axis, a power of 2
    padded = [size if d == ax else s for d, s in enumerate(x.shape)]
    v = x
    if size != n:
        v = Tensor(pad_value(x.value, [0] * rank, [size - n if d == ax else 0 for d in range(rank)], 0,
                             x.dtype, emit.op_name(x.fn, f"{op}.pad", None)), x.fn)
    idx = positions(padded, ax, x.fn, op)
    k = 2
    while k <= size:
        j = k // 2
        while j >= 1:
            v, idx = _stage(v, idx, ax, n, k, j, descending, emit.op_name(x.fn, f"{op}.stage", None))
            j //= 2
        k *= 2
    if size == n:
        return v, idx
    end = [n if d == ax else None for d in range(rank)]
    return slice_(v, [0] * rank, end), slice_(idx, [0] * rank, end)
