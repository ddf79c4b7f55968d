"""The expression language of ``te.compute``: index variables, affine index expressions, element
accesses and scalar expressions (TVM's ``tir.PrimExpr`` / ``te.IterVar``, kept to what becomes
one ``linalg.generic``).

Index expressions are affine combinations of loop variables (``i + di``, ``2 * i + k``, ``3``)
and become affine maps; everything else (``A[i, k] * B[k, j]``, ``exp(x)``, comparisons,
``if_then_else``) becomes the generic's scalar body. Nothing here emits IR (see
:mod:`mlc_mlir.te.compute`).
"""

from __future__ import annotations

import builtins

from typing import Dict, Optional, Sequence, Tuple

import numpy as np

from ..errors import BuildError

Number = (int, float, np.integer, np.floating)


def _is_number(x) -> bool:
    return isinstance(x, Number) and not isinstance(x, (bool, np.bool_))


class Expr:
    """A scalar expression (TVM ``PrimExpr``). Operators ``+ - * /``, unary ``-`` and the
    comparisons ``< <= > >=`` build new expressions; Python numbers are constants."""

    def __add__(self, o):
        return binary("add", self, o)

    def __radd__(self, o):
        return binary("add", o, self)

    def __sub__(self, o):
        return binary("sub", self, o)

    def __rsub__(self, o):
        return binary("sub", o, self)

    def __mul__(self, o):
        return binary("mul", self, o)

    def __rmul__(self, o):
        return binary("mul", o, self)

    def __truediv__(self, o):
        return binary("div", self, o)

    def __rtruediv__(self, o):
        return binary("div", o, self)

    def __neg__(self):
        return binary("sub", 0, self)

    def __lt__(self, o):
        return Compare("lt", as_expr(self), as_expr(o))

    def __le__(self, o):
        return Compare("le", as_expr(self), as_expr(o))

    def __gt__(self, o):
        return Compare("gt", as_expr(self), as_expr(o))

    def __ge__(self, o):
        return Compare("ge", as_expr(self), as_expr(o))

    __hash__ = object.__hash__

    @staticmethod
    def __mlc_access__(tensor, indices):
        """``tensor[indices]`` for a builder Tensor indexed with expressions (see
        ``builder.tensor.Tensor.__getitem__``)."""
        return Access(tensor, tuple(as_index(i, "index") for i in indices))


class IterVar(Expr):
    """A loop variable: a spatial axis of the output, or a reduce axis (``te.reduce_axis``),
    over ``[lo, lo + extent)``. Source: TVM ``te.IterVar``."""

    def __init__(self, name: str, extent: int, lo: int = 0, reduce: bool = False):
        self.name, self.extent, self.lo, self.reduce = name, extent, lo, reduce

    def __repr__(self) -> str:
        return f"{'reduce_axis' if self.reduce else 'axis'}({self.name}: [{self.lo}, {self.lo + self.extent}))"


class Affine(Expr):
    """An affine index expression ``sum(coeff * var) + const`` (an affine map result)."""

    def __init__(self, coeffs: Dict[IterVar, int], const: int):
        self.coeffs = {v: c for v, c in coeffs.items() if c != 0}
        self.const = const

    def bounds(self) -> Tuple[int, int]:
        """Smallest and largest value over the variables' ranges."""
        lo = hi = self.const
        for v, c in self.coeffs.items():
            a, b = c * v.lo, c * (v.lo + v.extent - 1)
            lo, hi = lo + builtins.min(a, b), hi + builtins.max(a, b)
        return lo, hi

    def __repr__(self) -> str:
        terms = [f"{c}*{v.name}" for v, c in self.coeffs.items()] + [str(self.const)]
        return " + ".join(terms)


class Const(Expr):
    """A number; takes the dtype of the expression it meets (float32 if alone)."""

    def __init__(self, value):
        self.value = value


class Binary(Expr):
    """``a <op> b`` for op in add, sub, mul, div, max, min."""

    def __init__(self, op: str, a: Expr, b: Expr):
        self.op, self.a, self.b = op, a, b


class Compare(Expr):
    """``a <op> b`` (lt, le, gt, ge): a boolean, used by :func:`if_then_else`."""

    def __init__(self, op: str, a: Expr, b: Expr):
        self.op, self.a, self.b = op, a, b


class Select(Expr):
    """``a if cond else b`` (``arith.select``)."""

    def __init__(self, cond: Compare, a: Expr, b: Expr):
        self.cond, self.a, self.b = cond, a, b


class Call(Expr):
    """A math function of one float argument (exp, log, log1p, expm1, sqrt, tanh)."""

    def __init__(self, fn: str, x: Expr):
        self.fn, self.x = fn, x


class Access(Expr):
    """``tensor[indices]``: an element of a builder Tensor, a placeholder or a compute result,
    read through an indexing map made of the affine ``indices``."""

    def __init__(self, tensor, indices: Tuple[Affine, ...]):
        shape = tuple(tensor.shape)
        if len(indices) != len(shape):
            raise BuildError(f"te: {_tname(tensor)} has rank {len(shape)}; indexed with {len(indices)} indices")
        self.tensor, self.indices = tensor, indices


class Reduce(Expr):
    """A reduction (sum, max, min) of ``body`` over reduce axes; only at the top of a compute."""

    def __init__(self, kind: str, body: Expr, axes: Tuple[IterVar, ...]):
        self.kind, self.body, self.axes = kind, body, axes


def _tname(t) -> str:
    return f"'{getattr(t, 'name', None) or type(t).__name__}'"


def as_expr(x) -> Expr:
    """``x`` as an Expr (numbers become :class:`Const`).

    Raises
    ------
    BuildError
        For anything else (e.g. a Tensor used without indices).
    """
    if isinstance(x, Expr):
        return x
    if _is_number(x):
        return Const(x)
    raise BuildError(f"te: {x!r} ({type(x).__name__}) is not an expression; index tensors (A[i, j]) "
                     "and use numbers, te.exp, te.if_then_else")


def as_index(x, what: str) -> Affine:
    """``x`` as an affine index expression.

    Raises
    ------
    BuildError
        ``te: index i * j is not affine`` (products of variables, division, data-dependent
        indices).
    """
    if isinstance(x, Affine):
        return x
    if isinstance(x, IterVar):
        return Affine({x: 1}, 0)
    if isinstance(x, (int, np.integer)) and not isinstance(x, bool):
        return Affine({}, int(x))
    if isinstance(x, Const) and isinstance(x.value, (int, np.integer)) and not isinstance(x.value, bool):
        return Affine({}, int(x.value))
    if isinstance(x, Binary) and x.op in ("add", "sub", "mul"):
        try:
            a, b = as_index(x.a, what), as_index(x.b, what)
        except BuildError:
            a = b = None
        if a is not None:
            if x.op == "add":
                return _affine_add(a, b, 1)
            if x.op == "sub":
                return _affine_add(a, b, -1)
            if not a.coeffs or not b.coeffs:
                k, e = (a.const, b) if not a.coeffs else (b.const, a)
                return Affine({v: c * k for v, c in e.coeffs.items()}, e.const * k)
    raise BuildError(f"te: {what} {_show(x)} is not affine in the loop variables; expected "
                     "sums of int * variable and int constants (e.g. i + di, 2 * i + k)")


def _show(x) -> str:
    if isinstance(x, Binary):
        sym = {"add": "+", "sub": "-", "mul": "*", "div": "/"}.get(x.op, x.op)
        return f"({_show(x.a)} {sym} {_show(x.b)})"
    if isinstance(x, IterVar):
        return x.name
    if isinstance(x, Const):
        return repr(x.value)
    return repr(x)


def _affine_add(a: Affine, b: Affine, sign: int) -> Affine:
    coeffs = dict(a.coeffs)
    for v, c in b.coeffs.items():
        coeffs[v] = coeffs.get(v, 0) + sign * c
    return Affine(coeffs, a.const + sign * b.const)


def binary(op: str, a, b) -> Expr:
    """``a <op> b``; integer-affine combinations of loop variables stay affine (so that
    ``i + di`` can index a tensor)."""
    a, b = as_expr(a), as_expr(b)
    out = Binary(op, a, b)
    if op in ("add", "sub", "mul") and _is_index(a) and _is_index(b):
        try:
            return as_index(out, "expression")
        except BuildError:
            return out
    return out


def _is_index(x: Expr) -> bool:
    return isinstance(x, (IterVar, Affine)) or (isinstance(x, Const) and isinstance(x.value, (int, np.integer)))


def reduce_axis(dom, name: Optional[str] = None) -> IterVar:
    """A reduction variable over ``dom`` (TVM ``te.reduce_axis``).

    Parameters
    ----------
    dom : int or (int, int)
        The extent, or ``(lo, hi)`` for ``[lo, hi)``.
    name : str, optional

    Raises
    ------
    BuildError
        For a non-int or empty range.
    """
    lo, hi = (0, dom) if isinstance(dom, (int, np.integer)) else tuple(dom) if \
        isinstance(dom, (tuple, list)) and len(dom) == 2 else (None, None)
    if not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in (lo, hi)) or hi <= lo:
        raise BuildError(f"reduce_axis: argument 'dom' is {dom!r}; expected an int > 0 or (lo, hi) with lo < hi")
    return IterVar(name or "k", int(hi) - int(lo), int(lo), reduce=True)


def _reduction(kind: str, expr, axis) -> Reduce:
    axes = tuple(axis) if isinstance(axis, (list, tuple)) else (axis,)
    for a in axes:
        if not isinstance(a, IterVar) or not a.reduce:
            raise BuildError(f"te.{kind}: argument 'axis' is {a!r}; expected te.reduce_axis variables")
    return Reduce(kind, as_expr(expr), axes)


def sum(expr, axis) -> Reduce:  # noqa: A001
    """Sum of ``expr`` over the reduce axes ``axis`` (TVM ``te.sum``); init 0.

    Raises
    ------
    BuildError
        If ``axis`` is not reduce axes.
    """
    return _reduction("sum", expr, axis)


def max(expr, axis=None):  # noqa: A001
    """``te.max(expr, axis=k)``: maximum over reduce axes (TVM ``te.max``), init -inf / INT_MIN;
    ``te.max(a, b)`` with an expression or number as second argument: the elementwise maximum
    (``arith.maximumf``/``maxsi``).

    Raises
    ------
    BuildError
        If ``axis`` is neither reduce axes nor an expression.
    """
    return _max_min("max", expr, axis)


def min(expr, axis=None):  # noqa: A001
    """Minimum over reduce axes, or the elementwise minimum of two expressions (see :func:`max`)."""
    return _max_min("min", expr, axis)


def _max_min(kind: str, expr, axis):
    is_axes = isinstance(axis, IterVar) and axis.reduce or (
        isinstance(axis, (list, tuple)) and axis and all(isinstance(a, IterVar) and a.reduce for a in axis))
    if is_axes:
        return _reduction(kind, expr, axis)
    if axis is None:
        raise BuildError(f"te.{kind}: expected a reduce axis (axis=k) or a second expression")
    return Binary(kind, as_expr(expr), as_expr(axis))


def if_then_else(cond, a, b) -> Select:
    """``a if cond else b`` elementwise (TVM ``tir.if_then_else``); ``cond`` is a comparison.

    Raises
    ------
    BuildError
        If ``cond`` is not a comparison (``i < 3``, ``A[i] >= 0``).
    """
    if not isinstance(cond, Compare):
        raise BuildError(f"te.if_then_else: argument 'cond' is {cond!r}; expected a comparison (a < b, ...)")
    return Select(cond, as_expr(a), as_expr(b))


def _math(fn: str):
    def f(x) -> Call:
        return Call(fn, as_expr(x))

    f.__name__ = fn
    f.__doc__ = f"``{fn}(x)`` of a float expression (``math.{fn}``)."
    return f


exp, log, sqrt, tanh = _math("exp"), _math("log"), _math("sqrt"), _math("tanh")
log1p, expm1 = _math("log1p"), _math("expm1")


def accesses(e: Expr, out: list) -> list:
    """Every :class:`Access` in ``e`` (depth first, with repeats)."""
    if isinstance(e, Access):
        out.append(e)
    elif isinstance(e, (Binary, Compare)):
        accesses(e.a, out)
        accesses(e.b, out)
    elif isinstance(e, Select):
        accesses(e.cond, out)
        accesses(e.a, out)
        accesses(e.b, out)
    elif isinstance(e, Call):
        accesses(e.x, out)
    elif isinstance(e, Reduce):
        accesses(e.body, out)
    return out


def check_no_reduce(e: Expr, where: str) -> None:
    """Raises BuildError if ``e`` holds a reduction (they are only allowed at the top)."""
    if isinstance(e, Reduce):
        raise BuildError(f"te.compute: {where}: a te.sum/max/min must be the whole body of the compute")
    for child in (getattr(e, "a", None), getattr(e, "b", None), getattr(e, "x", None),
                  getattr(e, "cond", None)):
        if isinstance(child, Expr):
            check_no_reduce(child, where)


def indices_of(shape: Sequence[int], names: Sequence[str]) -> Tuple[IterVar, ...]:
    """Spatial IterVars for an output ``shape``."""
    return tuple(IterVar(n, int(d)) for n, d in zip(names, shape))
