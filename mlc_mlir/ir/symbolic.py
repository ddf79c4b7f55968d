"""Symbolic sizes: integer polynomials over named dims (``batch``, ``seq``, ``2*seq + 1``).

A dynamic dimension of a graph function is a :class:`SymDim`: a polynomial with integer
coefficients over *atoms*, each atom a symbol name (``"seq"``), an exact-free floor division
``(expr)//c`` by a positive constant, or a ``min(...)``/``max(...)`` of expressions that no
constant difference decides (:func:`minimum`, :func:`maximum`: the clamps of ONNX/numpy slice
bounds, ``max(seq - 4095, 0)``). Polynomials are kept in a canonical form (monomials sorted,
zero terms dropped), so ``batch*seq == seq*batch`` and ``seq + seq == 2*seq``; an expression that
becomes a constant is returned as a Python ``int``. Equality is *provable* equality: two different
symbols compare unequal (they may or may not be equal at run time).

The text form (``str(d)``) parses back with :func:`parse` and evaluates with :meth:`SymDim.evaluate`
given the symbols' values; it is what a function's ``mlc.shape`` argument/result attributes hold,
so the runtime computes result sizes from argument sizes without the compiler (a shape function,
as TVM Relax's ``R.Tensor(("n", 784))`` signatures).

A SymDim may carry a *scope* (not part of its value): the object that emits the ``index`` SSA
value of an atom (``scope.atom_value(name) -> ir.Value``, e.g. ``tensor.dim %arg, 1``) and
remembers which value holds which expression (``scope.record(value, expr)``).
:meth:`SymDim.materialize` emits the polynomial with ``arith`` ops on ``index`` at the current
insertion point.
"""

from __future__ import annotations

import ast
from typing import Dict, Mapping, Optional, Tuple, Union

from .._mlir import arith_d, ir
from ..errors import BuildError

Atom = Union[str, "FloorDiv", "MinMax"]
Monomial = Tuple[Atom, ...]


class FloorDiv:
    """The atom ``(num)//den``: floor division of a SymDim by a positive int that does not divide it."""

    __slots__ = ("num", "den")

    def __init__(self, num: "SymDim", den: int):
        self.num, self.den = num, den

    def __str__(self) -> str:
        return f"({self.num})//{self.den}"

    def __eq__(self, other) -> bool:
        return isinstance(other, FloorDiv) and other.den == self.den and other.num == self.num

    def __hash__(self) -> int:
        return hash((str(self.num), self.den))


class MinMax:
    """The atom ``min(a, b, ...)`` or ``max(a, b, ...)`` (``kind``) of two or more SymDims and
    at most one int, no two of which differ by a constant (see :func:`minimum`)."""

    __slots__ = ("kind", "args")

    def __init__(self, kind: str, args: Tuple["Dim", ...]):
        self.kind, self.args = kind, args

    def __str__(self) -> str:
        return f"{self.kind}({', '.join(str(a) for a in self.args)})"

    def __eq__(self, other) -> bool:
        return isinstance(other, MinMax) and other.kind == self.kind and \
            [str(a) for a in other.args] == [str(a) for a in self.args]

    def __hash__(self) -> int:
        return hash(str(self))


def _key(a: Atom) -> str:
    return a if isinstance(a, str) else str(a)


class SymDim:
    """A non-constant symbolic size (see the module docstring).

    Build one with :func:`symbol`; combine with ``+ - *`` (SymDims and ints) and ``//`` by a
    positive int. ``int`` results come back as ``int``.
    """

    __slots__ = ("terms", "scope")

    def __init__(self, terms: Mapping[Monomial, int], scope=None):
        self.terms: Tuple[Tuple[Monomial, int], ...] = tuple(
            sorted(((m, c) for m, c in terms.items() if c), key=lambda mc: [_key(a) for a in mc[0]]))
        self.scope = scope

    # ------------------------------------------------------------ algebra
    @staticmethod
    def _make(terms: Dict[Monomial, int], scope) -> Union["SymDim", int]:
        terms = {m: c for m, c in terms.items() if c}
        if not terms:
            return 0
        if list(terms) == [()]:
            return terms[()]
        return SymDim(terms, scope)

    def _terms(self) -> Dict[Monomial, int]:
        return dict(self.terms)

    @staticmethod
    def _of(x) -> Dict[Monomial, int]:
        if isinstance(x, SymDim):
            return x._terms()
        return {(): int(x)}

    def _scope_of(self, other):
        return self.scope if self.scope is not None else getattr(other, "scope", None)

    def __add__(self, other):
        if not isinstance(other, (SymDim, int)):
            return NotImplemented
        t = self._terms()
        for m, c in self._of(other).items():
            t[m] = t.get(m, 0) + c
        return self._make(t, self._scope_of(other))

    __radd__ = __add__

    def __neg__(self):
        return self._make({m: -c for m, c in self.terms}, self.scope)

    def __sub__(self, other):
        if not isinstance(other, (SymDim, int)):
            return NotImplemented
        return self + (-other)

    def __rsub__(self, other):
        return (-self) + other

    def __mul__(self, other):
        if not isinstance(other, (SymDim, int)):
            return NotImplemented
        t: Dict[Monomial, int] = {}
        for m1, c1 in self.terms:
            for m2, c2 in self._of(other).items():
                m = tuple(sorted(m1 + m2, key=_key))
                t[m] = t.get(m, 0) + c1 * c2
        return self._make(t, self._scope_of(other))

    __rmul__ = __mul__

    def __floordiv__(self, other):
        if not isinstance(other, int) or other <= 0:
            raise BuildError(f"symbolic size {self}: '//' takes a positive int, got {other!r}")
        if all(c % other == 0 for _, c in self.terms):
            return self._make({m: c // other for m, c in self.terms}, self.scope)
        return SymDim({(FloorDiv(SymDim(self._terms()), other),): 1}, self.scope)

    def __eq__(self, other) -> bool:
        return isinstance(other, SymDim) and other.terms == self.terms

    def __ne__(self, other) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return hash(str(self))

    def with_scope(self, scope) -> "SymDim":
        """The same expression bound to ``scope``."""
        return SymDim(self._terms(), scope)

    # ------------------------------------------------------------ queries
    def symbols(self) -> Tuple[str, ...]:
        """The symbol names the expression depends on, sorted."""
        out = set()
        for m, _ in self.terms:
            for a in m:
                if isinstance(a, str):
                    out.add(a)
                elif isinstance(a, FloorDiv):
                    out.update(a.num.symbols())
                else:
                    out.update(s for d in a.args if isinstance(d, SymDim) for s in d.symbols())
        return tuple(sorted(out))

    @property
    def symbol(self) -> Optional[str]:
        """The name when the expression is one plain symbol (``seq``), else None."""
        if len(self.terms) == 1 and self.terms[0][1] == 1 and len(self.terms[0][0]) == 1 \
                and isinstance(self.terms[0][0][0], str):
            return self.terms[0][0][0]
        return None

    def __str__(self) -> str:
        parts = []
        for m, c in self.terms:
            factors = [a if isinstance(a, str) else str(a) for a in m]
            if not factors:
                body = str(abs(c))
            elif abs(c) == 1:
                body = "*".join(factors)
            else:
                body = "*".join([str(abs(c))] + factors)
            parts.append(("- " if c < 0 else "+ ") + body)
        s = " ".join(parts)
        return s[2:] if s.startswith("+ ") else "-" + s[2:]

    def __repr__(self) -> str:
        return f"SymDim({self})"

    def evaluate(self, values: Mapping[str, int]) -> int:
        """The size for the symbols' ``values``.

        Raises
        ------
        KeyError
            If a symbol has no value.
        """
        total = 0
        for m, c in self.terms:
            p = c
            for a in m:
                p *= _atom_value(a, values)
            total += p
        return total

    # ------------------------------------------------------------ IR
    def materialize(self) -> ir.Value:
        """Emit the ``index`` value of the expression at the current insertion point: atoms
        from the scope (``scope.atom_value(name)``), then ``arith.muli``/``addi``/``floordivsi``;
        the scope caches and records each emitted value.

        Raises
        ------
        BuildError
            If the SymDim has no scope.
        """
        if self.scope is None:
            raise BuildError(f"symbolic size {self}: no function scope to compute it in")
        cached = self.scope.cached(self)
        if cached is not None:
            return cached
        idx = ir.IndexType.get()
        total = None
        for m, c in self.terms:
            p = None
            for a in m:
                v = self._atom_ir(a)
                p = v if p is None else arith_d.muli(p, v)
            if p is None:
                p = _const(c)
            elif c != 1:
                p = arith_d.muli(p, _const(c))
            total = p if total is None else arith_d.addi(total, p)
        assert total is not None and total.type == idx
        self.scope.record(total, self)
        return total


    def _atom_ir(self, a: Atom) -> ir.Value:
        if isinstance(a, str):
            return self.scope.atom_value(a)
        alone = SymDim({(a,): 1}, self.scope)
        out = self.scope.cached(alone)
        if out is not None:
            return out
        if isinstance(a, FloorDiv):
            out = arith_d.floordivsi(a.num.with_scope(self.scope).materialize(), _const(a.den))
        else:
            vals = [d.with_scope(self.scope).materialize() if isinstance(d, SymDim) else _const(d) for d in a.args]
            fold = arith_d.minsi if a.kind == "min" else arith_d.maxsi
            out = vals[0]
            for v in vals[1:]:
                out = fold(out, v)
        self.scope.record(out, alone)
        return out


def _atom_value(a: Atom, values: Mapping[str, int]) -> int:
    if isinstance(a, str):
        return values[a]
    if isinstance(a, FloorDiv):
        return a.num.evaluate(values) // a.den
    got = [d.evaluate(values) if isinstance(d, SymDim) else d for d in a.args]
    return min(got) if a.kind == "min" else max(got)


def minimum(a: "Dim", b: "Dim") -> "Dim":
    """``min(a, b)`` of two sizes: the one that a constant difference proves smaller, else the
    atom ``min(a, b)`` (nested mins flattened, arguments that another dominates by a constant
    dropped, the rest sorted by text). :meth:`~mlc_mlir.builder.symbols.SymbolScope.minimum`
    also decides from the symbols' bounds."""
    return _extremum("min", a, b)


def maximum(a: "Dim", b: "Dim") -> "Dim":
    """``max(a, b)`` of two sizes, as :func:`minimum`."""
    return _extremum("max", a, b)


def _extremum(kind: str, a: "Dim", b: "Dim") -> "Dim":
    sign = -1 if kind == "min" else 1
    kept: list = []
    for d in _flat(kind, a) + _flat(kind, b):
        for i, k in enumerate(kept):
            diff = d - k
            if isinstance(diff, int):
                if sign * diff > 0:
                    kept[i] = d
                break
        else:
            kept.append(d)
    if len(kept) == 1:
        return kept[0]
    scope = next((d.scope for d in kept if isinstance(d, SymDim) and d.scope is not None), None)
    args = tuple(sorted((d.with_scope(None) if isinstance(d, SymDim) else d for d in kept), key=str))
    return SymDim({(MinMax(kind, args),): 1}, scope)


def _flat(kind: str, d: "Dim") -> list:
    if isinstance(d, SymDim) and len(d.terms) == 1 and d.terms[0][1] == 1 and len(d.terms[0][0]) == 1:
        a = d.terms[0][0][0]
        if isinstance(a, MinMax) and a.kind == kind:
            return list(a.args)
    return [d]


def _const(v: int) -> ir.Value:
    return arith_d.ConstantOp(ir.IndexType.get(), v).result


def symbol(name: str, scope=None) -> SymDim:
    """The SymDim of one symbol ``name`` (an identifier)."""
    return SymDim({(name,): 1}, scope)


Dim = Union[int, SymDim]


def is_static(shape) -> bool:
    """True when every dim of ``shape`` is an int."""
    return all(not isinstance(d, SymDim) for d in shape)


def parse(text: str, scope=None) -> Dim:
    """The Dim of its text form: an int literal, or an expression of identifiers, ints, ``+``,
    ``-``, ``*``, ``//`` (by an int), ``min(...)``, ``max(...)`` and parentheses (``"batch*seq"``, ``"(seq + 1)//2"``).

    Raises
    ------
    BuildError
        For any other text.
    """
    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except SyntaxError:
        raise BuildError(f"symbolic size {text!r} is not an expression of names and ints") from None

    def go(n):
        if isinstance(n, ast.Constant) and isinstance(n.value, int) and not isinstance(n.value, bool):
            return n.value
        if isinstance(n, ast.Name):
            return symbol(n.id, scope)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ("min", "max") \
                and len(n.args) >= 2 and not n.keywords:
            out = go(n.args[0])
            for arg in n.args[1:]:
                out = (minimum if n.func.id == "min" else maximum)(out, go(arg))
            return out
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub):
            return -go(n.operand)
        if isinstance(n, ast.BinOp) and isinstance(n.op, (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv)):
            a, b = go(n.left), go(n.right)
            if isinstance(n.op, ast.Add):
                return a + b
            if isinstance(n.op, ast.Sub):
                return a - b
            if isinstance(n.op, ast.Mult):
                return a * b
            if isinstance(b, int) and b > 0:
                return a // b
        raise BuildError(f"symbolic size {text!r}: unsupported term {ast.dump(n)}")

    return go(tree)
