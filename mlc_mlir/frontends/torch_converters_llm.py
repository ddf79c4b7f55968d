"""Converters for the core ATen ops of decoder LLMs (HF GPT-2, Llama, Qwen2, Mistral) that the
base registry (:mod:`.torch_converters`) lacks: runtime asserts, ``split_with_sizes``, the
comparisons and boolean ops of attention masks, ``sin``/``cos`` of rotary embeddings, and
``index_put`` of a static KV cache (a run-time-offset :func:`~mlc_mlir.ops.update_slice`),
``index.Tensor`` (advanced indexing), and transposes of 2-D weights folded into transposed params.

Masks are int8 0/1 (see :mod:`mlc_mlir.builder.math_ops`): ``bool`` tensors of torch arrive as
int8, so ``bitwise_and``/``bitwise_or`` of masks are ``minimum``/``maximum``.

Source: PyTorch core ATen IR (``native_functions.yaml``); transformers ``StaticLayer.update``
(``index_copy_``/``index_put_`` at ``arange(q) + cumulative_length``); TVM Relax
``frontend/torch/base_fx_graph_translator.py``.
"""

from __future__ import annotations

import numpy as np

from .. import ops
from ..builder import Tensor
from ..builder.linalg_emit import broadcast_shapes
from ..errors import BuildError, format_shape
from .torch_converters import CONVERTERS, _tensor, arg, register_converter


@register_converter("aten._assert_tensor_metadata.default", "aten._assert_scalar.default",
                    "aten.sym_constrain_range_for_size.default")
def _assert(ctx, node, args):
    """Export-time metadata checks: the builder already checked dtypes and shapes."""
    return None


@register_converter("aten.split_with_sizes.default", "aten.split.Tensor")
def _split(ctx, node, args):
    x = _tensor(str(node.target), "self", args[0])
    dim = arg(ctx, args, 2, "dim", 0) % x.ndim
    sizes = args[1]
    if isinstance(sizes, int):  # aten.split.Tensor: chunks of `sizes`, the last one shorter
        n = x.shape[dim]
        sizes = [min(sizes, n - s) for s in range(0, n, sizes)]
    return tuple(ops.split(x, [int(s) for s in sizes], axis=dim))


# ----------------------------------------------------------------------------- RoPE
# (comparisons, logical ops and pow live with the other math converters: torch_converters_math)
register_converter("aten.sin.default")(lambda ctx, node, args: ops.sin(args[0]))
register_converter("aten.cos.default")(lambda ctx, node, args: ops.cos(args[0]))


# ----------------------------------------------------------------------------- KV cache writes
@register_converter("aten.index_put.default", "aten.index_copy.default")
def _index_put(ctx, node, args):
    """``x[..., idx, ...] = values`` (``accumulate``: ``+=``). Along one dim where ``idx`` is a run
    of consecutive positions (``start + arange(n)``: a static KV cache's write), one
    :func:`ops.update_slice` at ``start``; any other index tensors (several, broadcast, negative)
    go through :func:`_scatter_put`; a bool mask index (told by the fx node's fake value: masks
    arrive as int8, like integer indices) through :func:`_mask_put`. ``index_copy(x, dim, idx,
    values)`` is the same write."""
    op = str(node.target)
    x = _tensor(op, "self", args[0])
    accumulate = False
    if op.startswith("aten.index_copy"):
        dim = args[1] % x.ndim
        indices, values = [None] * dim + [args[2]], args[3]
        node_index = node.args[2]
    else:
        indices, values = list(args[1]), args[2]
        accumulate = bool(arg(ctx, args, 3, "accumulate", False))
        dims = [i for i, e in enumerate(indices) if e is not None]
        dim = dims[0] if dims else 0
        node_index = node.args[1][dim] if dims else None
        if any(_is_mask(node.args[1][d]) for d in dims):
            if len(dims) != 1:
                raise BuildError(f"{op}: indices {[_index_kind(node.args[1][d]) for d in dims]} at dims "
                                 f"{dims}; expected a bool mask index alone (the others None)")
            return _mask_put(op, x, dim, _tensor(op, f"indices[{dim}]", indices[dim]),
                             _tensor(op, "values", values), accumulate)
    values = _tensor(op, "values", values)
    index = indices[dim] if dim < len(indices) else None
    whole_slices = len([e for e in indices if e is not None]) == 1 and isinstance(index, Tensor) \
        and index.ndim == 1 and values.ndim == x.ndim and values.shape[dim] == index.shape[0] \
        and all(v == s for d, (v, s) in enumerate(zip(values.shape, x.shape)) if d != dim)
    start = None
    if whole_slices and not accumulate and values.dtype == x.dtype:
        start = index if index.shape[0] == 1 else _arange_offset(ctx, node_index, index.shape[0])
    if start is None or (isinstance(start, Tensor) and start.dtype not in ("int32", "int64")):
        return _scatter_put(op, x, indices, values, accumulate)
    start = start if isinstance(start, int) else ops.reshape(start, [1]) if start.ndim == 0 else start
    return ops.update_slice(x, values, [start if d == dim else 0 for d in range(x.ndim)])


def _is_mask(src) -> bool:
    """Whether the fx node ``src`` is a bool (or legacy uint8) tensor: an index that masks the
    dims it stands for rather than listing positions (its fake value's dtype; False without
    one)."""
    val = src.meta.get("val") if hasattr(src, "meta") else None
    return str(getattr(val, "dtype", "")) in ("torch.bool", "torch.uint8")


def _index_kind(src) -> str:
    return "bool mask" if _is_mask(src) else "integer"


def _mask_put(op, x, dim, mask, values, accumulate):
    """``x[(:,) * dim + (mask,)] = values`` (``accumulate``: ``+=``) for a bool ``mask`` over
    ``x``'s dims ``dim .. dim + mask.ndim - 1``: ``where(mask, values, x)``, the mask and the values
    broadcast over ``x``. PyTorch broadcasts ``values`` to ``x[mask]``'s shape ``lead + (T,) +
    trail`` with ``T`` the mask's True count; ``values`` must have size 1 (or no dim) at ``T``'s
    place, since ``T`` is known only at run time.

    Raises
    ------
    BuildError
        If the mask's shape is not that of the dims it masks, or ``values`` does not broadcast
        to ``lead + (1,) + trail``."""
    k = mask.ndim
    lead, trail = tuple(x.shape[:dim]), tuple(x.shape[dim + k:])
    if tuple(mask.shape) != tuple(x.shape[dim:dim + k]):
        raise BuildError(f"{op}: argument 'indices[{dim}]' is a bool mask of shape {format_shape(mask.shape)}; "
                         f"expected the shape of the dims it masks, {format_shape(x.shape[dim:dim + k])}")
    at = values.ndim - len(trail) - 1  # the values dim broadcast over the True positions
    if at >= 0 and values.shape[at] != 1:
        raise BuildError(f"{op}: values {format_shape(values.shape)} hold {values.shape[at]} rows for the "
                         f"True positions of the bool mask index at dim {dim}; expected 1 row broadcast to "
                         "all of them (their number is known only at run time)")
    _check_broadcast(op, values, lead + (1,) + trail)
    full = (1,) * (len(lead) + 1 + len(trail) - values.ndim) + tuple(values.shape)
    v = ops.reshape(ops.cast(values, x.dtype), list(full[:dim]) + [1] * k + list(full[dim + 1:]))
    m = ops.reshape(mask, [1] * dim + list(mask.shape) + [1] * len(trail))
    return ops.where(m, ops.add(x, v) if accumulate else v, x)


def _scatter_put(op, x, indices, values, accumulate):
    """PyTorch's ``index_put`` in general: ``x`` permuted so the indexed dims lead and flattened
    to ``(N, R)`` (``N`` the indexed positions, ``R`` the rest), the index tensors broadcast to
    ``B``, wrapped (``i < 0`` reads ``i + n``) and linearized to ``M = prod(B)`` rows, ``values``
    broadcast to ``x[indices]``'s shape and laid out as ``(M, R)``; one
    :func:`ops.scatter_elements` along axis 0 (reduction ``add`` when accumulating)."""
    dims = [i for i, e in enumerate(indices) if e is not None]
    idx = [_tensor(op, f"indices[{d}]", indices[d]) for d in dims]
    if any(i.dtype not in ("int8", "int16", "int32", "int64") for i in idx):
        raise BuildError(f"{op}: index dtypes {[i.dtype for i in idx]}; expected integer tensors (a bool "
                         "mask index has a data-dependent shape)")
    shapes = [tuple(i.shape) for i in idx] + [tuple(x.shape), tuple(values.shape)]
    if not all(isinstance(n, int) for sh in shapes for n in sh):
        raise BuildError(f"{op}: shapes {shapes} are symbolic; expected static shapes")
    try:
        bshape = tuple(np.broadcast_shapes(*shapes[:len(idx)]))
    except ValueError:
        raise BuildError(f"{op}: index shapes {shapes[:len(idx)]} do not broadcast") from None
    reduction = "add" if accumulate else "none"
    if len(bshape) == 1 and len(dims) == 1:  # one 1-D index: a scatter along its dim
        d, m = dims[0], bshape[0]
        sel = tuple(x.shape[:d]) + (m,) + tuple(x.shape[d + 1:])
        _check_broadcast(op, values, sel)
        rows = ops.broadcast_to(ops.reshape(ops.cast(idx[0], "int64"), [1] * d + [m] + [1] * (x.ndim - d - 1)), sel)
        return ops.scatter_elements(x, rows, ops.broadcast_to(ops.cast(values, x.dtype), sel), axis=d,
                                    reduction=reduction, negative_indices=True)
    rest = [d for d in range(x.ndim) if d not in dims]
    sizes, rsizes = [x.shape[d] for d in dims], [x.shape[d] for d in rest]
    n_rows, r_cols, m_rows = int(np.prod(sizes)), int(np.prod(rsizes)), int(np.prod(bshape))
    linear = 0
    for i, n in zip(idx, sizes):  # row-major position among the indexed dims
        i = ops.broadcast_to(ops.cast(i, "int64"), bshape)
        i = ops.where(ops.less(i, 0), ops.add(i, n), i)
        linear = i if isinstance(linear, int) else ops.add(ops.multiply(linear, n), i)
    rows = ops.broadcast_to(ops.reshape(linear, [m_rows, 1]), [m_rows, r_cols])
    adjacent = dims == list(range(dims[0], dims[0] + len(dims)))
    lead = dims[0] if adjacent else 0  # where x[indices] holds the B dims
    sel_shape = tuple(rsizes[:lead]) + bshape + tuple(rsizes[lead:])
    _check_broadcast(op, values, sel_shape)
    v = ops.broadcast_to(ops.cast(values, x.dtype), sel_shape)
    nb = len(bshape)
    v = ops.permute(v, list(range(lead, lead + nb)) + list(range(lead)) + list(range(lead + nb, len(sel_shape))))
    flat = ops.reshape(ops.permute(x, dims + rest), [n_rows, r_cols])
    out = ops.scatter_elements(flat, rows, ops.reshape(v, [m_rows, r_cols]), axis=0,
                               reduction=reduction)
    out = ops.reshape(out, sizes + rsizes)
    order = dims + rest
    return ops.permute(out, [order.index(d) for d in range(x.ndim)])


def _check_broadcast(op, values, shape) -> None:
    """Raise unless ``values`` broadcasts to ``shape`` (the indexed part of ``self``)."""
    try:
        np.broadcast_shapes(tuple(values.shape), tuple(shape))
    except ValueError:
        raise BuildError(f"{op}: values {format_shape(values.shape)} do not broadcast to the indexed "
                         f"shape {format_shape(shape)}") from None


def _arange_offset(ctx, src, n):
    """``s`` when the fx node ``src`` is ``aten.add.Tensor(arange(0, n), s)`` (either order),
    converted; else None."""
    if str(getattr(src, "target", "")) != "aten.add.Tensor":
        return None
    for a, s in (src.args[:2], src.args[1::-1]):
        if str(getattr(a, "target", "")) == "aten.arange.start_step" and list(ctx.lookup(a.args[:2])) == [0, n] \
                and (len(a.args) < 3 or a.args[2] == 1):
            return ctx.lookup(s)
    return None


@register_converter("aten.index.Tensor")
def _index(ctx, node, args):
    """``x[..., i0, i1, ...]`` (PyTorch advanced indexing; a negative index counts from the end).
    One index tensor at dim ``d`` (the others ``None``) is ``take(x, idx, axis=d)``. Several are
    broadcast to one shape ``B`` (sizes may be symbolic) and stacked into coordinates for :func:`ops.gather_nd` over ``x``
    permuted so the indexed dims lead; the result's ``B`` dims stand where the first indexed dim
    was when the indexed dims are adjacent, else first (numpy's and PyTorch's rule)."""
    op = "aten.index"
    x = _tensor(op, "self", args[0])
    indices = list(args[1])
    dims = [i for i, e in enumerate(indices) if e is not None]
    idx = [_tensor(op, f"indices[{d}]", indices[d]) for d in dims]
    if any(i.dtype not in ("int8", "int16", "int32", "int64") for i in idx):
        raise BuildError(f"{op}: index dtypes {[i.dtype for i in idx]}; expected integer tensors (a bool "
                         "mask index has a data-dependent shape)")
    if len(dims) == 1:
        return ops.take(x, idx[0], axis=dims[0])
    bshape = tuple(broadcast_shapes(op, *[tuple(i.shape) for i in idx]))   # symbolic sizes too
    wide = [ops.cast(i, "int64") for i in idx]     # broadcast where needed (no identity copy)
    coords = ops.concat([ops.unsqueeze(w if tuple(w.shape) == bshape else ops.broadcast_to(w, bshape), [len(bshape)])
                         for w in wide], axis=len(bshape))
    rest = [d for d in range(x.ndim) if d not in dims]
    out = ops.gather_nd(ops.permute(x, dims + rest), coords)
    first = dims[0]
    if dims != list(range(first, first + len(dims))) or first == 0:
        return out
    nb = len(bshape)  # adjacent indexed dims after `first` kept dims: move those dims to the front
    return ops.permute(out, list(range(nb, nb + first)) + list(range(nb)) + list(range(nb + first, out.ndim)))


_BASE_TRANSPOSES = {k: CONVERTERS[k] for k in ("aten.permute.default", "aten.t.default", "aten.transpose.int")}


@register_converter(*_BASE_TRANSPOSES)
def _transpose_param(ctx, node, args):
    """The transpose of a 2-D weight (``nn.Linear``'s ``W`` in ``x @ W.T`` after
    decomposition) is a param holding ``W.T`` (made once, at import), so the product is a
    ``linalg.matmul`` with a (K, N) B whose rows stream contiguously (the M == 1 GEMV rule of
    the default schedule) and no call transposes a weight. Other transposes go to the base
    converters."""
    key = str(node.target)
    x = args[0]
    swap = isinstance(x, Tensor) and x.ndim == 2 and (
        key == "aten.t.default" or (key == "aten.permute.default" and list(args[1]) == [1, 0])
        or (key == "aten.transpose.int" and {args[1] % 2, args[2] % 2} == {0, 1}))
    found = ctx.param_of(x) if swap else None
    if found is None:
        return _BASE_TRANSPOSES[key](ctx, node, args)
    name, value = found
    return ctx.param(f"{name}.T", ctx.derived_weight(f"{name}.T", value, lambda v: np.ascontiguousarray(v.T)))
