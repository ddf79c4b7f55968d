"""More elementwise ops (ONNX/numpy names): ``erf``, ``power``, ``mod``, ``abs``, ``floor``,
``ceil``, ``round``, ``trunc``, ``log1p``, ``expm1``, ``sin``, ``cos``, ``tan``, the inverse and
hyperbolic trigonometric functions and ``atan2``, the comparisons
``equal``/``not_equal``/``less``/``less_equal``/``greater``/``greater_equal`` and ``where``; each one broadcasting
``linalg.generic`` built with :func:`mlc_mlir.builder.elementwise.elementwise`.

Comparisons return int8 0/1 masks, not bool: a tensor of i1 cannot be lowered (MLIR 22's
memref-to-llvm aborts on sub-byte stores), so masks are int8 like the pipeline asks.

Source: ONNX operator spec (Erf, Pow, Mod, Abs, Floor, Ceil, Sin, Cos, Tan, Asin, ..., Atanh, Equal, Less, Greater, Where), numpy.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from .._mlir import arith_d, math_d
from ..errors import BuildError
from ..ir import dtypes
from . import linalg_emit as emit
from .elementwise import _body_fn, _is_scalar, _operand_dtype, elementwise
from .tensor import Tensor

def _abs_int(x, dt):
    """``x < 0 ? 0 - x : x`` (``math.absi`` has no vector lowering in MLIR 22's math-to-llvm)."""
    zero = emit.scalar(0, dt)
    return arith_d.select(arith_d.cmpi(arith_d.CmpIPredicate.slt, x, zero), arith_d.subi(zero, x), x)


_UNARY = {
    "erf": {"float": lambda x, dt: math_d.erf(x)},
    "abs": {"float": lambda x, dt: math_d.absf(x), "int": lambda x, dt: _abs_int(x, dt)},
    "floor": {"float": lambda x, dt: math_d.floor(x)},
    "ceil": {"float": lambda x, dt: math_d.ceil(x)},
    "round": {"float": lambda x, dt: math_d.roundeven(x)},
    "trunc": {"float": lambda x, dt: math_d.trunc(x)},
    "log1p": {"float": lambda x, dt: math_d.log1p(x)},
    "expm1": {"float": lambda x, dt: math_d.expm1(x)},
    "sin": {"float": lambda x, dt: math_d.sin(x)},
    "cos": {"float": lambda x, dt: math_d.cos(x)},
    "tan": {"float": lambda x, dt: math_d.tan(x)},
    "asin": {"float": lambda x, dt: math_d.asin(x)},
    "acos": {"float": lambda x, dt: math_d.acos(x)},
    "atan": {"float": lambda x, dt: math_d.atan(x)},
    "sinh": {"float": lambda x, dt: math_d.sinh(x)},
    "cosh": {"float": lambda x, dt: math_d.cosh(x)},
    "asinh": {"float": lambda x, dt: math_d.asinh(x)},
    "acosh": {"float": lambda x, dt: math_d.acosh(x)},
    "atanh": {"float": lambda x, dt: math_d.atanh(x)},
}

_CMP = {
    "equal": (arith_d.CmpFPredicate.OEQ, arith_d.CmpIPredicate.eq),
    "less": (arith_d.CmpFPredicate.OLT, arith_d.CmpIPredicate.slt),
    "greater": (arith_d.CmpFPredicate.OGT, arith_d.CmpIPredicate.sgt),
    "not_equal": (arith_d.CmpFPredicate.UNE, arith_d.CmpIPredicate.ne),
    "less_equal": (arith_d.CmpFPredicate.OLE, arith_d.CmpIPredicate.sle),
    "greater_equal": (arith_d.CmpFPredicate.OGE, arith_d.CmpIPredicate.sge),
}


def _unary(op: str, x, name: Optional[str]) -> Tensor:
    return elementwise(op, [x], _body_fn(op, _UNARY[op], _operand_dtype(op, x)), name=name)


def erf(x, name: Optional[str] = None) -> Tensor:
    """Gauss error function (``math.erf``); float Tensor, same shape/dtype."""
    return _unary("erf", x, name)


def abs(x, name: Optional[str] = None) -> Tensor:  # noqa: A001
    """``|x|`` (``math.absf``; ints ``select(x < 0, -x, x)``, ``INT_MIN`` stays); float or int Tensor."""
    return _unary("abs", x, name)


def floor(x, name: Optional[str] = None) -> Tensor:
    """Round toward -inf (``math.floor``); float Tensor."""
    return _unary("floor", x, name)


def ceil(x, name: Optional[str] = None) -> Tensor:
    """Round toward +inf (``math.ceil``); float Tensor."""
    return _unary("ceil", x, name)


def round(x, name: Optional[str] = None) -> Tensor:  # noqa: A001
    """Round half to even (``math.roundeven``, ``numpy.round``, ``torch.round``); float Tensor."""
    return _unary("round", x, name)


def trunc(x, name: Optional[str] = None) -> Tensor:
    """Round toward zero (``math.trunc``); float Tensor."""
    return _unary("trunc", x, name)


def log1p(x, name: Optional[str] = None) -> Tensor:
    """``log(1 + x)``, accurate for small ``|x|`` (``math.log1p``); float Tensor."""
    return _unary("log1p", x, name)


def expm1(x, name: Optional[str] = None) -> Tensor:
    """``exp(x) - 1``, accurate for small ``|x|`` (``math.expm1``); float Tensor."""
    return _unary("expm1", x, name)


def power(a, b, name: Optional[str] = None) -> Tensor:
    """``a ** b`` with numpy broadcasting (``math.powf``); float operands of one dtype
    (Tensors, numpy arrays or scalars).

    Raises
    ------
    BuildError
        For integer dtypes, mismatched dtypes or shapes.
    """
    return _float_binary("power", a, b, math_d.powf, name)


def _float_binary(op: str, a, b, fn, name: Optional[str]) -> Tensor:
    """A broadcasting float binary op ``fn(a, b)`` (one ``math`` op)."""
    dt = _operand_dtype(op, a, b)
    if not dtypes.is_float(dt):
        raise BuildError(f"{op}: dtype {dt} is not supported; expected a float dtype")
    return elementwise(op, [a, b], lambda x, y, _dt: fn(x, y), name=name)


def sin(x, name: Optional[str] = None) -> Tensor:
    """Sine in radians (``math.sin``, libm's ``sinf`` after lowering); float Tensor."""
    return _unary("sin", x, name)


def cos(x, name: Optional[str] = None) -> Tensor:
    """Cosine in radians (``math.cos``); float Tensor."""
    return _unary("cos", x, name)


def _trig(op: str, what: str):
    def fn(x, name: Optional[str] = None) -> Tensor:
        return _unary(op, x, name)
    fn.__name__ = fn.__qualname__ = op
    fn.__doc__ = (f"{what} (``math.{op}``, libm's ``{op}f`` after ``convert-math-to-libm``); float "
                  "Tensor, same shape and dtype. numpy's ``{op}`` semantics (nan outside the domain).\n\n"
                  "    Raises\n    ------\n    BuildError\n        For an integer dtype.\n    ").replace("{op}", op)
    return fn


tan = _trig("tan", "Tangent in radians")
asin = _trig("asin", "Inverse sine, in radians")
acos = _trig("acos", "Inverse cosine, in radians")
atan = _trig("atan", "Inverse tangent, in radians")
sinh = _trig("sinh", "Hyperbolic sine")
cosh = _trig("cosh", "Hyperbolic cosine")
asinh = _trig("asinh", "Inverse hyperbolic sine")
acosh = _trig("acosh", "Inverse hyperbolic cosine")
atanh = _trig("atanh", "Inverse hyperbolic tangent")


def atan2(y, x, name: Optional[str] = None) -> Tensor:
    """``atan2(y, x)``: the angle of the point ``(x, y)`` in ``[-pi, pi]`` (``math.atan2``,
    ``numpy.arctan2``) with numpy broadcasting; float operands of one dtype.

    Raises
    ------
    BuildError
        For integer dtypes, mismatched dtypes or shapes.
    """
    return _float_binary("atan2", y, x, math_d.atan2, name)


def _safe_divisor(b, dt):
    """``b``, or 1 where ``b`` is 0 or -1: ``arith.remsi`` is undefined for ``x % 0`` and traps
    (SIGFPE on x86) for ``INT_MIN % -1``; ``x % 1 == x % -1 == 0`` and numpy's ``x % 0`` is 0."""
    zero_or_minus_one = arith_d.ori(arith_d.cmpi(arith_d.CmpIPredicate.eq, b, emit.scalar(0, dt)),
                                    arith_d.cmpi(arith_d.CmpIPredicate.eq, b, emit.scalar(-1, dt)))
    return arith_d.select(zero_or_minus_one, emit.scalar(1, dt), b)


def _mod_int(a, b, dt):
    """``numpy.mod``: the truncated remainder plus ``b`` where it is nonzero and its sign differs
    from ``b``'s."""
    zero = emit.scalar(0, dt)
    r = arith_d.remsi(a, _safe_divisor(b, dt))
    signs_differ = arith_d.xori(arith_d.cmpi(arith_d.CmpIPredicate.slt, r, zero),
                                arith_d.cmpi(arith_d.CmpIPredicate.slt, b, zero))
    fix = arith_d.andi(arith_d.cmpi(arith_d.CmpIPredicate.ne, r, zero), signs_differ)
    return arith_d.select(fix, arith_d.addi(r, b), r)


def _mod_float(a, b, dt):
    """``numpy.mod`` as numpy's ``npy_divmod``: ``r = fmod(a, b)``; ``r + b`` where ``r`` is
    nonzero (NaN included, which stays NaN) and its sign differs from ``b``'s; a zero ``r`` takes
    ``b``'s sign (``copysign(0, b)``)."""
    zero = emit.scalar(0.0, dt)
    r = arith_d.remf(a, b)
    signs_differ = arith_d.xori(arith_d.cmpf(arith_d.CmpFPredicate.OLT, r, zero),
                                arith_d.cmpf(arith_d.CmpFPredicate.OLT, b, zero))
    nonzero = arith_d.cmpf(arith_d.CmpFPredicate.UNE, r, zero)
    fixed = arith_d.select(arith_d.andi(nonzero, signs_differ), arith_d.addf(r, b), r)
    return arith_d.select(nonzero, fixed, math_d.copysign(zero, b))


_MOD = {
    False: {"int": _mod_int, "float": _mod_float},
    True: {"int": lambda a, b, dt: arith_d.remsi(a, _safe_divisor(b, dt)),
           "float": lambda a, b, dt: arith_d.remf(a, b)},
}


def mod(a, b, fmod: bool = False, name: Optional[str] = None) -> Tensor:
    """Remainder of ``a / b`` with numpy broadcasting: ``numpy.mod`` (``fmod=False``: the result
    has the sign of ``b``, ``a - floor(a / b) * b``) or ``numpy.fmod`` (``fmod=True``: C
    ``fmod``, the sign of ``a``, ``a - trunc(a / b) * b``).

    One ``linalg.generic``: ``arith.remsi`` (ints) / ``arith.remf`` (floats, LLVM ``frem``,
    i.e. C ``fmod``); for ``fmod=False`` an ``arith.select`` adds ``b`` where the remainder is
    nonzero and its sign differs from ``b``'s (and a zero float remainder takes ``b``'s sign,
    ``math.copysign``). Never traps: an integer ``x % 0`` is 0 (numpy's result, with its
    warning) and ``INT_MIN % -1`` is 0; a float ``x % 0`` is NaN.

    Parameters
    ----------
    a, b : Tensor, numpy array or Python scalar (at least one not a scalar)
        One dtype in {float16, bfloat16, float32, float64, int8, int16, int32, int64}; shapes
        broadcast (numpy rules) to the result shape.
    fmod : bool
        False: ``numpy.mod`` (Python ``%``); True: ``numpy.fmod``.

    Returns
    -------
    Tensor of the broadcast shape, the operands' dtype.

    Raises
    ------
    BuildError
        For a non-bool ``fmod``, bool operands, or mismatched dtypes or shapes
        (``mod: shapes (2, 3) and (4,) are not broadcastable (dimension -1: 3 vs 4)``).

    Source: ONNX ``Mod`` (attribute ``fmod``), ``numpy.mod`` / ``numpy.fmod`` (numpy's
    ``npy_divmod`` for the float sign fix-up).
    """
    if not isinstance(fmod, (bool, np.bool_)):
        raise BuildError(f"mod: argument 'fmod' is {fmod!r}; expected a bool")
    dt = _operand_dtype("mod", a, b)
    if dt == "bool":
        raise BuildError("mod: dtype bool is not supported; expected a float or int dtype (use ops.cast)")
    return elementwise("mod", [a, b], _body_fn("mod", _MOD[bool(fmod)], dt), name=name)


def _compare(op: str, a, b, name: Optional[str]) -> Tensor:
    dt = _operand_dtype(op, a, b)
    fpred, ipred = _CMP[op]
    if dtypes.is_float(dt):
        def body(x, y, _dt):
            return arith_d.extui(i8, arith_d.cmpf(fpred, x, y))
    else:
        def body(x, y, _dt):
            return arith_d.extui(i8, arith_d.cmpi(ipred, x, y))
    i8 = dtypes.to_ir_type("int8")
    return elementwise(op, [a, b], body, out_dtype="int8", name=name)


def equal(a, b, name: Optional[str] = None) -> Tensor:
    """``a == b`` with broadcasting; int8 0/1 result (ordered compare for floats: NaN != NaN)."""
    return _compare("equal", a, b, name)


def less(a, b, name: Optional[str] = None) -> Tensor:
    """``a < b`` with broadcasting (signed for ints); int8 0/1 result."""
    return _compare("less", a, b, name)


def greater(a, b, name: Optional[str] = None) -> Tensor:
    """``a > b`` with broadcasting (signed for ints); int8 0/1 result."""
    return _compare("greater", a, b, name)


def not_equal(a, b, name: Optional[str] = None) -> Tensor:
    """``a != b`` with broadcasting; int8 0/1 result (unordered compare for floats: NaN != x)."""
    return _compare("not_equal", a, b, name)


def less_equal(a, b, name: Optional[str] = None) -> Tensor:
    """``a <= b`` with broadcasting (signed for ints; False with a NaN); int8 0/1 result."""
    return _compare("less_equal", a, b, name)


def greater_equal(a, b, name: Optional[str] = None) -> Tensor:
    """``a >= b`` with broadcasting (signed for ints; False with a NaN); int8 0/1 result."""
    return _compare("greater_equal", a, b, name)


def where(cond, a, b, name: Optional[str] = None) -> Tensor:
    """``numpy.where(cond, a, b)`` with broadcasting over all three (``arith.select``).

    Parameters
    ----------
    cond : Tensor or numpy array, dtype int8 or bool; nonzero selects ``a``
    a, b : Tensor, numpy array or scalar, one dtype (any)

    Raises
    ------
    BuildError
        If ``cond`` is not int8/bool, or ``a``/``b`` dtypes or the shapes do not match.
    """
    fn = emit.function_of("where", cond, a, b)
    c = emit.as_tensor("where", "cond", fn, cond, "int8" if not isinstance(cond, Tensor) else None)
    if c.dtype not in ("int8", "bool"):
        raise BuildError(f"where: argument 'cond' has dtype {c.dtype}; expected int8 or bool")
    dt = _operand_dtype("where", a, b)
    a, b = (np.asarray(v, dtypes.to_numpy_dtype(dt)) if _is_scalar(v) else v for v in (a, b))
    a = emit.as_tensor("where", "a", fn, a, dt)
    b = emit.as_tensor("where", "b", fn, b, dt)
    out_shape = emit.broadcast_shapes("where", c.shape, a.shape, b.shape)
    rank = len(out_shape)
    ins = [c, a, b]
    res = emit.generic(emit.op_name(fn, "where", name), [t.value for t in ins],
                       [emit.broadcast_map(t.shape, out_shape) for t in ins],
                       [emit.empty(out_shape, dt)], [emit.identity_map(rank)], ["parallel"] * rank,
                       lambda p, x, y, _o: [arith_d.select(
                           arith_d.cmpi(arith_d.CmpIPredicate.ne, p, emit.scalar(0, c.dtype)), x, y)])
    return Tensor(res[0], fn)
