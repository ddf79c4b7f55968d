"""The op inventory: ``mlc_mlir.ops.<name>`` for every op of the graph builder.

Categories (TOPI-style): elementwise (:mod:`mlc_mlir.builder.elementwise`), nn
(:mod:`mlc_mlir.builder.nn`, :mod:`mlc_mlir.builder.normalization`), reduction (:mod:`mlc_mlir.builder.reduction`), shape
(:mod:`mlc_mlir.builder.shape`), contraction (:mod:`mlc_mlir.builder.einsum`). Each op checks
shapes/dtypes and raises ``BuildError``.
"""

from .builder.elementwise import (  # noqa: F401
    add, bitcast, cast, clip, divide, exp, gelu, log, maximum, minimum, multiply, negative, relu, rsqrt,
    sigmoid, sqrt, subtract, tanh,
)
from .builder.conv_transpose import conv_transpose2d  # noqa: F401
from .builder.determinant import det  # noqa: F401
from .builder.einsum import einsum  # noqa: F401
from .builder.linalg_emit import constant_op as constant  # noqa: F401
from .builder.nn import (  # noqa: F401
    avg_pool2d, batch_matmul, conv2d, dense, global_avg_pool2d, matmul, max_pool2d,
)
from .builder.normalization import batch_norm, layer_norm, log_softmax, softmax  # noqa: F401
from .builder.reduction import argmax, argmin, max, mean, min, prod, sum  # noqa: F401,A004
from .builder.scan import cumsum  # noqa: F401
from .builder.volumetric import avg_pool3d, conv3d, max_pool3d  # noqa: F401
from .builder.shape import (  # noqa: F401,A004
    broadcast_to, concat, flatten, permute, reshape, slice, transpose,
)
from .builder.indexing import (  # noqa: F401
    arange, expand, gather, pad, size_array, split, squeeze, unsqueeze, update_slice,
)
from .builder.math_ops import (  # noqa: F401,A004
    abs, acos, acosh, asin, asinh, atan, atan2, atanh, ceil, cos, cosh, equal, erf, expm1, floor, greater,
    greater_equal, less, less_equal, log1p, mod, not_equal, power, round, sin, sinh, tan, trunc, where,
)
from .builder.take import gather_elements, gather_nd, take  # noqa: F401
from .builder.generators import full  # noqa: F401
from .builder.scatter import scatter_elements  # noqa: F401
from .builder.col2im import col2im  # noqa: F401
from .builder.embedding_bag import embedding_bag  # noqa: F401
from .builder.grid_sample import grid_sample  # noqa: F401
from .builder.resize import resize  # noqa: F401
from .builder.sort import sort  # noqa: F401
from .builder.topk import topk  # noqa: F401
