"""Divisors of loop extents, in time independent of the extent's size.

Schedules split loops by divisors of their extents, and static extents can be as large as an
``int64`` (a ``(2**40,)`` tensor compiles like any other). Enumerating ``range(1, n + 1)`` would
take hours for such extents, so divisors come from the prime factorization: trial division by
small primes, then a deterministic Miller-Rabin test and Pollard's rho (Brent's variant) for
what is left (Pollard, "A Monte Carlo method for factorization", BIT 1975; Brent, "An improved
Monte Carlo factorization algorithm", BIT 1980). Every function here runs in time polynomial in
the number of digits of ``n``, times the number of divisors where it returns them.
"""

from __future__ import annotations

import bisect
import functools
import math
from typing import Dict, Tuple

#: Witnesses that make Miller-Rabin deterministic for every n < 3.3e24 (Sorenson and Webster,
#: "Strong pseudoprimes to twelve prime bases", Math. Comp. 2017), which covers int64 extents.
_WITNESSES = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41)
_SMALL_PRIMES = tuple(p for p in range(2, 1000) if all(p % q for q in range(2, math.isqrt(p) + 1)))


def _is_prime(n: int) -> bool:
    if n < 2:
        return False
    for p in _WITNESSES:
        if n % p == 0:
            return n == p
    d, s = n - 1, 0
    while d % 2 == 0:
        d, s = d // 2, s + 1
    for a in _WITNESSES:
        x = pow(a, d, n)
        if x in (1, n - 1):
            continue
        for _ in range(s - 1):
            x = x * x % n
            if x == n - 1:
                break
        else:
            return False
    return True


def _rho(n: int) -> int:
    """A non-trivial factor of the odd composite ``n`` (Brent's cycle detection, batched gcds)."""
    for c in range(1, n):
        y, r, q, g, m = 2, 1, 1, 1, 128
        x = ys = y
        while g == 1:
            x = y
            for _ in range(r):
                y = (y * y + c) % n
            k = 0
            while k < r and g == 1:
                ys = y
                for _ in range(min(m, r - k)):
                    y = (y * y + c) % n
                    q = q * abs(x - y) % n
                g = math.gcd(q, n)
                k += m
            r *= 2
        if g == n:
            g = 1
            while g == 1:
                ys = (ys * ys + c) % n
                g = math.gcd(abs(x - ys), n)
        if g != n:
            return g
    raise AssertionError(f"no factor found for {n}")  # unreachable for composite n


def _factor_into(n: int, out: Dict[int, int]) -> None:
    if n == 1:
        return
    if _is_prime(n):
        out[n] = out.get(n, 0) + 1
        return
    d = _rho(n)
    _factor_into(d, out)
    _factor_into(n // d, out)


@functools.lru_cache(maxsize=4096)
def factorize(n: int) -> Tuple[Tuple[int, int], ...]:
    """Prime factorization of ``n >= 1`` as ``((p, e), ...)`` with ascending primes.

    Raises
    ------
    ValueError
        If ``n < 1``.
    """
    if n < 1:
        raise ValueError(f"factorize: expected a positive int, got {n}")
    out: Dict[int, int] = {}
    for p in _SMALL_PRIMES:
        while n % p == 0:
            out[p] = out.get(p, 0) + 1
            n //= p
    _factor_into(n, out)
    return tuple(sorted(out.items()))


@functools.lru_cache(maxsize=4096)
def divisors(n: int) -> Tuple[int, ...]:
    """Positive divisors of ``n >= 1``, ascending (from :func:`factorize`)."""
    divs = [1]
    for p, e in factorize(n):
        divs = [d * p ** k for d in divs for k in range(e + 1)]
    return tuple(sorted(divs))


def largest_divisor(n: int, cap: int) -> int:
    """The largest divisor of ``n`` not above ``cap`` (at least 1; 1 for ``n <= 1``)."""
    if n <= 1 or cap <= 1:
        return 1
    if n <= cap:
        return n
    divs = divisors(n)
    return divs[bisect.bisect_right(divs, cap) - 1]


def pow2_floor(x: int) -> int:
    """The largest power of two not above ``x`` (1 for ``x <= 1``)."""
    return 1 << (max(1, x).bit_length() - 1)
