"""Fused attention on CPU: ``softmax(scale * Q K^T + bias) V`` as one loop nest with an online
softmax over key blocks (flash attention's recurrence), emitted as a private function on
tensors (``scf.forall`` / ``scf.for`` / ``vector``).

The unit is one query row of one head: rows ``(b, h, i)`` run in parallel (``scf.forall``);
each walks the keys in blocks of ``V`` (one vector register of scores, ``V`` =
:func:`key_block`), keeping the running row maximum ``m``, the running sum ``l`` and the
accumulator ``acc`` (a ``head_dim`` vector) in registers:

    s     = scale * (q . k_j  for j in block) + bias[block]       (V dot products, vectorized over D)
    m'    = max(m, max(s));  a = exp(m - m');  p = exp(s - m')
    l     = a * l + sum(p);  acc = a * acc + sum_j p_j v_j
    out   = acc / l          (0 where every key is masked: l == 0, as torch's safe softmax)

No score matrix is materialized (a block's scores live in one vector), K and V are read in
place: grouped-query attention reads K/V head ``h // (H / Hkv)`` (no ``repeat_kv`` copy), and a
block whose bias is ``-inf`` everywhere (a causal or length mask past the row's last key) is
skipped after reading its ``V`` bias values, so a decode step over a cache of ``max_seq_len``
rows reads only the keys it attends to. Keys past the last full block run as blocks of one.

Source: Dao et al., "FlashAttention" (2022) and Milakov & Gimelshein, "Online normalizer
calculation for softmax" (2018); llama.cpp's CPU ``flash_attn_ext`` (one query row per task,
online softmax over the KV cache); TVM Relax's ``attention`` op.
"""

from __future__ import annotations

from typing import Optional, Sequence

from ..._mlir import arith_d, func_d, ir, math_d, scf_d, tensor_d, vector_d
from ...errors import ScheduleError
from ...target import Target


def key_block(target: Target) -> int:
    """Keys per block: one vector register of float32 scores (``target.vector_lanes(32)``, 16
    with AVX-512, 8 with AVX2), so a block's scores, probabilities and masks stay in a register."""
    return target.vector_lanes(32)


def _idx(v: int) -> ir.Value:
    return arith_d.ConstantOp(ir.IndexType.get(), v).result


def _f32(v: float) -> ir.Value:
    return arith_d.ConstantOp(ir.F32Type.get(), v).result


def _dim(t: ir.Value, d: int) -> ir.Value:
    tt = ir.RankedTensorType(t.type)
    return _idx(tt.shape[d]) if not tt.is_dynamic_dim(d) else tensor_d.dim(t, _idx(d))


def _read(src: ir.Value, indices: Sequence[ir.Value], n: int) -> ir.Value:
    """``vector<n x f32>`` along the last dim of ``src`` at ``indices`` (in bounds)."""
    rank = ir.RankedTensorType(src.type).rank
    perm = ir.AffineMap.get(rank, 0, [ir.AffineDimExpr.get(rank - 1)])
    vt = ir.VectorType.get([n], ir.F32Type.get())
    return vector_d.transfer_read(vt, src, list(indices), ir.AffineMapAttr.get(perm), _f32(0.0),
                                  ir.ArrayAttr.get([ir.BoolAttr.get(True)]))


def _fast():
    return ir.Attribute.parse("#arith.fastmath<reassoc,contract>")


class _Row:
    """Emits the key loop of one query row (see the module docstring)."""

    def __init__(self, q, k, v, bias, b, h, hk, i, scale: float, head_dim: int):
        self.k, self.v, self.bias, self.b, self.hk = k, v, bias, b, hk
        self.d = head_dim
        self.q = arith_d.mulf(_read(q, [b, h, i, _idx(0)], head_dim),
                              vector_d.broadcast(ir.VectorType.get([head_dim], ir.F32Type.get()), _f32(scale)))
        if bias is not None:
            bt = ir.RankedTensorType(bias.type)
            self.bias_at = [(x if bt.shape[n] != 1 else _idx(0)) for n, x in enumerate((b, h, i))]

    def scores(self, j0: ir.Value, n: int) -> ir.Value:
        """``vector<n>`` of ``q . k_j`` for keys ``j0 .. j0 + n - 1``. With ``n`` a power of two
        dividing ``D``, each key's products are first summed chunk-wise into one ``vector<n>``
        and the ``n`` vectors are reduced together by a butterfly of shuffles and adds (``n - 1``
        adds of pairs, log2(n) levels: the transpose-reduce of ``hadd`` networks) instead of one
        horizontal reduction per key."""
        f32 = ir.F32Type.get()
        vt = ir.VectorType.get([n], f32)
        keys = [arith_d.addi(j0, _idx(t)) if t else j0 for t in range(n)]
        if n == 1 or n & (n - 1) or self.d % n:
            return vector_d.from_elements(vt, [vector_d.reduction(
                f32, vector_d.CombiningKind.ADD,
                arith_d.mulf(self.q, _read(self.k, [self.b, self.hk, j, _idx(0)], self.d)),
                fastmath=_fast()) for j in keys])
        chunks = [vector_d.extract_strided_slice(vt, self.q, [c], [n], [1]) for c in range(0, self.d, n)]
        parts = []
        for j in keys:
            w = None
            for c, qc in zip(range(0, self.d, n), chunks):
                kc = _read(self.k, [self.b, self.hk, j, _idx(c)], n)
                w = arith_d.mulf(qc, kc) if w is None else vector_d.fma(qc, kc, w)
            parts.append(w)
        h = n // 2
        while len(parts) > 1:   # each vector: keys of 2h lanes each -> twice the keys of h lanes
            lo = [i + g for g in range(0, n, 2 * h) for i in range(h)]
            lo = lo + [n + i for i in lo]
            hi = [i + h for i in lo]
            parts = [arith_d.addf(vector_d.shuffle(a, b, lo), vector_d.shuffle(a, b, hi))
                     for a, b in zip(parts[::2], parts[1::2])]
            h //= 2
        return parts[0]

    def block(self, j0: ir.Value, n: int, m, l, acc):
        """Emit the update of ``(m, l, acc)`` by keys ``j0 .. j0 + n - 1``; returns the new triple."""
        f32 = ir.F32Type.get()
        vt = ir.VectorType.get([n], f32)
        s = self.scores(j0, n)
        if self.bias is not None:
            s = arith_d.addf(s, _read(self.bias, self.bias_at + [j0], n))
        m_new = arith_d.maximumf(m, vector_d.reduction(f32, vector_d.CombiningKind.MAXIMUMF, s))
        # every score so far -inf: shift by 0, so that exp(-inf - 0) = 0 (no inf - inf NaN)
        dead = arith_d.cmpf(arith_d.CmpFPredicate.OEQ, m_new, _f32(float("-inf")))
        shift = arith_d.select(dead, _f32(0.0), m_new)
        alpha = math_d.exp(arith_d.subf(m, shift))
        p = math_d.exp(arith_d.subf(s, vector_d.broadcast(vt, shift)))
        l_new = arith_d.addf(arith_d.mulf(l, alpha), vector_d.reduction(f32, vector_d.CombiningKind.ADD, p,
                                                                       fastmath=_fast()))
        dvt = ir.VectorType.get([self.d], f32)
        acc = arith_d.mulf(acc, vector_d.broadcast(dvt, alpha))
        for t in range(n):
            j = arith_d.addi(j0, _idx(t)) if t else j0
            vv = _read(self.v, [self.b, self.hk, j, _idx(0)], self.d)
            pt = vector_d.broadcast(dvt, vector_d.extract(p, [], [t]))
            acc = vector_d.fma(pt, vv, acc)
        return m_new, l_new, acc

    def loop(self, lo: ir.Value, hi: ir.Value, n: int, init):
        """``scf.for`` over blocks of ``n`` keys in ``[lo, hi)`` (``hi - lo`` a multiple of ``n``)
        carrying ``(m, l, acc)``; a block whose bias is all ``-inf`` is skipped (``scf.if``)."""
        loop = scf_d.ForOp(lo, hi, _idx(n), list(init))
        with ir.InsertionPoint(loop.body):
            j0 = loop.induction_variable
            carried = list(loop.inner_iter_args)
            if self.bias is None:
                scf_d.YieldOp(list(self.block(j0, n, *carried)))
            else:
                f32 = ir.F32Type.get()
                bmax = vector_d.reduction(f32, vector_d.CombiningKind.MAXIMUMF,
                                          _read(self.bias, self.bias_at + [j0], n))
                live = arith_d.cmpf(arith_d.CmpFPredicate.ONE, bmax, _f32(float("-inf")))
                branch = scf_d.IfOp(live, [c.type for c in carried], has_else=True)
                with ir.InsertionPoint(branch.then_block):
                    scf_d.YieldOp(list(self.block(j0, n, *carried)))
                with ir.InsertionPoint(branch.else_block):
                    scf_d.YieldOp(carried)
                scf_d.YieldOp(list(branch.results))
        return list(loop.results)


def emit_flash_attention(module_body, name: str, q_type: ir.RankedTensorType, k_type: ir.RankedTensorType,
                         v_type: ir.RankedTensorType, bias_type: Optional[ir.RankedTensorType],
                         scale: float, target: Target) -> func_d.FuncOp:
    """Emits ``func.func private @name(q, k, v[, bias]) -> out``: fused attention (see the module
    docstring) at the end of ``module_body`` (an insertion point's block).

    Parameters
    ----------
    q_type : tensor (B, H, Sq, D) f32
        Queries; ``Sq`` may be dynamic.
    k_type, v_type : tensor (B, Hkv, Skv, D) f32
        Keys and values, ``H % Hkv == 0`` (head ``h`` reads K/V head ``h // (H / Hkv)``).
    bias_type : tensor (B | 1, H | 1, Sq | 1, Skv) f32, optional
        Added to the scaled scores (a mask of 0 / -inf, or any bias); size-1 dims broadcast.
    scale : float
        Multiplies ``Q K^T``.
    target : Target
        Sets the key block (:func:`key_block`).

    Returns
    -------
    func_d.FuncOp
        ``out: tensor (B, H, Sq, D) f32``.

    Raises
    ------
    ScheduleError
        If the shapes or dtypes disagree (the message names the operand, expected vs actual).
    """
    f32 = ir.F32Type.get()
    for what, t in (("q", q_type), ("k", k_type), ("v", v_type)) + ((("bias", bias_type),) if bias_type else ()):
        if t.rank != 4 or t.element_type != f32:
            raise ScheduleError(f"flash attention: operand '{what}' is {t}; expected a rank-4 f32 tensor")
    bq, h, _, d = q_type.shape
    _, hkv, skv, _ = k_type.shape
    dyn = ir.ShapedType.get_dynamic_size()
    if any(x == dyn for x in (bq, h, d, hkv)) or k_type.shape != v_type.shape or \
            k_type.shape[0] != bq or k_type.shape[3] != d or h % hkv:
        raise ScheduleError(f"flash attention: q {q_type}, k {k_type}, v {v_type}; expected static "
                            "(B, H, Sq, D) and (B, Hkv, Skv, D) with H % Hkv == 0")
    if bias_type is not None and (bias_type.shape[3] != skv or any(
            s not in (1, full) for s, full in zip(bias_type.shape[:3], q_type.shape[:3]))):
        raise ScheduleError(f"flash attention: operand 'bias' is {bias_type}; expected (B|1, H|1, "
                            f"Sq|1, {skv}) for q {q_type}")
    inputs = [q_type, k_type, v_type] + ([bias_type] if bias_type is not None else [])
    with ir.InsertionPoint(module_body):
        fn = func_d.FuncOp(name, ir.FunctionType.get(inputs, [q_type]), visibility="private")
    entry = fn.regions[0].blocks.append(*inputs)
    nblock = key_block(target)
    with ir.InsertionPoint(entry):
        q, k, v = entry.arguments[:3]
        bias = entry.arguments[3] if bias_type is not None else None
        sq = _dim(q, 2)
        out = tensor_d.EmptyOp([x if x != dyn else sq for x in q_type.shape], f32).result
        forall = scf_d.ForallOp([0, 0, 0], [bq, h, sq], [1, 1, 1], shared_outs=[out])
        with ir.InsertionPoint(forall.body):
            b, hh, i = forall.induction_variables
            shared = forall.body.arguments[3]
            hk = arith_d.divui(hh, _idx(h // hkv)) if h != hkv else hh
            row = _Row(q, k, v, bias, b, hh, hk, i, scale, d)
            dvt = ir.VectorType.get([d], f32)
            carried = [_f32(float("-inf")), _f32(0.0), vector_d.broadcast(dvt, _f32(0.0))]
            n_kv = _dim(k, 2)
            full = arith_d.muli(arith_d.divui(n_kv, _idx(nblock)), _idx(nblock))
            carried = row.loop(_idx(0), full, nblock, carried)
            m, l, acc = row.loop(full, n_kv, 1, carried)
            empty_row = arith_d.cmpf(arith_d.CmpFPredicate.OEQ, l, _f32(0.0))
            inv = arith_d.select(empty_row, _f32(0.0), arith_d.divf(_f32(1.0), l))
            res = arith_d.mulf(acc, vector_d.broadcast(dvt, inv))
            one = [1, 1, 1, d]
            offs = [b, hh, i, _idx(0)]
            dyn_offs = [x for x in offs]
            static = [dyn, dyn, dyn, 0]
            slice_t = ir.RankedTensorType.get(one, f32)
            tile = tensor_d.extract_slice(slice_t, shared, dyn_offs[:3], [], [], static, one, [1, 1, 1, 1])
            perm = ir.AffineMap.get(4, 0, [ir.AffineDimExpr.get(3)])
            tile = vector_d.transfer_write(slice_t, res, tile, [_idx(0)] * 4, ir.AffineMapAttr.get(perm),
                                           ir.ArrayAttr.get([ir.BoolAttr.get(True)]))
            term = scf_d.InParallelOp()
            with ir.InsertionPoint(term.region.blocks[0]):
                tensor_d.parallel_insert_slice(tile, shared, dyn_offs[:3], [], [], static, one, [1, 1, 1, 1])
        func_d.ReturnOp([forall.results[0]])
    return fn
