"""``FuseAttention`` (``mlc-fuse-attention``): scaled dot-product attention written as
``batch_matmul -> (scale, + bias) -> softmax -> batch_matmul`` becomes one call of a fused
attention function (flash attention's online softmax; the kernel comes from the caller, e.g.
:func:`~mlc_mlir.schedule.rules.attention.emit_flash_attention`).

Before (torch's decomposition of ``scaled_dot_product_attention`` with grouped-query heads; the
view ops elided)::

    %kb = linalg.generic {broadcast}  ins(%k : 1x2x1x96x32)   -> 1x2x2x96x32   // repeat_kv
    %kt = linalg.transpose ins(collapse(%kb) : 1x4x96x32) permutation = [0, 1, 3, 2]
    %s  = linalg.batch_matmul ins(%q * c1, %kt * c2 : 4x1x32, 4x32x96)
    %x  = linalg.generic {addf} ins(expand(%s), %bias : 1x4x1x96, 1x1x1x96)
    %p  = softmax.max / shift / exp / sum / div (%x), then where(all -inf, 0, %p)
    %o  = linalg.batch_matmul ins(collapse(%p), collapse(broadcast(%v)) : 4x1x96, 4x96x32)

After::

    %a = func.call @main_attention(%q, %k, %v, %bias) : (1x4x1x32, 1x2x96x32, 1x2x96x32, 1x1x1x96) -> 1x4x1x32
    %o = tensor.collapse_shape %a [[0, 1], [2], [3]] : 4x1x32

The pattern is recognized structurally (op kinds and body ops), and the data movement on each
operand's way (reshapes, transposes, the broadcast of K/V heads, scalar scales) is checked by
replaying it with numpy on an index array of the source: ``Q`` must reach the first matmul as
``Q.reshape(B*H, Sq, D)``, ``K`` as ``repeat(K, H/Hkv, heads).reshape(B*H, Skv, D)^T``, ``V``
likewise untransposed, the scores reach the softmax as ``S.reshape(x.shape)`` and the
probabilities the second matmul as ``P.reshape(B*H, Sq, Skv)``. Anything else is left as it
is. The ops the call replaces are erased when dead (DCE), so the broadcast copies of K/V go.
A constant bias of zeros is dropped, and one whose query rows are equal is passed as one row.

Source: TVM Relax's ``FuseOpsByPattern`` with the attention patterns of
``relax.backend.patterns`` (``make_attention_pattern``: matmul, softmax, matmul with optional
scale and bias); PyTorch's SDPA decomposition (``_scaled_dot_product_attention_math`` with
``_safe_softmax``).
"""

from __future__ import annotations

import dataclasses
from typing import Callable, List, Optional, Sequence, Tuple

import numpy as np

from ..._mlir import func_d, ir, tensor_d
from ...ir import emitters
from ...ir.module import OP_NAME_ATTR, Module
from ...graph.emit_rewrites import named_fill, reshape
from ...graph.linalg_attrs import indexing_maps, iterator_types
from ...graph.use_def import named_ops, producer
from ...graph.pass_manager import ScopedPass, register_pass
from ...graph.rewrite import body_ops

#: ``kernel(module_body, name, q_type, k_type, v_type, bias_type or None, scale) -> func.FuncOp``.
AttentionKernel = Callable[..., func_d.FuncOp]

#: A dynamic dim's size in the numpy replay of the view ops (any size above 1 would do).
_REPLAY_SIZE = 3


def _body(op: ir.Operation) -> List[ir.Operation]:
    """The ops of a ``linalg.generic`` body, without the ``linalg.yield``."""
    ops = [o.operation for o in op.regions[0].blocks[0].operations]
    return ops[:-1]


def _generic(v: ir.Value, body: Sequence[str], n_in: int) -> Optional[ir.Operation]:
    """The ``linalg.generic`` producing ``v`` if its body ops are ``body`` (besides in-body
    constants) and it has ``n_in`` inputs."""
    op = producer(v)
    if op is None or op.name != "linalg.generic" or len(op.operands) != n_in + 1:
        return None
    names = [o.name for o in _body(op) if o.name != "arith.constant"]
    return op if names == list(body) else None


def _in_body_constant(op: ir.Operation) -> Optional[float]:
    """The float of an elementwise ``x * c`` / ``x / c`` generic whose ``c`` is an in-body
    constant; None for other bodies."""
    ops = _body(op)
    consts = [o for o in ops if o.name == "arith.constant"]
    rest = [o for o in ops if o.name != "arith.constant"]
    if len(consts) != 1 or len(rest) != 1 or rest[0].name not in ("arith.mulf", "arith.divf"):
        return None
    c, arith = consts[0], rest[0]
    if not isinstance(c.attributes["value"], ir.FloatAttr) or arith.operands[1] != c.results[0] or \
            not isinstance(arith.operands[0].owner, ir.Block):
        return None
    value = ir.FloatAttr(c.attributes["value"]).value
    return value if arith.name == "arith.mulf" else (1.0 / value if value else None)


def _identity(m: ir.AffineMap) -> bool:
    return m == ir.AffineMap.get_identity(m.n_dims, context=m.context)


@dataclasses.dataclass
class _View:
    """A value traced back to its ``source`` through data movement and scalar scales."""

    source: ir.Value
    ops: List[ir.Operation]     # forward order
    scale: float


def _trace(v: ir.Value) -> _View:
    """The farthest of :func:`_views`."""
    return _views(v)[-1]


def _views(v: ir.Value) -> List[_View]:
    """Walk back from ``v`` through reshapes, transposes, broadcasts (a copy body) and scalar
    scales (``x * c``): the views of ``v`` on every value of the way, nearest first (``v``
    itself with no ops); see :func:`_replay`."""
    ops, scale = [], 1.0
    out = [_View(v, [], 1.0)]
    while True:
        op = producer(v)
        if op is None:
            break
        if op.name in ("tensor.collapse_shape", "tensor.expand_shape", "linalg.transpose"):
            ops.append(op)
            v = op.operands[0]
            out.append(_View(v, ops[::-1], scale))
            continue
        if op.name == "linalg.generic" and len(op.operands) == 2 and \
                all(i == "parallel" for i in iterator_types(op)):
            maps = indexing_maps(op)
            body = _body(op)
            if _identity(maps[1]) and not body and \
                    op.regions[0].blocks[0].operations[0].operands[0] == op.regions[0].blocks[0].arguments[0]:
                if all(isinstance(e, ir.AffineDimExpr) or (isinstance(e, ir.AffineConstantExpr) and e.value == 0)
                       for e in maps[0].results):
                    ops.append(op)    # a broadcast
                    v = op.operands[0]
                    out.append(_View(v, ops[::-1], scale))
                    continue
            c = _in_body_constant(op) if _identity(maps[0]) and _identity(maps[1]) else None
            if c is not None:
                scale *= c
                v = op.operands[0]
                out.append(_View(v, ops[::-1], scale))
                continue
        break
    return out


def _concrete(t: ir.RankedTensorType) -> Tuple[int, ...]:
    return tuple(_REPLAY_SIZE if t.is_dynamic_dim(d) else t.shape[d] for d in range(t.rank))


def _replay(x: np.ndarray, ops: Sequence[ir.Operation]) -> Optional[np.ndarray]:
    """Apply the view ops of :func:`_trace` to ``x`` with numpy; None if a shape disagrees."""
    for op in ops:
        rt = ir.RankedTensorType(op.results[0].type)
        if op.name == "tensor.collapse_shape":
            groups = [[ir.IntegerAttr(i).value for i in g] for g in ir.ArrayAttr(op.attributes["reassociation"])]
            x = x.reshape([int(np.prod([x.shape[i] for i in g])) for g in groups])
        elif op.name == "tensor.expand_shape":
            groups = [[ir.IntegerAttr(i).value for i in g] for g in ir.ArrayAttr(op.attributes["reassociation"])]
            shape = []
            for src, g in enumerate(groups):
                sizes = [rt.shape[d] if not rt.is_dynamic_dim(d) else -1 for d in g]
                if sizes.count(-1) > 1:
                    return None
                known = int(np.prod([s for s in sizes if s != -1]))
                shape += [s if s != -1 else x.shape[src] // known for s in sizes]
            x = x.reshape(shape)
        elif op.name == "linalg.transpose":
            x = np.transpose(x, [ir.IntegerAttr(p).value if not isinstance(p, int) else p
                                 for p in op.attributes["permutation"]])
        else:   # broadcast generic: out[i] = in[map(i)]
            m = indexing_maps(op)[0]
            shape = [rt.shape[d] if not rt.is_dynamic_dim(d) else None for d in range(rt.rank)]
            for r, e in enumerate(m.results):
                if isinstance(e, ir.AffineDimExpr) and shape[e.position] is None:
                    shape[e.position] = x.shape[r]
            if None in shape:
                return None
            grid = np.indices(shape)
            idx = tuple(grid[e.position] if isinstance(e, ir.AffineDimExpr) else np.zeros(shape, int)
                        for e in m.results)
            x = x[idx]
        if x.ndim != rt.rank or any(not rt.is_dynamic_dim(d) and x.shape[d] != rt.shape[d]
                                    for d in range(rt.rank)):
            return None
    return x


def _reaches(view: _View, expected: np.ndarray, src: np.ndarray) -> bool:
    got = _replay(src, view.ops)
    return got is not None and got.shape == expected.shape and np.array_equal(got, expected)


def _first_reaching(views: Sequence[_View], layout) -> Optional[_View]:
    """The farthest of ``views`` whose source ``t`` (rank 4, or rank 3 read as ``(1, ...)``) the
    view ops carry to ``layout(4-D shape, 4-D index array of t)`` (None: no such layout)."""
    for w in reversed(views):
        t = ir.RankedTensorType(w.source.type)
        if t.rank not in (3, 4) or (t.rank == 3 and t.is_dynamic_dim(0)):
            continue
        src = _index_array(t)
        src4 = src.reshape((1,) * (4 - t.rank) + src.shape)
        expected = layout(src4.shape, src4)
        if expected is not None and _reaches(w, expected, src):
            return w
    return None


def _dims4(t: ir.RankedTensorType) -> Tuple[List[int], List[bool]]:
    """The concrete sizes (:func:`_concrete`) and dynamic flags of ``t`` read as rank 4."""
    pad = 4 - t.rank
    return [1] * pad + list(_concrete(t)), [False] * pad + [t.is_dynamic_dim(d) for d in range(t.rank)]


def _as_4d(v: ir.Value, name: str) -> ir.Value:
    """``v`` itself (rank 4) or expanded from ``(N, S, D)`` to ``(1, N, S, D)``."""
    t = ir.RankedTensorType(v.type)
    if t.rank == 4:
        return v
    sizes = [tensor_d.dim(v, emitters.index_constant(d)) if t.is_dynamic_dim(d)
             else t.shape[d] for d in range(3)]
    t4 = ir.RankedTensorType.get([1] + list(t.shape), t.element_type)
    dynamic, static = emitters.mixed_sizes([1] + sizes)
    r = tensor_d.ExpandShapeOp(t4, v, [[0, 1], [2], [3]], dynamic, static).result
    emitters.set_name(r.owner, name)
    return r


def _index_array(t: ir.RankedTensorType, shape=None) -> np.ndarray:
    shape = _concrete(t) if shape is None else shape
    return np.arange(int(np.prod(shape))).reshape(shape)


def _zero_init(mm: ir.Operation) -> bool:
    fill = named_fill(mm.operands[2])
    if fill is None:
        return False
    c = producer(fill.operands[0])
    return c is not None and c.name == "arith.constant" and ir.FloatAttr(c.attributes["value"]).value == 0.0


def _row_reduction(op: Optional[ir.Operation], body: Sequence[str], inputs: Sequence[ir.Value]) -> bool:
    """Whether ``op`` is a ``linalg.generic`` reducing the last axis only, with body ops ``body``
    and inputs ``inputs``."""
    return op is not None and op.name == "linalg.generic" and list(op.operands[:-1]) == list(inputs) and \
        body_ops(op) == list(body) and iterator_types(op)[-1] == "reduction" and \
        iterator_types(op).count("reduction") == 1


def _row_softmax_input(p: ir.Value) -> Optional[ir.Value]:
    """``x`` if ``p`` is ``ops.softmax``'s row form ``e * inv`` with ``e = exp(x - m)``, ``m``
    the row max of x, ``inv = 1 / s`` and ``s`` the row sum of ``e``, else None."""
    out = _generic(p, ["arith.mulf"], 2)
    ex = out and _generic(out.operands[0], ["arith.subf", "math.exp"], 2)
    inv = out and _generic(out.operands[1], ["arith.divf"], 1)
    if not ex or not inv:
        return None
    x, m = ex.operands[0], ex.operands[1]
    if not _row_reduction(producer(m), ["arith.maxnumf"], [x]):
        return None
    s = producer(inv.operands[0])
    return x if _row_reduction(s, ["arith.addf"], [out.operands[0]]) else None


def _softmax_input(p: ir.Value) -> Optional[ir.Value]:
    """``x`` if ``p`` is ``exp(x - max(x)) / sum(exp(x - max(x)))`` over the last axis (the
    decomposed softmax, or ``ops.softmax``'s row form: :func:`_row_softmax_input`), else None."""
    row = _row_softmax_input(p)
    if row is not None:
        return row
    div = _generic(p, ["arith.divf"], 2)
    if div is None:
        return None
    e, total = div.operands[0], _trace(div.operands[1])
    red = producer(total.source)
    if red is None or red.name != "linalg.generic" or red.operands[0] != e or \
            body_ops(red) != ["arith.addf"] or iterator_types(red)[-1] != "reduction":
        return None
    ex = _generic(e, ["math.exp"], 1)
    shift = ex and _generic(ex.operands[0], ["arith.subf"], 2)
    if not shift:
        return None
    x, mx = shift.operands[0], producer(_trace(shift.operands[1]).source)
    if mx is None or mx.name != "linalg.generic" or mx.operands[0] != x or \
            body_ops(mx) != ["arith.maximumf"] or iterator_types(mx)[-1] != "reduction":
        return None
    rank = ir.RankedTensorType(x.type).rank
    if iterator_types(red).count("reduction") != 1 or iterator_types(mx).count("reduction") != 1 or \
            len(iterator_types(red)) != rank:
        return None
    return x


def _unguarded(p: ir.Value, mod: Module) -> ir.Value:
    """``p`` without torch's safe-softmax guard ``where(all(x == -inf), 0, softmax(x))`` (the
    fused kernel yields 0 for such rows itself)."""
    w = _generic(p, ["arith.cmpi", "arith.select"], 3)
    if w is None:
        return p
    zeros = producer(w.operands[1])
    value = mod.constant_value(zeros.attributes["value"]) if zeros is not None and \
        zeros.name == "arith.constant" else None
    if value is None or value.size == 0 or np.any(value != 0):
        return p
    cond = _trace(w.operands[0]).source      # eq(max(eq(eq(x, -inf), 0)), 0): no finite score
    c1 = _generic(cond, ["arith.cmpi", "arith.extui"], 1)
    red = c1 and producer(_trace(c1.operands[0]).source)
    if not red or red.name != "linalg.generic" or body_ops(red) != ["arith.maxsi"]:
        return p
    c2 = _generic(red.operands[0], ["arith.cmpi", "arith.extui"], 1)
    c3 = c2 and _generic(c2.operands[0], ["arith.cmpf", "arith.extui"], 1)
    if not c3:
        return p
    return w.operands[2] if _softmax_input(w.operands[2]) is not None and \
        _softmax_input(w.operands[2]) == c3.operands[0] else p


@dataclasses.dataclass
class _Match:
    q: ir.Value
    k: ir.Value
    v: ir.Value
    bias: Optional[ir.Value]
    bias_groups: Optional[List[List[int]]]    # expand a lower-rank bias to 4-D
    scale: float


def _bias_of(x: ir.Value) -> Tuple[ir.Value, Optional[ir.Value], Optional[List[List[int]]]]:
    """``(scores, bias, groups)`` if ``x = scores + bias`` (4-D ``x``) with ``bias`` broadcast
    along the leading dims (numpy style: a map of increasing dims, or zeros on unit dims) and
    whole along the last one; ``groups``: the reassociation expanding a lower-rank bias to
    ``(B|1, H|1, Sq|1, Skv)`` (None when it is 4-D already). Else ``(x, None, None)``."""
    add = _generic(x, ["arith.addf"], 2)
    xt = ir.RankedTensorType(x.type)
    if add is None or xt.rank != 4 or not all(i == "parallel" for i in iterator_types(add)):
        return x, None, None
    maps = indexing_maps(add)
    for s, b in ((0, 1), (1, 0)):
        bt = ir.RankedTensorType(add.operands[b].type)
        if not (_identity(maps[s]) and _identity(maps[2])) or bt.element_type != xt.element_type:
            continue
        res = list(maps[b].results)
        pos = [e.position if isinstance(e, ir.AffineDimExpr) else None for e in res]
        ok = bool(res) and pos[-1] == 3 and not bt.is_dynamic_dim(bt.rank - 1) and bt.shape[-1] == xt.shape[3]
        for i, (e, p) in enumerate(zip(res, pos)):
            if p is None:   # a constant: 0 on a unit dim of a 4-D bias
                ok &= bt.rank == 4 and isinstance(e, ir.AffineConstantExpr) and e.value == 0 and bt.shape[i] == 1
            elif bt.rank == 4:
                ok &= p == i and (bt.shape[i] == 1 or bt.shape[i] == xt.shape[i])
            else:
                ok &= (i == 0 or (pos[i - 1] is not None and pos[i - 1] < p)) and \
                    (bt.shape[i] == xt.shape[p] or (bt.shape[i] == 1 and not bt.is_dynamic_dim(i)))
        if not ok or (bt.rank != 4 and not bt.has_static_shape):
            continue
        if bt.rank == 4:
            return add.operands[s], add.operands[b], None
        groups, start = [], 0
        for p in pos:
            groups.append(list(range(start, p + 1)))
            start = p + 1
        return add.operands[s], add.operands[b], groups
    return x, None, None


def match_attention(o: ir.Operation, mod: Module) -> Optional[_Match]:
    """The operands of the attention whose output is the ``linalg.batch_matmul`` ``o``, or None
    (see the module docstring)."""
    f32 = ir.F32Type.get()
    if ir.RankedTensorType(o.results[0].type).element_type != f32 or not _zero_init(o):
        return None
    pv, vvs = _trace(o.operands[0]), [w for w in _views(o.operands[1]) if w.scale == 1.0]
    if pv.scale != 1.0:
        return None
    x = _softmax_input(_unguarded(pv.source, mod))
    if x is None:
        return None
    s_val, bias, groups = _bias_of(x)
    sv = _trace(s_val)
    s = producer(sv.source)
    if s is None or s.name != "linalg.batch_matmul" or not _zero_init(s):
        return None
    xt = ir.RankedTensorType(x.type)
    qv = _first_reaching(_views(s.operands[0]), lambda t, i: i.reshape(t[0] * t[1], t[2], t[3]))
    if qv is None:
        return None
    qt = ir.RankedTensorType(qv.source.type)
    (b, h, sq, d), qdyn = _dims4(qt)
    if qdyn[0] or qdyn[1] or qdyn[3]:
        return None

    def kv_layout(t, i):   # (B, Hkv, Skv, D) read by heads h // (H / Hkv)
        if t[0] != b or t[3] != d or h % t[1]:
            return None
        return np.repeat(i, h // t[1], axis=1).reshape(b * h, t[2], d)

    kv = _first_reaching(_views(s.operands[1]), lambda t, i: None if kv_layout(t, i) is None
                         else kv_layout(t, i).transpose(0, 2, 1))
    vv = _first_reaching(vvs, kv_layout)
    if kv is None or vv is None:
        return None
    kt, vt = (ir.RankedTensorType(w.source.type) for w in (kv, vv))
    if kt.shape != vt.shape or not kt.has_static_shape or any(t.element_type != f32 for t in (qt, kt, vt)):
        return None
    skv = kt.shape[-2]
    sidx = _index_array(ir.RankedTensorType(s.results[0].type), (b * h, sq, skv))
    pshape = (b, h, sq, skv) if xt.rank == 4 else (b * h, sq, skv)
    pidx = np.arange(b * h * sq * skv).reshape(pshape)
    if not (_reaches(sv, sidx.reshape(pshape), sidx) and _reaches(pv, pidx.reshape(b * h, sq, skv), pidx)):
        return None
    if bias is not None and xt.rank != 4:
        return None
    return _Match(qv.source, kv.source, vv.source, bias, groups, qv.scale * kv.scale * sv.scale)


def _constant_bias(bias: ir.Value, mod: Module, label: str) -> Optional[ir.Value]:
    """A constant 4-D ``bias`` made cheaper for the kernel: None when it is all zeros (BERT's
    mask without padding), its first row (``tensor.extract_slice`` to ``(B|1, H|1, 1, Skv)``,
    broadcast over the query rows) when every query row holds the same values; else ``bias``.
    The kernel reads a row-wise bias as strided columns, a broadcast one as one scalar per key
    (SDPA 1x2x128x64 on a Zen 5 core: 0.059 ms with a 128x128 zero bias, 0.049 without)."""
    op = producer(bias)
    value = mod.constant_value(op.attributes["value"]) if op is not None and op.name == "arith.constant" else None
    if value is None or value.ndim != 4:
        return bias
    if not np.any(value):
        return None
    if value.shape[2] == 1 or np.any(value != value[:, :, :1, :]):
        return bias
    sizes = list(value.shape[:2]) + [1, value.shape[3]]
    row = tensor_d.extract_slice(ir.RankedTensorType.get(sizes, ir.RankedTensorType(bias.type).element_type),
                                 bias, [], [], [], [0, 0, 0, 0], sizes, [1, 1, 1, 1])
    emitters.set_name(row.owner, f"{label}.bias_row")
    return row


@register_pass
class FuseAttention(ScopedPass):
    """Replace each recognized attention by a call of a fused attention function (see the module
    docstring); attentions of the same operand types and scale (the layers of a transformer)
    call one function.

    Parameters
    ----------
    kernel : AttentionKernel
        ``kernel(module_body, name, q_type, k_type, v_type, bias_type, scale)`` emits the fused
        function at the end of ``module_body`` and returns it (``out: (B, H, Sq, D)``).
    functions : sequence of str, optional
        As :class:`~.pass_manager.ScopedPass`.
    """

    name = "mlc-fuse-attention"

    def __init__(self, kernel: AttentionKernel, functions: Optional[Sequence[str]] = None):
        super().__init__(None, functions)
        self.kernel = kernel

    def transform(self, mod: Module) -> Module:
        used = set(mod.function_names())
        body = mod.ir_module.body
        kernels = {}    # (operand types, scale) -> the fused function: one per distinct attention
        for o in named_ops(mod, "linalg.batch_matmul", self.functions):
            m = match_attention(o, mod)
            if m is None:
                continue
            fname = o.parent.opview.sym_name.value
            label = ir.StringAttr(o.attributes[OP_NAME_ATTR]).value
            with ir.InsertionPoint(o), o.location:
                bias = m.bias
                if bias is not None and m.bias_groups is not None:
                    bt = ir.RankedTensorType(bias.type)
                    shape = [1] * 4
                    for i, g in enumerate(m.bias_groups):
                        shape[g[-1]] = bt.shape[i]
                    bias = reshape(bias, m.bias_groups, shape, f"{label}.bias_4d")
                bias = _constant_bias(bias, mod, label) if bias is not None else None
                args = [_as_4d(x, f"{label}.{n}_4d") for x, n in ((m.q, "q"), (m.k, "k"), (m.v, "v"))] + \
                    ([bias] if bias is not None else [])
                types = [ir.RankedTensorType(a.type) for a in args[:3]] + \
                    [ir.RankedTensorType(bias.type) if bias is not None else None]
                key = (tuple(str(t) for t in types), m.scale)
                if key not in kernels:
                    name, k = f"{fname}_attention", 1
                    while name in used:
                        name, k = f"{fname}_attention_{k}", k + 1
                    used.add(name)
                    kernels[key] = self.kernel(body, name, *types, m.scale)
                fn = kernels[key]
                call = func_d.CallOp(fn, args)
                call.attributes[OP_NAME_ATTR] = ir.StringAttr.get(f"{label}.attention")
                out = reshape(call.results[0], [[0, 1], [2], [3]], ir.RankedTensorType(o.results[0].type).shape, label)
            o.results[0].replace_all_uses_with(out)
        return mod
