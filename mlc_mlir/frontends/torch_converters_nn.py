"""Converters of core ATen nn ops beyond :mod:`.torch_converters`: group and instance
normalization (statistics of the input itself) and 3-D pooling. Conventions as in
:mod:`.torch_converters`; the statistics outputs of the ``native_*`` ops are None.

Source: PyTorch ``native_functions.yaml`` (``native_group_norm``,
``_native_batch_norm_legit.no_stats``, ``max_pool3d_with_indices``, ``avg_pool3d``),
Wu & He, "Group Normalization" (2018); Ulyanov et al., "Instance Normalization" (2016).
"""

from __future__ import annotations

from .. import ops
from ..builder import Tensor
from ..errors import BuildError
from .torch_converters import _ints, _tensor, arg, ceil_mode_pad, register_converter


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
    ``scale_factors`` the scales (PyTorch maps coordinates by them), else the output size."""
    x = _tensor(str(node.target), "input", args[0])
    bilinear = "bilinear" in str(node.target)
    size = arg(ctx, args, 1, "output_size")
    scales = arg(ctx, args, 3 if bilinear else 2, "scale_factors")
    kw = dict(sizes=_ints(size)) if scales is None else dict(scales=[float(s) for s in scales])
    if bilinear:
        mode = "align_corners" if arg(ctx, args, 2, "align_corners", False) else "pytorch_half_pixel"
        return ops.resize(x, mode="linear", coordinate_transformation_mode=mode, axes=[2, 3], **kw)
    return ops.resize(x, mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor",
                      axes=[2, 3], **kw)
