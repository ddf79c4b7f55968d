"""from_torch converters, one small program per ATen op, against PyTorch eager: values (1e-5
relative), shapes and dtypes (a bool result arrives as the builder's int8 0/1 mask), including
PyTorch's type promotion for mixed int/float/bool operands. Also checks that every converter of
:mod:`torch_converters_math` / ``_nn`` / ``_shape`` is reached by some case, and that
``docs/torch_ops.md`` is the rendering of the current registry."""

import pathlib

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn, F = torch.nn, torch.nn.functional

import mlc_mlir as mlc  # noqa: E402
from mlc_mlir.errors import BuildError  # noqa: E402
from mlc_mlir.frontends import (torch_converters_create, torch_converters_math, torch_converters_nn,  # noqa: E402
                                torch_converters_shape)
from mlc_mlir.frontends.torch import decomposition_table, from_exported_program  # noqa: E402
from mlc_mlir.frontends.torch_converters import CONVERTERS  # noqa: E402
from mlc_mlir.frontends.torch_table import render_table  # noqa: E402

g = torch.Generator().manual_seed(0)


def randn(*s):
    return torch.randn(*s, generator=g)


def randint(lo, hi, *s):
    return torch.randint(lo, hi, s, generator=g)


class Fn(nn.Module):
    def __init__(self, f):
        super().__init__()
        self.f = f

    def forward(self, *a):
        return self.f(*a)


def _with_nan(x):
    x = x.clone()
    x.view(-1)[::5] = float("nan")
    return x


# name -> (callable or module, inputs)
CASES = {
    "abs": (lambda x: x.abs(), (randn(3, 4),)),
    "linalg_det": (lambda x: torch.linalg.det(x) + 1.0, (randn(2, 3, 5, 5),)),
    "abs_int": (lambda x: x.abs(), (randint(-9, 9, 3, 4),)),
    "log1p": (lambda x: torch.log1p(x.abs()), (randn(3, 4),)),
    "log1p_tiny": (lambda x: torch.log1p(x), (randn(64) * 1e-7,)),
    "expm1": (lambda x: torch.expm1(x), (randn(3, 4),)),
    "reciprocal": (lambda x: torch.reciprocal(x), (randn(3, 4),)),
    "sign": (lambda x: torch.sign(x), (_with_nan(randn(4, 5)),)),
    "sign_int": (lambda x: torch.sign(x), (randint(-3, 3, 4, 5),)),
    "leaky_relu": (lambda x: F.leaky_relu(x, 0.2), (randn(3, 4),)),
    "elu": (lambda x: F.elu(x, 0.7), (randn(3, 4),)),
    "selu": (lambda x: F.selu(x), (randn(3, 4),)),
    "hardtanh": (lambda x: F.hardtanh(x, -0.5, 0.5), (randn(3, 4),)),
    "pow3": (lambda x: x ** 3, (randn(3, 4),)),
    "pow7": (lambda x: x ** 7, (randn(3, 4),)),
    "pow_neg2": (lambda x: x ** -2, (randn(3, 4) + 3,)),
    "pow0": (lambda x: x ** 0, (randn(3, 4),)),
    "pow_2_5": (lambda x: x.abs() ** 2.5, (randn(3, 4),)),
    "pow_sqrt": (lambda x: x.abs() ** 0.5, (randn(3, 4),)),
    "pow_int": (lambda x: x ** 3, (randint(-5, 5, 3, 4),)),
    "pow_tensor": (lambda x, y: x.abs() ** y, (randn(3, 4), randn(3, 4))),
    "pow_scalar_base": (lambda x: 2.0 ** x, (randn(3, 4),)),
    "gt_scalar": (lambda x: x > 0.5, (_with_nan(randn(3, 5)),)),
    "ge_scalar": (lambda x: x >= 0.1, (randn(3, 4),)),
    "lt_tensor": (lambda x, y: x < y, (randn(3, 4), randn(4))),
    "le_tensor": (lambda x, y: x <= y, (_with_nan(randn(3, 5)), randn(3, 5))),
    "eq_scalar": (lambda x: x == 2, (randint(0, 4, 3, 4),)),
    "ne_scalar": (lambda x: x != 0, (_with_nan(randn(3, 5)),)),
    "ne_tensor": (lambda x, y: x != y, (randint(0, 3, 3, 4), randint(0, 3, 3, 4))),
    "gt_int_vs_float": (lambda x: x > 0.5, (randint(0, 3, 3, 4),)),
    "eq_int_vs_float_tensor": (lambda x, y: x == y, (randint(0, 3, 3, 4), randint(0, 3, 3, 4).float())),
    "and_or_xor_not": (lambda x: (((x > 0) & (x < 1)) | (x < -1)) ^ ~(x > 2), (randn(4, 5),)),
    "logical": (lambda x, y: torch.logical_and(x, y) | torch.logical_xor(x > 0, y), (randn(3, 4), randn(3, 4))),
    "mask_arith": (lambda x: (x > 0) * x + (x < 0).sum(), (randn(3, 4),)),
    "bool_input": (lambda x, m: torch.where(m, x, 0.0) + m.sum(), (randn(3, 4), randn(3, 4) > 0)),
    "sum_dtype_mean_dtype": (lambda x: (x.sum(dtype=torch.float64), x.mean(1, dtype=torch.float64)),
                             (randn(3, 4),)),
    "sqrt_of_int": (lambda x: torch.sqrt(x) + torch.exp(x), (randint(0, 5, 3, 4),)),
    "int_plus_float": (lambda x: x + 1.5, (randint(0, 4, 3, 4),)),
    "int_div_int": (lambda x, y: x / y, (randint(-9, 9, 3, 4), randint(1, 4, 3, 4))),
    "int_times_float_tensor": (lambda x, y: x * y, (randint(0, 4, 3, 4), randn(3, 4))),
    "where_int_float": (lambda x, y: torch.where(x > 0, x, y), (randint(-3, 3, 3, 4), randn(3, 4))),
    "floor_div_int": (lambda x: x // 3, (randint(-9, 9, 3, 4),)),
    "floor_div_float": (lambda x: x // 0.7, (randn(3, 4),)),
    "trunc_div": (lambda x, y: torch.div(x, y, rounding_mode="trunc"), (randn(3, 4) * 4, randn(3, 4))),
    "trunc_div_int": (lambda x: torch.div(x, 4, rounding_mode="trunc"), (randint(-9, 9, 3, 4),)),
    "remainder": (lambda x: x % 0.7, (randn(3, 4),)),
    "remainder_int": (lambda x: x % 3, (randint(-9, 9, 3, 4),)),
    "fmod": (lambda x: torch.fmod(x, 0.7), (randn(3, 4),)),
    "max_dim": (lambda x: x.max(dim=1), (randn(3, 4),)),
    "max_dim_keep": (lambda x: x.max(dim=0, keepdim=True), (randint(0, 3, 5, 4),)),
    "min_dim": (lambda x: x.min(dim=-1), (randn(3, 4),)),
    "argmax": (lambda x: x.argmax(1), (randn(3, 4),)),
    "argmax_all": (lambda x: x.argmax(), (randn(3, 4),)),
    "argmin": (lambda x: x.argmin(0, keepdim=True), (randn(3, 4),)),
    "argmin_int": (lambda x: x.argmin(1), (randint(-3, 3, 4, 6),)),
    "argmax_0d": (lambda x: x.argmax(-1), (randn(()),)),
    "max_dim_0d": (lambda x: x.max(0), (randn(()),)),
    "cumsum_0d": (lambda x: x.cumsum(0), (randn(()),)),
    "amin": (lambda x: x.amin((0, 2)), (randn(3, 4, 5),)),
    "prod": (lambda x: x.prod(1), (randn(3, 4),)),
    "prod_all": (lambda x: x.prod(), (randint(1, 3, 3, 4),)),
    "var": (lambda x: x.var(1), (randn(3, 8),)),
    "var_biased_keep": (lambda x: x.var(dim=(0, 2), unbiased=False, keepdim=True), (randn(3, 4, 5),)),
    "std_all": (lambda x: x.std(), (randn(3, 8),)),
    "norm2": (lambda x: x.norm(dim=1), (randn(3, 8),)),
    "norm1": (lambda x: torch.linalg.vector_norm(x, 1, dim=0), (randn(3, 8),)),
    "norm_inf": (lambda x: torch.linalg.vector_norm(x, float("inf")), (randn(3, 8),)),
    "norm_3": (lambda x: torch.linalg.vector_norm(x, 3, dim=-1, keepdim=True), (randn(3, 8),)),
    "norm_0": (lambda x: torch.linalg.vector_norm(x, 0), (torch.relu(randn(3, 8)),)),
    "cumsum": (lambda x: x.cumsum(1), (randn(3, 7),)),
    "cumsum_long": (lambda x: x.cumsum(0), (randn(1000, 2).abs(),)),  # no cancellation: rtol applies
    "cumsum_int": (lambda x: x.cumsum(-1), (randint(-5, 5, 2, 600),)),
    "cumsum_mask": (lambda x: (x > 0).cumsum(1), (randn(3, 9),)),
    "gather": (lambda x, i: x.gather(1, i), (randn(3, 4), randint(0, 4, 3, 6))),
    "gather_dim0": (lambda x, i: x.gather(0, i), (randn(5, 4), randint(0, 5, 2, 4))),
    "repeat": (lambda x: x.repeat(2, 1, 3), (randn(3, 4),)),
    "group_norm": (nn.GroupNorm(2, 4), (randn(2, 4, 5, 5),)),
    "group_norm_1d": (nn.GroupNorm(3, 6, affine=False), (randn(2, 6, 7),)),
    "instance_norm": (nn.InstanceNorm2d(4), (randn(2, 4, 5, 5),)),
    "instance_norm_affine": (nn.InstanceNorm1d(3, affine=True), (randn(2, 3, 9),)),
    "max_pool3d": (nn.MaxPool3d(2), (randn(1, 2, 4, 6, 6),)),
    "max_pool3d_pad": (nn.MaxPool3d(3, stride=(1, 2, 2), padding=1, dilation=(2, 1, 1)), (randn(2, 3, 6, 7, 7),)),
    "avg_pool3d": (nn.AvgPool3d((2, 3, 3), stride=2, padding=1), (randn(1, 2, 5, 7, 7),)),
    "conv1d": (nn.Conv1d(2, 4, 3, stride=2, padding=1, dilation=2), (randn(2, 2, 17),)),
    "conv1d_groups": (nn.Conv1d(4, 8, 5, groups=2, bias=False), (randn(1, 4, 12),)),
    "conv_transpose1d": (nn.ConvTranspose1d(3, 2, 4, stride=2, padding=1), (randn(1, 3, 9),)),
    "conv3d": (nn.Conv3d(2, 3, 3), (randn(1, 2, 5, 6, 6),)),
    "conv3d_strided": (nn.Conv3d(4, 6, (3, 1, 3), stride=(2, 1, 1), padding=(1, 0, 1), dilation=(1, 1, 2), groups=2),
                       (randn(2, 4, 7, 5, 8),)),
    "mse": (lambda a, b: ((a - b) ** 2).mean(), (randn(1000), randn(1000))),
    "empty_results": (lambda x: (torch.exp(x), x.sum(1), x[:, :2] * 2), (randn(0, 3),)),
    "reductions_0d": (lambda x: (x.sum(0), x.amax(-1, keepdim=True), x.mean((0,))), (randn(()),)),
    "logical_not_float": (lambda x: torch.logical_not(x), (torch.tensor([0.0, 1.5, -2.0, float("nan")]),)),
    "max_pool2d_ceil": (nn.MaxPool2d(3, 2, 1, ceil_mode=True), (randn(1, 2, 8, 9),)),
    "max_pool3d_ceil": (nn.MaxPool3d(2, 2, ceil_mode=True), (randn(1, 2, 5, 5, 7),)),
    "rounding": (lambda x: (torch.erf(x), x.floor(), x.ceil(), x.round(), x.trunc(), torch.frac(x)),
                 (torch.tensor([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.3, -0.7]),)),
    "logs_exp2": (lambda x: (x.abs().log2(), x.abs().log10(), torch.exp2(x)), (randn(3, 4),)),
    "isnan_isinf": (lambda x: (x.isnan(), (x / 0.0).isinf()), (_with_nan(randn(4, 5)),)),
    "hypot": (lambda x, y: torch.hypot(x, y), (randn(3, 4), randn(3, 4))),
    "clamp_tensor": (lambda x, lo: x.clamp(lo, lo + 0.5), (randn(3, 4), randn(4))),
    "max_min_all": (lambda x: (x.max(), x.min()), (randn(3, 4),)),
    "any_all": (lambda x: ((x > 0).any(), (x > -3).all(), (x > 0).all(1), x.any(0)), (randn(3, 4),)),
    "sort": (lambda x: x.sort(1), (randn(3, 6),)),
    "sort_desc": (lambda x: x.sort(0, descending=True).values, (randn(5, 3),)),
    "sort_stable": (lambda x: torch.sort(x, dim=0, descending=True, stable=True), (randint(-2, 3, 9, 4),)),
    "var_mean": (lambda x: torch.var_mean(x, 1, correction=0), (randn(3, 8),)),
    "flip": (lambda x: x.flip(0, -1), (randn(3, 4, 2),)),
    "index_select": (lambda x, i: x.index_select(1, i), (randn(3, 5), randint(0, 5, 7))),
    "pad": (lambda x: F.pad(x, (1, 2, 0, 1), value=0.5), (randn(2, 3, 4),)),
    "pad_crop": (lambda x: F.pad(x, (-1, 2, 1, -1)), (randn(2, 3, 4),)),
    "upsample_nearest": (lambda x: F.interpolate(x, scale_factor=2, mode="nearest"), (randn(1, 2, 3, 4),)),
    "upsample_nearest_size": (lambda x: F.interpolate(x, size=(5, 7), mode="nearest"), (randn(1, 2, 3, 4),)),
    "upsample_bilinear": (lambda x: F.interpolate(x, scale_factor=2, mode="bilinear"), (randn(1, 2, 3, 4),)),
    "upsample_bilinear_ac_scale": (lambda x: F.interpolate(x, scale_factor=1.7, mode="bilinear", align_corners=True),
                                   (randn(2, 3, 4, 4),)),
    "upsample_bilinear_ac": (lambda x: F.interpolate(x, size=(5, 6), mode="bilinear", align_corners=True),
                             (randn(1, 2, 3, 4),)),
    # trigonometric and hyperbolic functions (libm through convert-math-to-libm)
    "tan": (lambda x: torch.tan(x), (randn(3, 4),)),
    "asin": (lambda x: torch.asin(x.clamp(-1, 1)), (randn(3, 4),)),
    "acos": (lambda x: torch.acos(x), (randn(3, 4) * 0.9,)),
    "atan": (lambda x: torch.atan(x), (randn(3, 4) * 3,)),
    "sinh": (lambda x: torch.sinh(x), (randn(3, 4),)),
    "cosh": (lambda x: torch.cosh(x), (randn(3, 4),)),
    "asinh": (lambda x: torch.asinh(x), (randn(3, 4) * 4,)),
    "acosh": (lambda x: torch.acosh(x.abs() + 1), (randn(3, 4),)),
    "atanh": (lambda x: torch.atanh(x), (randn(3, 4) * 0.5,)),
    "atan2": (lambda y, x: torch.atan2(y, x), (randn(3, 4), randn(1, 4))),
    "atan2_int": (lambda y, x: torch.atan2(y, x), (randint(-3, 3, 5), randint(-3, 3, 5))),
    "bitwise_scalar": (lambda m: (m > 0) & True, (randn(6),)),
    "bitwise_or_scalar": (lambda m: (m > 0) | False, (randn(6),)),
    "bitwise_xor_scalar": (lambda m: (m > 0) ^ True, (randn(6),)),
    "div_scalar_floor": (lambda x: torch.div(x, 3, rounding_mode="floor"), (randint(-9, 9, 7),)),
    # creation ops with a size taken from an input (not foldable at import)
    "mv": (lambda a, v: a @ v, (randn(37, 515).abs(), randn(515).abs())),  # no cancellation
    "mv_int": (lambda a, v: torch.mv(a, v), (randint(-4, 5, 9, 33), randint(-4, 5, 33))),
    "copy": (lambda x, y: x.clone().copy_(y), (randn(3, 4), randn(4))),
    "dropout_eval": (lambda x: torch.ops.aten.native_dropout(x, 0.3, False), (randn(3, 4),)),
    # shape and data movement
    # core ATen ops the default decompositions expand (kept by an empty table, KEEP_CORE)
    "reflection_pad1d": (lambda x: torch.ops.aten.reflection_pad1d(x, [2, 1]), (randn(2, 3, 5),)),
    "reflection_pad2d": (lambda x: torch.ops.aten.reflection_pad2d(x, [1, 2, 2, 0]), (randn(1, 2, 4, 5),)),
    "reflection_pad3d": (lambda x: torch.ops.aten.reflection_pad3d(x, [1, 1, 0, 1, 1, 0]), (randn(1, 1, 3, 4, 3),)),
    "replication_pad2d": (lambda x: torch.ops.aten.replication_pad2d(x, [3, 1, 0, 2]), (randn(1, 2, 3, 4),)),
    "replication_pad3d": (lambda x: torch.ops.aten.replication_pad3d(x, [1, 0, 2, 1, 0, 1]), (randn(1, 1, 2, 3, 2),)),
    "replication_pad1d": (lambda x: torch.ops.aten.replication_pad1d(x, [0, 3]), (randn(2, 4),)),
    "diagonal": (lambda x: torch.diagonal(x, 1, 0, 2), (randn(4, 3, 5),)),
    "diagonal_neg": (lambda x: torch.diagonal(x, -2), (randn(5, 4),)),
    "as_strided": (lambda x: torch.as_strided(x, (3, 2), (1, 3), 1), (randn(12),)),
    "select_scatter": (lambda x, y: torch.select_scatter(x, y, 1, -1), (randn(3, 4, 2), randn(3, 2))),
    "slice_scatter": (lambda x, y: torch.slice_scatter(x, y, 0, 1, 3), (randn(5, 3), randn(2, 3))),
    "slice_scatter_step": (lambda x, y: torch.slice_scatter(x, y, 1, 0, None, 2), (randn(2, 5), randn(2, 3))),
    "masked_scatter": (lambda x, m, s: x.masked_scatter(m > 0, s), (randn(3, 4), randn(1, 4), randn(20))),
    # a mask of the input's shape: its broadcast_to is an identity copy (OpInfo masked_scatter 0)
    "masked_scatter_full_mask": (lambda x, m, s: x.masked_scatter(m > 0, s), (randn(5, 5), randn(5, 5), randn(25))),
    "masked_scatter_full_mask_3d": (lambda x, m, s: x.masked_scatter(m > 0, s), (randn(2, 3, 7), randn(2, 3, 7),
                                                                                randn(50))),
    "masked_index_put_accumulate": (  # OpInfo _unsafe_masked_index_put_accumulate 0
        lambda x, m, v: torch.ops.aten._unsafe_masked_index_put_accumulate(
            x, m > 0, [torch.tensor([[0], [1], [1], [0], [1], [4], [2], [0], [0], [4]]),
                       torch.tensor([[3, 1, 4, 2, 3, 2, 1, 3, 2, 2]])], v), (randn(5, 5), randn(10, 10), randn(10, 10))),
    "masked_index_put_accumulate_wide": (
        lambda x, m, v: torch.ops.aten._unsafe_masked_index_put_accumulate(
            x, m > 0, [torch.tensor([[3], [0], [3]]), torch.tensor([[5, 0, 7, 7, 2, 1]])], v),
        (randn(4, 8), randn(3, 6), randn(3, 6))),
    "scatter_src": (lambda x, s: x.scatter(1, torch.tensor([[2, 0], [1, 3], [0, 0]]), s),
                    (randn(3, 4), randn(3, 3))),
    "scatter_value": (lambda x: (x * 0).scatter(1, torch.tensor([[4], [0], [2]]), 1.0) + x, (randn(3, 5),)),
    "scatter_add": (lambda x, s: x.scatter_add(0, torch.tensor([[0, 1, 2], [0, 0, 2], [1, 1, 1]]), s),
                    (randn(4, 3), randn(3, 3))),
    "scatter_reduce_amax": (lambda x, s: x.scatter_reduce(0, torch.tensor([0, 2, 0, 1, 2]), s, "amax"),
                            (randn(4), randn(5))),
    "scatter_reduce_mean": (lambda x, s: x.scatter_reduce(0, torch.tensor([0, 2, 0, 1, 2]), s, "mean",
                                                          include_self=False), (randn(4), randn(5))),
    "scatter_reduce_prod": (lambda x, s: x.scatter_reduce(1, torch.tensor([[1, 1], [0, 2]]), s, "prod"),
                            (randn(2, 3), randn(2, 2))),
    "scatter_reduce_kw": (lambda x, s: x.scatter(1, torch.tensor([[0, 0], [2, 1]]), s, reduce="multiply"),
                          (randn(2, 3), randn(2, 2))),
    "scatter_value_reduce": (lambda x: x.scatter(0, torch.tensor([[1, 0, 1]]), 2.0, reduce="add"), (randn(2, 3),)),
    "scatter_add_int": (lambda x: torch.zeros(4, dtype=torch.int64).scatter_add(0, x, torch.ones_like(x)),
                        (randint(0, 4, 9),)),
    "adaptive_avg_pool2d_uneven": (lambda x: F.adaptive_avg_pool2d(x, (3, 2)), (randn(1, 2, 7, 5),)),
    "adaptive_avg_pool3d": (lambda x: F.adaptive_avg_pool3d(x, (2, 3, 1)), (randn(1, 2, 5, 6, 4),)),
    "cdist": (lambda a, b: torch.cdist(a, b), (randn(2, 5, 3), randn(2, 4, 3))),
    "cdist_p1": (lambda a, b: torch.cdist(a, b, p=1.0), (randn(5, 3), randn(4, 3))),
    "pdist": (lambda a: F.pdist(a), (randn(5, 3),)),
    "avg_pool1d": (lambda x: torch.ops.aten.avg_pool1d(x, [3], [2], [1], False, False), (randn(2, 3, 9),)),
    "adaptive_avg_pool1d": (lambda x: torch.ops.aten.adaptive_avg_pool1d(x, [4]), (randn(2, 3, 7),)),
    "fill": (lambda x: torch.ops.aten.fill.Scalar(x, 1.5) * x, (randn(2, 3),)),
    "grid_sample_bicubic_border": (lambda x, g: F.grid_sample(x, g * 1.3, mode="bicubic", padding_mode="border",
                                                              align_corners=True), (randn(2, 3, 5, 7), randn(2, 4, 3, 2))),
    "grid_sample_nearest_reflection": (lambda x, g: F.grid_sample(x, g, mode="nearest", padding_mode="reflection",
                                                                 align_corners=False),
                                       (randn(1, 2, 4, 3), randn(1, 5, 6, 2))),
    "grid_sample_3d": (lambda x, g: F.grid_sample(x, g, padding_mode="reflection", align_corners=False),
                       (randn(1, 2, 3, 4, 5), randn(1, 2, 3, 4, 3))),
    "col2im": (lambda x: F.fold(x, (5, 7), (2, 3), padding=(1, 0), stride=(1, 2), dilation=(2, 1)), (randn(2, 18, 15),)),
    "col2im_unbatched": (lambda x: F.fold(x, (4, 5), 2), (randn(8, 12),)),
    "embedding_bag_mean": (nn.EmbeddingBag(10, 3, mode="mean"), (torch.tensor([1, 2, 4, 5, 4, 3, 2, 9]),
                                                                 torch.tensor([0, 3, 3, 6]))),
    "embedding_bag_max_2d_padding": (lambda w, i: F.embedding_bag(i, w, mode="max", padding_idx=2),
                                     (randn(10, 4), torch.tensor([[1, 2, 4], [2, 2, 2], [5, 0, 9]]))),
    "embedding_bag_sum_weighted": (lambda w, i, o, p: F.embedding_bag(i, w, o, mode="sum", per_sample_weights=p,
                                                                      include_last_offset=True),
                                   (randn(7, 5), torch.tensor([1, 2, 4, 5, 4, 3, 2, 6, 0]), torch.tensor([0, 4, 4, 9]),
                                    randn(9))),
}


_EXPORTED = {}  # case name -> decomposed ExportedProgram (shared by the tests below)
KEEP_CORE = {"select_scatter", "reflection_pad1d", "reflection_pad2d", "reflection_pad3d", "replication_pad1d", "replication_pad2d",
             "replication_pad3d", "avg_pool1d", "adaptive_avg_pool1d", "fill", "col2im",
             "col2im_unbatched"}


def _export(name):
    if name not in _EXPORTED:
        f, inputs = CASES[name]
        model = (f if isinstance(f, nn.Module) else Fn(f)).eval()
        with torch.no_grad():
            _EXPORTED[name] = torch.export.export(model, inputs).run_decompositions(
                {} if name in KEEP_CORE else decomposition_table())
    return _EXPORTED[name]


def _reference(model, inputs):
    with torch.no_grad():
        want = model(*inputs)
    return [w.numpy() for w in (want if isinstance(want, (tuple, list)) else (want,))]


@pytest.mark.parametrize("name", sorted(CASES))
def test_converter_matches_eager(name):
    f, inputs = CASES[name]
    model = (f if isinstance(f, nn.Module) else Fn(f)).eval()
    want = _reference(model, inputs)
    args = [t.numpy().astype(np.int8) if t.dtype == torch.bool else t.numpy() for t in inputs]
    got = mlc.compile(from_exported_program(_export(name)))(*args)
    got = got if isinstance(got, (tuple, list)) else (got,)
    assert len(got) == len(want)
    for gv, wv in zip(got, want):
        gv = np.asarray(gv)
        if wv.dtype == np.bool_:
            assert gv.dtype == np.int8 and set(np.unique(gv)) <= {0, 1}, (gv.dtype, np.unique(gv))
            gv = gv.astype(bool)
        assert gv.shape == wv.shape and gv.dtype == wv.dtype, (gv.shape, gv.dtype, wv.shape, wv.dtype)
        np.testing.assert_allclose(gv, wv, rtol=1e-5, atol=1e-6, equal_nan=True)


def test_every_new_converter_has_a_case():
    """Each converter registered by the math/nn modules is reached by a case of CASES."""
    reached = set()
    for name in CASES:
        reached |= {str(n.target) for n in _export(name).graph.nodes if n.op == "call_function"}
    mine = {name for name, fn in CONVERTERS.items()
            if fn.__module__ in (torch_converters_math.__name__, torch_converters_nn.__name__,
                                 torch_converters_shape.__name__, torch_converters_create.__name__)}
    # overloads that eager programs reach only through other spellings
    aliases = {"aten.max_pool3d.default", "aten.var.dim", "aten.prod.default", "aten.pow.Scalar",
               "aten.fmod.Tensor", "aten.remainder.Tensor", "aten.lt.Scalar", "aten.le.Scalar",
               "aten.gt.Tensor", "aten.ge.Tensor", "aten.eq.Tensor", "aten.bitwise_or.Tensor",
               "aten.logical_or.default", "aten.bitwise_and.Tensor", "aten.logical_not.default",
               "aten.logical_xor.default",
               # spellings eager code does not reach (the export of `div`, `atan2`, `pad`, `arange`
               # picks another overload): same converter functions as the reached ones
               "aten.div.Scalar_mode", "aten.atan2.out", "aten.arange.default", "aten.arange.start",
               "aten.adaptive_avg_pool2d.default", "aten.adaptive_avg_pool3d.default",
               "aten.empty_strided.default", "aten.empty.memory_format",
               "aten.arange.start_step",
               "aten._embedding_bag.default"}  # export reaches _embedding_bag_forward_only  # symbolic creation ops: test_creation_ops_with_symbolic_sizes
    assert not (mine - reached - aliases), sorted(mine - reached - aliases)


def test_creation_ops_with_symbolic_sizes():
    """full / arange / empty / scalar_tensor of a dynamic size are built at run time (not folded
    at import): one compile serves two sizes."""
    class Creation(nn.Module):
        def forward(self, x):
            n = x.shape[0]
            r = torch.arange(n).to(torch.float32).unsqueeze(1) + torch.arange(1, n + 1).unsqueeze(1)
            e = torch.empty(n, x.shape[1]).fill_(0.5)   # its contents are undefined until filled
            return x + torch.full((n, 1), 2.5) + r * torch.scalar_tensor(n) + e, torch.full((n,), 7)

    seen = {str(n.target) for n in torch.export.export(Creation(), (randn(3, 4),), dynamic_shapes={
        "x": {0: torch.export.Dim("n", min=2, max=64)}}).run_decompositions().graph.nodes}
    assert {"aten.full.default", "aten.arange.start_step", "aten.scalar_tensor.default"} <= seen, seen
    fn = mlc.compile(mlc.from_torch(Creation(), (randn(3, 4),),
                                    dynamic_shapes={"x": {0: torch.export.Dim("n", min=2, max=64)}}))
    for n in (3, 11):
        x = randn(n, 4)
        got, want = fn(x.numpy()), Creation()(x)
        for g_, w_ in zip(got, want):
            assert g_.shape == tuple(w_.shape) and g_.dtype == w_.numpy().dtype
            np.testing.assert_allclose(g_, w_.numpy(), rtol=1e-6)


def test_random_and_data_dependent_ops_refused_with_reason():
    with pytest.raises(BuildError, match=r"aten.randn.default x1.*draws random numbers"):
        mlc.from_torch(Fn(lambda x: x + torch.randn(3)), (randn(3),))
    with pytest.raises(BuildError, match=r"aten.nonzero.default.*depends on the data"):
        mlc.from_torch(Fn(lambda x: torch.nonzero(x)), (randn(3),))
    # a training-mode dropout mask depends on no input: it must not be folded into one sample
    with pytest.raises(BuildError, match=r"aten.bernoulli.p x1.*draws random numbers"):
        mlc.from_torch(Fn(lambda x: torch.nn.functional.dropout2d(x, 0.5, training=True)),
                       (randn(2, 4, 3, 3),))


def test_integer_bitwise_refused_by_name():
    model = Fn(lambda x, y: x & y)
    with pytest.raises(BuildError, match="aten.bitwise_and.Tensor: integer operands"):
        mlc.from_torch(model, (randint(0, 4, 3), randint(0, 4, 3)))


def test_negative_integer_power_refused():
    with pytest.raises(BuildError, match="expected >= 0 for an integer tensor"):
        mlc.from_torch(Fn(lambda x: x ** -2), (randint(1, 4, 3),))


def test_docs_table_is_current():
    """``docs/torch_ops.md`` is ``python -m mlc_mlir.frontends.torch_table`` of this registry."""
    path = pathlib.Path(__file__).resolve().parents[2] / "docs" / "torch_ops.md"
    assert path.read_text() == render_table(), "regenerate: python -m mlc_mlir.frontends.torch_table"


def test_unbounded_range_constraint_is_no_bound():
    """torch's ``int_oo`` upper bound (which sympy calls finite) is no bound, not an int()."""
    import sympy
    from torch.utils._sympy.numbers import int_oo
    from torch.utils._sympy.value_ranges import ValueRanges

    from mlc_mlir.frontends.torch import _bounds

    class Exported:
        range_constraints = {sympy.Symbol("s0"): ValueRanges(2, int_oo), sympy.Symbol("s1"): ValueRanges(1, 64)}

    assert _bounds(Exported(), {"s0": "n"}) == {"n": (2, None), "s1": (1, 64)}
