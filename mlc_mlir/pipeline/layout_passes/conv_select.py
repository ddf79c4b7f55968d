"""What the conv rewrites of the layout stage read from a convolution: its shapes and element
dtype (:func:`conv_signature`, the arguments of a :data:`ConvSelect` callback) and the algorithm
a tuning record chose for it (:func:`chosen_algorithm`).
"""

from __future__ import annotations

from typing import Callable, Optional, Tuple

from ..._mlir import ir
from ...graph.linalg_attrs import tensor_shape
from ...ir import dtypes
from ...ir.module import CONV_ALGORITHM_ATTR


#: ``select(x_shape, w_shape, out_shape, dtype) -> bool``: which convolutions a conv rewrite
#: (:class:`~.conv_nhwc.ConvToNHWC`, :class:`~.conv_im2col.ConvToIm2col`) takes, from :func:`conv_signature`.
ConvSelect = Callable[[Tuple[int, ...], Tuple[int, ...], Tuple[int, ...], str], bool]


def conv_signature(op) -> Tuple[Tuple[int, ...], Tuple[int, ...], Tuple[int, ...], str]:
    """``(input shape, filter shape, output shape, element dtype name)`` of a
    ``linalg.conv_2d_*`` op (operands 0, 1 and its init): what the conv rewrites' ``select``
    callbacks are given."""
    dtype = dtypes.from_ir_type(ir.RankedTensorType(op.operands[0].type).element_type)
    return tensor_shape(op.operands[0]), tensor_shape(op.operands[1]), tensor_shape(op.operands[2]), dtype


def chosen_algorithm(op) -> Optional[int]:
    """The :data:`~mlc_mlir.ir.module.CONV_ALGORITHM_ATTR` of a convolution op, or None."""
    if CONV_ALGORITHM_ATTR not in op.attributes:
        return None
    return ir.IntegerAttr(op.attributes[CONV_ALGORITHM_ATTR]).value
