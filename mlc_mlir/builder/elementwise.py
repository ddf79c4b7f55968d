"""Elementwise ops with numpy broadcasting, each one ``linalg.generic`` (TOPI's ``elemwise`` and
``broadcast`` categories).

Binary ops take Tensors, numpy arrays (constants) or Python scalars; at least one operand must be
a Tensor. Tensor operands must share a dtype (no implicit promotion: use :func:`cast`); scalars
take the tensor's dtype. Float-only ops (exp, log, ...) reject integer tensors.
"""

from __future__ import annotations

import math
from typing import Callable, Dict, Optional

import numpy as np

from .._mlir import arith_d, ir, math_d
from ..errors import BuildError
from ..ir import dtypes
from ..ir.emitters import divide_int
from . import linalg_emit as emit
from .tensor import Tensor

# ---------------------------------------------------------------------------- scalar bodies
# Each entry: dtype kind -> function(block values..., dtype) -> value. Kinds: "float", "int".


def _f(fn):
    return {"float": fn}


_BINARY: Dict[str, Dict[str, Callable]] = {
    "add": {"float": lambda a, b, dt: arith_d.addf(a, b), "int": lambda a, b, dt: arith_d.addi(a, b)},
    "subtract": {"float": lambda a, b, dt: arith_d.subf(a, b), "int": lambda a, b, dt: arith_d.subi(a, b)},
    "multiply": {"float": lambda a, b, dt: arith_d.mulf(a, b), "int": lambda a, b, dt: arith_d.muli(a, b)},
    "divide": {"float": lambda a, b, dt: arith_d.divf(a, b), "int": lambda a, b, dt: divide_int(a, b, dt)},
    "maximum": {"float": lambda a, b, dt: arith_d.maximumf(a, b), "int": lambda a, b, dt: arith_d.maxsi(a, b)},
    "minimum": {"float": lambda a, b, dt: arith_d.minimumf(a, b), "int": lambda a, b, dt: arith_d.minsi(a, b)},
}


def _sigmoid(x, dt):
    one = emit.scalar(1.0, dt)
    return arith_d.divf(one, arith_d.addf(one, math_d.exp(arith_d.negf(x))))


def _gelu_tanh(x, dt):
    # 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))
    c = emit.scalar(math.sqrt(2.0 / math.pi), dt)
    x3 = arith_d.mulf(arith_d.mulf(x, x), x)
    inner = arith_d.mulf(c, arith_d.addf(x, arith_d.mulf(emit.scalar(0.044715, dt), x3)))
    t = arith_d.addf(emit.scalar(1.0, dt), math_d.tanh(inner))
    return arith_d.mulf(arith_d.mulf(emit.scalar(0.5, dt), x), t)


def _gelu_erf(x, dt):
    # 0.5 * x * (1 + erf(x / sqrt(2)))
    e = math_d.erf(arith_d.mulf(x, emit.scalar(1.0 / math.sqrt(2.0), dt)))
    return arith_d.mulf(arith_d.mulf(emit.scalar(0.5, dt), x), arith_d.addf(emit.scalar(1.0, dt), e))


_UNARY: Dict[str, Dict[str, Callable]] = {
    "negative": {"float": lambda x, dt: arith_d.negf(x),
                 "int": lambda x, dt: arith_d.subi(emit.scalar(0, dt), x)},
    "exp": _f(lambda x, dt: math_d.exp(x)),
    "log": _f(lambda x, dt: math_d.log(x)),
    "sqrt": _f(lambda x, dt: math_d.sqrt(x)),
    "rsqrt": _f(lambda x, dt: math_d.rsqrt(x)),
    "tanh": _f(lambda x, dt: math_d.tanh(x)),
    "sigmoid": _f(_sigmoid),
    "relu": {"float": lambda x, dt: arith_d.maximumf(x, emit.scalar(0.0, dt)),
             "int": lambda x, dt: arith_d.maxsi(x, emit.scalar(0, dt))},
    "gelu_tanh": _f(_gelu_tanh),
    "gelu_erf": _f(_gelu_erf),
}


def _kind(dtype: str) -> str:
    return "float" if dtypes.is_float(dtype) else "int"


def _body_fn(op: str, table: Dict[str, Callable], dtype: str) -> Callable:
    fn = table.get(_kind(dtype))
    if fn is None:
        raise BuildError(f"{op}: dtype {dtype} is not supported; expected one of "
                         f"{sorted(d for d in dtypes.ALL_DTYPES if _kind(d) in table)}")
    return fn


def _is_scalar(x) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool)


def elementwise(op: str, operands, body: Callable, out_dtype: Optional[str] = None,
                name: Optional[str] = None) -> Tensor:
    """Emit one broadcasting ``linalg.generic`` computing ``body(*scalars, dtype)``.

    Parameters
    ----------
    op : str
        Op kind, used for the default ``mlc.name`` and in errors.
    operands : list
        Tensors, numpy arrays or Python scalars; scalars are materialized inside the body.
    body : callable
        ``body(*scalar_values, dtype) -> value`` emitted in the generic's region.
    out_dtype : str, optional
        Result dtype (default: the operands' dtype).

    Raises
    ------
    BuildError
        On non-broadcastable shapes or mismatched dtypes.
    """
    fn = emit.function_of(op, *operands)
    tensors = [x for x in operands if isinstance(x, Tensor)]
    if not tensors:  # numpy arrays only: the first one becomes a constant and sets the dtype
        i = next(i for i, x in enumerate(operands) if isinstance(x, np.ndarray))
        operands = list(operands)
        operands[i] = emit.as_tensor(op, "x", fn, operands[i])
        tensors = [operands[i]]
    dtype = tensors[0].dtype
    for i, x in enumerate(operands):
        if _is_scalar(x):
            _check_scalar(op, "abcdefgh"[i] if len(operands) > 1 else "x", x, dtype)
    names = "abcdefgh"
    ins, positions = [], []
    for i, x in enumerate(operands):
        if _is_scalar(x):
            continue
        t = emit.as_tensor(op, names[i] if len(operands) > 1 else "x", fn, x, dtype)
        ins.append(t)
        positions.append(i)
    out_shape = emit.broadcast_shapes(op, *[t.shape for t in ins])
    out_dtype = out_dtype or dtype
    init = emit.empty(out_shape, out_dtype)
    rank = len(out_shape)

    def region(*args):
        vals, it = [], iter(args[:len(ins)])
        for x in operands:
            vals.append(emit.scalar(x, dtype) if _is_scalar(x) else next(it))
        return [body(*vals, dtype)]

    res = emit.generic(emit.op_name(fn, op, name), [t.value for t in ins],
                       [emit.broadcast_map(t.shape, out_shape) for t in ins], [init],
                       [emit.identity_map(rank)], ["parallel"] * rank, region)
    return Tensor(res[0], fn)


def _check_scalar(op: str, arg: str, x, dtype: str) -> None:
    """A Python int scalar takes the integer tensor's dtype; like numpy 2 (NEP 50) it must fit.

    Raises
    ------
    BuildError
        ``add: argument 'b' is 1000; expected a value representable in int8 [-128, 127]``.
    """
    if dtype not in dtypes.INT_DTYPES or not isinstance(x, (int, np.integer)):
        return
    info = np.iinfo(np.dtype(dtype))
    if not info.min <= int(x) <= info.max:
        raise BuildError(f"{op}: argument '{arg}' is {x!r}; expected a value representable in {dtype} "
                         f"[{info.min}, {info.max}] (numpy raises OverflowError)")


def _operand_dtype(op: str, *xs) -> str:
    """dtype of the first Tensor (or numpy array) among ``xs``.

    Raises
    ------
    BuildError
        If there is neither.
    """
    for x in xs:
        if isinstance(x, Tensor):
            return x.dtype
    for x in xs:
        if isinstance(x, np.ndarray):
            return dtypes.canonical_dtype(x.dtype)
    names = ", ".join(f"'{n}'" for n in ("a", "b")[:len(xs)]) if len(xs) > 1 else "'x'"
    raise BuildError(f"{op}: argument {names} is {type(xs[0]).__name__}; expected a Tensor or numpy.ndarray"
                     if len(xs) == 1 else f"{op}: at least one of {names} must be a Tensor or numpy.ndarray")


def _binary(op: str, a, b, name: Optional[str]) -> Tensor:
    return elementwise(op, [a, b], _body_fn(op, _BINARY[op], _operand_dtype(op, a, b)), name=name)


def _unary(op: str, x, name: Optional[str], table_key: Optional[str] = None) -> Tensor:
    return elementwise(op, [x], _body_fn(op, _UNARY[table_key or op], _operand_dtype(op, x)), name=name)


def add(a, b, name: Optional[str] = None) -> Tensor:
    """``a + b`` with numpy broadcasting; ``linalg.generic`` of ``arith.addf``/``addi``.

    a, b: Tensor, numpy array or scalar, same dtype (float*/int*). Raises BuildError on shape or
    dtype mismatch.
    """
    return _binary("add", a, b, name)


def subtract(a, b, name: Optional[str] = None) -> Tensor:
    """``a - b`` with numpy broadcasting (see :func:`add`)."""
    return _binary("subtract", a, b, name)


def multiply(a, b, name: Optional[str] = None) -> Tensor:
    """``a * b`` with numpy broadcasting (see :func:`add`)."""
    return _binary("multiply", a, b, name)


def divide(a, b, name: Optional[str] = None) -> Tensor:
    """``a / b`` with numpy broadcasting; integer division truncates toward zero (``arith.divsi``)
    and never traps: ``x / 0`` is 0 and ``INT_MIN / -1`` wraps to ``INT_MIN`` (numpy's results),
    through ``arith.select`` on the divisor."""
    return _binary("divide", a, b, name)


def maximum(a, b, name: Optional[str] = None) -> Tensor:
    """Elementwise maximum (``arith.maximumf`` propagates NaN like ``numpy.maximum``)."""
    return _binary("maximum", a, b, name)


def minimum(a, b, name: Optional[str] = None) -> Tensor:
    """Elementwise minimum (``arith.minimumf`` propagates NaN like ``numpy.minimum``)."""
    return _binary("minimum", a, b, name)


def negative(x, name: Optional[str] = None) -> Tensor:
    """``-x``; float or int Tensor."""
    return _unary("negative", x, name)


def exp(x, name: Optional[str] = None) -> Tensor:
    """``e**x`` (``math.exp``); float Tensor."""
    return _unary("exp", x, name)


def log(x, name: Optional[str] = None) -> Tensor:
    """Natural log (``math.log``); float Tensor."""
    return _unary("log", x, name)


def sqrt(x, name: Optional[str] = None) -> Tensor:
    """Square root (``math.sqrt``); float Tensor."""
    return _unary("sqrt", x, name)


def rsqrt(x, name: Optional[str] = None) -> Tensor:
    """``1 / sqrt(x)`` (``math.rsqrt``); float Tensor."""
    return _unary("rsqrt", x, name)


def tanh(x, name: Optional[str] = None) -> Tensor:
    """Hyperbolic tangent (``math.tanh``); float Tensor."""
    return _unary("tanh", x, name)


def sigmoid(x, name: Optional[str] = None) -> Tensor:
    """``1 / (1 + exp(-x))``; float Tensor."""
    return _unary("sigmoid", x, name)


def relu(x, name: Optional[str] = None) -> Tensor:
    """``max(x, 0)``; float or int Tensor."""
    return _unary("relu", x, name)


def gelu(x, approximate: str = "tanh", name: Optional[str] = None) -> Tensor:
    """GELU (Hendrycks & Gimpel 2016). ``approximate="tanh"`` (the tanh formula, PyTorch's
    ``approximate='tanh'``) or ``"none"``/``"erf"`` (exact, with ``math.erf``); float Tensor.

    Raises
    ------
    BuildError
        For another ``approximate``.
    """
    key = {"tanh": "gelu_tanh", "none": "gelu_erf", "erf": "gelu_erf"}.get(approximate)
    if key is None:
        raise BuildError(f"gelu: argument 'approximate' is {approximate!r}; expected 'tanh' or 'erf'")
    return elementwise("gelu", [x], _body_fn("gelu", _UNARY[key], _operand_dtype("gelu", x)), name=name)


def clip(x, a_min, a_max, name: Optional[str] = None) -> Tensor:
    """``min(max(x, a_min), a_max)`` like ``numpy.clip``; bounds are Python scalars.

    Raises
    ------
    BuildError
        If a bound is not a scalar or ``a_min > a_max``.
    """
    x = emit.tensor_arg("clip", "x", x)
    for arg, v in (("a_min", a_min), ("a_max", a_max)):
        if not _is_scalar(v):
            raise BuildError(f"clip: argument '{arg}' is {v!r}; expected a Python scalar")
    if a_min > a_max:
        raise BuildError(f"clip: a_min={a_min} is greater than a_max={a_max}")
    mx, mn = _BINARY["maximum"][_kind(x.dtype)], _BINARY["minimum"][_kind(x.dtype)]
    return elementwise("clip", [x, a_min, a_max], lambda v, lo, hi, dt: mn(mx(v, lo, dt), hi, dt),
                       name=name)


def _cast_value(v, src: str, dst: str):
    if src == dst:
        return v
    dt = dtypes.to_ir_type(dst)
    sf, df = dtypes.is_float(src), dtypes.is_float(dst)
    sb, db = dtypes.bit_width(src), dtypes.bit_width(dst)
    if sf and df:
        if src in ("bfloat16", "float16") and dst in ("bfloat16", "float16"):
            return arith_d.truncf(dt, arith_d.extf(ir.F32Type.get(), v))
        return arith_d.extf(dt, v) if db > sb else arith_d.truncf(dt, v)
    if sf and not df:
        if dst == "bool":
            return arith_d.cmpf(arith_d.CmpFPredicate.UNE, v, emit.scalar(0.0, src))
        return arith_d.fptosi(dt, v)
    if not sf and df:
        return arith_d.uitofp(dt, v) if src == "bool" else arith_d.sitofp(dt, v)
    if dst == "bool":
        return arith_d.cmpi(arith_d.CmpIPredicate.ne, v, emit.scalar(0, src))
    if db > sb:
        return arith_d.extui(dt, v) if src == "bool" else arith_d.extsi(dt, v)
    return arith_d.trunci(dt, v)


def cast(x, dtype, name: Optional[str] = None) -> Tensor:
    """Convert to ``dtype`` like ``numpy.astype`` (float->int truncates toward zero; to bool is
    ``!= 0``); any pair of :data:`~mlc_mlir.ir.dtypes.ALL_DTYPES`. ``x`` itself when it has
    ``dtype`` already and no ``name`` is asked for.

    Raises
    ------
    BuildError
        For an unknown dtype or a non-Tensor ``x``.
    """
    x = emit.tensor_arg("cast", "x", x)
    dst = dtypes.canonical_dtype(dtype)
    src = x.dtype
    if src == dst and name is None:
        return x   # no op: an identity generic would only be folded away later
    return elementwise("cast", [x], lambda v, dt: _cast_value(v, src, dst), out_dtype=dst, name=name)


def bitcast(x, dtype, name: Optional[str] = None) -> Tensor:
    """Reinterpret each element's bits as ``dtype`` (``arith.bitcast``; numpy ``view``, ONNX
    ``BitCast``), same shape.

    Raises
    ------
    BuildError
        For a non-Tensor ``x``, an unknown dtype, a bool side, or dtypes of different bit widths.
    """
    x = emit.tensor_arg("bitcast", "x", x)
    dst = dtypes.canonical_dtype(dtype)
    if "bool" in (x.dtype, dst) or dtypes.bit_width(x.dtype) != dtypes.bit_width(dst):
        raise BuildError(f"bitcast: dtypes {x.dtype} -> {dst}; expected two non-bool dtypes of one bit width")
    if x.dtype == dst and name is None:
        return x
    ty = dtypes.to_ir_type(dst)
    return elementwise("bitcast", [x], lambda v, dt: arith_d.bitcast(ty, v), out_dtype=dst, name=name)


Tensor.install_operators(add=add, subtract=subtract, multiply=multiply, divide=divide, negative=negative)
