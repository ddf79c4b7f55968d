"""ONNX converters, spatial sampling and rearrangement: GridSample, AffineGrid, DepthToSpace,
SpaceToDepth, Col2Im. Conventions as in :mod:`.onnx_ops`.

Source: ONNX operator spec (Operators.md), TVM Relax ``onnx_frontend.py``.
"""

from __future__ import annotations

from typing import List

import numpy as np

from .. import ops
from .onnx_registry import OPSETS, NodeInputs, np_dtype, register, shape_of

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


def _base_coordinates(size: int, align_corners: bool) -> np.ndarray:
    """Normalized coordinates of ``size`` pixels: their centres in ``[-1, 1]`` (``-1`` and ``1``
    the outer edges), or ``linspace(-1, 1)`` with ``align_corners`` (the corner centres)."""
    if align_corners:
        return np.linspace(-1.0, 1.0, size) if size > 1 else np.zeros(1)
    return (2.0 * np.arange(size) + 1.0) / size - 1.0


@register("AffineGrid", opsets=(20, OPSETS[1]))
def _affine_grid(n: NodeInputs) -> List[object]:
    """``grid[n, p] = theta[n] @ (x_p, y_p, [z_p,] 1)`` over the output pixels ``p`` (x along the
    last axis): one ``einsum`` of ``theta`` with the constant homogeneous base grid."""
    theta = n.t(0)
    size = [int(v) for v in n.np(1, "size")]
    d = len(size) - 2
    if d not in (2, 3) or tuple(shape_of(theta)[1:]) != (d, d + 1) or min(size[2:]) < 1:
        raise n.fail(f"inputs 'theta' {shape_of(theta)} and 'size' {size}; expected (N, 2, 3) with (N, C, H, W) "
                     "or (N, 3, 4) with (N, C, D, H, W), spatial sizes >= 1")
    align = bool(n.attr("align_corners", 0))
    axes = np.meshgrid(*[_base_coordinates(s, align) for s in size[2:]], indexing="ij")  # (D,) H, W each
    base = np.stack(list(axes[::-1]) + [np.ones_like(axes[0])], axis=-1).reshape(-1, d + 1)  # x first
    grid = ops.einsum("nij,pj->npi", theta, ops.constant(base.astype(np_dtype(theta))))
    return [ops.reshape(grid, (shape_of(theta)[0],) + tuple(size[2:]) + (d,))]


def _blocks(n: NodeInputs, x):
    """``(shape, blocksize)`` of a DepthToSpace/SpaceToDepth node on ``(N, C, H, W)``."""
    shape, b = shape_of(x), int(n.attr("blocksize"))
    if len(shape) != 4 or b < 1:
        raise n.fail(f"input 'input' has shape {shape} with blocksize {b}; expected (N, C, H, W) and blocksize >= 1")
    return shape, b


@register("DepthToSpace")
def _depth_to_space(n: NodeInputs) -> List[object]:
    """``DCR`` (depth, column, row: the default) or ``CRD`` channel order, as the spec's
    reshape - transpose - reshape."""
    x = n.t(0)
    (bn, c, h, w), b = _blocks(n, x)
    if c % (b * b):
        raise n.fail(f"input 'input' has {c} channels; expected a multiple of blocksize^2 = {b * b}")
    mode = n.str_attr("mode", "DCR")
    if mode == "DCR":
        t = ops.permute(ops.reshape(x, (bn, b, b, c // (b * b), h, w)), (0, 3, 4, 1, 5, 2))
    elif mode == "CRD":
        t = ops.permute(ops.reshape(x, (bn, c // (b * b), b, b, h, w)), (0, 1, 4, 2, 5, 3))
    else:
        raise n.fail(f"attribute 'mode' is {mode!r}; expected 'DCR' or 'CRD'")
    return [ops.reshape(t, (bn, c // (b * b), h * b, w * b))]


@register("SpaceToDepth")
def _space_to_depth(n: NodeInputs) -> List[object]:
    """The inverse of ``DepthToSpace`` in the same ``mode`` (``DCR``, the default, or
    ``CRD``): reshape - transpose - reshape."""
    x = n.t(0)
    (bn, c, h, w), b = _blocks(n, x)
    if h % b or w % b:
        raise n.fail(f"input 'input' has shape {(bn, c, h, w)}; expected H and W multiples of blocksize {b}")
    mode = n.str_attr("mode", "DCR")
    if mode not in ("DCR", "CRD"):
        raise n.fail(f"attribute 'mode' is {mode!r}; expected 'DCR' or 'CRD'")
    perm = (0, 3, 5, 1, 2, 4) if mode == "DCR" else (0, 1, 3, 5, 2, 4)
    t = ops.permute(ops.reshape(x, (bn, c, h // b, b, w // b, b)), perm)
    return [ops.reshape(t, (bn, c * b * b, h // b, w // b))]


@register("Col2Im", opsets=(18, OPSETS[1]))
def _col2im(n: NodeInputs) -> List[object]:
    """``Col2Im``: :func:`ops.col2im` with the constant ``image_shape`` and ``block_shape``."""
    image = [int(v) for v in n.np(1, "image_shape")]
    block = [int(v) for v in n.np(2, "block_shape")]
    d = len(image)
    return [ops.col2im(n.t(0), image, block, strides=n.attr("strides", [1] * d),
                       pads=n.attr("pads", [0] * (2 * d)), dilations=n.attr("dilations", [1] * d))]
