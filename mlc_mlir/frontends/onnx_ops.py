"""ONNX converters: one function per op family, each composing :mod:`mlc_mlir.ops`.

Each converter takes a :class:`~.onnx_registry.NodeInputs` and returns one value per node
output. Version differences (attributes that became inputs, Softmax's coercion to 2-D before
opset 13) are handled in the converter with ``node.opset``. Unsupported attribute values raise
``BuildError`` naming the node. Source: ONNX operator spec (Operators.md, per-version
changes), TVM Relax ``relax/frontend/onnx/onnx_frontend.py``.
"""

from __future__ import annotations

from typing import List

import numpy as np
from onnx import numpy_helper

from .. import ops
from ..builder import Tensor
from .onnx_registry import NodeInputs, register

#: ONNX TensorProto element type (int) -> our dtype; BOOL is carried as int8 0/1.
_TO = {1: "float32", 11: "float64", 10: "float16", 16: "bfloat16", 3: "int8", 5: "int16",
       6: "int32", 7: "int64", 9: "int8"}
_BOOL = 9


def _shape(v) -> tuple:
    return tuple(v.shape)


def _dtype(v) -> str:
    return v.dtype if isinstance(v, Tensor) else str(np.asarray(v).dtype).replace("bool", "int8")


def _same(n: NodeInputs, a, b):
    """Bring a numpy operand to the Tensor operand's dtype (ONNX requires equal dtypes)."""
    if isinstance(a, Tensor) and not isinstance(b, Tensor):
        b = np.asarray(b).astype(a.dtype if a.dtype != "bfloat16" else np.float32)
    elif isinstance(b, Tensor) and not isinstance(a, Tensor):
        a = np.asarray(a).astype(b.dtype if b.dtype != "bfloat16" else np.float32)
    return a, b


# ------------------------------------------------------------------------------- elementwise
_BINARY = {"Add": ops.add, "Sub": ops.subtract, "Mul": ops.multiply, "Div": ops.divide,
           "Equal": ops.equal, "Less": ops.less, "Greater": ops.greater}


@register(*_BINARY)
def _binary(n: NodeInputs) -> List[object]:
    if n.opset < 7 or n.attr("broadcast") not in (None, 0) and n.attr("axis") is not None:
        raise n.fail("legacy broadcast with 'axis' is not supported; expected numpy broadcasting")
    a, b = _same(n, n.t(0), n.t(1))
    return [_BINARY[n.node.op_type](a, b)]


@register("LessOrEqual", "GreaterOrEqual", opsets=(12, 21))
def _cmp_or_equal(n: NodeInputs) -> List[object]:
    a, b = _same(n, n.t(0), n.t(1))
    strict = ops.greater(a, b) if n.node.op_type == "LessOrEqual" else ops.less(a, b)
    return [ops.subtract(1, strict)]


@register("Not")
def _not(n: NodeInputs) -> List[object]:
    return [ops.subtract(1, n.t(0))]


@register("And", "Or", "Xor")
def _logic(n: NodeInputs) -> List[object]:
    a, b = n.t(0), n.t(1)
    if n.node.op_type == "And":
        return [ops.multiply(a, b)]
    if n.node.op_type == "Or":
        return [ops.maximum(a, b)]
    return [ops.cast(ops.less(ops.multiply(a, b), ops.maximum(a, b)), "int8")]


@register("Pow")
def _pow(n: NodeInputs) -> List[object]:
    a, b = n.t(0), n.t(1)
    if isinstance(b, Tensor) and b.dtype != _dtype(a):
        b = ops.cast(b, _dtype(a))
    a, b = _same(n, a, b)
    return [ops.power(a, b)]


@register("Max", "Min", "Sum", "Mean")
def _variadic(n: NodeInputs) -> List[object]:
    fn = {"Max": ops.maximum, "Min": ops.minimum, "Sum": ops.add, "Mean": ops.add}[n.node.op_type]
    acc = n.t(0)
    for i in range(1, len(n)):
        acc, b = _same(n, acc, n.t(i))
        acc = fn(acc, b)
    if not isinstance(acc, Tensor):
        acc = ops.add(acc, np.zeros((), acc.dtype))
    if n.node.op_type == "Mean":
        acc = ops.divide(acc, float(len(n)))
    return [acc]


_UNARY = {"Relu": ops.relu, "Exp": ops.exp, "Log": ops.log, "Sqrt": ops.sqrt, "Tanh": ops.tanh,
          "Sigmoid": ops.sigmoid, "Neg": ops.negative, "Abs": ops.abs, "Erf": ops.erf,
          "Floor": ops.floor, "Ceil": ops.ceil}


@register(*_UNARY)
def _unary(n: NodeInputs) -> List[object]:
    return [_UNARY[n.node.op_type](n.t(0))]


@register("Identity", "Dropout")
def _identity(n: NodeInputs) -> List[object]:
    x = n.t(0)
    if n.node.op_type == "Dropout" and len(n.node.output) > 1 and n.node.output[1]:
        return [x, np.ones(_shape(x), np.bool_)]
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
    x, slope = _same(n, n.t(0), n.t(1))
    return [ops.where(ops.less(x, 0.0), ops.multiply(x, slope), x)]


@register("HardSigmoid")
def _hard_sigmoid(n: NodeInputs) -> List[object]:
    y = ops.add(ops.multiply(n.t(0), float(n.attr("alpha", 0.2))), float(n.attr("beta", 0.5)))
    return [ops.clip(y, 0.0, 1.0)]


@register("Gelu", opsets=(20, 21))
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
    if to not in _TO:
        raise n.fail(f"attribute 'to' is element type {to}; expected one of {sorted(_TO)}")
    x = n.t(0)
    if to == _BOOL:
        return [ops.subtract(1, ops.equal(x, np.zeros((), _np_dtype(x))))]
    return [ops.cast(x, _TO[to])]


def _np_dtype(x):
    return np.float32 if _dtype(x) == "bfloat16" else np.dtype(_dtype(x))


@register("Where")
def _where(n: NodeInputs) -> List[object]:
    a, b = _same(n, n.t(1), n.t(2))
    return [ops.where(n.t(0), a, b)]


# ---------------------------------------------------------------------------------- linear
def _matmul(n: NodeInputs, a, b):
    sa, sb = _shape(a), _shape(b)
    if len(sa) == 1:
        return ops.squeeze(_matmul(n, ops.unsqueeze(a, [0]), b), [len(sb) - 2])
    if len(sb) == 1:
        return ops.squeeze(_matmul(n, a, ops.unsqueeze(b, [1])), [-1])
    if len(sa) == 2 and len(sb) == 2:
        return ops.matmul(a, b)
    if len(sb) == 2:  # (..., M, K) @ (K, N): fold the batch into M
        y = ops.matmul(ops.reshape(a, (-1, sa[-1])), b)
        return ops.reshape(y, sa[:-1] + (sb[-1],))
    batch = tuple(np.broadcast_shapes(sa[:-2], sb[:-2]))
    a = ops.reshape(ops.expand(a, batch + sa[-2:]), (-1,) + sa[-2:])
    b = ops.reshape(ops.expand(b, batch + sb[-2:]), (-1,) + sb[-2:])
    return ops.reshape(ops.batch_matmul(a, b), batch + (sa[-2], sb[-1]))


@register("MatMul")
def _matmul_op(n: NodeInputs) -> List[object]:
    a, b = _same(n, n.t(0), n.t(1))
    return [_matmul(n, a, b)]


@register("Gemm")
def _gemm(n: NodeInputs) -> List[object]:
    a, b = _same(n, n.t(0), n.t(1))
    if n.attr("transA", 0):
        a = ops.transpose(a)
    if n.attr("transB", 0):
        b = ops.transpose(b)
    y = ops.matmul(a, b)
    alpha, beta = float(n.attr("alpha", 1.0)), float(n.attr("beta", 1.0))
    if alpha != 1.0:
        y = ops.multiply(y, alpha)
    if n.has(2):
        c = _same(n, y, n.t(2))[1]
        y = ops.add(y, c if beta == 1.0 else ops.multiply(c, beta))
    return [y]


# ------------------------------------------------------------------------------ conv / pool
def _pads2d(n: NodeInputs, in_hw, k_hw, strides, dilations) -> tuple:
    """ONNX pads (h_begin, w_begin, h_end, w_end) -> (top, left, bottom, right), auto_pad too."""
    auto = n.attr("auto_pad", b"NOTSET").decode()
    if auto in ("NOTSET",):
        p = list(n.attr("pads", [0, 0, 0, 0]))
        return (p[0], p[1], p[2], p[3])
    if auto == "VALID":
        return (0, 0, 0, 0)
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pads = []
        for size, k, s, d in zip(in_hw, k_hw, strides, dilations):
            out = -(-size // s)
            total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
            small, big = total // 2, total - total // 2
            pads.append((small, big) if auto == "SAME_UPPER" else (big, small))
        return (pads[0][0], pads[1][0], pads[0][1], pads[1][1])
    raise n.fail(f"attribute 'auto_pad' is {auto!r}; expected NOTSET, VALID, SAME_UPPER or SAME_LOWER")


def _check_2d(n: NodeInputs, x) -> None:
    if len(_shape(x)) != 4:
        raise n.fail(f"input 'X' has shape {_shape(x)}; expected a 4-D NCHW tensor (2-D spatial only)")


@register("Conv")
def _conv(n: NodeInputs) -> List[object]:
    x, w = n.t(0), n.t(1)
    _check_2d(n, x)
    k = _shape(w)[2:]
    strides = tuple(n.attr("strides", [1, 1]))
    dil = tuple(n.attr("dilations", [1, 1]))
    pads = _pads2d(n, _shape(x)[2:], k, strides, dil)
    bias = n.t(2) if n.has(2) else None
    return [ops.conv2d(x, w, bias, strides=strides, padding=pads, dilation=dil,
                       groups=int(n.attr("group", 1)))]


def _pool_args(n: NodeInputs, x):
    _check_2d(n, x)
    if n.attr("ceil_mode", 0):
        raise n.fail("attribute 'ceil_mode' is 1; expected 0")
    k = tuple(n.attr("kernel_shape"))
    strides = tuple(n.attr("strides", [1, 1]))
    dil = tuple(n.attr("dilations", [1, 1]))
    return k, strides, _pads2d(n, _shape(x)[2:], k, strides, dil), dil


@register("MaxPool")
def _max_pool(n: NodeInputs) -> List[object]:
    x = n.t(0)
    if len(n.node.output) > 1 and n.node.output[1]:
        raise n.fail("output 'Indices' is requested; expected only 'Y'")
    if n.attr("storage_order", 0):
        raise n.fail("attribute 'storage_order' is 1; expected 0")
    k, s, p, d = _pool_args(n, x)
    return [ops.max_pool2d(x, k, strides=s, padding=p, dilation=d)]


@register("AveragePool")
def _avg_pool(n: NodeInputs) -> List[object]:
    x = n.t(0)
    k, s, p, d = _pool_args(n, x)
    if d != (1, 1):
        raise n.fail(f"attribute 'dilations' is {d}; expected (1, 1)")
    return [ops.avg_pool2d(x, k, strides=s, padding=p, count_include_pad=bool(n.attr("count_include_pad", 0)))]


@register("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(n: NodeInputs) -> List[object]:
    x = n.t(0)
    axes = tuple(range(2, len(_shape(x))))
    if n.node.op_type == "GlobalMaxPool":
        return [ops.max(x, axis=axes, keepdims=True)]
    return [ops.mean(x, axis=axes, keepdims=True)]


# ---------------------------------------------------------------------------- normalization
@register("BatchNormalization")
def _batch_norm(n: NodeInputs) -> List[object]:
    if n.attr("training_mode", 0):
        raise n.fail("attribute 'training_mode' is 1; expected 0 (inference)")
    x = n.t(0)
    args = [_same(n, x, n.t(i))[1] for i in range(1, 5)]
    return [ops.batch_norm(x, *args, eps=float(n.attr("epsilon", 1e-5)), axis=1)]


@register("LayerNormalization", opsets=(17, 21))
def _layer_norm(n: NodeInputs) -> List[object]:
    if len(n.node.output) > 1 and any(n.node.output[1:]):
        raise n.fail("outputs 'Mean'/'InvStdDev' are requested; expected only 'Y'")
    x = n.t(0)
    rank = len(_shape(x))
    axis = int(n.attr("axis", -1)) % rank
    axes = tuple(range(axis - rank, 0))
    gamma = ops.broadcast_to(n.t(1), _shape(x)[axis:]) if _shape(n.t(1)) != _shape(x)[axis:] else n.t(1)
    beta = n.t(2) if n.has(2) else None
    if beta is not None and _shape(beta) != _shape(x)[axis:]:
        beta = ops.broadcast_to(beta, _shape(x)[axis:])
    return [ops.layer_norm(x, gamma, beta, axis=axes, eps=float(n.attr("epsilon", 1e-5)))]


@register("Softmax", "LogSoftmax")
def _softmax(n: NodeInputs) -> List[object]:
    x = n.t(0)
    fn = ops.softmax if n.node.op_type == "Softmax" else ops.log_softmax
    shape = _shape(x)
    if n.opset >= 13:
        return [fn(x, axis=int(n.attr("axis", -1)))]
    axis = int(n.attr("axis", 1)) % max(len(shape), 1)
    flat = ops.reshape(x, (int(np.prod(shape[:axis])), int(np.prod(shape[axis:]))))
    return [ops.reshape(fn(flat, axis=-1), shape)]


# ---------------------------------------------------------------------------------- shapes
@register("Transpose")
def _transpose(n: NodeInputs) -> List[object]:
    x = n.t(0)
    perm = n.attr("perm")
    return [ops.transpose(x, list(perm) if perm is not None else None)]


@register("Reshape")
def _reshape(n: NodeInputs) -> List[object]:
    x = n.t(0)
    shape = [int(d) for d in (n.np(1, "shape") if n.opset >= 5 else n.attr("shape"))]
    if not n.attr("allowzero", 0):
        shape = [_shape(x)[i] if d == 0 else d for i, d in enumerate(shape)]
    return [ops.reshape(x, shape)]


@register("Flatten")
def _flatten(n: NodeInputs) -> List[object]:
    x = n.t(0)
    shape = _shape(x)
    axis = int(n.attr("axis", 1)) % (len(shape) + 1)
    return [ops.reshape(x, (int(np.prod(shape[:axis])), int(np.prod(shape[axis:]))))]


@register("Concat")
def _concat(n: NodeInputs) -> List[object]:
    vals = [n.t(i) for i in range(len(n)) if n.has(i)]
    ref = next((v for v in vals if isinstance(v, Tensor)), vals[0])
    vals = [_same(n, ref, v)[1] for v in vals]
    return [ops.concat(vals, axis=int(n.attr("axis")))]


def _axes_input(n: NodeInputs, since: int):
    if n.opset >= since:
        return [int(a) for a in n.np(1, "axes")] if n.has(1) else None
    return n.attr("axes")


@register("Squeeze")
def _squeeze(n: NodeInputs) -> List[object]:
    return [ops.squeeze(n.t(0), _axes_input(n, 13))]


@register("Unsqueeze")
def _unsqueeze(n: NodeInputs) -> List[object]:
    return [ops.unsqueeze(n.t(0), _axes_input(n, 13))]


@register("Gather")
def _gather(n: NodeInputs) -> List[object]:
    idx = n.t(1)
    if not isinstance(idx, Tensor):
        idx = np.asarray(idx).astype(np.int64)
    return [ops.gather(n.t(0), idx, axis=int(n.attr("axis", 0)))]


@register("Expand")
def _expand(n: NodeInputs) -> List[object]:
    return [ops.expand(n.t(0), [int(d) for d in n.np(1, "shape")])]


@register("Split")
def _split(n: NodeInputs) -> List[object]:
    x = n.t(0)
    axis = int(n.attr("axis", 0))
    size = _shape(x)[axis]
    if n.opset >= 13 and n.has(1):
        sizes = [int(s) for s in n.np(1, "split")]
    elif n.opset < 13 and n.attr("split") is not None:
        sizes = list(n.attr("split"))
    else:
        parts = int(n.attr("num_outputs", len(n.node.output)))
        chunk = -(-size // parts)
        sizes = [min(chunk, size - i * chunk) for i in range(parts)]
    return ops.split(x, sizes, axis=axis)


@register("Slice")
def _slice(n: NodeInputs) -> List[object]:
    x = n.t(0)
    if n.opset < 10:
        starts, ends, axes, steps = n.attr("starts"), n.attr("ends"), n.attr("axes"), None
    else:
        starts, ends = n.np(1, "starts"), n.np(2, "ends")
        axes = n.np(3, "axes") if n.has(3) else None
        steps = n.np(4, "steps") if n.has(4) else None
    axes = list(range(len(starts))) if axes is None else [int(a) % len(_shape(x)) for a in axes]
    steps = [1] * len(starts) if steps is None else [int(s) for s in steps]
    if any(s <= 0 for s in steps):
        raise n.fail(f"input 'steps' is {steps}; expected positive steps")
    lim = lambda v: int(max(min(int(v), 2**62), -2**62))  # noqa: E731
    return [ops.slice(x, [lim(s) for s in starts], [lim(e) for e in ends], strides=steps, axes=axes)]


@register("Pad")
def _pad(n: NodeInputs) -> List[object]:
    x = n.t(0)
    mode = n.attr("mode", b"constant").decode()
    if mode != "constant":
        raise n.fail(f"attribute 'mode' is {mode!r}; expected 'constant'")
    rank = len(_shape(x))
    if n.opset < 11:
        pads, value = list(n.attr("pads")), float(n.attr("value", 0.0))
    else:
        pads = [int(p) for p in n.np(1, "pads")]
        value = n.np(2, "constant_value").item() if n.has(2) else 0
        if n.has(3):
            axes = [int(a) % rank for a in n.np(3, "axes")]
            full = [0] * (2 * rank)
            for j, a in enumerate(axes):
                full[a], full[a + rank] = pads[j], pads[j + len(axes)]
            pads = full
    if min(pads) < 0:
        raise n.fail(f"input 'pads' is {pads}; expected non-negative pads")
    return [ops.pad(x, [(pads[i], pads[i + rank]) for i in range(rank)], constant_value=value)]


@register("Shape")
def _shape_op(n: NodeInputs) -> List[object]:
    shape = np.array(_shape(n.values[0]), np.int64)
    return [shape[n.attr("start", 0):n.attr("end", len(shape))]]


@register("Size")
def _size(n: NodeInputs) -> List[object]:
    return [np.array(int(np.prod(_shape(n.values[0]))), np.int64)]


@register("Constant")
def _constant(n: NodeInputs) -> List[object]:
    (name, v), = n.attrs.items()
    if name == "value":
        return [np.asarray(numpy_helper.to_array(v))]
    if name in ("value_float", "value_int"):
        return [np.array(v, np.float32 if name == "value_float" else np.int64)]
    if name in ("value_floats", "value_ints"):
        return [np.array(v, np.float32 if name == "value_floats" else np.int64)]
    raise n.fail(f"attribute {name!r} is not supported; expected value, value_float(s), value_int(s)")


# ------------------------------------------------------------------------------- reductions
_REDUCE = {"ReduceSum": ops.sum, "ReduceMean": ops.mean, "ReduceMax": ops.max, "ReduceMin": ops.min}


@register(*_REDUCE)
def _reduce(n: NodeInputs) -> List[object]:
    x = n.t(0)
    since = 13 if n.node.op_type == "ReduceSum" else 18
    axes = _axes_input(n, since)
    keep = bool(n.attr("keepdims", 1))
    if axes is not None and len(axes) == 0:
        axes = None
    if axes is None and n.attr("noop_with_empty_axes", 0):
        return [x]
    fn = _REDUCE[n.node.op_type]
    if n.node.op_type == "ReduceSum":
        return [fn(x, axis=None if axes is None else tuple(axes), keepdims=keep, dtype=_dtype(x))]
    return [fn(x, axis=None if axes is None else tuple(axes), keepdims=keep)]


@register("ArgMax")
def _argmax(n: NodeInputs) -> List[object]:
    if n.attr("select_last_index", 0):
        raise n.fail("attribute 'select_last_index' is 1; expected 0")
    return [ops.argmax(n.t(0), axis=int(n.attr("axis", 0)), keepdims=bool(n.attr("keepdims", 1)))]
