"""ONNX ``Attention`` and ``RotaryEmbedding`` (opset 23+). Attention: scaled dot-product attention with 3-D or 4-D inputs,
grouped-query heads, a key/value cache (``past_key``/``past_value`` -> ``present_*``), boolean
or additive masks, causal and sliding-window masks aligned to the bottom right, ``softcap``,
``nonpad_kv_seqlen`` (an external static cache) and the ``qk_matmul_output`` modes.

The node becomes batch matmuls, a softmax and elementwise ops; masks that depend only on static
sizes are built as numpy constants, those that depend on run-time inputs (``attn_mask``,
``nonpad_kv_seqlen``) as ops. Rows whose every key is masked give zeros, not NaN, as the
specification's fully-masked-row guard requires. Source: ONNX operator spec ``Attention`` and
its reference implementation (``onnx.reference.ops.op_attention``, ``op_rotary_embedding``).
"""

from __future__ import annotations

from typing import List, Optional

import numpy as np

from .. import ops
from ..builder import Tensor
from .onnx_registry import OPSETS, NodeInputs, ONNX_DTYPES, dtype_of, register, shape_of

_NEG_INF = -np.inf


def _is_static(v) -> bool:
    return not isinstance(v, Tensor)


def _add(a, b):
    """``a + b`` where either may be None (absent), a numpy constant or a Tensor."""
    if a is None or b is None:
        return b if a is None else a
    if _is_static(a) and _is_static(b):
        return np.asarray(a) + np.asarray(b)
    return ops.add(a, b)


def _where(cond, a, b):
    if _is_static(cond):
        return np.where(np.asarray(cond) != 0, a, b)
    return ops.where(cond, a, b)


def _bias(allowed, dtype: str):
    """The additive bias of a mask: 0 where ``allowed`` (numpy bool or int8 0/1 Tensor), -inf
    elsewhere."""
    return _where(allowed, np.zeros((), dtype), np.full((), _NEG_INF, dtype))


def _heads_first(x, heads: int, n: NodeInputs, arg: str):
    """(B, S, heads * D) -> (B, heads, S, D)."""
    b, s, hidden = shape_of(x)
    if hidden % heads:
        raise n.fail(f"input '{arg}' has hidden size {hidden}; expected a multiple of {heads} heads")
    return ops.transpose(ops.reshape(x, (b, s, heads, hidden // heads)), (0, 2, 1, 3))


def _bmm(a, b):
    """(..., M, K) @ (..., K, N) over equal leading dims through ``ops.batch_matmul``."""
    lead = shape_of(a)[:-2]
    m, k = shape_of(a)[-2:]
    nn_ = shape_of(b)[-1]
    batch = int(np.prod(lead))
    out = ops.batch_matmul(ops.reshape(a, (batch, m, k)), ops.reshape(b, (batch, k, nn_)))
    return ops.reshape(out, (*lead, m, nn_))


def _mask_bias(mask, kv_len: int, dtype: str):
    """``attn_mask`` as an additive bias padded to ``kv_len`` keys: a boolean mask (int8 0/1)
    gives 0 where it is set and -inf elsewhere; a float mask is the bias, padded with -inf."""
    is_bool = dtype_of(mask) == "int8"
    pad = kv_len - shape_of(mask)[-1]
    if pad > 0:
        widths = [(0, 0)] * (len(shape_of(mask)) - 1) + [(0, pad)]
        fill = 0 if is_bool else _NEG_INF
        mask = np.pad(mask, widths, constant_values=fill) if _is_static(mask) \
            else ops.pad(mask, widths, constant_value=fill)
    if is_bool:
        return _bias(mask, dtype)
    return mask


def _frontier(offset, q_len: int, kv_len: int, lo: Optional[int], hi: Optional[int], dtype: str):
    """The bias (0 allowed, -inf not) of keys ``j`` that query ``i`` may attend:
    ``i + offset - lo <= j <= i + offset + hi`` (a bound of None is open). ``offset`` is an int
    (result (q, kv)), a static (B,) array of per-batch offsets or a run-time (B,) int64 Tensor
    (result (B, 1, q, kv))."""
    if _is_static(offset) and np.ndim(offset) == 1:
        return np.stack([_frontier(int(o), q_len, kv_len, lo, hi, dtype) for o in offset])[:, None]
    diff = np.arange(q_len).reshape(q_len, 1) - np.arange(kv_len).reshape(1, kv_len)  # i - j
    if _is_static(offset):
        d = diff + int(offset)
        allowed = np.ones_like(d, dtype=bool)
        if hi is not None:
            allowed &= -d <= hi
        if lo is not None:
            allowed &= d <= lo
        return _bias(allowed, dtype)
    off = ops.reshape(offset, (shape_of(offset)[0], 1, 1, 1))
    bias = None
    if hi is not None:   # j - i - hi <= offset  <=>  (j - i - hi - 1) < offset
        bias = _add(bias, _bias(ops.less((-diff - hi - 1).astype(np.int64), off), dtype))
    if lo is not None:   # i - j - lo <= -offset <=> offset < (j - i + lo + 1)
        bias = _add(bias, _bias(ops.less(off, (-diff + lo + 1).astype(np.int64)), dtype))
    return bias


@register("Attention", opsets=(23, OPSETS[1]))
def _attention(n: NodeInputs) -> List[object]:
    q, k, v = n.t(0), n.t(1), n.t(2)
    rank = len(shape_of(q))
    if rank not in (3, 4) or len(shape_of(k)) != rank or len(shape_of(v)) != rank:
        raise n.fail(f"inputs Q, K, V have shapes {shape_of(q)}, {shape_of(k)}, {shape_of(v)}; "
                     f"expected all 3-D (B, S, hidden) or all 4-D (B, heads, S, head size)")
    dtype = dtype_of(q)
    if rank == 3:
        qh, kvh = n.attr("q_num_heads"), n.attr("kv_num_heads")
        if qh is None or kvh is None:
            raise n.fail("3-D inputs need attributes 'q_num_heads' and 'kv_num_heads'")
        q, k, v = _heads_first(q, qh, n, "Q"), _heads_first(k, kvh, n, "K"), _heads_first(v, kvh, n, "V")
    batch, q_heads, q_len, head = shape_of(q)
    scale = n.attr("scale")
    scale = 1.0 / np.sqrt(head) if scale is None else float(scale)
    s = np.asarray(np.sqrt(scale), dtype)             # Q and K are each scaled by sqrt(scale)
    past_len = 0
    if n.has(4) != n.has(5):
        raise n.fail("inputs 'past_key' and 'past_value' must be given together")
    if n.has(4):
        past_len = shape_of(n.t(4))[2]
        k = ops.concat([n.t(4), k], axis=2)
        v = ops.concat([n.t(5), v], axis=2)
    present_k, present_v = k, v
    kv_heads, kv_len = shape_of(k)[1], shape_of(k)[2]
    if q_heads != kv_heads:
        if q_heads % kv_heads:
            raise n.fail(f"{q_heads} query heads and {kv_heads} key/value heads; expected the "
                         f"query heads to be a multiple")
        rep = q_heads // kv_heads          # interleave: [h0, h0, h1, h1, ...]
        k, v = (ops.reshape(ops.broadcast_to(ops.reshape(t, (batch, kv_heads, 1, kv_len, shape_of(t)[3])),
                                             (batch, kv_heads, rep, kv_len, shape_of(t)[3])),
                            (batch, q_heads, kv_len, shape_of(t)[3])) for t in (k, v))

    nonpad = n.t(6) if n.opset >= 24 and n.has(6) else None
    if nonpad is not None and n.has(4):
        raise n.fail("input 'nonpad_kv_seqlen' cannot be combined with 'past_key'")
    left, right = int(n.attr("left_window_size", -1)), int(n.attr("right_window_size", -1))
    causal, window = bool(n.attr("is_causal", 0)), left >= 0 or right >= 0
    offset = past_len                   # where the query block starts among the keys
    if nonpad is not None and (causal or window):
        offset = ops.subtract(ops.cast(nonpad, "int64"), np.int64(q_len)) \
            if isinstance(nonpad, Tensor) else np.asarray(nonpad, np.int64).reshape(-1) - q_len
    bias = _mask_bias(n.t(3), kv_len, dtype) if n.has(3) else None
    if causal:
        bias = _add(bias, _frontier(offset, q_len, kv_len, None, 0, dtype))
    if window:
        bias = _add(bias, _frontier(offset, q_len, kv_len, left if left >= 0 else None,
                                    right if right >= 0 else None, dtype))
    if nonpad is not None:
        keys = np.arange(kv_len).reshape(1, 1, 1, kv_len)
        limit = ops.reshape(ops.cast(nonpad, "int64"), (batch, 1, 1, 1)) \
            if isinstance(nonpad, Tensor) else np.asarray(nonpad, np.int64).reshape(batch, 1, 1, 1)
        valid = ops.less(keys.astype(np.int64), limit) if isinstance(limit, Tensor) else keys < limit
        bias = _add(bias, _bias(valid, dtype))

    kt = ops.transpose(ops.multiply(k, s), (0, 1, 3, 2))
    qk = _bmm(ops.multiply(q, s), kt)
    softcap = float(n.attr("softcap", 0.0))
    if softcap > 0:
        qk = ops.multiply(ops.tanh(ops.divide(qk, np.asarray(softcap, dtype))), np.asarray(softcap, dtype))
    mode = int(n.attr("qk_matmul_output_mode", 0))
    qk_out = qk
    logits = _add(qk, None if bias is None else _as_dtype(bias, dtype))
    if mode == 2:
        qk_out = logits
    precision = n.attr("softmax_precision")
    sdt = ONNX_DTYPES.get(precision, dtype) if precision is not None else dtype
    p = ops.softmax(ops.cast(logits, sdt) if sdt != dtype else logits, axis=-1)
    if bias is not None:                     # rows with no attendable key are zeros
        full = np.broadcast_to(bias, np.broadcast_shapes(np.shape(bias), (1, 1, q_len, kv_len))) \
            if _is_static(bias) else bias
        masked = np.isneginf(np.max(full, axis=-1, keepdims=True)) if _is_static(full) \
            else ops.equal(ops.max(full, axis=-1, keepdims=True), np.asarray(_NEG_INF, dtype))
        if not _is_static(masked) or masked.any():
            p = _where(masked, np.zeros((), sdt), p)
    if sdt != dtype:
        p = ops.cast(p, dtype)
    if mode == 3:
        qk_out = p
    y = _bmm(p, v)
    if rank == 3:
        y = ops.reshape(ops.transpose(y, (0, 2, 1, 3)), (batch, q_len, -1))
    return [y, present_k, present_v, qk_out]


def _as_dtype(x, dtype: str):
    return np.asarray(x, dtype) if _is_static(x) else x


@register("RotaryEmbedding", opsets=(23, OPSETS[1]))
def _rotary_embedding(n: NodeInputs) -> List[object]:
    """Rotary position embedding (RoFormer, Su et al. 2021) of ``input`` (B, S, hidden) or
    (B, heads, S, head size) with ``cos_cache``/``sin_cache`` (max positions, rotary dim / 2)
    read at ``position_ids`` (B, S), or (B, S, rotary dim / 2) caches when no ids are given;
    the first ``rotary_embedding_dim`` channels of each head rotate, in halves or interleaved
    pairs, the rest pass through."""
    x, cos, sin = n.t(0), n.t(1), n.t(2)
    shape = shape_of(x)
    if len(shape) == 4:
        x = ops.transpose(x, (0, 2, 1, 3))                           # (B, S, heads, D)
    elif len(shape) == 3:
        heads = n.attr("num_heads")
        if not heads or shape[2] % heads:
            raise n.fail(f"3-D input of shape {shape} needs attribute 'num_heads' dividing {shape[2]}")
        x = ops.reshape(x, (shape[0], shape[1], heads, shape[2] // heads))
    else:
        raise n.fail(f"input has shape {shape}; expected (B, S, hidden) or (B, heads, S, head size)")
    b, s, heads, d = shape_of(x)
    rot = int(n.attr("rotary_embedding_dim", 0)) or d
    if n.has(3):
        ids = n.t(3)
        cos, sin = ops.take(cos, ids, axis=0), ops.take(sin, ids, axis=0)
    if shape_of(cos)[-1] != rot // 2 or shape_of(sin)[-1] != rot // 2:
        raise n.fail(f"cos/sin caches have last dims {shape_of(cos)[-1]}/{shape_of(sin)[-1]}; "
                     f"expected rotary_embedding_dim / 2 = {rot // 2}")
    cos, sin = ops.unsqueeze(cos, (2,)), ops.unsqueeze(sin, (2,))   # (B, S, 1, rot / 2)
    interleaved = bool(n.attr("interleaved", 0))
    if interleaved:
        x1 = ops.slice(x, [0], [rot], [2], axes=[3])
        x2 = ops.slice(x, [1], [rot], [2], axes=[3])
    else:
        x1 = ops.slice(x, [0], [rot // 2], axes=[3])
        x2 = ops.slice(x, [rot // 2], [rot], axes=[3])
    real = ops.subtract(ops.multiply(cos, x1), ops.multiply(sin, x2))
    imag = ops.add(ops.multiply(sin, x1), ops.multiply(cos, x2))
    if interleaved:
        rotated = ops.reshape(ops.concat([ops.unsqueeze(real, (4,)), ops.unsqueeze(imag, (4,))], axis=4),
                              (b, s, heads, rot))
    else:
        rotated = ops.concat([real, imag], axis=3)
    y = rotated if rot == d else ops.concat([rotated, ops.slice(x, [rot], [d], axes=[3])], axis=3)
    return [ops.transpose(y, (0, 2, 1, 3)) if len(shape) == 4 else ops.reshape(y, shape)]
