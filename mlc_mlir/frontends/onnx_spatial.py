"""ONNX converters, spatial sampling and rearrangement: GridSample, DepthToSpace, SpaceToDepth,
Col2Im. Conventions as in :mod:`.onnx_ops`.

Source: ONNX operator spec (Operators.md), TVM Relax ``onnx_frontend.py``.
"""

from __future__ import annotations

from typing import List

from .. import ops
from .onnx_registry import OPSETS, NodeInputs, register, shape_of

#: GridSample-16's mode names -> the names of GridSample-20 and :func:`ops.grid_sample`
_GRID_MODES = {"bilinear": "linear", "bicubic": "cubic", "nearest": "nearest", "linear": "linear",
               "cubic": "cubic"}


@register("GridSample", opsets=(16, OPSETS[1]))
def _grid_sample(n: NodeInputs) -> List[object]:
    """``GridSample``: :func:`ops.grid_sample` (4-D input at opset 16, N-D from opset 20)."""
    x, grid = n.t(0), n.t(1)
    default = "bilinear" if n.opset < 20 else "linear"
    mode = n.str_attr("mode", default)
    allowed = ("bilinear", "nearest", "bicubic") if n.opset < 20 else ("linear", "nearest", "cubic")
    if mode not in allowed:
        raise n.fail(f"attribute 'mode' is {mode!r}; expected one of {list(allowed)} at opset {n.opset}")
    if n.opset < 20 and len(shape_of(x)) != 4:
        raise n.fail(f"input 'X' has shape {shape_of(x)}; expected (N, C, H, W) at opset {n.opset}")
    return [ops.grid_sample(x, grid, mode=_GRID_MODES[mode], padding_mode=n.str_attr("padding_mode", "zeros"),
                            align_corners=bool(n.attr("align_corners", 0)))]
