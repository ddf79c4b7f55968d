"""``exp(x - shift)`` for the online softmax of the fused attention kernel, where ``x <= shift``
always holds (a score minus its row's running maximum, or the old maximum minus the new one):
either ``math.exp`` (the ``math`` stage's Cephes ``expf``, valid on the whole real line) or a
shorter sequence that uses the sign of the argument, one of the kernel's decisions
(:attr:`~mlc_mlir.schedule.rules.attention.AttentionKnobs.exp_degree`).

The short form computes ``2^n e^r`` with ``d = max(x - shift, -127 ln2_hi)``, ``n = roundeven(d
log2 e)`` and ``r = d - n ln 2`` in ``[-ln 2 / 2, ln 2 / 2]`` (Cody-Waite: ``ln 2`` in two parts,
two FMAs, so the reduction loses no bits at ``|d|`` near 88): a polynomial ``P(r) ~ e^r`` of degree
6 times ``2^n`` built from exponent bits (``(n + 127) << 23``). ``d <= 0`` needs no overflow
clamp and no split of ``2^n`` in two factors, and ``n = -127`` gives the bits of ``+0.0``, so
``exp(-inf) = 0`` (masked keys) and arguments below about ``-87.7`` give 0 instead of a
denormal (< 1.2e-38, negligible against the row maximum's ``exp(0) = 1``). A NaN argument
gives NaN (``r`` is NaN; the exponent bits take ``n = -127`` through
:func:`~mlc_mlir.ir.emitters.ordered_max`, so no poison reaches them).

The coefficients minimize the relative error of ``P(r) / e^r`` on ``[-ln 2 / 2, ln 2 / 2]``
(Lawson's iteratively reweighted least squares on Chebyshev nodes, rounded to f32); the largest
relative error of the result on normal floats, against float64 ``exp``, is about ``1.1e-7``
(Cephes ``expf``: ``8.2e-8``). Degrees 4 and 5 measured no faster in the attention kernel of the
small BERT (one FMA less out of about thirteen operations).
Source: the ``exp2``-and-exponent-bits form of the softmax exponentials in FlashAttention-3 (Shah
et al., 2024, which uses the hardware ``exp2``) and of oneDNN's / XNNPACK's vector ``expf``
kernels; Muller, "Elementary Functions" (2016), ch. 3 (minimax polynomials).
"""

from __future__ import annotations

from ..._mlir import arith_d, ir, math_d
from ...errors import ScheduleError
from ...ir.emitters import horner, like_type, ordered_max, splat_constant

#: Degrees of the short form the kernel may use (0 stands for ``math.exp``).
EXP_DEGREES = (0, 6)

#: degree -> coefficients of ``P(r) ~ e^r`` on ``[-ln 2 / 2, ln 2 / 2]``, lowest order first.
_EXP_COEFFS = {
    6: (1.0, 1.0, 0.49999991059303284, 0.16666419804096222, 0.04166822507977486, 0.008374815806746483,
        0.0013836845755577087),
}
_LOG2E = 1.4426950408889634
_LN2_HI, _LN2_LO = 0.693359375, -2.12194440e-4   # Cephes: ln 2 = _LN2_HI + _LN2_LO, _LN2_HI 9 bits


def shifted_exp(x: ir.Value, shift: ir.Value, degree: int) -> ir.Value:
    """``exp(x - shift)`` for f32 ``x <= shift`` (scalars or vectors of one shape; see the module
    docstring): ``degree`` 0 emits ``math.exp``, 6 the short form with a polynomial of that
    degree.

    Raises
    ------
    ScheduleError
        If ``degree`` is not one of :data:`EXP_DEGREES`.
    """
    if degree not in EXP_DEGREES:
        raise ScheduleError(f"attention exp: degree {degree}; expected one of {EXP_DEGREES}")
    d = arith_d.subf(x, shift)
    if degree == 0:
        return math_d.exp(d)
    i32 = ir.IntegerType.get_signless(32)
    d = ordered_max(splat_constant(d.type, -127.0 * _LN2_HI), d)   # NaN stays
    n = math_d.roundeven(arith_d.mulf(d, splat_constant(d.type, _LOG2E)))
    r = math_d.fma(n, splat_constant(d.type, -_LN2_HI), d)
    r = math_d.fma(n, splat_constant(d.type, -_LN2_LO), r)
    p = horner(r, _EXP_COEFFS[degree][::-1])
    e = arith_d.fptosi(like_type(d.type, i32), ordered_max(n, splat_constant(d.type, -127.0)))
    bits = arith_d.shli(arith_d.addi(e, splat_constant(e.type, 127)), splat_constant(e.type, 23))
    return arith_d.mulf(p, arith_d.bitcast(d.type, bits))

__all__ = ["EXP_DEGREES", "shifted_exp"]
