"""The op inventory: ``mlc_mlir.ops.<name>`` for every op of the graph builder.

Categories (TOPI-style): elementwise (:mod:`mlc_mlir.builder.elementwise`), nn
(:mod:`mlc_mlir.builder.nn`), reduction (:mod:`mlc_mlir.builder.reduction`), shape
(:mod:`mlc_mlir.builder.shape`). Each op checks shapes/dtypes and raises ``BuildError``.
"""

from .builder.elementwise import (  # noqa: F401
    add, cast, clip, divide, exp, gelu, log, maximum, minimum, multiply, negative, relu, rsqrt,
    sigmoid, sqrt, subtract, tanh,
)
from .builder.nn import (  # noqa: F401
    avg_pool2d, batch_matmul, batch_norm, conv2d, dense, global_avg_pool2d, layer_norm, log_softmax,
    matmul, max_pool2d, softmax,
)
from .builder.reduction import argmax, max, mean, min, sum  # noqa: F401,A004
from .builder.shape import (  # noqa: F401,A004
    broadcast_to, concat, flatten, pad, permute, reshape, slice, transpose,
)
