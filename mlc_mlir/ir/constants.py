"""Weights as MLIR attributes: numpy arrays become ``dense_resource`` blobs (never IR text).

The blob keeps a reference to the numpy buffer for the lifetime of the context, so building a
module with 100 MB of weights neither copies them through text nor prints them.
"""

from __future__ import annotations

import numpy as np

from .._mlir import ir
from . import dtypes


def is_splat_view(array: np.ndarray) -> bool:
    """Whether ``array`` is a zero-stride view of one value (``np.broadcast_to(scalar, shape)``,
    e.g. ONNX ``ConstantOfShape``) with more than one element: it becomes a splat attribute
    and is never materialized."""
    return array.size > 1 and all(s == 0 for s in array.strides)


def elements_attr(array: np.ndarray, blob_name: str) -> ir.Attribute:
    """An elements attribute holding ``array``: ``DenseElementsAttr`` for scalars, bools and
    splat views (:func:`is_splat_view`, a splat ``dense<v>`` that stores one element),
    ``DenseResourceElementsAttr`` (named ``blob_name``, uniqued by MLIR on collision) otherwise.

    Needs an active context. Raises ``BuildError`` for unsupported dtypes.
    """
    dtype = dtypes.canonical_dtype(array.dtype)
    if is_splat_view(array) and dtype != "bool":
        t = ir.RankedTensorType.get(list(array.shape), dtypes.to_ir_type(dtype))
        v, et = array[(0,) * array.ndim], dtypes.to_ir_type(dtype)
        elt = ir.IntegerAttr.get(et, int(v)) if isinstance(et, ir.IntegerType) else ir.FloatAttr.get(et, float(v))
        return ir.DenseElementsAttr.get_splat(t, elt)
    # ascontiguousarray makes a 0-d array 1-d: keep the shape
    arr = np.ascontiguousarray(array, dtype=dtypes.to_numpy_dtype(dtype)).reshape(np.shape(array))
    t = ir.RankedTensorType.get(list(arr.shape), dtypes.to_ir_type(dtype))
    if dtype == "bool":
        return ir.DenseElementsAttr.get(np.packbits(arr.reshape(-1), bitorder="little"), type=t)
    if arr.size <= 1:
        return ir.DenseElementsAttr.get(arr, type=t)
    return ir.DenseResourceElementsAttr.get_from_buffer(
        memoryview(arr.reshape(-1).view(np.uint8)), blob_name, t, alignment=64)
