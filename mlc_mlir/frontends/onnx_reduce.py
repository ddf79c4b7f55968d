"""ONNX converters, reduction family: ReduceSum/Mean/Max/Min (and the derived ReduceL1/L2,
ReduceProd, ReduceLogSum...), LpNormalization, ArgMax/ArgMin, CumSum, CumProd. Conventions as in :mod:`.onnx_ops`.

Source: ONNX operator spec (Operators.md), TVM Relax ``onnx_frontend.py``.
"""

from __future__ import annotations

from typing import List

import numpy as np

from .. import ops
from .onnx_registry import OPSETS, NodeInputs, axes_input, dtype_of, np_dtype, register, shape_of


# ------------------------------------------------------------------------------- reductions
_REDUCE = {"ReduceSum": ops.sum, "ReduceMean": ops.mean, "ReduceMax": ops.max, "ReduceMin": ops.min,
           "ReduceProd": ops.prod}
#: derived reductions: (pre-map, base reduction, post-map)
_DERIVED = {
    "ReduceL1": (ops.abs, "ReduceSum", None),
    "ReduceL2": (lambda x: ops.multiply(x, x), "ReduceSum", ops.sqrt),
    "ReduceSumSquare": (lambda x: ops.multiply(x, x), "ReduceSum", None),
    "ReduceLogSum": (None, "ReduceSum", ops.log),
}


def _reduce_args(n: NodeInputs):
    """(axes or None for all, keepdims, no-op) of a reduction; axes are an input from opset 13
    (ReduceSum) or 18 (the others)."""
    since = 13 if n.node.op_type == "ReduceSum" else 18
    axes = axes_input(n, since)
    if axes is not None and len(axes) == 0:
        axes = None
    noop = axes is None and bool(n.attr("noop_with_empty_axes", 0))
    return (None if axes is None else tuple(axes)), bool(n.attr("keepdims", 1)), noop


def _base(op: str, x, axes, keep):
    if op == "ReduceSum":
        return ops.sum(x, axis=axes, keepdims=keep, dtype=dtype_of(x))
    y = _REDUCE[op](x, axis=axes, keepdims=keep)
    return ops.cast(y, dtype_of(x)) if dtype_of(y) != dtype_of(x) else y  # int prod is int64


@register(*_REDUCE)
def _reduce(n: NodeInputs) -> List[object]:
    x = n.t(0)
    axes, keep, noop = _reduce_args(n)
    return [x if noop else _base(n.node.op_type, x, axes, keep)]


@register(*_DERIVED)
def _reduce_derived(n: NodeInputs) -> List[object]:
    pre, base, post = _DERIVED[n.node.op_type]
    x = n.t(0)
    axes, keep, noop = _reduce_args(n)
    y = x if pre is None else pre(x)
    if noop:
        return [y if post is None else post(y)]
    y = _base(base, y, axes, keep)
    return [y if post is None else post(y)]


@register("ReduceLogSumExp")
def _reduce_log_sum_exp(n: NodeInputs) -> List[object]:
    """``log(sum(exp(x - m))) + m`` with ``m`` the max over the same axes (no overflow)."""
    x = n.t(0)
    axes, keep, noop = _reduce_args(n)
    if noop:
        return [x]
    m = ops.max(x, axis=axes, keepdims=True)
    y = ops.add(ops.log(ops.sum(ops.exp(ops.subtract(x, m)), axis=axes, keepdims=True)), m)
    if not keep:
        rank = len(shape_of(x))
        drop = range(rank) if axes is None else sorted(a % rank for a in axes)
        y = ops.squeeze(y, list(drop))
    return [y]


@register("LpNormalization")
def _lp_normalization(n: NodeInputs) -> List[object]:
    """``x / ||x||_p`` along ``axis`` (p 1 or 2); a zero norm gives 0, as the ONNX reference."""
    x = n.t(0)
    p = int(n.attr("p", 2))
    if p not in (1, 2):
        raise n.fail(f"attribute 'p' is {p}; expected 1 or 2")
    axis = int(n.attr("axis", -1))
    norm = ops.sum(ops.abs(x) if p == 1 else ops.multiply(x, x), axis=(axis,), keepdims=True)
    norm = norm if p == 1 else ops.sqrt(norm)
    zero = np.zeros((), dtype_of(x))
    is_zero = ops.equal(norm, zero)
    return [ops.where(is_zero, zero, ops.divide(x, ops.where(is_zero, np.ones((), dtype_of(x)), norm)))]


@register("ArgMax", "ArgMin")
def _argmax(n: NodeInputs) -> List[object]:
    """ArgMin is ArgMax of ``-x``; ``select_last_index`` is ArgMax of ``x`` reversed along
    ``axis`` (a gather), mapped back with ``L - 1 - i``."""
    x = n.t(0)
    axis = int(n.attr("axis", 0)) % len(shape_of(x))
    if n.node.op_type == "ArgMin":
        x = ops.negative(x)
    last = bool(n.attr("select_last_index", 0))
    length = shape_of(x)[axis]
    if last:
        x = ops.gather(x, np.arange(length - 1, -1, -1, dtype=np.int64), axis=axis)
    i = ops.argmax(x, axis=axis, keepdims=bool(n.attr("keepdims", 1)))
    return [ops.subtract(np.asarray(length - 1, np.int64), i) if last else i]


@register("CumSum", opsets=(11, OPSETS[1]))
def _cumsum(n: NodeInputs) -> List[object]:
    """``ops.cumsum`` along ``axis``: inclusive or ``exclusive``, forward or ``reverse``."""
    x = n.t(0)
    axis = int(n.np(1, "axis").reshape(-1)[0])
    return [ops.cumsum(x, axis, exclusive=bool(n.attr("exclusive", 0)), reverse=bool(n.attr("reverse", 0)))]


def _shifted(x, axis: int, by: int, reverse: bool):
    """``x`` moved ``by`` positions along ``axis`` (toward the end, or the start when
    ``reverse``), the vacated positions filled with 1 (the product's identity)."""
    shape = shape_of(x)
    length = shape[axis]
    ones = np.ones(shape[:axis] + (by,) + shape[axis + 1:], np_dtype(x))
    if reverse:
        return ops.concat([ops.slice(x, [by], [length], axes=[axis]), ones], axis=axis)
    return ops.concat([ones, ops.slice(x, [0], [length - by], axes=[axis])], axis=axis)


@register("CumProd", opsets=(26, OPSETS[1]))
def _cumprod(n: NodeInputs) -> List[object]:
    """Cumulative product along ``axis`` (``exclusive``, ``reverse``) as a Hillis-Steele scan:
    ``ceil(log2 L)`` rounds of ``y *= shift(y, 2^k)`` (Hillis & Steele 1986, "Data parallel
    algorithms"); exact for zeros and signs, unlike ``exp(cumsum(log x))``."""
    x = n.t(0)
    rank = len(shape_of(x))
    axis = int(n.np(1, "axis").reshape(-1)[0])
    if not -rank <= axis < rank:
        raise n.fail(f"input 'axis' is {axis}; expected in [{-rank}, {rank})")
    axis %= rank
    reverse = bool(n.attr("reverse", 0))
    length = shape_of(x)[axis]
    y = _shifted(x, axis, 1, reverse) if n.attr("exclusive", 0) and length > 0 else x
    by = 1
    while by < length:
        y = ops.multiply(y, _shifted(y, axis, by, reverse))
        by *= 2
    return [y]
