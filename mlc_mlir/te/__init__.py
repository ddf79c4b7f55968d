"""Tensor expressions (TVM ``te``): ``placeholder``, ``compute``, ``reduce_axis``, ``sum``/``max``/
``min``, emitted as one ``linalg.generic`` per compute (see :mod:`mlc_mlir.te.compute`).

>>> A = te.placeholder((M, K), name="A"); B = te.placeholder((K, N), name="B")
>>> k = te.reduce_axis((0, K), name="k")
>>> C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
>>> te.create_function(bb, "main", [A, B, C])
"""

from .compute import (  # noqa: F401
    ComputeTensor, Placeholder, compute, create_function, emit, placeholder,
)
from .expr import (  # noqa: F401,A004
    exp, expm1, if_then_else, log, log1p, max, min, reduce_axis, sqrt, sum, tanh,
)
