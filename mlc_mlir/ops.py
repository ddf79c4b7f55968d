"""The op inventory: ``mlc_mlir.ops.<name>`` for every op of the graph builder.

Categories (TOPI-style): elementwise (:mod:`mlc_mlir.builder.elementwise`), nn
(:mod:`mlc_mlir.builder.nn`), reduction (:mod:`mlc_mlir.builder.reduction`), shape
(:mod:`mlc_mlir.builder.shape`). Each op checks shapes/dtypes and raises ``BuildError``.
"""

from .builder.elementwise import (  # noqa: F401
    add, cast, clip, divide, exp, gelu, log, maximum, minimum, multiply, negative, relu, rsqrt,
    sigmoid, sqrt, subtract, tanh,
)
from .builder.nn import batch_matmul, dense, matmul  # noqa: F401
