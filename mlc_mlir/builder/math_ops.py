"""More elementwise ops (ONNX/numpy names): ``erf``, ``power``, ``abs``, ``floor``, ``ceil``, the
comparisons ``equal``/``less``/``greater`` and ``where``; each one broadcasting
``linalg.generic`` built with :func:`mlc_mlir.builder.elementwise.elementwise`.

Comparisons return int8 0/1 masks, not bool: a tensor of i1 cannot be lowered (MLIR 22's
memref-to-llvm aborts on sub-byte stores), so masks are int8 like the pipeline asks.

Source: ONNX operator spec (Erf, Pow, Abs, Floor, Ceil, Equal, Less, Greater, Where), numpy.
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

_UNARY = {
    "erf": {"float": lambda x, dt: math_d.erf(x)},
    "abs": {"float": lambda x, dt: math_d.absf(x), "int": lambda x, dt: math_d.absi(x)},
    "floor": {"float": lambda x, dt: math_d.floor(x)},
    "ceil": {"float": lambda x, dt: math_d.ceil(x)},
}

_CMP = {
    "equal": (arith_d.CmpFPredicate.OEQ, arith_d.CmpIPredicate.eq),
    "less": (arith_d.CmpFPredicate.OLT, arith_d.CmpIPredicate.slt),
    "greater": (arith_d.CmpFPredicate.OGT, arith_d.CmpIPredicate.sgt),
}


def _unary(op: str, x, name: Optional[str]) -> Tensor:
    return elementwise(op, [x], _body_fn(op, _UNARY[op], _operand_dtype(op, x)), name=name)


def erf(x, name: Optional[str] = None) -> Tensor:
    """Gauss error function (``math.erf``); float Tensor, same shape/dtype."""
    return _unary("erf", x, name)


def abs(x, name: Optional[str] = None) -> Tensor:  # noqa: A001
    """``|x|`` (``math.absf`` / ``math.absi``); float or int Tensor."""
    return _unary("abs", x, name)


def floor(x, name: Optional[str] = None) -> Tensor:
    """Round toward -inf (``math.floor``); float Tensor."""
    return _unary("floor", x, name)


def ceil(x, name: Optional[str] = None) -> Tensor:
    """Round toward +inf (``math.ceil``); float Tensor."""
    return _unary("ceil", x, name)


def power(a, b, name: Optional[str] = None) -> Tensor:
    """``a ** b`` with numpy broadcasting (``math.powf``); float operands of one dtype
    (Tensors, numpy arrays or scalars).

    Raises
    ------
    BuildError
        For integer dtypes, mismatched dtypes or shapes.
    """
    dt = _operand_dtype("power", a, b)
    if not dtypes.is_float(dt):
        raise BuildError(f"power: dtype {dt} is not supported; expected a float dtype")
    return elementwise("power", [a, b], lambda x, y, _dt: math_d.powf(x, y), name=name)


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
