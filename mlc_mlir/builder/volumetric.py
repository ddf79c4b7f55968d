"""3-D (volumetric) window ops, NCDHW: ``conv3d``, ``max_pool3d``, ``avg_pool3d``, each a
composition of the 2-D ops of :mod:`.nn` over the kernel's depth taps.

Output depth plane ``od`` of a 3-D window op reads input planes ``od * SD + kd * DD`` for
``kd < KD``. So the op is, per depth tap ``kd``, the 2-D op applied to the strided depth slice
``x[:, :, kd * DD :: SD]`` with the depth folded into the batch (``(N * OD, C, H, W)``), and the
taps are combined elementwise (sum for convolution and average, maximum for max pooling). The
work is that of the direct 3-D op; each 2-D op gets the 2-D schedules (packing, Winograd, ...).

Source: the depth-tap decomposition of 3-D convolution (cuDNN's "3-D as a sum of 2-D
convolutions"), PyTorch ``Conv3d`` / ``MaxPool3d`` / ``AvgPool3d`` (NCDHW, weight FCDHW).
"""

from __future__ import annotations

from typing import Callable, List, Optional, Sequence

import numpy as np

from ..errors import BuildError, format_shape
from . import linalg_emit as emit
from .elementwise import add, maximum, multiply
from .nn import avg_pool2d, conv2d, max_pool2d
from .reduction import _lowest
from .shape import pad, permute, reshape, slice
from .tensor import Tensor


def _triple(op: str, arg: str, v, lo: int) -> List[int]:
    t = [int(v)] * 3 if isinstance(v, (int, np.integer)) else [int(e) for e in v]
    if len(t) == 1:
        t = t * 3
    if len(t) != 3 or min(t) < lo:
        raise BuildError(f"{op}: argument '{arg}' is {v!r}; expected an int or 3 ints, each >= {lo}")
    return t


def _pads(op: str, padding) -> List[int]:
    """``(front, top, left, back, bottom, right)`` from an int, 3 ints (symmetric) or 6 ints."""
    p = [int(padding)] * 3 if isinstance(padding, (int, np.integer)) else [int(e) for e in padding]
    if len(p) in (1, 3):
        p = (p * 3)[:3] * 2
    if len(p) != 6 or min(p) < 0:
        raise BuildError(f"{op}: argument 'padding' is {padding!r}; expected an int, 3 ints or 6 ints "
                         "(front, top, left, back, bottom, right), each >= 0")
    return p


def _taps(op: str, x: Tensor, kd: int, sd: int, pd: Sequence[int], dd: int, pad_value,
          plane: Callable[[Tensor, int], Tensor], combine) -> Tensor:
    """Apply ``plane(slice, tap)`` to the depth slice of every tap and ``combine`` the results;
    returns ``(N, C', OD, OH, OW)``."""
    if x.ndim != 5:
        raise BuildError(f"{op}: argument 'x' has shape {format_shape(x.shape)}; expected rank 5 (N, C, D, H, W)")
    n, c, d = x.shape[:3]
    span = dd * (kd - 1) + 1
    if span > d + sum(pd):
        raise BuildError(f"{op}: the depth window spans {span} (kernel {kd}, dilation {dd}); expected at most "
                         f"the padded input depth {d + sum(pd)}")
    od = (d + sum(pd) - span) // sd + 1
    xt = permute(x, (0, 2, 1, 3, 4))  # (N, D, C, H, W): a depth slice is then a batch of planes
    if any(pd):
        xt = pad(xt, [(0, 0), tuple(pd), (0, 0), (0, 0), (0, 0)], pad_value)
    acc = None
    for k in range(kd):
        s = slice(xt, [k * dd], [k * dd + (od - 1) * sd + 1], [sd], axes=[1])
        y = plane(reshape(s, (n * od, c) + tuple(x.shape[3:])), k)
        acc = y if acc is None else combine(acc, y)
    y = reshape(acc, (n, od) + tuple(acc.shape[1:]))
    return permute(y, (0, 2, 1, 3, 4))


def conv3d(x, weight, bias=None, strides=1, padding=0, dilation=1, groups: int = 1,
           name: Optional[str] = None) -> Tensor:
    """3-D convolution, NCDHW input and FCDHW weight (PyTorch ``Conv3d``, ONNX ``Conv`` with 3
    spatial dims): the sum over depth taps ``kd`` of :func:`~.nn.conv2d` of the strided depth
    slice (depth folded into the batch) with ``weight[:, :, kd]``.

    Parameters
    ----------
    x : Tensor (N, C, D, H, W)
        dtype in {float16, bfloat16, float32, float64, int8, int16, int32, int64}.
    weight : Tensor or numpy.ndarray (F, C/groups, KD, KH, KW), x's dtype
    bias : Tensor or numpy.ndarray (F,), optional
    strides, dilation : int or 3 ints, >= 1
    padding : int or 3 ints, >= 0 (symmetric zero padding per spatial dim)
    groups : int, divides C and F

    Returns
    -------
    Tensor (N, F, OD, OH, OW), ``OD = (D + 2 PD - DD (KD - 1) - 1) // SD + 1`` (same for H, W).

    Raises
    ------
    BuildError
        For a wrong rank or weight shape, bad strides/padding/dilation, or the errors of
        :func:`~.nn.conv2d` (dtype, groups, bias).
    """
    op = "conv3d"
    x = emit.tensor_arg(op, "x", x)
    ws = emit.operand_shape(op, "weight", weight, x.dtype)
    if len(ws) != 5:
        raise BuildError(f"{op}: argument 'weight' has shape {format_shape(ws)}; expected rank 5 "
                         "(F, C/groups, KD, KH, KW)")
    (sd, sh, sw), (pd, ph, pw) = _triple(op, "strides", strides, 1), _triple(op, "padding", padding, 0)
    pd = (pd, pd)
    dd, dh, dw = _triple(op, "dilation", dilation, 1)
    nm = emit.op_name(x.fn, op, name)

    def tap(k: int):
        if isinstance(weight, Tensor):
            return reshape(slice(weight, [k], [k + 1], axes=[2]), ws[:2] + ws[3:])
        return np.ascontiguousarray(np.asarray(weight)[:, :, k])

    y = _taps(op, x, ws[2], sd, pd, dd, 0,
              lambda s, k: conv2d(s, tap(k), None, (sh, sw), (ph, pw), (dh, dw), groups, name=f"{nm}.tap{k}"),
              add)
    if bias is not None:
        b = reshape(bias, (ws[0], 1, 1, 1)) if isinstance(bias, Tensor) else np.reshape(bias, (ws[0], 1, 1, 1))
        y = add(y, b, name=f"{nm}.bias_add")
    return y


def max_pool3d(x, kernel_size: Sequence[int], strides=None, padding=0, dilation=1,
               name: Optional[str] = None) -> Tensor:
    """3-D max pooling, NCDHW (PyTorch ``MaxPool3d`` without ``ceil_mode``): the elementwise
    maximum over depth taps of :func:`~.nn.max_pool2d` of the strided depth slices; depth
    padding holds the dtype's lowest value.

    Parameters
    ----------
    x : Tensor (N, C, D, H, W), float or int dtype
    kernel_size : int or 3 ints, >= 1
    strides : int or 3 ints (default ``kernel_size``)
    padding : int, 3 ints (symmetric) or 6 ints (front, top, left, back, bottom, right), >= 0
    dilation : int or 3 ints, >= 1

    Returns
    -------
    Tensor (N, C, OD, OH, OW), x's dtype.

    Raises
    ------
    BuildError
        For a wrong rank, a bad window argument or a window larger than the padded input.
    """
    op = "max_pool3d"
    x = emit.tensor_arg(op, "x", x)
    kd, kh, kw = _triple(op, "kernel_size", kernel_size, 1)
    sd, sh, sw = _triple(op, "strides", kernel_size if strides is None else strides, 1)
    p = _pads(op, padding)
    dd, dh, dw = _triple(op, "dilation", dilation, 1)
    nm = emit.op_name(x.fn, op, name)
    return _taps(op, x, kd, sd, (p[0], p[3]), dd, _lowest(x.dtype),
                 lambda s, k: max_pool2d(s, (kh, kw), (sh, sw), (p[1], p[2], p[4], p[5]), (dh, dw),
                                         name=f"{nm}.tap{k}"),
                 maximum)


def avg_pool3d(x, kernel_size: Sequence[int], strides=None, padding=0, name: Optional[str] = None) -> Tensor:
    """3-D average pooling, NCDHW, padding counted in the divisor (PyTorch ``AvgPool3d`` with
    ``count_include_pad=True``): the sum over depth taps of :func:`~.nn.avg_pool2d` of the
    strided depth slices, divided by ``KD``.

    Parameters, returns and errors as :func:`max_pool3d`, for a float ``x`` (a BuildError
    otherwise), without ``dilation``, and with ``padding`` an int or 3 ints >= 0 (zeros, counted).
    """
    op = "avg_pool3d"
    x = emit.tensor_arg(op, "x", x)
    kd, kh, kw = _triple(op, "kernel_size", kernel_size, 1)
    sd, sh, sw = _triple(op, "strides", kernel_size if strides is None else strides, 1)
    pd, ph, pw = _triple(op, "padding", padding, 0)
    nm = emit.op_name(x.fn, op, name)
    y = _taps(op, x, kd, sd, (pd, pd), 1, 0,
              lambda s, k: avg_pool2d(s, (kh, kw), (sh, sw), (ph, pw), count_include_pad=True,
                                      name=f"{nm}.tap{k}"), add)
    return multiply(y, 1.0 / kd, name=nm)
