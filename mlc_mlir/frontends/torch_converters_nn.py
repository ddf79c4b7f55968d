"""Converters of core ATen nn ops beyond :mod:`.torch_converters`: group and instance
normalization (statistics of the input itself), 3-D pooling and adaptive average pooling of
any output size (2-D and 3-D). Conventions as in
:mod:`.torch_converters`; the statistics outputs of the ``native_*`` ops are None.

Source: PyTorch ``native_functions.yaml`` (``native_group_norm``,
``_native_batch_norm_legit.no_stats``, ``max_pool3d_with_indices``, ``avg_pool3d``),
Wu & He, "Group Normalization" (2018); Ulyanov et al., "Instance Normalization" (2016).
"""

from __future__ import annotations

import numpy as np

from .. import ops
from ..builder import Tensor
from ..errors import BuildError
from .torch_converters import _ints, _pair, _tensor, arg, ceil_mode_pad, register_converter


def _affine(y: Tensor, w, b) -> Tensor:
    """``y * w + b`` with per-channel (axis 1) ``w`` and ``b``, each optional."""
    shape = [y.shape[1]] + [1] * (y.ndim - 2)
    if w is not None:
        y = ops.multiply(y, ops.reshape(w, shape))
    if b is not None:
        y = ops.add(y, ops.reshape(b, shape))
    return y


@register_converter("aten.native_group_norm.default")
def _group_norm(ctx, node, args):
    """``layer_norm`` of ``x`` viewed as ``(N, G, C/G * spatial)``, then the per-channel affine."""
    x = _tensor("aten.native_group_norm", "input", args[0])
    w, b, groups, eps = args[1], args[2], int(args[6]), float(args[7])
    n, c = x.shape[:2]
    if c % groups:
        raise BuildError(f"aten.native_group_norm: argument 'group' is {groups}; expected a divisor of the "
                         f"{c} channels")
    y = ops.layer_norm(ops.reshape(x, [n, groups, -1]), None, None, axis=-1, eps=eps)
    return _affine(ops.reshape(y, list(x.shape)), w, b), None, None


@register_converter("aten._native_batch_norm_legit.no_stats")
def _batch_norm_no_stats(ctx, node, args):
    """Batch normalization with the input's own statistics over every axis but 1 (biased
    variance), as instance norm exports: ``(x - mean) * rsqrt(var + eps) * w + b``."""
    x = _tensor("aten._native_batch_norm_legit", "input", args[0])
    w, b = args[1], args[2]
    if not arg(ctx, args, 3, "training", True):
        raise BuildError("aten._native_batch_norm_legit.no_stats: argument 'training' is False; expected True "
                         "(there are no running statistics to use)")
    eps = float(arg(ctx, args, 5, "eps", 1e-5))
    axes = tuple(d for d in range(x.ndim) if d != 1)
    c = ops.subtract(x, ops.mean(x, axis=axes, keepdims=True))
    var = ops.mean(ops.multiply(c, c), axis=axes, keepdims=True)
    return _affine(ops.multiply(c, ops.rsqrt(ops.add(var, eps))), w, b), None, None


def _window3d(ctx, args, i_stride: int, i_pad: int):
    k = _ints(args[1])
    stride = _ints(arg(ctx, args, i_stride, "stride", []) or k)
    return k, stride, _ints(arg(ctx, args, i_pad, "padding", 0))


@register_converter("aten.max_pool3d_with_indices.default", "aten.max_pool3d.default", dtypes="float, int")
def _max_pool3d(ctx, node, args):
    """``ops.max_pool3d`` (2-D pooling per depth tap), ``ceil_mode`` as extra end padding; the
    indices output is not converted."""
    x = _tensor("aten.max_pool3d", "self", args[0])
    k, stride, pad = (v * 3 if len(v) == 1 else v for v in _window3d(ctx, args, 2, 3))
    dil = _ints(arg(ctx, args, 4, "dilation", 1))
    dil = dil * 3 if len(dil) == 1 else dil
    end = [p + (ceil_mode_pad(x.shape[2 + i], k[i], stride[i], p, dil[i]) if arg(ctx, args, 5, "ceil_mode", False)
                else 0) for i, p in enumerate(pad)]
    y = ops.max_pool3d(x, k, strides=stride, padding=list(pad) + end, dilation=dil)
    return (y, None) if str(node.target).startswith("aten.max_pool3d_with_indices") else y


@register_converter("aten.avg_pool3d.default")
def _avg_pool3d(ctx, node, args):
    """``ops.avg_pool3d``; ``count_include_pad=False`` only without padding (then the same)."""
    k, stride, pad = _window3d(ctx, args, 2, 3)
    if arg(ctx, args, 4, "ceil_mode", False) or arg(ctx, args, 6, "divisor_override") is not None:
        raise BuildError("aten.avg_pool3d: 'ceil_mode'/'divisor_override' are set; expected False/None")
    if not arg(ctx, args, 5, "count_include_pad", True) and any(pad):
        raise BuildError(f"aten.avg_pool3d: 'count_include_pad' is False with padding {pad}; expected "
                         "count_include_pad=True or no padding")
    return ops.avg_pool3d(args[0], k, strides=stride, padding=pad)


@register_converter("aten.upsample_nearest2d.vec", "aten.upsample_bilinear2d.vec")
def _upsample(ctx, node, args):
    """``ops.resize`` of H, W: nearest as ONNX ``asymmetric`` + ``floor``; bilinear with
    ``align_corners`` as ONNX ``align_corners``, else ``pytorch_half_pixel``. With
    ``scale_factors`` the scales (PyTorch maps coordinates by them), else the output size; with
    ``align_corners`` always the output size ``floor(n * scale)`` (PyTorch maps corners to
    corners of the integer size, ONNX by the unrounded ``n * scale``)."""
    x = _tensor(str(node.target), "input", args[0])
    bilinear = "bilinear" in str(node.target)
    size = arg(ctx, args, 1, "output_size")
    scales = arg(ctx, args, 3 if bilinear else 2, "scale_factors")
    corners = bilinear and bool(arg(ctx, args, 2, "align_corners", False))
    if scales is not None and corners:
        size = [int(np.floor(x.shape[2 + i] * float(s))) for i, s in enumerate(scales)]
        scales = None
    kw = dict(sizes=_ints(size)) if scales is None else dict(scales=[float(s) for s in scales])
    if bilinear:
        mode = "align_corners" if corners else "pytorch_half_pixel"
        return ops.resize(x, mode="linear", coordinate_transformation_mode=mode, axes=[2, 3], **kw)
    return ops.resize(x, mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor",
                      axes=[2, 3], **kw)


def _adaptive_matrix(n: int, out: int) -> np.ndarray:
    """``(out, n)`` float32 rows averaging PyTorch's adaptive windows ``[floor(o n / out),
    ceil((o + 1) n / out))``."""
    a = np.zeros((out, n), np.float32)
    for o in range(out):
        lo, hi = (o * n) // out, -((-(o + 1) * n) // out)
        a[o, lo:hi] = 1.0 / (hi - lo)
    return a


def adaptive_avg_pool(op: str, x: Tensor, output_size, dims: int) -> Tensor:
    """Adaptive average pooling of the last ``dims`` dims to ``output_size``: a box average is
    separable, so one ``ops.einsum`` per pooled dim with the window-averaging matrix
    (:func:`_adaptive_matrix`); windows of different sizes and overlapping ones included.

    Raises
    ------
    BuildError
        For a rank below ``dims + 1``, a symbolic pooled dim or an output size < 1.
    """
    out = _ints(output_size)
    out = out * dims if len(out) == 1 else out
    if x.ndim < dims + 1 or len(out) != dims or any(o is None or o < 1 for o in out):
        raise BuildError(f"{op}: argument 'output_size' is {out} for input {tuple(x.shape)}; expected {dims} "
                         f"sizes >= 1 for the last {dims} dims")
    letters = "abcdefgh"[:x.ndim]
    for i in range(dims):
        d = x.ndim - dims + i
        n = x.shape[d]
        if not isinstance(n, int):
            raise BuildError(f"{op}: dim {d} of the input is symbolic ({n}); expected a static size")
        if out[i] == n:
            continue
        if out[i] == 1:
            x = ops.mean(x, axis=(d,), keepdims=True)
            continue
        a = ops.constant(_adaptive_matrix(n, out[i]).astype(x.dtype))
        x = ops.einsum(f"{letters},z{letters[d]}->{letters[:d]}z{letters[d + 1:]}", x, a)
    return x


@register_converter("aten._adaptive_avg_pool3d.default", "aten.adaptive_avg_pool3d.default")
def _adaptive_avg_pool3d(ctx, node, args):
    """:func:`adaptive_avg_pool` of D, H, W."""
    return adaptive_avg_pool(str(node.target), _tensor(str(node.target), "self", args[0]), args[1], 3)


@register_converter("aten._adaptive_avg_pool2d.default", "aten.adaptive_avg_pool2d.default")
def _adaptive_avg_pool2d(ctx, node, args):
    """``global_avg_pool2d`` for 1x1, ``avg_pool2d`` when the output divides (H, W), else
    :func:`adaptive_avg_pool`; an unbatched ``(C, H, W)`` input gets a batch dim of 1."""
    x = _tensor("aten.adaptive_avg_pool2d", "self", args[0])
    if x.ndim == 3:
        return ops.squeeze(_adaptive_avg_pool2d(ctx, node, [ops.unsqueeze(x, [0])] + list(args[1:])), [0])
    oh, ow = _pair(args[1])
    h, w = x.shape[2:]
    if (oh, ow) == (1, 1):
        return ops.global_avg_pool2d(x)
    if isinstance(h, int) and isinstance(w, int) and h % oh == 0 and w % ow == 0:
        return ops.avg_pool2d(x, (h // oh, w // ow))
    return adaptive_avg_pool("aten.adaptive_avg_pool2d", x, [oh, ow], 2)


@register_converter("aten.avg_pool1d.default")
def _avg_pool1d(ctx, node, args):
    """``ops.avg_pool2d`` of ``(N, C, 1, L)`` with a ``(1, k)`` window."""
    x = _tensor("aten.avg_pool1d", "self", args[0])
    k = _ints(args[1])[0]
    stride = (_ints(arg(ctx, args, 2, "stride", []) or [k]))[0]
    pad = _ints(arg(ctx, args, 3, "padding", 0))[0]
    if arg(ctx, args, 4, "ceil_mode", False):
        raise BuildError("aten.avg_pool1d: 'ceil_mode' is True; expected False")
    y = ops.avg_pool2d(ops.unsqueeze(x, [x.ndim - 1]), (1, k), strides=(1, stride), padding=(0, pad),
                       count_include_pad=bool(arg(ctx, args, 5, "count_include_pad", True)))
    return ops.squeeze(y, [y.ndim - 2])


@register_converter("aten.adaptive_avg_pool1d.default")
def _adaptive_avg_pool1d(ctx, node, args):
    """:func:`adaptive_avg_pool` of the last dim."""
    return adaptive_avg_pool("aten.adaptive_avg_pool1d", _tensor("aten.adaptive_avg_pool1d", "self", args[0]),
                             args[1], 1)


#: ATen's GridSamplerInterpolation / GridSamplerPadding enums -> ops.grid_sample's names
_GRID_MODES = ("linear", "nearest", "cubic")
_GRID_PADDINGS = ("zeros", "border", "reflection")


@register_converter("aten.grid_sampler_2d.default", "aten.grid_sampler_3d.default")
def _grid_sampler(ctx, node, args):
    """``ops.grid_sample`` with ATen's enums (interpolation 0 bilinear, 1 nearest, 2 bicubic;
    padding 0 zeros, 1 border, 2 reflection)."""
    op = str(node.target)
    x, grid = _tensor(op, "input", args[0]), _tensor(op, "grid", args[1])
    mode, pad = int(arg(ctx, args, 2, "interpolation_mode", 0)), int(arg(ctx, args, 3, "padding_mode", 0))
    want = 4 if "2d" in op else 5
    if x.ndim != want or not 0 <= mode < 3 or not 0 <= pad < 3:
        raise BuildError(f"{op}: input {tuple(x.shape)}, interpolation_mode {mode}, padding_mode {pad}; expected "
                         f"a rank-{want} input and enums in [0, 2]")
    return ops.grid_sample(x, grid, mode=_GRID_MODES[mode], padding_mode=_GRID_PADDINGS[pad],
                           align_corners=bool(arg(ctx, args, 4, "align_corners", False)))


@register_converter("aten.col2im.default")
def _col2im(ctx, node, args):
    """``ops.col2im`` (``torch.nn.functional.fold``) of a batched ``(N, C*kh*kw, L)`` or
    unbatched ``(C*kh*kw, L)`` input; symmetric padding."""
    x = _tensor("aten.col2im", "self", args[0])
    two = [arg(ctx, args, i, n) for i, n in ((1, "output_size"), (2, "kernel_size"), (3, "dilation"),
                                                (4, "padding"), (5, "stride"))]
    size, k, dil, pad, stride = (_pair(v) for v in two)
    if x.ndim == 2:
        return ops.squeeze(ops.col2im(ops.unsqueeze(x, [0]), size, k, stride, pad, dil), [0])
    return ops.col2im(x, size, k, strides=stride, pads=pad, dilations=dil)


@register_converter("aten._embedding_bag.default", "aten._embedding_bag_forward_only.default")
def _embedding_bag(ctx, node, args):
    """``ops.embedding_bag`` (mode 0 sum, 1 mean, 2 max; ``padding_idx`` -1 is none); the
    ``offset2bag``, ``bag_size`` and ``max_indices`` outputs are None."""
    op = str(node.target)
    mode = int(arg(ctx, args, 4, "mode", 0))
    if mode not in (0, 1, 2):
        raise BuildError(f"{op}: argument 'mode' is {mode}; expected 0 (sum), 1 (mean) or 2 (max)")
    pad = arg(ctx, args, 8, "padding_idx", -1)
    y = ops.embedding_bag(args[0], args[1], args[2], mode=("sum", "mean", "max")[mode],
                          per_sample_weights=arg(ctx, args, 6, "per_sample_weights"),
                          include_last_offset=bool(arg(ctx, args, 7, "include_last_offset", False)),
                          padding_idx=None if pad is None or int(pad) < 0 else int(pad))
    return y, None, None, None
