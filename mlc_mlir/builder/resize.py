"""``resize``: nearest, linear and cubic interpolation of any axes (ONNX ``Resize``, TOPI
``image.resize``, PyTorch ``interpolate``), built from ``take`` and ``einsum``.

Every ONNX resize is separable: along one axis, output ``o`` is a fixed combination of a few
input elements (``coeffs . x[neighbours(o)]``, edges repeated) or, for ``tf_crop_and_resize``
outside the crop, the extrapolation value. Shapes are static, so the combinations are computed
here with numpy as an ``(out, in)`` interpolation matrix ``R`` per axis
(:func:`interpolation_matrix`), and the axes are resized one after the other, first to last,
as in the ONNX reference implementation:

* ``nearest``: each row of ``R`` has a single 1, so the axis is a ``take`` of the selected
  indices (exact, for every dtype);
* ``linear`` / ``cubic``: ``einsum`` of ``x`` with ``R`` along the axis (one ``linalg.generic``
  contraction; floating dtypes);
* rows outside the crop box take ``extrapolation_value`` (``where``).

Source: the ONNX ``Resize`` specification (opsets 11-19: coordinate transformation modes,
nearest modes, cubic coefficient ``A``, ``exclude_outside``, ``antialias``, ``axes``,
``keep_aspect_ratio_policy``); Keys (1981) for the cubic kernel.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence, Tuple

import numpy as np

from ..errors import BuildError, format_shape
from ..ir import dtypes
from .einsum import einsum
from .linalg_emit import constant_op, empty
from .math_ops import where
from .take import take
from .tensor import Tensor

MODES = ("nearest", "linear", "cubic")
COORDINATE_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
                    "asymmetric", "tf_crop_and_resize")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def _source_coordinate(o: int, in_len: int, out_len: int, scale: float, mode: str,
                       roi: Tuple[float, float]) -> float:
    """The input coordinate of output index ``o`` (ONNX ``coordinate_transformation_mode``);
    ``out_width = scale * in_len`` is the unrounded output length."""
    out_width = scale * in_len
    if mode == "align_corners":
        return 0.0 if out_width == 1 else o * (in_len - 1) / (out_width - 1)
    if mode == "asymmetric":
        return o / scale
    if mode == "tf_crop_and_resize":
        start, end = roi
        if out_width == 1:
            return (end - start) * (in_len - 1) / 2 + start * (in_len - 1)
        return o * (end - start) * (in_len - 1) / (out_width - 1) + start * (in_len - 1)
    if mode == "pytorch_half_pixel":
        return -0.5 if out_width == 1 else (o + 0.5) / scale - 0.5
    if mode == "half_pixel":
        return (o + 0.5) / scale - 0.5
    # half_pixel_symmetric: the centre of the input maps to the centre of the output canvas
    offset = in_len / 2 * (1 - out_len / out_width)
    return offset + (o + 0.5) / scale - 0.5


def _coefficients(ratio: float, scale: float, mode: str, nearest_mode: str, a: float,
                  antialias: bool) -> np.ndarray:
    """Weights of the neighbours of a coordinate whose fractional part is ``ratio`` in (0, 1]."""
    if mode == "nearest":
        if float(ratio).is_integer():
            return np.array([0.0, 1.0])
        take_right = {"round_prefer_floor": ratio > 0.5, "round_prefer_ceil": ratio >= 0.5,
                      "floor": False, "ceil": True}[nearest_mode]
        return np.array([0.0, 1.0]) if take_right else np.array([1.0, 0.0])
    if mode == "linear":
        if not antialias:
            return np.array([1 - ratio, ratio])
        s = min(scale, 1.0)
        start = int(np.floor(-1 / s) + 1)
        args = (np.arange(start, 2 - start) - ratio) * s
        w = np.clip(1 - np.abs(args), 0, 1)
        return w / w.sum()

    def keys(t: float) -> float:   # the cubic convolution kernel with parameter a
        t = abs(t)
        if t <= 1:
            return (a + 2) * t ** 3 - (a + 3) * t ** 2 + 1
        return a * t ** 3 - 5 * a * t ** 2 + 8 * a * t - 4 * a if t < 2 else 0.0

    if not antialias:
        return np.array([keys(ratio + 1), keys(ratio), keys(1 - ratio), keys(2 - ratio)])
    s = min(scale, 1.0)
    start = int(np.floor(-2 / s) + 1)
    w = np.array([keys(s * (i - ratio)) for i in range(start, 2 - start)])
    return w / w.sum()


def interpolation_matrix(in_len: int, out_len: int, scale: float, mode: str = "nearest",
                         coordinate_mode: str = "half_pixel",
                         nearest_mode: str = "round_prefer_floor", cubic_coeff_a: float = -0.75,
                         exclude_outside: bool = False, antialias: bool = False,
                         roi: Tuple[float, float] = (0.0, 1.0)) -> Tuple[np.ndarray, np.ndarray]:
    """The 1-D resize along one axis as ``(R, outside)``: ``R`` float64 ``(out_len, in_len)``
    with ``out = R @ in``, and ``outside`` bool ``(out_len,)``: the rows outside a
    ``tf_crop_and_resize`` crop box (all-zero rows of ``R``; they take the extrapolation value).

    For each output index: its input coordinate ``x`` (the coordinate mode), the ``n`` nearest
    integers to ``x`` (ties to the smaller), their weights from the fractional part of ``x``
    (in (0, 1]; ``n`` = 2 for nearest and linear, 4 for cubic, wider with ``antialias`` when
    downsampling), and neighbours beyond the edges clamped to the edges (``exclude_outside``:
    dropped and the weights renormalized).
    """
    r = np.zeros((out_len, in_len))
    outside = np.zeros(out_len, dtype=bool)
    for o in range(out_len):
        x = _source_coordinate(o, in_len, out_len, scale, coordinate_mode, roi)
        if coordinate_mode == "tf_crop_and_resize" and (x < 0 or x > in_len - 1):
            outside[o] = True
            continue
        base = math.floor(x)
        ratio = 1.0 if float(x).is_integer() else x - base
        w = _coefficients(ratio, scale, mode, nearest_mode, cubic_coeff_a, antialias)
        n = len(w)
        # the n nearest integers to x, preferring smaller ones: with ratio in (0, 1] they start
        # at floor(x - ratio) - (n // 2 - 1), i.e. the neighbours x - ratio - n/2 + 1 ... x - ratio + n/2
        first = int(round(x - ratio)) - (n // 2 - 1)
        idx = np.arange(first, first + n)
        if exclude_outside:
            keep = (idx >= 0) & (idx < in_len)
            w = np.where(keep, w, 0.0)
            w = w / w.sum()
        for i, c in zip(np.clip(idx, 0, in_len - 1), w):
            r[o, i] += c
    return r, outside


def _output_sizes(op: str, shape, axes, sizes, scales, policy: str):
    """Per-axis output lengths and scales from ``sizes`` or ``scales`` (ONNX rules)."""
    if (sizes is None) == (scales is None):
        raise BuildError(f"{op}: give exactly one of 'sizes' and 'scales'")
    if sizes is not None:
        sizes = [int(s) for s in sizes]
        if len(sizes) != len(axes) or min(sizes) < 1:
            raise BuildError(f"{op}: argument 'sizes' is {sizes}; expected {len(axes)} positive ints")
        empty_axes = [a for a in axes if shape[a] == 0]
        if empty_axes:
            raise BuildError(f"{op}: x {format_shape(shape)} is empty along axes {empty_axes}; expected "
                             "non-empty axes to resize to 'sizes' (values from no input)")
        scl = [sizes[i] / shape[a] for i, a in enumerate(axes)]
        if policy == "stretch":
            return sizes, scl
        s = min(scl) if policy == "not_larger" else max(scl)
        return [int(s * shape[a] + 0.5) for a in axes], [s] * len(axes)
    scales = [float(s) for s in scales]
    if len(scales) != len(axes) or min(scales) <= 0:
        raise BuildError(f"{op}: argument 'scales' is {scales}; expected {len(axes)} positive numbers")
    return [int(s * shape[a]) for s, a in zip(scales, axes)], scales


def resize(x, sizes: Optional[Sequence[int]] = None, scales: Optional[Sequence[float]] = None,
           mode: str = "nearest", coordinate_transformation_mode: str = "half_pixel",
           nearest_mode: str = "round_prefer_floor", cubic_coeff_a: float = -0.75,
           exclude_outside: bool = False, extrapolation_value: float = 0.0,
           antialias: bool = False, roi: Optional[Sequence[float]] = None,
           axes: Optional[Sequence[int]] = None, keep_aspect_ratio_policy: str = "stretch",
           name: Optional[str] = None) -> Tensor:
    """Resize ``x`` along ``axes`` to ``sizes`` or by ``scales`` (ONNX ``Resize`` semantics; see
    the module docstring for how it is emitted).

    Parameters
    ----------
    x : Tensor, any rank >= 1
        Any dtype for ``nearest``; float16/bfloat16/float32/float64 for ``linear``/``cubic``.
    sizes : sequence of int, optional
        Output length per axis of ``axes`` (with ``keep_aspect_ratio_policy``).
    scales : sequence of float, optional
        Scale per axis; output length ``floor(scale * length)``. Exactly one of the two.
    mode, coordinate_transformation_mode, nearest_mode : str
        One of :data:`MODES`, :data:`COORDINATE_MODES`, :data:`NEAREST_MODES`.
    cubic_coeff_a, exclude_outside, antialias : cubic kernel parameter, edge and downsampling
        filter options (``antialias`` only for linear/cubic).
    extrapolation_value : float
        Output outside the ``tf_crop_and_resize`` box.
    roi : sequence of float, optional
        ``starts + ends`` (normalized, one pair per axis of ``axes``) for ``tf_crop_and_resize``.
    axes : sequence of int, optional
        Default: all axes, in order.
    keep_aspect_ratio_policy : str
        ``stretch``, ``not_larger`` or ``not_smaller`` (with ``sizes``).

    Returns
    -------
    Tensor of ``x``'s dtype; the resized axes have their new lengths.

    Raises
    ------
    BuildError
        For an unknown mode, bad axes, sizes or scales of the wrong length, both or neither of
        sizes/scales, a missing roi for ``tf_crop_and_resize``, antialiased nearest, or
        linear/cubic on an integer tensor.
    """
    op = "resize"
    if not isinstance(x, Tensor):
        raise BuildError(f"{op}: argument 'x' is {type(x).__name__}; expected a Tensor")
    for arg, v, allowed in (("mode", mode, MODES),
                            ("coordinate_transformation_mode", coordinate_transformation_mode,
                             COORDINATE_MODES),
                            ("nearest_mode", nearest_mode, NEAREST_MODES),
                            ("keep_aspect_ratio_policy", keep_aspect_ratio_policy,
                             ("stretch", "not_larger", "not_smaller"))):
        if v not in allowed:
            raise BuildError(f"{op}: argument '{arg}' is {v!r}; expected one of {list(allowed)}")
    if mode == "nearest" and antialias:
        raise BuildError(f"{op}: antialias applies to linear and cubic modes, not nearest")
    if mode != "nearest" and not dtypes.is_float(x.dtype):
        raise BuildError(f"{op}: {mode} mode needs a floating tensor; x has dtype {x.dtype}")
    rank = len(x.shape)
    axes = list(range(rank)) if axes is None else [a + rank if a < 0 else a for a in axes]
    if sorted(set(axes)) != sorted(axes) or any(not 0 <= a < rank for a in axes):
        raise BuildError(f"{op}: argument 'axes' is {list(axes)}; expected distinct axes of a "
                         f"rank-{rank} tensor {format_shape(x.shape)}")
    out_lens, scl = _output_sizes(op, x.shape, axes, sizes, scales, keep_aspect_ratio_policy)
    if coordinate_transformation_mode == "tf_crop_and_resize":
        if roi is None or len(roi) != 2 * len(axes):
            raise BuildError(f"{op}: tf_crop_and_resize needs 'roi' with {2 * len(axes)} values "
                             f"(starts, ends); got {None if roi is None else list(roi)}")
        boxes = {a: (float(roi[i]), float(roi[len(axes) + i])) for i, a in enumerate(axes)}
    else:
        boxes = {a: (0.0, 1.0) for a in axes}
    if 0 in x.shape:  # numpy's empty arrays: nothing to interpolate, nothing to interpolate from
        out_shape = list(x.shape)
        for a, n_out in zip(axes, out_lens):
            out_shape[a] = n_out
        if 0 not in out_shape:
            raise BuildError(f"{op}: x {format_shape(x.shape)} is empty; expected an output with no "
                             f"element too, got {format_shape(out_shape)} (values from no input)")
        return Tensor(empty(out_shape, x.dtype), x.fn)
    npdt = np.float32 if x.dtype == "bfloat16" else dtypes.to_numpy_dtype(x.dtype)
    y = x
    for a, n_out, s in sorted(zip(axes, out_lens, scl)):
        n_in = x.shape[a]
        if n_out == n_in and math.isclose(s, 1.0) and boxes[a] == (0.0, 1.0):
            continue
        r, outside = interpolation_matrix(n_in, n_out, s, mode, coordinate_transformation_mode,
                                          nearest_mode, cubic_coeff_a, exclude_outside,
                                          antialias, boxes[a])
        if mode == "nearest":
            y = take(y, r.argmax(axis=1).astype(np.int64), axis=a)
        else:
            letters = "abcdefghijklmnopqrstuvwxyz"[:rank]
            new = "z" if "z" not in letters else "y"
            out = letters[:a] + new + letters[a + 1:]
            y = einsum(f"{letters},{new}{letters[a]}->{out}", y, constant_op(r.astype(npdt)))
        if outside.any():
            mask = outside.reshape([n_out if d == a else 1 for d in range(rank)]).astype(np.int8)
            y = where(mask, np.asarray(extrapolation_value).astype(npdt).item(), y)
    return y
