"""Polynomial approximations of f32 ``math`` functions (``mlc-approximate-math``).

LLVM has no vector ``exp``, ``erf``, ``tanh``, ``log``, ``log1p`` or ``expm1`` on x86 without a
vector math library, so ``convert-math-to-llvm`` / ``convert-math-to-libm`` scalarize each
vectorized op into one libm call per lane: in the small BERT, GELU's ``erff`` calls alone took 11%
of the run time, and an add + tanh-GELU over 700x700 ran 10x slower than PyTorch's. This pass
replaces these ops, scalar or vector (or tensor) f32, by ``arith`` sequences that vectorize:

* ``exp``: Cephes ``expf``: ``n = round(x log2 e)``, ``r = x - n ln 2`` (Cody-Waite, two
  constants), a degree-6 polynomial, times ``2^n`` built from exponent bits (two factors, so
  ``n = 128`` does not overflow the exponent field). Max relative error 8.2e-8 on
  [-87.3, 88.7] (1 ulp); ``exp(x) = 0`` below -87.34 (the true values are denormal, < 1.2e-38),
  ``+inf`` above 88.72, NaN stays NaN.
* ``erf``: the rational approximation of Eigen and XLA, ``x P(x^2) / Q(x^2)`` on ``x`` clamped
  to [-4, 4]; max absolute error 4.5e-7 over the real line (checked against ``scipy.special.erf``
  in ``test/pytest/test_math_approximation.py``).
* ``tanh``: Cephes ``tanhf``: ``x + x^3 P(x^2)`` below 0.625, ``1 - 2 / (exp(2|x|) + 1)`` with
  the sign of ``x`` above; 2 ulp, exactly +-1 where f32 ``tanh`` rounds to it.
* ``log``: Cephes ``logf``: ``x = m 2^e`` from the exponent bits with ``m`` in [sqrt(1/2),
  sqrt(2)), a degree-8 polynomial in ``m - 1`` and ``e ln 2`` in two parts; 1-2 ulp on normal
  inputs; ``log(0) = -inf``, ``log(x < 0) = NaN``, ``log(inf) = inf``, subnormal inputs are taken
  as the smallest normal number.
* ``log1p``: ``u = 1 + x``; ``x`` where ``u == 1``, else ``log(u) x / (u - 1)`` (Goldberg's
  correction for the rounding of ``1 + x``, "What every computer scientist should know about
  floating-point arithmetic", Theorem 4).
* ``expm1``: ``u = exp(x)``; ``x`` where ``u == 1``, -1 where ``u - 1 == -1``, else
  ``(u - 1) x / log(u)`` (Kahan's trick, the same correction in reverse).

Upstream MLIR has the same rewrites (``populateMathPolynomialApproximationPatterns``) but exposes
them only through a test pass that the released ``mlir-opt`` and Python bindings lack, so they
are written here with the Python builders and the greedy driver (:class:`RewritePatterns`).
Source: Cephes ``expf.c``, ``logf.c``, ``tanhf.c``; Eigen ``generic_fast_erf_float``; MLIR ``PolynomialApproximation.cpp`` (the log1p/expm1 corrections).
"""

from __future__ import annotations

from typing import Sequence

from ..._mlir import arith_d, ir, math_d
from ...errors import PipelineError
from ...ir.emitters import horner, like_type, splat_constant
from ...ir.module import Module
from ...graph.pass_manager import Pass
from ...graph.rewrite import Pattern, RewritePatterns

#: Ops this pass can approximate.
APPROXIMATED_OPS = ("math.exp", "math.erf", "math.tanh", "math.log", "math.log1p", "math.expm1")

# Cephes expf
_EXP_LO, _EXP_HI = -87.33654, 88.72283935546875  # exp(_EXP_LO) = FLT_MIN; exp(_EXP_HI) = FLT_MAX
_LOG2E, _LN2_HI, _LN2_LO = 1.44269504088896341, 0.693359375, -2.12194440e-4
_EXP_POLY = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
             1.6666665459e-1, 5.0000001201e-1)
# Eigen generic_fast_erf_float: numerator (odd, highest degree first) and denominator (even)
_ERF_P = (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06,
          -5.69250639462346e-05, -7.34990630326855e-04, -2.95459980854025e-03,
          -1.60960333262415e-02)
_ERF_Q = (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03,
          -7.37332916720468e-03, -1.42647390514189e-02)
# Cephes tanhf
_TANH_SMALL = 0.625
_TANH_POLY = (-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2, 1.33314422036e-1,
              -3.33332819422e-1)
# Cephes logf
_SQRT_HALF, _MIN_NORMAL = 0.707106781186547524, 1.17549435e-38
_LOG_POLY = (7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1,
             1.4249322787e-1, -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1,
             3.3333331174e-1)


def _is_f32(t: ir.Type) -> bool:
    elem = t.element_type if isinstance(t, ir.ShapedType) else t
    return isinstance(elem, ir.F32Type)


def _pow2(n: ir.Value, f32_type: ir.Type) -> ir.Value:
    """``2^n`` for integer-valued i32 ``n`` in [-126, 127] from the exponent bits."""
    i32 = n.type
    biased = arith_d.shli(arith_d.addi(n, splat_constant(i32, 127)), splat_constant(i32, 23))
    return arith_d.bitcast(f32_type, biased)


def approximate_exp(x: ir.Value) -> ir.Value:
    """Cephes ``expf`` of f32 ``x`` (scalar, vector or tensor) as ``arith``/``math.fma`` ops at
    the current insertion point; see the module docstring for accuracy and special values."""
    t = x.type
    i32 = like_type(t, ir.IntegerType.get_signless(32))
    xc = arith_d.minimumf(arith_d.maximumf(x, splat_constant(t, _EXP_LO)), splat_constant(t, _EXP_HI))
    n = math_d.floor(math_d.fma(xc, splat_constant(t, _LOG2E), splat_constant(t, 0.5)))
    r = math_d.fma(n, splat_constant(t, -_LN2_HI), xc)
    r = math_d.fma(n, splat_constant(t, -_LN2_LO), r)
    p = horner(r, _EXP_POLY)
    y = math_d.fma(p, arith_d.mulf(r, r), arith_d.addf(r, splat_constant(t, 1.0)))
    ni = arith_d.fptosi(i32, n)                       # n in [-126, 128]: 2^n as two factors
    half = arith_d.shrsi(ni, splat_constant(i32, 1))
    y = arith_d.mulf(arith_d.mulf(y, _pow2(half, t)), _pow2(arith_d.subi(ni, half), t))
    under = arith_d.cmpf(arith_d.CmpFPredicate.OLT, x, splat_constant(t, _EXP_LO))
    over = arith_d.cmpf(arith_d.CmpFPredicate.OGT, x, splat_constant(t, _EXP_HI))
    y = arith_d.select(under, splat_constant(t, 0.0), y)
    y = arith_d.select(over, splat_constant(t, float("inf")), y)
    nan = arith_d.cmpf(arith_d.CmpFPredicate.UNO, x, x)
    return arith_d.select(nan, x, y)


def approximate_erf(x: ir.Value) -> ir.Value:
    """Eigen's rational ``erf`` of f32 ``x`` (scalar, vector or tensor) at the current insertion
    point; max absolute error 4.5e-7, NaN stays NaN."""
    t = x.type
    xc = arith_d.minimumf(arith_d.maximumf(x, splat_constant(t, -4.0)), splat_constant(t, 4.0))
    x2 = arith_d.mulf(xc, xc)
    p = arith_d.mulf(xc, horner(x2, _ERF_P))
    return arith_d.divf(p, horner(x2, _ERF_Q))


def approximate_tanh(x: ir.Value) -> ir.Value:
    """Cephes ``tanhf`` of f32 ``x`` (scalar, vector or tensor) at the current insertion point:
    an odd polynomial below 0.625, ``1 - 2 / (exp(2|x|) + 1)`` with the sign of ``x`` above (both
    are computed; a select picks one per lane); about 2 ulp, NaN stays NaN."""
    t = x.type
    ax = math_d.absf(x)
    z = arith_d.mulf(x, x)
    small = math_d.fma(arith_d.mulf(horner(z, _TANH_POLY), z), x, x)
    e = approximate_exp(arith_d.addf(ax, ax))
    large = arith_d.subf(splat_constant(t, 1.0), arith_d.divf(splat_constant(t, 2.0), arith_d.addf(e, splat_constant(t, 1.0))))
    large = math_d.copysign(large, x)
    return arith_d.select(_cmp("OLT", ax, splat_constant(t, _TANH_SMALL)), small, large)


def _cmp(pred: str, a: ir.Value, b: ir.Value) -> ir.Value:
    return arith_d.cmpf(getattr(arith_d.CmpFPredicate, pred), a, b)


def approximate_log(x: ir.Value) -> ir.Value:
    """Cephes ``logf`` of f32 ``x`` (scalar, vector or tensor) at the current insertion point;
    see the module docstring for accuracy and special values."""
    t = x.type
    i32 = like_type(t, ir.IntegerType.get_signless(32))
    xn = arith_d.maximumf(x, splat_constant(t, _MIN_NORMAL))              # x <= 0 and NaN handled below
    bits = arith_d.bitcast(i32, xn)
    e = arith_d.subi(arith_d.shrui(bits, splat_constant(i32, 23)), splat_constant(i32, 126))
    m = arith_d.bitcast(t, arith_d.ori(arith_d.andi(bits, splat_constant(i32, 0x807FFFFF)),
                                       splat_constant(i32, 0x3F000000)))    # m in [0.5, 1)
    small = _cmp("OLT", m, splat_constant(t, _SQRT_HALF))
    ef = arith_d.sitofp(t, e)
    ef = arith_d.select(small, arith_d.subf(ef, splat_constant(t, 1.0)), ef)
    f = arith_d.subf(arith_d.select(small, arith_d.addf(m, m), m), splat_constant(t, 1.0))
    z = arith_d.mulf(f, f)
    y = arith_d.mulf(arith_d.mulf(horner(f, _LOG_POLY), f), z)
    y = math_d.fma(ef, splat_constant(t, _LN2_LO), y)
    y = math_d.fma(z, splat_constant(t, -0.5), y)
    r = math_d.fma(ef, splat_constant(t, _LN2_HI), arith_d.addf(f, y))
    r = arith_d.select(_cmp("OEQ", x, splat_constant(t, float("inf"))), x, r)
    r = arith_d.select(_cmp("OEQ", x, splat_constant(t, 0.0)), splat_constant(t, float("-inf")), r)
    return arith_d.select(_cmp("ULT", x, splat_constant(t, 0.0)), splat_constant(t, float("nan")), r)


def approximate_log1p(x: ir.Value) -> ir.Value:
    """``log(1 + x)`` of f32 ``x`` at the current insertion point through :func:`approximate_log`
    with Goldberg's correction for the rounding of ``1 + x``; NaN stays NaN."""
    t = x.type
    u = arith_d.addf(x, splat_constant(t, 1.0))
    log_u = approximate_log(u)
    r = arith_d.mulf(log_u, arith_d.divf(x, arith_d.subf(u, splat_constant(t, 1.0))))
    r = arith_d.select(_cmp("OEQ", u, splat_constant(t, float("inf"))), u, r)
    return arith_d.select(_cmp("OEQ", u, splat_constant(t, 1.0)), x, r)


def approximate_expm1(x: ir.Value) -> ir.Value:
    """``exp(x) - 1`` of f32 ``x`` at the current insertion point through
    :func:`approximate_exp` and :func:`approximate_log` with Kahan's correction; NaN stays NaN."""
    t = x.type
    u = approximate_exp(x)
    um1 = arith_d.subf(u, splat_constant(t, 1.0))
    r = arith_d.mulf(um1, arith_d.divf(x, approximate_log(u)))
    r = arith_d.select(_cmp("OEQ", u, splat_constant(t, float("inf"))), u, r)
    r = arith_d.select(_cmp("OEQ", um1, splat_constant(t, -1.0)), um1, r)
    return arith_d.select(_cmp("OEQ", u, splat_constant(t, 1.0)), x, r)


def _f32_pattern(root: str, fn) -> Pattern:
    def rewrite(op):
        x = op.operands[0]
        return fn(x) if _is_f32(x.type) else None  # other float types keep the math op

    rewrite.__name__ = f"approximate_{root.split('.')[1]}"
    return Pattern(root, rewrite)


_PATTERNS = {root: _f32_pattern(root, fn) for root, fn in zip(
    APPROXIMATED_OPS, (approximate_exp, approximate_erf, approximate_tanh, approximate_log,
                       approximate_log1p, approximate_expm1))}


class ApproximateMath(Pass):
    """Replace f32 ``math.exp`` / ``erf`` / ``tanh`` / ``log`` / ``log1p`` / ``expm1`` (``ops``) everywhere in the module, including
    inside ``linalg.generic`` bodies and on vectors, by polynomial approximations (see the module
    docstring). ``mlc.compile`` runs it on CPU targets after scheduling (``approximate_math``
    option).

    Parameters
    ----------
    ops : sequence of str
        A subset of :data:`APPROXIMATED_OPS`.

    Raises
    ------
    PipelineError
        For an op name this pass cannot approximate.
    """

    name = "mlc-approximate-math"

    def __init__(self, ops: Sequence[str] = APPROXIMATED_OPS):
        unknown = [o for o in ops if o not in _PATTERNS]
        if unknown:
            raise PipelineError(f"ApproximateMath: cannot approximate {unknown}; expected a subset "
                                f"of {list(APPROXIMATED_OPS)}")
        self.ops = tuple(ops)

    def transform(self, mod: Module) -> Module:
        return RewritePatterns([_PATTERNS[o] for o in self.ops], name=self.name).transform(mod)
