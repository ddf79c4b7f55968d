"""Converters of core ATen math ops: unary functions, comparisons and logical ops (bool results
as the builder's int8 0/1 masks), powers, and the reductions with indices or corrections
(``max.dim``, ``argmax``, ``var``, ``linalg_vector_norm``, ``cumsum``, ``gather``).

Conventions as in :mod:`.torch_converters`; operands are cast to the dtype PyTorch computes
in (:func:`~.torch_converters.common_dtype`, :func:`~.torch_converters.out_dtype`).

Source: PyTorch ``native_functions.yaml`` signatures and ``torch/_refs`` semantics (type
promotion, NaN handling); TVM Relax ``frontend/torch/base_fx_graph_translator.py``.
"""

from __future__ import annotations

import math
import operator

import numpy as np

from .. import ops
from ..builder import Tensor
from ..errors import BuildError
from .torch_converters import _dims, _tensor, arg, common_dtype, out_dtype, promote, register_converter, torch_dtype


def _float_in(node, x: Tensor) -> Tensor:
    """``x`` cast to the float dtype of ``node``'s result (ints go to float32 as in PyTorch)."""
    return promote(out_dtype(node) or x.dtype, x)[0]


# ----------------------------------------------------------------------------- unary
@register_converter("aten.abs.default", dtypes="float, int")
def _abs(ctx, node, args):
    """``ops.abs``."""
    return ops.abs(args[0])


@register_converter("aten.log1p.default")
def _log1p(ctx, node, args):
    """``math.log1p`` (accurate near 0); ints cast to float32."""
    return ops.log1p(_float_in(node, args[0]))


@register_converter("aten.expm1.default")
def _expm1(ctx, node, args):
    """``math.expm1`` (accurate near 0); ints cast to float32."""
    return ops.expm1(_float_in(node, args[0]))


@register_converter("aten.reciprocal.default")
def _reciprocal(ctx, node, args):
    """``1 / x``; ints cast to float32."""
    return ops.divide(1.0, _float_in(node, args[0]))


@register_converter("aten.sign.default", dtypes="float, int")
def _sign(ctx, node, args):
    """``(x > 0) - (x < 0)`` in x's dtype (NaN gives 0, as in PyTorch)."""
    x = _tensor("aten.sign", "self", args[0])
    return ops.cast(ops.subtract(ops.greater(x, 0), ops.less(x, 0)), x.dtype)


_FLOAT_UNARY = {
    "aten.erf.default": ops.erf, "aten.floor.default": ops.floor, "aten.ceil.default": ops.ceil,
    "aten.round.default": ops.round, "aten.trunc.default": ops.trunc,
    **{f"aten.{f}.default": getattr(ops, f)
       for f in ("tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh")},
}


def _register_float_unary(name: str, fn) -> None:
    def convert(ctx, node, args):
        return fn(_float_in(node, args[0]))
    convert.__doc__ = f"``ops.{fn.__name__}``; ints cast to float32."
    register_converter(name)(convert)


for _name, _fn in _FLOAT_UNARY.items():
    _register_float_unary(_name, _fn)


@register_converter("aten.atan2.default", "aten.atan2.out")
def _atan2(ctx, node, args):
    """``ops.atan2`` with both operands cast to the result dtype (ints to float32); the ``out=``
    overload returns the value (a functional graph has no out buffer to write)."""
    y, x = promote(out_dtype(node) or "float32", args[0], args[1])
    return ops.atan2(y, x)


@register_converter("aten.log2.default", "aten.log10.default")
def _log_base(ctx, node, args):
    """``log(x) / log(base)``."""
    base = 2.0 if str(node.target).startswith("aten.log2") else 10.0
    return ops.multiply(ops.log(_float_in(node, args[0])), 1.0 / math.log(base))


@register_converter("aten.exp2.default")
def _exp2(ctx, node, args):
    """``exp(x * log(2))``."""
    return ops.exp(ops.multiply(_float_in(node, args[0]), math.log(2.0)))


@register_converter("aten.isnan.default", dtypes="float, int")
def _isnan(ctx, node, args):
    """``x != x`` (an int tensor has no NaN)."""
    x = _tensor("aten.isnan", "self", args[0])
    return ops.not_equal(x, x) if x.dtype.startswith(("float", "bfloat")) else ops.multiply(ops.equal(x, x), 0)


@register_converter("aten.isinf.default")
def _isinf(ctx, node, args):
    """``|x| == inf``."""
    return ops.equal(ops.abs(args[0]), float("inf"))


@register_converter("aten.hypot.default")
def _hypot(ctx, node, args):
    """``sqrt(a * a + b * b)``."""
    a, b = promote(out_dtype(node), args[0], args[1])
    return ops.sqrt(ops.add(ops.multiply(a, a), ops.multiply(b, b)))


@register_converter("aten.clamp.Tensor", dtypes="float, int")
def _clamp_tensor(ctx, node, args):
    """``minimum(maximum(x, min), max)`` with tensor (or None) bounds."""
    dt = out_dtype(node)
    x, lo, hi = promote(dt, args[0], arg(ctx, args, 1, "min"), arg(ctx, args, 2, "max"))
    y = x if lo is None else ops.maximum(x, lo)
    return y if hi is None else ops.minimum(y, hi)


@register_converter("aten.leaky_relu.default")
def _leaky_relu(ctx, node, args):
    """``where(x > 0, x, negative_slope * x)``."""
    x = _tensor("aten.leaky_relu", "self", args[0])
    return ops.where(ops.greater(x, 0.0), x, ops.multiply(x, float(arg(ctx, args, 1, "negative_slope", 0.01))))


@register_converter("aten.elu.default")
def _elu(ctx, node, args):
    """``scale * where(x > 0, x, alpha * expm1(input_scale * x))``."""
    x = _tensor("aten.elu", "self", args[0])
    alpha, scale = float(arg(ctx, args, 1, "alpha", 1.0)), float(arg(ctx, args, 2, "scale", 1.0))
    in_scale = float(arg(ctx, args, 3, "input_scale", 1.0))
    neg = ops.multiply(ops.expm1(ops.multiply(x, in_scale) if in_scale != 1 else x), alpha * scale)
    return ops.where(ops.greater(x, 0.0), ops.multiply(x, scale) if scale != 1 else x, neg)


@register_converter("aten.hardtanh.default", dtypes="float, int")
def _hardtanh(ctx, node, args):
    """``clip(x, min_val, max_val)``."""
    return ops.clip(args[0], arg(ctx, args, 1, "min_val", -1.0), arg(ctx, args, 2, "max_val", 1.0))


# ----------------------------------------------------------------------------- powers
def _int_power(x: Tensor, n: int) -> Tensor:
    """``x ** n`` for an int ``n >= 1`` by binary exponentiation (``2 * log2(n)`` multiplies)."""
    result, base = None, x
    while n:
        if n & 1:
            result = base if result is None else ops.multiply(result, base)
        n >>= 1
        if n:
            base = ops.multiply(base, base)
    return result


@register_converter("aten.pow.Tensor_Scalar", dtypes="float, int")
def _pow_scalar(ctx, node, args):
    """Integral exponents by repeated multiplication (negative: ``1 / x**-n``), ``0.5`` /
    ``-0.5`` as ``sqrt`` / ``rsqrt``, any other as ``math.powf``; operands in the result dtype."""
    x, e = args[0], args[1]
    (x,) = promote(out_dtype(node), _tensor("aten.pow", "self", x))
    if isinstance(e, float) and e.is_integer() and abs(e) <= 64:
        e = int(e)
    if isinstance(e, bool):
        e = int(e)
    if isinstance(e, int):
        if e == 0:
            return ops.add(ops.multiply(x, 0), 1)
        if e > 0:
            return _int_power(x, e)
        if x.dtype.startswith("int"):
            raise BuildError(f"aten.pow: argument 'exponent' is {e}; expected >= 0 for an integer tensor "
                             "(PyTorch raises)")
        return ops.divide(1.0, _int_power(x, -e))
    if e == 0.5:
        return ops.sqrt(x)
    if e == -0.5:
        return ops.rsqrt(x)
    return ops.power(x, float(e))


@register_converter("aten.pow.Tensor_Tensor", "aten.pow.Scalar")
def _pow(ctx, node, args):
    """``math.powf`` with both operands in the (float) result dtype."""
    dt = out_dtype(node)
    if dt is not None and not dt.startswith(("float", "bfloat")):
        raise BuildError(f"{node.target}: result dtype is {dt}; expected a float dtype")
    a, b = promote(dt, args[0], args[1])
    return ops.power(float(a) if isinstance(a, (int, float)) else a, float(b) if isinstance(b, (int, float)) else b)


# ----------------------------------------------------------------------------- comparisons
_COMPARE = {"eq": ops.equal, "ne": ops.not_equal, "lt": ops.less, "le": ops.less_equal,
            "gt": ops.greater, "ge": ops.greater_equal}


def _register_compare(name: str, fn) -> None:
    def convert(ctx, node, args):
        return fn(*promote(common_dtype(node), args[0], args[1]))
    convert.__doc__ = f"``{fn.__name__}`` in the promoted dtype of both operands; a bool (int8 0/1) result."
    register_converter(f"aten.{name}.Scalar", f"aten.{name}.Tensor", dtypes="float, int, bool")(convert)


for _name, _fn in _COMPARE.items():
    _register_compare(_name, _fn)


def _mask(x):
    """A bool operand as an int8 0/1 mask (any nonzero is True); a Python scalar as 0 or 1."""
    if isinstance(x, (bool, int, float)):
        return int(bool(x))
    x = _tensor("aten.logical", "self", x)
    return ops.not_equal(x, 0)


@register_converter("aten.logical_and.default", "aten.bitwise_and.Tensor",
                    "aten.bitwise_and.Scalar", dtypes="bool")
def _and(ctx, node, args):
    """Masks multiplied (a constant True operand leaves the other mask); ``bitwise_and`` only of
    bool tensors."""
    # transformers' and_masks start from torch.full((), True): no x * 1 op, an identity that
    # the schedules' canonicalization would erase under a transform handle
    _bool_only(node)
    a, b = _mask(args[0]), _mask(args[1])
    if isinstance(a, int) and a == 1:
        return b
    if isinstance(b, int) and b == 1:
        return a
    return ops.multiply(a, b)


@register_converter("aten.logical_or.default", "aten.bitwise_or.Tensor",
                    "aten.bitwise_or.Scalar", dtypes="bool")
def _or(ctx, node, args):
    """Maximum of masks; ``bitwise_or`` only of bool tensors."""
    _bool_only(node)
    return ops.maximum(_mask(args[0]), _mask(args[1]))


@register_converter("aten.logical_xor.default", "aten.bitwise_xor.Tensor",
                    "aten.bitwise_xor.Scalar", dtypes="bool")
def _xor(ctx, node, args):
    """Masks compared with ``!=``; ``bitwise_xor`` only of bool tensors."""
    _bool_only(node)
    return ops.not_equal(_mask(args[0]), _mask(args[1]))


@register_converter("aten.bitwise_not.default", dtypes="bool")
def _not(ctx, node, args):
    """``1 - mask`` of a bool tensor."""
    _bool_only(node)
    return ops.subtract(1, _mask(args[0]))


def _bool_only(node) -> None:
    """Bitwise ops of integers have no builder op: refuse them by name."""
    result = str(getattr(node.meta.get("val"), "dtype", "torch.bool")) if hasattr(node, "meta") else "torch.bool"
    if str(node.target).startswith("aten.bitwise") and (result != "torch.bool" or any(
            str(getattr(a.meta.get("val"), "dtype", "torch.bool")) != "torch.bool"
            for a in node.args if hasattr(a, "meta"))):
        raise BuildError(f"{node.target}: integer operands are not supported; expected bool tensors")


# ----------------------------------------------------------------------------- division
@register_converter("aten.div.Tensor_mode", "aten.div.Scalar_mode", dtypes="float, int")
def _div_mode(ctx, node, args):
    """``rounding_mode='trunc'``: ``trunc(a / b)`` (integer division truncates already);
    ``'floor'``: ``floor(a / b)``, for ints ``(a - mod(a, b)) / b``."""
    a, b = promote(out_dtype(node), args[0], args[1])
    mode = ctx.kwargs.get("rounding_mode", args[2] if len(args) > 2 else None)
    t = a if isinstance(a, Tensor) else b
    is_int = t.dtype.startswith("int")
    if mode == "trunc":
        if is_int:
            return ops.divide(a, b)
        q = ops.divide(a, b)
        return ops.where(ops.less(q, 0.0), ops.ceil(q), ops.floor(q))
    if mode == "floor":
        return ops.divide(ops.subtract(a, ops.mod(a, b)), b) if is_int else ops.floor(ops.divide(a, b))
    if mode is None:
        return ops.divide(a, b)
    raise BuildError(f"aten.div: argument 'rounding_mode' is {mode!r}; expected None, 'trunc' or 'floor'")


@register_converter("aten.remainder.Scalar", "aten.remainder.Tensor", dtypes="float, int")
def _remainder(ctx, node, args):
    """``ops.mod`` (the sign of the divisor, Python's ``%``)."""
    return ops.mod(*promote(out_dtype(node), args[0], args[1]))


@register_converter("aten.fmod.Scalar", "aten.fmod.Tensor", dtypes="float, int")
def _fmod(ctx, node, args):
    """``ops.mod(fmod=True)`` (the sign of the dividend, C ``fmod``)."""
    return ops.mod(*promote(out_dtype(node), args[0], args[1]), fmod=True)


# ----------------------------------------------------------------------------- reductions
def _keep(ctx, args, i: int) -> bool:
    return bool(arg(ctx, args, i, "keepdim", False))


def _vector(x) -> Tensor:
    """A 0-d tensor as shape (1,) (PyTorch reduces a scalar over dim 0 or -1)."""
    x = _tensor("aten.reduce", "self", x)
    return ops.reshape(x, [1]) if x.ndim == 0 else x


def _scalar_back(x: Tensor, y: Tensor) -> Tensor:
    return ops.reshape(y, []) if x.ndim == 0 else y


@register_converter("aten.max.dim", "aten.min.dim", dtypes="float, int")
def _max_dim(ctx, node, args):
    """``(values, indices)``: ``ops.max``/``min`` and ``ops.argmax``/``argmin`` (first index)."""
    x, dim, keep = args[0], int(args[1]), _keep(ctx, args, 2)
    v = _vector(x)
    if str(node.target).startswith("aten.max"):
        pair = ops.max(v, axis=dim, keepdims=keep), ops.argmax(v, axis=dim, keepdims=keep)
    else:
        pair = ops.min(v, axis=dim, keepdims=keep), ops.argmin(v, axis=dim, keepdims=keep)
    return tuple(_scalar_back(x, y) for y in pair)


@register_converter("aten._linalg_det.default")
def _linalg_det(ctx, node, args):
    """``(det, LU, pivots)`` of ``torch.linalg.det``: ``det`` is ``ops.det`` (partial-pivoting
    elimination); a graph that reads the LU factors or the pivots is refused."""
    used = sorted({u.args[1] for u in node.users if u.target is operator.getitem} - {0})
    if used:
        raise BuildError(f"aten._linalg_det: outputs {used} (LU, pivots) are used; expected only the determinant "
                         "(output 0)")
    return ops.det(args[0]), None, None


@register_converter("aten.argmax.default", "aten.argmin.default", dtypes="float, int")
def _argmax(ctx, node, args):
    """First index of the extreme value (NaN wins) as int64; ``dim=None`` over all elements."""
    dim = arg(ctx, args, 1, "dim")
    fn = ops.argmax if str(node.target).startswith("aten.argmax") else ops.argmin
    keep = _keep(ctx, args, 2)
    return _scalar_back(args[0], fn(_vector(args[0]), axis=None if dim is None else int(dim), keepdims=keep))


@register_converter("aten.max.default", "aten.min.default", dtypes="float, int")
def _max_all(ctx, node, args):
    """``ops.max`` / ``ops.min`` over every element."""
    return (ops.max if str(node.target).startswith("aten.max") else ops.min)(args[0])


@register_converter("aten.any.default", dtypes="float, int, bool")
def _any_default(ctx, node, args):
    """Max of the ``!= 0`` mask over every element (``all`` decomposes to ``any`` of the negation)."""
    return ops.max(_mask(args[0]))


@register_converter("aten.sort.default", "aten.sort.stable", dtypes="float, int")
def _sort(ctx, node, args):
    """``ops.sort``: stable (equal values keep their order), which ``stable=True`` asks for and
    the default (``stable=False``) allows."""
    x = _tensor("aten.sort", "self", args[0])
    stable = str(node.target).endswith("stable")
    dim = int(ctx.kwargs.get("dim", -1) if stable else arg(ctx, args, 1, "dim", -1))
    descending = bool(ctx.kwargs.get("descending", False) if stable else arg(ctx, args, 2, "descending", False))
    if x.ndim == 0:
        return x, ops.cast(ops.multiply(x, 0), "int64")
    return ops.sort(x, axis=dim, descending=descending)


@register_converter("aten.var_mean.correction")
def _var_mean(ctx, node, args):
    """``(var, mean)`` as ``aten.var.correction`` and ``aten.mean.dim``."""
    x = _tensor("aten.var_mean", "self", args[0])
    axes = _dims(x, arg(ctx, args, 1, "dim"))
    keep = bool(ctx.kwargs.get("keepdim", False))
    return _var(ctx, node, args), ops.mean(x, axis=axes, keepdims=keep)


@register_converter("aten.amin.default", dtypes="float, int")
def _amin(ctx, node, args):
    """``ops.min`` over ``dim``."""
    return ops.min(args[0], axis=_dims(args[0], arg(ctx, args, 1, "dim")), keepdims=_keep(ctx, args, 2))


@register_converter("aten.prod.default", "aten.prod.dim_int", dtypes="float, int")
def _prod(ctx, node, args):
    """``ops.prod`` (ints in int64), in the result dtype."""
    x = _tensor("aten.prod", "self", args[0])
    dim = arg(ctx, args, 1, "dim") if str(node.target).endswith("dim_int") else None
    y = ops.prod(x, axis=dim, keepdims=_keep(ctx, args, 2) if dim is not None else False)
    return promote(out_dtype(node), y)[0]


@register_converter("aten.var.correction", "aten.var.dim")
def _var(ctx, node, args):
    """``sum((x - mean)**2) / (N - correction)`` (``var.dim``: ``unbiased`` is correction 1)."""
    x = _tensor("aten.var", "self", args[0])
    axes = _dims(x, arg(ctx, args, 1, "dim"))
    if str(node.target).endswith("correction"):
        corr = ctx.kwargs.get("correction", args[2] if len(args) > 2 else None)
        corr = 1 if corr is None else corr
        keep = bool(ctx.kwargs.get("keepdim", args[3] if len(args) > 3 else False))
    else:
        corr = 1 if arg(ctx, args, 2, "unbiased", True) else 0
        keep = _keep(ctx, args, 3)
    count = int(np.prod([x.shape[a] for a in (axes if axes is not None else range(x.ndim))]))
    c = ops.subtract(x, ops.mean(x, axis=axes, keepdims=True))
    s = ops.sum(ops.multiply(c, c), axis=axes, keepdims=keep)
    return ops.multiply(s, 1.0 / (count - corr) if count > corr else float("nan"))


def p_norm(x: Tensor, p: float, axes, keep: bool) -> Tensor:
    """The p-norm of ``x`` over ``axes`` as PyTorch computes it: ``p`` 2: ``sqrt(sum(x*x))``;
    1: ``sum(|x|)``; inf / -inf: ``max`` / ``min(|x|)``; 0: the count of nonzeros; other p:
    ``sum(|x|**p) ** (1/p)``."""
    a = ops.abs(x)
    if p == 2:
        return ops.sqrt(ops.sum(ops.multiply(x, x), axis=axes, keepdims=keep))
    if p == 1:
        return ops.sum(a, axis=axes, keepdims=keep)
    if math.isinf(p):
        return (ops.max if p > 0 else ops.min)(a, axis=axes, keepdims=keep)
    if p == 0:
        return ops.sum(ops.cast(ops.not_equal(x, 0.0), x.dtype), axis=axes, keepdims=keep)
    return ops.power(ops.sum(ops.power(a, p), axis=axes, keepdims=keep), 1.0 / p)


@register_converter("aten.linalg_vector_norm.default")
def _vector_norm(ctx, node, args):
    """:func:`p_norm` of ``ord`` over ``dim`` (``dtype=`` casts first)."""
    x = _tensor("aten.linalg_vector_norm", "self", args[0])
    p = float(arg(ctx, args, 1, "ord", 2))
    axes, keep = _dims(x, arg(ctx, args, 2, "dim")), _keep(ctx, args, 3)
    dt = ctx.kwargs.get("dtype")
    if dt is not None:
        x = ops.cast(x, torch_dtype("aten.linalg_vector_norm", dt))
    return p_norm(x, p, axes, keep)


@register_converter("aten._cdist_forward.default")
def _cdist(ctx, node, args):
    """``cdist(x1 (..., P, M), x2 (..., R, M), p)``: :func:`p_norm` over M of the broadcast
    differences ``(..., P, R, M)`` (the direct formula; PyTorch's matrix-product shortcut for
    p = 2 differs from it by rounding only)."""
    x1 = _tensor("aten._cdist_forward", "x1", args[0])
    x2 = _tensor("aten._cdist_forward", "x2", args[1])
    d = ops.subtract(ops.unsqueeze(x1, [x1.ndim - 1]), ops.unsqueeze(x2, [x2.ndim - 2]))
    return p_norm(d, float(args[2]), (d.ndim - 1,), False)


@register_converter("aten._pdist_forward.default")
def _pdist(ctx, node, args):
    """``pdist(x (N, M), p)``: :func:`p_norm` of ``x[i] - x[j]`` for every ``i < j`` in
    row-major order (``N (N - 1) / 2`` distances)."""
    x = _tensor("aten._pdist_forward", "self", args[0])
    if x.ndim != 2 or not isinstance(x.shape[0], int):
        raise BuildError(f"aten._pdist_forward: argument 'self' has shape {tuple(x.shape)}; expected a "
                         "static (N, M) matrix")
    i, j = np.triu_indices(x.shape[0], k=1)
    if i.size == 0:
        return ops.full([0], 0, x.dtype)
    d = ops.subtract(ops.take(x, i.astype(np.int64), axis=0), ops.take(x, j.astype(np.int64), axis=0))
    return p_norm(d, float(arg(ctx, args, 1, "p", 2)), (1,), False)


@register_converter("aten.cumsum.default", dtypes="float, int, bool")
def _cumsum(ctx, node, args):
    """``ops.cumsum`` (blocked triangular matmuls); ints and bools sum to int64 (PyTorch)."""
    x = _tensor("aten.cumsum", "self", args[0])
    return _scalar_back(x, ops.cumsum(_vector(x), int(args[1]), dtype=out_dtype(node) or x.dtype))


@register_converter("aten.gather.default", dtypes="any")
def _gather(ctx, node, args):
    """``ops.gather_elements`` along ``dim`` (``torch.gather``; ``sparse_grad`` ignored)."""
    x = _tensor("aten.gather", "self", args[0])
    return _scalar_back(x, ops.gather_elements(_vector(x), _vector(args[2]), axis=int(args[1])))

