"""ONNX converters, reduction family: ReduceSum/Mean/Max/Min (and the derived ReduceL1/L2,
ReduceProd, ReduceLogSum...), ArgMax/ArgMin, CumSum. Conventions as in :mod:`.onnx_ops`.

Source: ONNX operator spec (Operators.md), TVM Relax ``onnx_frontend.py``.
"""

from __future__ import annotations

from typing import List

import numpy as np

from .. import ops
from ..builder import Tensor
from .onnx_registry import (  # noqa: F401
    ONNX_BOOL, ONNX_DTYPES, NodeInputs, axes_input, dtype_of, np_dtype, register, same_dtype, shape_of,
)


# ------------------------------------------------------------------------------- reductions
_REDUCE = {"ReduceSum": ops.sum, "ReduceMean": ops.mean, "ReduceMax": ops.max, "ReduceMin": ops.min}


@register(*_REDUCE)
def _reduce(n: NodeInputs) -> List[object]:
    x = n.t(0)
    since = 13 if n.node.op_type == "ReduceSum" else 18
    axes = axes_input(n, since)
    keep = bool(n.attr("keepdims", 1))
    if axes is not None and len(axes) == 0:
        axes = None
    if axes is None and n.attr("noop_with_empty_axes", 0):
        return [x]
    fn = _REDUCE[n.node.op_type]
    if n.node.op_type == "ReduceSum":
        return [fn(x, axis=None if axes is None else tuple(axes), keepdims=keep, dtype=dtype_of(x))]
    return [fn(x, axis=None if axes is None else tuple(axes), keepdims=keep)]


@register("ArgMax")
def _argmax(n: NodeInputs) -> List[object]:
    if n.attr("select_last_index", 0):
        raise n.fail("attribute 'select_last_index' is 1; expected 0")
    return [ops.argmax(n.t(0), axis=int(n.attr("axis", 0)), keepdims=bool(n.attr("keepdims", 1)))]
