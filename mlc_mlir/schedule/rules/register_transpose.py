"""The transpose of an ``L x L`` block held in ``L`` vector registers, by ``L log2(L)``
two-input shuffles (``vector.shuffle``), for ``L`` a power of two.

Stage ``h`` (``L / 2``, ..., 2, 1) pairs row ``i`` with row ``i + h`` (``i`` in the first half
of its group of ``2h`` rows) and swaps the off-diagonal ``h x h`` blocks of every ``2h x 2h``
block: the new row ``i`` takes the even ``h``-column blocks of row ``i`` and of row ``i + h``
(``a[c:c+h], b[c:c+h]``), the new row ``i + h`` their odd ones. After the last stage row ``j``
holds column ``j``. On AVX-512 (``L = 16``) the four stages become ``vshuff32x4`` (h = 8, 4),
``vunpcklpd`` / ``vunpckhpd`` (h = 2) and ``vpermt2ps`` (h = 1): 64 shuffles for 256 elements,
where reading a column of a row-major tile element by element costs a load and an insert per
element.
Source: the recursive block transpose of MLIR's ``vector.transpose`` lowering
(``lowering_strategy = "shuffle_16x16"``, ``LowerVectorTranspose.cpp``) and of the 4x4
``_MM_TRANSPOSE4_PS`` macro.
"""

from __future__ import annotations

from typing import List, Sequence

from ..._mlir import ir, vector_d
from ...errors import ScheduleError


def transpose_registers(rows: Sequence[ir.Value]) -> List[ir.Value]:
    """``L`` vectors ``vector<L x T>`` (the rows of an ``L x L`` block) -> its ``L`` columns.

    Raises
    ------
    ScheduleError
        If ``L`` is not a power of two or a row is not ``vector<L>``.
    """
    n = len(rows)
    if n & (n - 1) or any(ir.VectorType(r.type).shape != [n] for r in rows):
        raise ScheduleError(f"register transpose: {n} rows of types {sorted({str(r.type) for r in rows})}; "
                            f"expected a power of two of vector<{n}> rows")
    out = list(rows)
    h = n // 2
    while h:
        lo = [c if (c // h) % 2 == 0 else n + c - h for c in range(n)]
        hi = [c + h if (c // h) % 2 == 0 else n + c for c in range(n)]
        for i in (i for i in range(n) if (i // h) % 2 == 0):
            a, b = out[i], out[i + h]
            out[i], out[i + h] = vector_d.shuffle(a, b, lo), vector_d.shuffle(a, b, hi)
        h //= 2
    return out


__all__ = ["transpose_registers"]
