"""The tile of an operand that a loop nest reads at a loop: the shape of a staged panel.

An operand indexed by a linear combination of iteration dims (a convolution's input row
``oh * stride + kh * dilation``) is read, over a tile of ``e_d`` iterations of each dim ``d``,
on ``sum_d |c_d| * (e_d - 1) + 1`` elements of that axis (the bounding box of the window; MLIR's
``linalg`` tiling computes the same slice sizes, ``computeSliceParameters``). TVM derives a
staged buffer's shape the same way (``compute_at``'s region inference).
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

from .._mlir import ir

#: ``((dim, coefficient), ...)`` of one result of an indexing map; None for a non-linear one.
Terms = Optional[Tuple[Tuple[int, int], ...]]


def affine_dim(expr) -> Optional[int]:
    """The position of an affine expression that is a lone dim (``d2``), else None."""
    if isinstance(expr, ir.AffineDimExpr):
        return expr.position
    return None


def linear_terms(expr) -> Terms:
    """The ``(dim, coefficient)`` terms of an affine expression ``sum c_d * d_d + const``
    (constants dropped: they shift the window, not its size); None when it is not of that
    form (``floordiv``, ``mod``, a product of dims, a symbol)."""
    if isinstance(expr, ir.AffineDimExpr):
        return ((expr.position, 1),)
    if isinstance(expr, ir.AffineConstantExpr):
        return ()
    if isinstance(expr, ir.AffineAddExpr):
        lhs, rhs = linear_terms(expr.lhs), linear_terms(expr.rhs)
        return None if lhs is None or rhs is None else lhs + rhs
    if isinstance(expr, ir.AffineMulExpr):
        for a, b in ((expr.lhs, expr.rhs), (expr.rhs, expr.lhs)):
            if isinstance(b, ir.AffineConstantExpr):
                inner = linear_terms(a)
                return None if inner is None else tuple((d, c * b.value) for d, c in inner)
    return None


def map_terms(amap) -> Tuple[Terms, ...]:
    """:func:`linear_terms` of each result of an ``ir.AffineMap``."""
    return tuple(linear_terms(e) for e in amap.results)


def tile_shape(terms: Sequence[Terms], extents: Sequence[int]) -> Optional[List[int]]:
    """Shape of the operand tile read over ``extents[d]`` iterations of each dim ``d``
    (module docstring); None when a result is not linear."""
    if any(t is None for t in terms):
        return None
    return [sum(abs(c) * (extents[d] - 1) for d, c in t) + 1 for t in terms]


def spread_threads(shape: Sequence[int], nthreads: int) -> List[int]:
    """Threads per dim of a cooperative copy of ``shape`` by at most ``nthreads`` threads:
    the contiguous (last) dim first, as many threads as its extent allows, then the next dim
    with the threads left, and so on (consecutive threads read consecutive addresses:
    coalesced loads); each a divisor of its extent, so every thread copies a static tile."""
    out = [1] * len(shape)
    left = max(1, nthreads)
    for d in reversed(range(len(shape))):
        t = next(c for c in range(min(shape[d], left), 0, -1) if shape[d] % c == 0)
        out[d] = t
        left //= t
        if left <= 1:
            break
    return out
