"""ONNX converters, elementwise family (arithmetic, comparisons, logic, activations, Cast,
Where); the other families live in :mod:`.onnx_nn` (linear, conv, pool, normalization),
:mod:`.onnx_shape` (shapes, constants, indexing) and :mod:`.onnx_reduce` (reductions).

Each converter takes a :class:`~.onnx_registry.NodeInputs` and returns one value per node
output, composing :mod:`mlc_mlir.ops` only. Version differences (attributes that became inputs)
are handled in the converter with ``node.opset``. Unsupported attribute values raise
``BuildError`` naming the node. Source: ONNX operator spec (Operators.md, per-version
changes), TVM Relax ``relax/frontend/onnx/onnx_frontend.py``.
"""

from __future__ import annotations

from typing import List

import numpy as np

from .. import ops
from ..builder import Tensor
from .onnx_registry import (
    OPSETS, ONNX_BOOL, ONNX_DTYPES, NodeInputs, dtype_of, np_dtype, register, same_dtype, shape_of,
)


# ------------------------------------------------------------------------------- elementwise
_BINARY = {"Add": ops.add, "Sub": ops.subtract, "Mul": ops.multiply, "Div": ops.divide,
           "Equal": ops.equal, "Less": ops.less, "Greater": ops.greater}


def legacy_broadcast(n: NodeInputs, a, b):
    """Opset < 7 binary ops: with ``broadcast=1`` and ``axis``, B's dims line up with A's from
    ``axis`` on (B is reshaped to A's rank with 1s around); without ``axis`` B matches A's
    trailing dims, which is numpy broadcasting. From opset 7 on: numpy broadcasting as is."""
    if n.opset >= 7 or not n.attr("broadcast", 0) or n.attr("axis") is None:
        return a, b
    ra, sb = len(shape_of(a)), shape_of(b)
    axis = int(n.attr("axis")) % max(ra, 1)
    if axis + len(sb) > ra:
        raise n.fail(f"attribute 'axis' is {axis} with B of shape {sb}; expected B to fit in A's "
                     f"shape {shape_of(a)} from that axis")
    new = (1,) * axis + sb + (1,) * (ra - axis - len(sb))
    return a, (ops.reshape(b, new) if isinstance(b, Tensor) else np.reshape(b, new))


@register(*_BINARY)
def _binary(n: NodeInputs) -> List[object]:
    a, b = same_dtype(n, *legacy_broadcast(n, n.t(0), n.t(1)))
    return [_BINARY[n.node.op_type](a, b)]


@register("Mod", opsets=(10, OPSETS[1]))
def _mod(n: NodeInputs) -> List[object]:
    """``fmod=0``: ``numpy.mod`` (sign of the divisor); ``fmod=1``: ``numpy.fmod`` (C ``fmod``).
    Before opset 28 the spec requires ``fmod=1`` for floats; a float ``fmod=0`` is converted as
    ``numpy.mod`` at every opset (what ``onnx.reference`` computes, and opset 28's definition)."""
    fmod = n.attr("fmod", 0)
    if fmod not in (0, 1):
        raise n.fail(f"attribute 'fmod' is {fmod}; expected 0 or 1")
    a, b = same_dtype(n, n.t(0), n.t(1))
    return [ops.mod(a, b, fmod=bool(fmod))]


@register("LessOrEqual", "GreaterOrEqual", opsets=(12, OPSETS[1]))
def _cmp_or_equal(n: NodeInputs) -> List[object]:
    a, b = same_dtype(n, n.t(0), n.t(1))
    strict = ops.greater(a, b) if n.node.op_type == "LessOrEqual" else ops.less(a, b)
    return [ops.subtract(1, strict)]


def _mask(v):
    """A BOOL operand as the int8 0/1 carrier (a numpy bool array from a folded node)."""
    return v.astype(np.int8) if isinstance(v, np.ndarray) and v.dtype == np.bool_ else v


@register("Not")
def _not(n: NodeInputs) -> List[object]:
    return [ops.subtract(1, _mask(n.t(0)))]


@register("And", "Or", "Xor")
def _logic(n: NodeInputs) -> List[object]:
    a, b = _mask(n.t(0)), _mask(n.t(1))
    if n.node.op_type == "And":
        return [ops.multiply(a, b)]
    if n.node.op_type == "Or":
        return [ops.maximum(a, b)]
    return [ops.cast(ops.less(ops.multiply(a, b), ops.maximum(a, b)), "int8")]


@register("Pow")
def _pow(n: NodeInputs) -> List[object]:
    """``ops.power`` in the base's dtype; an integer base with a float exponent is raised in
    float64 and truncated back to the base's dtype (numpy's ``power(a, b).astype(a.dtype)``,
    the ONNX reference)."""
    a, b = legacy_broadcast(n, n.t(0), n.t(1))
    if not dtype_of(a).startswith(("float", "bfloat")) and dtype_of(b).startswith(("float", "bfloat")):
        a64 = ops.cast(a, "float64") if isinstance(a, Tensor) else np.asarray(a, np.float64)
        b64 = ops.cast(b, "float64") if isinstance(b, Tensor) else np.asarray(b, np.float64)
        return [ops.cast(ops.power(a64, b64), dtype_of(a))]
    if isinstance(b, Tensor) and b.dtype != dtype_of(a):
        b = ops.cast(b, dtype_of(a))
    a, b = same_dtype(n, a, b)
    return [ops.power(a, b)]


@register("Max", "Min", "Sum", "Mean")
def _variadic(n: NodeInputs) -> List[object]:
    fn = {"Max": ops.maximum, "Min": ops.minimum, "Sum": ops.add, "Mean": ops.add}[n.node.op_type]
    acc = n.t(0)
    for i in range(1, len(n)):
        acc, b = same_dtype(n, acc, n.t(i))
        acc = fn(acc, b)
    if not isinstance(acc, Tensor):
        acc = ops.add(acc, np.zeros((), acc.dtype))
    if n.node.op_type == "Mean":
        acc = ops.divide(acc, float(len(n)))
    return [acc]


_UNARY = {"Relu": ops.relu, "Exp": ops.exp, "Log": ops.log, "Sqrt": ops.sqrt, "Tanh": ops.tanh,
          "Sigmoid": ops.sigmoid, "Neg": ops.negative, "Abs": ops.abs, "Erf": ops.erf,
          "Floor": ops.floor, "Ceil": ops.ceil, "Sin": ops.sin, "Cos": ops.cos, "Tan": ops.tan,
          "Asin": ops.asin, "Acos": ops.acos, "Atan": ops.atan, "Sinh": ops.sinh, "Cosh": ops.cosh,
          "Asinh": ops.asinh, "Acosh": ops.acosh, "Atanh": ops.atanh}


@register(*_UNARY)
def _unary(n: NodeInputs) -> List[object]:
    return [_UNARY[n.node.op_type](n.t(0))]


@register("Identity", "Dropout")
def _identity(n: NodeInputs) -> List[object]:
    x = n.t(0)
    if n.node.op_type == "Dropout" and n.has(2):
        mode, ratio = n.values[2], n.values[1] if n.has(1) else np.asarray(0.5)
        zero_ratio = not isinstance(ratio, Tensor) and float(np.asarray(ratio).reshape(-1)[0]) == 0.0
        if isinstance(mode, Tensor) or (bool(np.asarray(mode).reshape(-1)[0]) and not zero_ratio):
            raise n.fail("input 'training_mode' is true or computed at run time; expected false "
                         "(inference: Dropout is the identity)")
    if n.node.op_type == "Dropout" and len(n.node.output) > 1 and n.node.output[1]:
        return [x, np.ones(shape_of(x), np.bool_)]
    return [x]


@register("Reciprocal")
def _reciprocal(n: NodeInputs) -> List[object]:
    return [ops.divide(1.0, n.t(0))]


@register("Softplus")
def _softplus(n: NodeInputs) -> List[object]:
    return [ops.log(ops.add(ops.exp(n.t(0)), 1.0))]


@register("LeakyRelu")
def _leaky_relu(n: NodeInputs) -> List[object]:
    x = n.t(0)
    return [ops.where(ops.less(x, 0.0), ops.multiply(x, float(n.attr("alpha", 0.01))), x)]


@register("PRelu")
def _prelu(n: NodeInputs) -> List[object]:
    """Before opset 7 a 1-D slope of C values is per channel (axis 1), as PyTorch exported it."""
    x, slope = same_dtype(n, n.t(0), n.t(1))
    xs, ss = shape_of(x), shape_of(slope)
    if n.opset < 7 and len(ss) == 1 and len(xs) > 2 and ss[0] == xs[1]:
        new = (ss[0],) + (1,) * (len(xs) - 2)
        slope = ops.reshape(slope, new) if isinstance(slope, Tensor) else np.reshape(slope, new)
    return [ops.where(ops.less(x, 0.0), ops.multiply(x, slope), x)]


@register("HardSigmoid")
def _hard_sigmoid(n: NodeInputs) -> List[object]:
    y = ops.add(ops.multiply(n.t(0), float(n.attr("alpha", 0.2))), float(n.attr("beta", 0.5)))
    return [ops.clip(y, 0.0, 1.0)]


@register("Gelu", opsets=(20, OPSETS[1]))
def _gelu(n: NodeInputs) -> List[object]:
    return [ops.gelu(n.t(0), approximate=n.attr("approximate", b"none").decode())]


@register("Clip")
def _clip(n: NodeInputs) -> List[object]:
    x = n.t(0)
    if n.opset < 11:
        lo, hi = n.attr("min"), n.attr("max")
    else:
        lo = n.np(1, "min").item() if n.has(1) else None
        hi = n.np(2, "max").item() if n.has(2) else None
    if lo is not None:
        x = ops.maximum(x, lo)
    if hi is not None:
        x = ops.minimum(x, hi)
    return [x]


@register("Cast")
def _cast(n: NodeInputs) -> List[object]:
    to = n.attr("to")
    if to not in ONNX_DTYPES:
        raise n.fail(f"attribute 'to' is element type {to}; expected one of {sorted(ONNX_DTYPES)}")
    x = n.t(0)
    if to == ONNX_BOOL:
        return [ops.subtract(1, ops.equal(x, np.zeros((), np_dtype(x))))]
    return [ops.cast(x, ONNX_DTYPES[to])]



@register("BitCast", opsets=(26, OPSETS[1]))
def _bitcast(n: NodeInputs) -> List[object]:
    """``ops.bitcast`` to ``to`` (same bit width; BOOL and 4-bit/8-bit float types refused)."""
    to = int(n.attr("to"))
    if to not in ONNX_DTYPES or to == ONNX_BOOL:
        raise n.fail(f"attribute 'to' is element type {to}; expected one of "
                     f"{sorted(k for k in ONNX_DTYPES if k != ONNX_BOOL)}")
    x = n.t(0)
    return [ops.bitcast(x if isinstance(x, Tensor) else ops.constant(np.asarray(x)), ONNX_DTYPES[to])]


@register("Where")
def _where(n: NodeInputs) -> List[object]:
    a, b = same_dtype(n, n.t(1), n.t(2))
    return [ops.where(n.t(0), a, b)]


def _where_negative(x, neg):
    """``neg(x)`` where ``x < 0``, else ``x``."""
    return ops.where(ops.less(x, 0.0), neg(x), x)


@register("Elu")
def _elu(n: NodeInputs) -> List[object]:
    alpha = float(n.attr("alpha", 1.0))
    return [_where_negative(n.t(0), lambda x: ops.multiply(ops.subtract(ops.exp(x), 1.0), alpha))]


@register("Selu")
def _selu(n: NodeInputs) -> List[object]:
    alpha, gamma = float(n.attr("alpha", 1.67326319217681884765625)), float(n.attr("gamma", 1.05070102214813232421875))
    y = _where_negative(n.t(0), lambda x: ops.multiply(ops.subtract(ops.exp(x), 1.0), alpha))
    return [ops.multiply(y, gamma)]


@register("Celu", opsets=(12, OPSETS[1]))
def _celu(n: NodeInputs) -> List[object]:
    alpha = float(n.attr("alpha", 1.0))
    return [_where_negative(n.t(0), lambda x: ops.multiply(ops.subtract(ops.exp(ops.divide(x, alpha)), 1.0), alpha))]


@register("ThresholdedRelu", opsets=(10, OPSETS[1]))
def _thresholded_relu(n: NodeInputs) -> List[object]:
    x = n.t(0)
    return [ops.where(ops.greater(x, float(n.attr("alpha", 1.0))), x, 0.0)]


@register("Softsign")
def _softsign(n: NodeInputs) -> List[object]:
    x = n.t(0)
    return [ops.divide(x, ops.add(ops.abs(x), 1.0))]


@register("HardSwish", opsets=(14, OPSETS[1]))
def _hard_swish(n: NodeInputs) -> List[object]:
    x = n.t(0)
    return [ops.multiply(x, ops.clip(ops.add(ops.multiply(x, 1.0 / 6.0), 0.5), 0.0, 1.0))]


@register("Round", opsets=(11, OPSETS[1]))
def _round(n: NodeInputs) -> List[object]:
    """Half to even, as the spec asks."""
    return [ops.round(n.t(0))]


@register("Swish", opsets=(24, OPSETS[1]))
def _swish(n: NodeInputs) -> List[object]:
    """``x * sigmoid(alpha * x)``."""
    return [_swish_of(n.t(0), float(n.attr("alpha", 1.0)))]


def _swish_of(x, alpha: float):
    """``x * sigmoid(alpha * x)``."""
    return ops.multiply(x, ops.sigmoid(x if alpha == 1.0 else ops.multiply(x, np.asarray(alpha, np_dtype(x)))))


@register("SwiGLU", opsets=(28, OPSETS[1]))
def _swiglu(n: NodeInputs) -> List[object]:
    """``Swish_alpha(A) * B`` (gate ``A`` and value ``B`` of one shape, no broadcasting)."""
    a, b = same_dtype(n, n.t(0), n.t(1))
    if shape_of(a) != shape_of(b):
        raise n.fail(f"inputs 'A' {shape_of(a)} and 'B' {shape_of(b)}; expected identical shapes")
    return [ops.multiply(_swish_of(a, float(n.attr("alpha", 1.0))), b)]


@register("IsInf", opsets=(10, OPSETS[1]))
def _is_inf(n: NodeInputs) -> List[object]:
    """Masks ``x == +inf`` / ``x == -inf`` as ``detect_positive`` / ``detect_negative`` ask."""
    x = n.t(0)
    pos, neg = bool(n.attr("detect_positive", 1)), bool(n.attr("detect_negative", 1))
    if pos and neg:
        return [ops.equal(ops.abs(x), np.inf)]
    if pos or neg:
        return [ops.equal(x, np.inf if pos else -np.inf)]
    return [ops.multiply(ops.cast(ops.equal(x, x), "int8"), 0)]


@register("Mish", opsets=(18, OPSETS[1]))
def _mish(n: NodeInputs) -> List[object]:
    x = n.t(0)
    return [ops.multiply(x, ops.tanh(ops.log(ops.add(ops.exp(x), 1.0))))]


@register("Sign")
def _sign(n: NodeInputs) -> List[object]:
    x = n.t(0)
    dt = np_dtype(x)
    pos, neg = ops.cast(ops.greater(x, np.zeros((), dt)), dtype_of(x)), ops.cast(ops.less(x, np.zeros((), dt)), dtype_of(x))
    return [ops.subtract(pos, neg)]


@register("Shrink")
def _shrink(n: NodeInputs) -> List[object]:
    x = n.t(0)
    lambd, bias = float(n.attr("lambd", 0.5)), float(n.attr("bias", 0.0))
    dt = np_dtype(x)
    lo, hi = np.asarray(-lambd, dt), np.asarray(lambd, dt)
    up = ops.where(ops.greater(x, hi), ops.subtract(x, np.asarray(bias, dt)), np.zeros((), dt))
    return [ops.where(ops.less(x, lo), ops.add(x, np.asarray(bias, dt)), up)]


@register("CastLike", opsets=(15, OPSETS[1]))
def _cast_like(n: NodeInputs) -> List[object]:
    x, like = n.t(0), n.values[1]
    to = dtype_of(like)
    if dtype_of(x) == to:
        return [x]
    return [ops.cast(x, to)]


@register("IsNaN", opsets=(9, OPSETS[1]))
def _isnan(n: NodeInputs) -> List[object]:
    """``x != x`` (0/1 int8, the BOOL carrier)."""
    x = n.t(0)
    return [ops.not_equal(x, x)]
