"""ONNX converters of the stateful sequence ops of recurrent LLM layers (opset 27): the
``CausalConvWithState`` of Mamba / Gated DeltaNet blocks and ``LinearAttention``. Each returns
its output and the state to carry into the next call. Conventions as in :mod:`.onnx_ops`.

* ``CausalConvWithState``: ``x`` (B, C, L) after ``past_state`` (B, C, K - 1; zeros when
  absent) along time, a depthwise valid ``ops.conv2d`` with the (C, 1, K) kernel (as
  (B, C, 1, L + K - 1)), plus ``bias``, optionally SiLU; the present state is the last
  ``K - 1`` positions of the concatenation.
* ``LinearAttention``: see :func:`_linear_attention`.

Source: ONNX operator spec (CausalConvWithState-27, LinearAttention-27),
``onnx.reference.ops`` (``op_causal_conv_with_state``, ``op_linear_attention``); Yang et al.,
"Gated Delta Networks" (2024) for the update rules.
"""

from __future__ import annotations

from typing import List

import numpy as np

from .. import ops
from ..builder import Tensor
from .onnx_registry import OPSETS, NodeInputs, np_dtype, register, same_dtype, shape_of


@register("CausalConvWithState", opsets=(27, OPSETS[1]))
def _causal_conv_with_state(n: NodeInputs) -> List[object]:
    x, w = n.t(0), n.t(1)
    xs, ws = shape_of(x), shape_of(w)
    if len(xs) != 3 or len(ws) != 3 or ws[:2] != (xs[1], 1) or ws[2] < 1:
        raise n.fail(f"inputs 'input' {xs} and 'weight' {ws}; expected (B, C, L) and (C, 1, K), K >= 1")
    (b, c, length), k = xs, ws[2]
    act = n.str_attr("activation", "none")
    if act not in ("none", "silu", "swish"):
        raise n.fail(f"attribute 'activation' is {act!r}; expected none, silu or swish")
    if n.has(3):
        past = same_dtype(n, x, n.t(3))[1]
        if shape_of(past) != (b, c, k - 1):
            raise n.fail(f"input 'past_state' has shape {shape_of(past)}; expected {(b, c, k - 1)}")
        full = ops.concat([past, x], axis=2) if k > 1 else x
    else:
        full = ops.pad(x, [(0, 0), (0, 0), (k - 1, 0)]) if k > 1 else x
    w4 = ops.reshape(w, (c, 1, 1, k)) if isinstance(w, Tensor) else np.reshape(w, (c, 1, 1, k))
    bias = same_dtype(n, x, n.t(2))[1] if n.has(2) else None
    y = ops.conv2d(ops.reshape(full, (b, c, 1, length + k - 1)), w4, bias, strides=(1, 1), padding=0,
                   dilation=(1, 1), groups=c)
    y = ops.reshape(y, (b, c, length))
    if act != "none":
        y = ops.multiply(y, ops.sigmoid(y))
    state = ops.slice(full, [length], [length + k - 1], axes=[2])
    return [y, state]


#: the longest sequence ``LinearAttention`` unrolls (~10 ops per token)
MAX_STEPS = 64

_RULES = {"linear": (False, False), "gated": (True, False), "delta": (False, True), "gated_delta": (True, True)}


def _heads(n: NodeInputs, t, name: str, heads: int):
    """(B, T, H*D) -> (B, T, H, D), float32."""
    s = shape_of(t)
    if len(s) != 3 or s[2] % heads:
        raise n.fail(f"input '{name}' has shape {s}; expected (B, T, H*D) with H = {heads}")
    t = ops.reshape(t, (s[0], s[1], heads, s[2] // heads))
    return ops.cast(t, "float32") if t.dtype != "float32" else t


def _step(t, i: int):
    """Token ``i`` of (B, T, H, D): (B, H, D)."""
    s = shape_of(t)
    return ops.reshape(ops.slice(t, [i], [i + 1], axes=[1]), (s[0], s[2], s[3]))


@register("LinearAttention", opsets=(27, OPSETS[1]))
def _linear_attention(n: NodeInputs) -> List[object]:
    """The recurrence of ``update_rule`` over the tokens, unrolled (``T <= MAX_STEPS``), in
    float32 (the reference's precision), per KV head, state ``S`` (B, H_kv, d_k, d_v)::

        gated:  S = exp(g_t) * S                       (g_t per head or per key channel)
        delta:  v_t = beta_t * (v_t - S^T k_t)
        S = S + k_t (x) v_t;  o_t = scale * q_t^T S    (q heads grouped onto KV heads: GQA)

    ``scale`` 0 means ``1 / sqrt(d_k)``. Returns the output (B, T, H_q * d_v) in the query's
    dtype and the present state in the past state's (else the query's) dtype."""
    q_heads, kv_heads = n.attr("q_num_heads"), n.attr("kv_num_heads")
    if not q_heads or not kv_heads or int(q_heads) % int(kv_heads):
        raise n.fail(f"attributes 'q_num_heads' {q_heads} and 'kv_num_heads' {kv_heads}; expected positive, "
                     "q_num_heads a multiple of kv_num_heads")
    hq, hkv = int(q_heads), int(kv_heads)
    rule = n.str_attr("update_rule", "gated_delta")
    if rule not in _RULES:
        raise n.fail(f"attribute 'update_rule' is {rule!r}; expected one of {list(_RULES)}")
    gating, delta = _RULES[rule]
    for i, name, want in ((4, "decay", gating), (5, "beta", delta)):
        if n.has(i) != want:
            raise n.fail(f"input '{name}' is {'absent' if want else 'given'}; update_rule {rule!r} "
                         f"{'requires' if want else 'forbids'} it")
    query = n.t(0)
    q, k, v = _heads(n, query, "query", hq), _heads(n, n.t(1), "key", hkv), _heads(n, n.t(2), "value", hkv)
    b, steps, _, dk = shape_of(q)
    dv = shape_of(v)[3]
    if shape_of(k)[:2] != (b, steps) or shape_of(v)[:2] != (b, steps) or shape_of(k)[3] != dk:
        raise n.fail(f"inputs 'query' {shape_of(query)}, 'key' {shape_of(n.t(1))}, 'value' {shape_of(n.t(2))}; "
                     "expected one (B, T) and the key head size of the query")
    if steps > MAX_STEPS:
        raise n.fail(f"the sequence has {steps} tokens; expected at most {MAX_STEPS} (the recurrence is unrolled)")
    if gating:
        last = shape_of(n.t(4))[-1]
        if last not in (hkv, hkv * dk):
            raise n.fail(f"input 'decay' has shape {shape_of(n.t(4))}; expected a last axis of {hkv} or {hkv * dk}")
        g = _heads(n, n.t(4), "decay", hkv)  # (B, T, H_kv, 1 or d_k)
    if delta:
        last = shape_of(n.t(5))[-1]
        if last not in (hkv, 1):
            raise n.fail(f"input 'beta' has shape {shape_of(n.t(5))}; expected a last axis of {hkv} or 1")
        beta = _heads(n, n.t(5), "beta", last)  # (B, T, H_kv or 1, 1)
    state_dtype = query.dtype
    if n.has(3):
        past = n.t(3)
        if shape_of(past) != (b, hkv, dk, dv):
            raise n.fail(f"input 'past_state' has shape {shape_of(past)}; expected {(b, hkv, dk, dv)}")
        state_dtype = past.dtype if isinstance(past, Tensor) else np_dtype(past).name
        state = ops.cast(past, "float32") if state_dtype != "float32" else past
    else:
        state = np.zeros((b, hkv, dk, dv), np.float32)
    scale = float(n.attr("scale", 0.0)) or 1.0 / float(np.sqrt(dk))
    outs = []
    for i in range(steps):
        k_t, v_t = _step(k, i), _step(v, i)
        if gating:
            state = ops.multiply(state, ops.unsqueeze(ops.exp(_step(g, i)), [3]))
        if delta:
            v_t = ops.multiply(_step(beta, i), ops.subtract(v_t, ops.einsum("bhdm,bhd->bhm", state, k_t)))
        state = ops.add(state, ops.multiply(ops.unsqueeze(k_t, [3]), ops.unsqueeze(v_t, [2])))
        q_t = ops.reshape(_step(q, i), (b, hkv, hq // hkv, dk))
        o = ops.einsum("bhgd,bhdm->bhgm", ops.multiply(q_t, np.float32(scale)), state)
        outs.append(ops.reshape(o, (b, 1, hq * dv)))
    out = outs[0] if steps == 1 else ops.concat(outs, axis=1)
    if out.dtype != query.dtype:
        out = ops.cast(out, query.dtype)
    if isinstance(state, np.ndarray):  # no tokens: the state passes through
        state = ops.add(state, np.zeros((), np.float32))
    return [out, ops.cast(state, state_dtype) if state_dtype != "float32" else state]
