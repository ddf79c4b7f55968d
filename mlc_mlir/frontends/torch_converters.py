"""Converters from core ATen ops (after ``torch.export(...).run_decompositions()``) to builder ops.

:data:`CONVERTERS` maps an ATen overload name (``str(node.target)``, e.g. ``"aten.addmm.default"``)
to ``converter(ctx, node, args) -> value`` where ``args`` are ``node.args`` with every fx node
replaced by its converted value (a :class:`~mlc_mlir.builder.Tensor`, a tuple of them, or a Python
scalar/list) and ``ctx.kwargs`` holds ``node.kwargs`` converted the same way. A converter composes
:mod:`mlc_mlir.ops` only (no IR text), so every op is shape- and dtype-checked by the builder.
Multi-output ATen ops return a tuple whose unused entries (batch-norm statistics, pooling indices)
are None; ``operator.getitem`` picks entries.

Source: PyTorch core ATen IR (``torch/_decomp``, ``native_functions.yaml`` signatures), TVM Relax
``frontend/torch/base_fx_graph_translator.py`` (one method per op).
"""

from __future__ import annotations

from typing import Callable, Dict, Optional, Sequence

import numpy as np

from .. import ops
from ..builder import Tensor
from ..errors import BuildError, format_shape
from ..ir.symbolic import SymDim, is_static

Converter = Callable[..., object]

#: ATen overload name -> converter.
CONVERTERS: Dict[str, Converter] = {}

#: ATen overload name -> the input dtypes its converter takes (for the docs' table).
CONVERTER_DTYPES: Dict[str, str] = {}

#: ``str(torch.dtype)`` -> mlc-mlir dtype name (a table, not an if-chain).
TORCH_DTYPES = {
    "torch.float32": "float32", "torch.float64": "float64", "torch.float16": "float16",
    "torch.bfloat16": "bfloat16", "torch.int8": "int8", "torch.int16": "int16",
    "torch.int32": "int32", "torch.int64": "int64", "torch.bool": "bool",
}


#: Core ATen ops refused on purpose, with the reason ``from_torch`` prints for them.
REFUSED: Dict[str, str] = {
    **{f"aten.{n}": "draws random numbers (a compiled graph has no RNG state): create the tensor "
       "outside and pass it as an input" for n in ("rand.default", "randn.default", "randperm.default")},
    "aten.nonzero.default": "its result's length depends on the data (no static or symbolic size)",
    "aten._local_scalar_dense.default": "reads a tensor element into Python (.item()): data-dependent "
                                        "control flow",
    **{f"aten.{n}": "a training (autograd) op: from_torch compiles inference graphs" for n in (
        "_adaptive_avg_pool2d_backward.default", "avg_pool2d_backward.default", "convolution_backward.default",
        "embedding_dense_backward.default", "max_pool2d_with_indices_backward.default",
        "native_group_norm_backward.default", "native_layer_norm_backward.default")},
    "aten._native_batch_norm_legit.default": "training-mode batch norm updates its running statistics: "
                                             "export the model after model.eval()",
    **{f"aten.{n}": "complex-valued (no complex dtype)" for n in ("_fft_r2c.default", "_fft_c2r.default")},
    "aten.resize_.default": "resizes a tensor's storage in place (tensor sizes are fixed by the graph's types)",
}


def register_converter(*names: str, dtypes: str = "float") -> Callable[[Converter], Converter]:
    """Decorator registering ``fn`` as the converter of each ATen overload in ``names``;
    ``dtypes`` says which input dtypes it takes (``"float"``, ``"float, int"``, ``"any"``...,
    shown in ``docs/torch_ops.md``).

    >>> @register_converter("aten.relu.default")
    ... def _relu(ctx, node, args):
    ...     return ops.relu(args[0])

    A later registration of the same name replaces the earlier one (to override a converter).
    """
    def deco(fn: Converter) -> Converter:
        for n in names:
            CONVERTERS[n] = fn
            CONVERTER_DTYPES[n] = dtypes
        return fn
    return deco


def arg(ctx, args: Sequence, i: int, name: str, default=None):
    """Positional argument ``i`` of an ATen call, else keyword ``name``, else ``default``."""
    if len(args) > i:
        return args[i]
    return ctx.kwargs.get(name, default)


def torch_dtype(op: str, dt) -> str:
    """The mlc-mlir dtype of a ``torch.dtype``.

    Raises
    ------
    BuildError
        For a dtype outside :data:`TORCH_DTYPES` (complex, float8, unsigned).
    """
    name = TORCH_DTYPES.get(str(dt))
    if name is None:
        raise BuildError(f"{op}: argument 'dtype' is {dt}; expected one of {sorted(TORCH_DTYPES)}")
    return name


def _builder_dtype(t) -> Optional[str]:
    """The builder dtype of a torch dtype (bool as int8, the builder's mask dtype)."""
    name = TORCH_DTYPES.get(str(t))
    return "int8" if name == "bool" else name


def out_dtype(node, i: int = 0) -> Optional[str]:
    """The builder dtype of output ``i`` of ``node`` from its fake value (``meta['val']``, what
    PyTorch's type promotion gives); None where the graph carries none (``from_fx``)."""
    val = node.meta.get("val") if hasattr(node, "meta") else None
    if isinstance(val, (tuple, list)):
        val = val[i]
    return _builder_dtype(val.dtype) if hasattr(val, "dtype") else None


def common_dtype(node, n: int = 2) -> Optional[str]:
    """The dtype PyTorch computes an n-ary op in (``torch.result_type`` of the first ``n``
    arguments' fake values and scalars, e.g. the compare dtype of ``int64 > 0.5`` is float32);
    None without fake values (``from_fx``)."""
    import torch

    vals = []
    for a in node.args[:n]:
        v = a.meta.get("val") if hasattr(a, "meta") else a
        if v is None:
            return None
        vals.append(v)
    if not any(isinstance(v, torch.Tensor) for v in vals):
        return None
    return _builder_dtype(torch.result_type(*vals) if len(vals) == 2 else
                          torch.result_type(vals[0], vals[0]))


def promote(dt: Optional[str], *vals):
    """``vals`` with each Tensor cast to ``dt`` and bool scalars as ints (no-op for ``dt`` None)."""
    out = []
    for v in vals:
        if isinstance(v, bool):
            v = int(v)
        if dt is not None and isinstance(v, Tensor) and v.dtype != dt:
            v = ops.cast(v, dt)
        out.append(v)
    return out


def _tensor(op: str, argname: str, x) -> Tensor:
    if not isinstance(x, Tensor):
        raise BuildError(f"{op}: argument '{argname}' is {type(x).__name__}; expected a tensor")
    return x


def _ints(v) -> list:
    """Ints of an ATen ``int[]`` argument; symbolic sizes (``SymDim``) stay as they are."""
    return [int(v)] if isinstance(v, int) else [e if isinstance(e, SymDim) else int(e) for e in v]


def _pair(v) -> list:
    """An ATen ``int[2]`` argument (``3``, ``[3]`` or ``[3, 3]``) as two ints."""
    v = _ints(v)
    return v * 2 if len(v) == 1 else v


# ----------------------------------------------------------------------------- elementwise
def _scaled(y, alpha):
    return y if alpha == 1 else ops.multiply(y, alpha)


def _alpha_operands(ctx, node, args, scaled: int = 1) -> list:
    """``[self, other]`` cast to the result dtype (PyTorch type promotion), the one at index
    ``scaled`` times ``alpha`` (the third argument of ``aten.add``/``sub``/``rsub``)."""
    ab = list(promote(out_dtype(node), args[0], args[1]))
    ab[scaled] = _scaled(ab[scaled], arg(ctx, args, 2, "alpha", 1))
    return ab


@register_converter("aten.add.Tensor", "aten.add.Scalar", dtypes="float, int")
def _add(ctx, node, args):
    """``self + alpha * other``, operands cast to the result dtype; an integer ``x + 0`` is ``x``."""
    a, b = _alpha_operands(ctx, node, args)
    # transformers' arange(n) + offset with offset 0: an identity op, which the schedules'
    # canonicalization would erase under a transform handle
    for x, y in ((a, b), (b, a)):
        if isinstance(x, Tensor) and not x.dtype.startswith("float") and not isinstance(y, Tensor) \
                and np.ndim(y) == 0 and y == 0:
            return x
    return ops.add(a, b)


@register_converter("aten.sub.Tensor", "aten.sub.Scalar", dtypes="float, int")
def _sub(ctx, node, args):
    """``self - alpha * other``, operands cast to the result dtype."""
    return ops.subtract(*_alpha_operands(ctx, node, args))


@register_converter("aten.rsub.Scalar", "aten.rsub.Tensor", dtypes="float, int")
def _rsub(ctx, node, args):
    """``other - alpha * self``, operands cast to the result dtype."""
    a, b = _alpha_operands(ctx, node, args, scaled=0)
    return ops.subtract(b, a)


@register_converter("aten.mul.Tensor", "aten.mul.Scalar", dtypes="float, int")
def _mul(ctx, node, args):
    """Operands cast to the result dtype (PyTorch type promotion); ``x * 1`` is ``x`` (it folds
    away in schedules)."""
    a, b = promote(out_dtype(node), args[0], args[1])
    if isinstance(a, Tensor) and not isinstance(b, Tensor) and np.ndim(b) == 0 and b == 1:
        return a
    if isinstance(b, Tensor) and not isinstance(a, Tensor) and np.ndim(a) == 0 and a == 1:
        return b
    return ops.multiply(a, b)


@register_converter("aten.div.Tensor", "aten.div.Scalar", dtypes="float, int")
def _div(ctx, node, args):
    """True division: integer operands are cast to the float result dtype first."""
    mode = ctx.kwargs.get("rounding_mode")
    if mode is not None:
        raise BuildError(f"aten.div: argument 'rounding_mode' is {mode!r}; expected None")
    return ops.divide(*promote(out_dtype(node), args[0], args[1]))


_BINARY = {"aten.maximum.default": ops.maximum, "aten.minimum.default": ops.minimum}
_UNARY = {
    "aten.relu.default": ops.relu, "aten.tanh.default": ops.tanh, "aten.sigmoid.default": ops.sigmoid,
    "aten.exp.default": ops.exp, "aten.log.default": ops.log, "aten.sqrt.default": ops.sqrt,
    "aten.rsqrt.default": ops.rsqrt, "aten.neg.default": ops.negative,
}
for _name, _fn in _BINARY.items():
    register_converter(_name, dtypes="float, int")(
        lambda ctx, node, args, _fn=_fn: _fn(*promote(out_dtype(node), args[0], args[1])))
for _name, _fn in _UNARY.items():  # an int operand of a float function is cast first (PyTorch)
    register_converter(_name)(lambda ctx, node, args, _fn=_fn: _fn(*promote(out_dtype(node), args[0])))


@register_converter("aten.gelu.default")
def _gelu(ctx, node, args):
    return ops.gelu(args[0], approximate=arg(ctx, args, 1, "approximate", "none"))


@register_converter("aten.clamp.default", dtypes="float, int")
def _clamp(ctx, node, args):
    lo, hi = arg(ctx, args, 1, "min"), arg(ctx, args, 2, "max")
    return ops.clip(args[0], -np.inf if lo is None else lo, np.inf if hi is None else hi)


@register_converter("aten.clone.default", "aten.alias.default", "aten.detach.default",
                    "aten.contiguous.default", "aten.lift_fresh_copy.default", "aten.dropout.default", dtypes="any")
def _identity(ctx, node, args):
    return args[0]


@register_converter("aten._to_copy.default", "aten.to.dtype", dtypes="any")
def _to_copy(ctx, node, args):
    """``ops.cast``; to bool is the ``!= 0`` mask (int8 0/1)."""
    dt = arg(ctx, args, 1, "dtype")
    x = _tensor("aten._to_copy", "self", args[0])
    if str(dt) == "torch.bool":
        return ops.not_equal(x, 0)
    want = None if dt is None else torch_dtype("aten._to_copy", dt)
    return x if want is None or want == x.dtype else ops.cast(x, want)


# ----------------------------------------------------------------------------- shape
@register_converter("aten.view.default", "aten._unsafe_view.default", "aten.reshape.default", dtypes="any")
def _view(ctx, node, args):
    return ops.reshape(args[0], _ints(args[1]))


@register_converter("aten.permute.default", dtypes="any")
def _permute(ctx, node, args):
    return ops.permute(args[0], _ints(args[1]))


@register_converter("aten.t.default", dtypes="any")
def _t(ctx, node, args):
    x = _tensor("aten.t", "self", args[0])
    return x if x.ndim < 2 else ops.transpose(x)


@register_converter("aten.transpose.int", dtypes="any")
def _transpose(ctx, node, args):
    x = _tensor("aten.transpose", "self", args[0])
    perm = list(range(x.ndim))
    a, b = args[1] % x.ndim, args[2] % x.ndim
    perm[a], perm[b] = perm[b], perm[a]
    return ops.permute(x, perm)


@register_converter("aten.expand.default", dtypes="any")
def _expand(ctx, node, args):
    x = _tensor("aten.expand", "self", args[0])
    size = _ints(args[1])
    lead = len(size) - x.ndim
    if lead < 0:
        raise BuildError(f"aten.expand: argument 'size' is {size}; expected at least {x.ndim} dims "
                         f"for self {format_shape(x.shape)}")
    shape = [x.shape[i - lead] if s == -1 else s for i, s in enumerate(size)]
    return x if tuple(shape) == tuple(x.shape) else ops.broadcast_to(x, shape)


@register_converter("aten.unsqueeze.default", dtypes="any")
def _unsqueeze(ctx, node, args):
    x = _tensor("aten.unsqueeze", "self", args[0])
    d = args[1] % (x.ndim + 1)
    return ops.reshape(x, list(x.shape[:d]) + [1] + list(x.shape[d:]))


@register_converter("aten.squeeze.dim", "aten.squeeze.dims", "aten.squeeze.default", dtypes="any")
def _squeeze(ctx, node, args):
    x = _tensor("aten.squeeze", "self", args[0])
    dims = range(x.ndim) if len(args) < 2 else [d % x.ndim for d in _ints(args[1])]
    drop = {d for d in dims if x.shape[d] == 1}
    return ops.reshape(x, [s for d, s in enumerate(x.shape) if d not in drop])


@register_converter("aten.flatten.using_ints", dtypes="any")
def _flatten(ctx, node, args):
    return ops.flatten(args[0], arg(ctx, args, 1, "start_dim", 0), arg(ctx, args, 2, "end_dim", -1))


@register_converter("aten.slice.Tensor", dtypes="any")
def _slice(ctx, node, args):
    x = _tensor("aten.slice", "self", args[0])
    dim = arg(ctx, args, 1, "dim", 0) % x.ndim
    start, end, step = arg(ctx, args, 2, "start"), arg(ctx, args, 3, "end"), arg(ctx, args, 4, "step", 1)
    n = x.shape[dim]
    if isinstance(n, SymDim):   # ops.slice clamps the bounds (Python rules) on a symbolic axis
        end = None if isinstance(end, int) and end >= np.iinfo(np.int64).max else end
    else:
        start = None if start is None else max(min(start, n), -n)
        end = None if end is None else max(min(end, n), -n)  # end=INT64_MAX
    return ops.slice(x, [start], [end], [step], axes=[dim])


@register_converter("aten.select.int", dtypes="any")
def _select(ctx, node, args):
    x = _tensor("aten.select", "self", args[0])
    dim, i = args[1] % x.ndim, args[2]
    y = ops.slice(x, [i], [i + 1 if i != -1 else None], axes=[dim])
    return ops.reshape(y, [s for d, s in enumerate(x.shape) if d != dim])


@register_converter("aten.cat.default", dtypes="any")
def _cat(ctx, node, args):
    return ops.concat(list(args[0]), axis=arg(ctx, args, 1, "dim", 0))


# ----------------------------------------------------------------------------- linear algebra
@register_converter("aten.mm.default", dtypes="float, int")
def _mm(ctx, node, args):
    return ops.matmul(args[0], args[1])


@register_converter("aten.mv.default", dtypes="float, int")
def _mv(ctx, node, args):
    """``A @ x`` for A (N, K), x (K,): a ``dense`` of x as one row (``(1, K) @ (N, K)^T``, the
    GEMV rule's row-dot case), reshaped to (N,)."""
    a, x = _tensor("aten.mv", "self", args[0]), _tensor("aten.mv", "vec", args[1])
    return ops.reshape(ops.dense(ops.reshape(x, [1, x.shape[0]]), a), [a.shape[0]])


@register_converter("aten.bmm.default", dtypes="float, int")
def _bmm(ctx, node, args):
    return ops.batch_matmul(args[0], args[1])


@register_converter("aten.addmm.default", dtypes="float, int")
def _addmm(ctx, node, args):
    beta, alpha = arg(ctx, args, 3, "beta", 1), arg(ctx, args, 4, "alpha", 1)
    return ops.add(_scaled(ops.matmul(args[1], args[2]), alpha), _scaled(args[0], beta))


@register_converter("aten.linear.default", dtypes="float, int")
def _linear(ctx, node, args):
    x, w, b = args[0], args[1], arg(ctx, args, 2, "bias")
    x = _tensor("aten.linear", "input", x)
    if x.ndim == 2:
        return ops.dense(x, w, b)
    y = ops.dense(ops.reshape(x, [-1, x.shape[-1]]), w, b)
    return ops.reshape(y, list(x.shape[:-1]) + [y.shape[-1]])


@register_converter("aten.matmul.default", dtypes="float, int")
def _matmul(ctx, node, args):
    """``torch.matmul`` for 2-D @ 2-D, N-D @ 2-D and equal-batch N-D @ N-D (N >= 3)."""
    a, b = _tensor("aten.matmul", "self", args[0]), _tensor("aten.matmul", "other", args[1])
    if a.ndim == 2 and b.ndim == 2:
        return ops.matmul(a, b)
    if a.ndim > 2 and b.ndim == 2:
        y = ops.matmul(ops.reshape(a, [-1, a.shape[-1]]), b)
        return ops.reshape(y, list(a.shape[:-1]) + [b.shape[1]])
    if a.ndim == b.ndim and a.ndim >= 3 and a.shape[:-2] == b.shape[:-2]:
        y = ops.batch_matmul(ops.reshape(a, [-1] + list(a.shape[-2:])), ops.reshape(b, [-1] + list(b.shape[-2:])))
        return ops.reshape(y, list(a.shape[:-1]) + [b.shape[-1]])
    raise BuildError(f"aten.matmul: arguments have shapes {format_shape(a.shape)} and {format_shape(b.shape)}; "
                     "expected 2-D @ 2-D, N-D @ 2-D or N-D @ N-D with equal batch dims")


# ----------------------------------------------------------------------------- nn
def _reshape(v, shape):
    return ops.reshape(v, list(shape)) if isinstance(v, Tensor) else np.reshape(v, shape)


@register_converter("aten.convolution.default", "aten.conv1d.default", "aten.conv2d.default",
                    "aten.conv3d.default", dtypes="float, int")
def _convolution(ctx, node, args):
    """1-D (a 2-D convolution over ``(N, C, 1, L)``), 2-D and 3-D (``ops.conv3d``)
    convolution; transposed for 1-D and 2-D."""
    x = _tensor("aten.convolution", "input", args[0])
    if len(args) < 9:  # aten.convNd: (input, weight, bias, stride, padding, dilation, groups)
        w, b = args[1], arg(ctx, args, 2, "bias")
        stride, pad = arg(ctx, args, 3, "stride", 1), arg(ctx, args, 4, "padding", 0)
        dil = arg(ctx, args, 5, "dilation", 1)
        transposed, out_pad, groups = False, 0, arg(ctx, args, 6, "groups", 1)
    else:
        w, b, stride, pad, dil, transposed, out_pad, groups = args[1:9]
    if isinstance(pad, str):
        raise BuildError(f"aten.convolution: argument 'padding' is {pad!r}; expected ints")
    nd = x.ndim - 2
    if nd == 3 and not transposed:
        return ops.conv3d(x, w, b, strides=stride, padding=pad, dilation=dil, groups=groups)
    if nd not in (1, 2):
        raise BuildError(f"aten.convolution: argument 'input' has shape {format_shape(x.shape)}; expected "
                         "rank 3, 4 or 5 (NCL, NCHW, NCDHW; transposed: NCL or NCHW)")
    stride, pad, dil, out_pad = (_ints(v) * (nd if len(_ints(v)) == 1 else 1) for v in (stride, pad, dil, out_pad))
    if nd == 1:
        x, w = _reshape(x, x.shape[:2] + (1, x.shape[2])), _reshape(w, tuple(w.shape[:2]) + (1, w.shape[2]))
        stride, pad, dil, out_pad = [1] + stride, [0] + pad, [1] + dil, [0] + out_pad
    if transposed:
        y = ops.conv_transpose2d(x, w, b, strides=stride, padding=pad, output_padding=out_pad, dilation=dil,
                                 groups=groups)
    else:
        y = ops.conv2d(x, w, b, strides=stride, padding=pad, dilation=dil, groups=groups)
    return _reshape(y, y.shape[:2] + (y.shape[3],)) if nd == 1 else y


@register_converter("aten.conv_transpose2d.input")
def _conv_transpose2d(ctx, node, args):
    """(input, weight, bias, stride, padding, output_padding, groups, dilation)."""
    x = _tensor("aten.conv_transpose2d", "input", args[0])
    return ops.conv_transpose2d(x, args[1], arg(ctx, args, 2, "bias"), strides=_pair(arg(ctx, args, 3, "stride", 1)),
                                padding=_pair(arg(ctx, args, 4, "padding", 0)),
                                output_padding=_pair(arg(ctx, args, 5, "output_padding", 0)),
                                groups=arg(ctx, args, 6, "groups", 1), dilation=_pair(arg(ctx, args, 7, "dilation", 1)))


def ceil_mode_pad(size: int, k: int, stride: int, pad: int, dil: int) -> int:
    """Extra end padding that makes a floor-mode window op produce PyTorch's ``ceil_mode``
    output length: ``ceil((size + 2 pad - dil (k - 1) - 1) / stride) + 1`` windows, less the last
    one if it would start in the end padding."""
    span = dil * (k - 1) + 1
    out = -(-(size + 2 * pad - span) // stride) + 1
    if (out - 1) * stride >= size + pad:
        out -= 1
    return max((out - 1) * stride + span - (size + 2 * pad), 0)


def _ones_like_channels(x: Tensor, v) -> np.ndarray:
    return np.full((x.shape[1],), v, dtype=x.dtype)


@register_converter("aten._native_batch_norm_legit_no_training.default")
def _batch_norm(ctx, node, args):
    x, w, b, mean, var = args[:5]
    eps = arg(ctx, args, 6, "eps", 1e-5)
    w = _ones_like_channels(x, 1) if w is None else w
    b = _ones_like_channels(x, 0) if b is None else b
    return ops.batch_norm(x, w, b, mean, var, eps=eps, axis=1), None, None


@register_converter("aten.max_pool2d_with_indices.default", "aten.max_pool2d.default", dtypes="float, int")
def _max_pool2d(ctx, node, args):
    """``ops.max_pool2d``; ``ceil_mode`` as extra end padding (:func:`ceil_mode_pad`)."""
    x, k = _tensor("aten.max_pool2d", "self", args[0]), _pair(args[1])
    stride = _pair(arg(ctx, args, 2, "stride", []) or k)
    pad, dil = _pair(arg(ctx, args, 3, "padding", 0)), _pair(arg(ctx, args, 4, "dilation", 1))
    end = [p + (ceil_mode_pad(x.shape[2 + i], k[i], stride[i], pad[i], dil[i])
                if arg(ctx, args, 5, "ceil_mode", False) else 0) for i, p in enumerate(pad)]
    y = ops.max_pool2d(x, k, strides=stride, padding=(pad[0], pad[1], end[0], end[1]), dilation=dil)
    return (y, None) if str(node.target).startswith("aten.max_pool2d_with_indices") else y


@register_converter("aten.topk.default", dtypes="float, int")
def _topk(ctx, node, args):
    return ops.topk(args[0], int(args[1]), axis=int(arg(ctx, args, 2, "dim", -1)),
                    largest=bool(arg(ctx, args, 3, "largest", True)),
                    sorted=bool(arg(ctx, args, 4, "sorted", True)))


@register_converter("aten.avg_pool2d.default")
def _avg_pool2d(ctx, node, args):
    x, k = args[0], _pair(args[1])
    stride, pad = _pair(arg(ctx, args, 2, "stride", []) or k), _pair(arg(ctx, args, 3, "padding", 0))
    if arg(ctx, args, 4, "ceil_mode", False) or arg(ctx, args, 6, "divisor_override") is not None:
        raise BuildError("aten.avg_pool2d: 'ceil_mode'/'divisor_override' are set; expected False/None")
    return ops.avg_pool2d(x, k, strides=stride, padding=pad,
                          count_include_pad=arg(ctx, args, 5, "count_include_pad", True))


def _dims(x: Tensor, dims) -> Optional[tuple]:
    """ATen ``dim`` as builder axes: None for all (also for a 0-d tensor, whose dim 0 / -1 is itself)."""
    if dims is None or (not isinstance(dims, int) and list(dims) == []) or getattr(x, "ndim", 1) == 0:
        return None
    return tuple(_ints(dims))


@register_converter("aten.mean.dim", "aten.mean.default")
def _mean(ctx, node, args):
    """``ops.mean`` in the result dtype (``dtype=`` casts first)."""
    x = promote(out_dtype(node), args[0])[0]
    return ops.mean(x, axis=_dims(x, arg(ctx, args, 1, "dim")),
                    keepdims=bool(arg(ctx, args, 2, "keepdim", False)))


@register_converter("aten.sum.dim_IntList", "aten.sum.default", dtypes="float, int")
def _sum(ctx, node, args):
    """``ops.sum`` accumulating in the result dtype (ints and bools: int64; ``dtype=``)."""
    return ops.sum(args[0], axis=_dims(args[0], arg(ctx, args, 1, "dim")), keepdims=bool(arg(ctx, args, 2, "keepdim", False)),
                   dtype=out_dtype(node))


@register_converter("aten.amax.default", dtypes="float, int")
def _amax(ctx, node, args):
    return ops.max(args[0], axis=_dims(args[0], arg(ctx, args, 1, "dim")),
                   keepdims=bool(arg(ctx, args, 2, "keepdim", False)))


@register_converter("aten._softmax.default", "aten.softmax.int")
def _softmax(ctx, node, args):
    return ops.softmax(args[0], axis=args[1])


@register_converter("aten._log_softmax.default", "aten.log_softmax.int")
def _log_softmax(ctx, node, args):
    return ops.log_softmax(args[0], axis=args[1])


@register_converter("aten.native_layer_norm.default", "aten.layer_norm.default")
def _layer_norm(ctx, node, args):
    x, shape = args[0], _ints(args[1])
    w, b = arg(ctx, args, 2, "weight"), arg(ctx, args, 3, "bias")
    eps = arg(ctx, args, 4, "eps", 1e-5)
    y = ops.layer_norm(x, w, b, axis=tuple(range(-len(shape), 0)), eps=eps)
    return (y, None, None) if str(node.target).startswith("aten.native_layer_norm") else y


@register_converter("aten.embedding.default", dtypes="float, int")
def _embedding(ctx, node, args):
    # PyTorch raises for any index outside [0, num_embeddings), negative ones included
    return ops.take(args[0], args[1], axis=0, negative_indices=False)


# ----------------------------------------------------------------------------- masks (int8 0/1)
@register_converter("aten.logical_not.default", dtypes="float, int, bool")
def _logical_not(ctx, node, args):
    """``x == 0`` (a mask, or any number: NaN is True, so its negation False)."""
    return ops.equal(_tensor("aten.logical_not", "self", args[0]), 0)


@register_converter("aten.any.dim", "aten.any.dims", dtypes="float, int, bool")
def _any(ctx, node, args):
    x = _tensor("aten.any", "self", args[0])
    x = x if x.dtype == "int8" else ops.subtract(1, ops.equal(x, 0))
    return ops.max(x, axis=_dims(x, arg(ctx, args, 1, "dim")), keepdims=bool(arg(ctx, args, 2, "keepdim", False)))


@register_converter("aten.where.self", dtypes="any")
def _where(ctx, node, args):
    """Branches cast to the result dtype (PyTorch type promotion)."""
    a, b = promote(out_dtype(node), args[1], args[2])
    if not isinstance(a, Tensor) and not isinstance(b, Tensor):  # two folded 0-d tensors
        dt = out_dtype(node) or "float32"
        a = np.asarray(a, dtype=np.int8 if dt in ("bool", "int8") else dt)
    return ops.where(args[0], a, b)


@register_converter("aten.full_like.default", dtypes="any")
def _full_like(ctx, node, args):
    x = _tensor("aten.full_like", "self", args[0])
    dt = ctx.kwargs.get("dtype")
    dt = x.dtype if dt is None else torch_dtype("aten.full_like", dt)
    if not is_static(x.shape):   # a symbolic shape: a fill at run time
        return ops.full(x.shape, args[1], dt)
    return ops.constant(np.full(x.shape, args[1], dtype=np.int8 if dt == "bool" else dt))
