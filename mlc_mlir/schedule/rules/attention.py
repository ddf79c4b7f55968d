"""Fused attention on CPU: ``softmax(scale * Q K^T + bias) V`` as one loop nest with an online
softmax over key blocks (flash attention's recurrence), emitted as a private function on
tensors (``scf.forall`` / ``scf.for`` / ``vector``).

Rows run in parallel (``scf.forall`` over batch, heads and row blocks), each walking the keys in
blocks of ``L`` = :func:`key_block` with the running row maximum ``m``, the running sum ``l``
and the accumulator ``acc`` (``D`` values per row):

    s     = scale * q K_block^T + bias[block]
    m'    = max(m, max(s));  a = exp(m - m');  p = exp(s - m')
    l     = a * l + sum(p);  acc = a * acc + p V_block
    out   = acc / l          (0 where every key is masked: l == 0, as torch's safe softmax)

* Blocks of ``L`` query rows (:class:`_RowBlock`, prefill): scores are columns, one
  ``vector<L>`` over the rows per key, so ``q K^T`` is one FMA per (key, d) with the key element
  broadcast, and ``m``, ``l``, the exponentials and ``acc^T`` (a ``(D, L)`` stack buffer, as is the
  scaled ``Q^T``) are vectors over rows; the ``P V`` update runs ``unroll`` rows of ``acc^T`` at
  once (independent FMA chains, from the target's vector registers).
* The rows after the last full block, one at a time (:class:`_Row`, decode's single row):
  ``q`` and ``acc`` are ``vector<D>``; a key block's ``L`` dot products are reduced together by a
  shuffle butterfly; the K and V rows of the block :data:`PREFETCH_BLOCKS` ahead are prefetched
  (a decode step reads the whole cache from DRAM, like its weights).

No score matrix is materialized beyond one block, K and V are read in place: grouped-query
attention reads K/V head ``h // (H / Hkv)`` (no ``repeat_kv`` copy), and a block whose bias is
``-inf`` everywhere (a causal or length mask past the rows' last key) is skipped after reading
its bias, so a decode step over a cache of ``max_seq_len`` rows reads only the keys it attends
to. Keys after the last full block run as blocks of one.

Source: Dao et al., "FlashAttention" (2022) and Milakov & Gimelshein, "Online normalizer
calculation for softmax" (2018); llama.cpp's CPU ``flash_attn_ext`` (one query row per task,
online softmax over the KV cache); TVM Relax's ``attention`` op.
"""

from __future__ import annotations

from typing import List, Optional, Sequence

from ..._mlir import arith_d, bufferization_d, func_d, ir, math_d, memref_d, scf_d, tensor_d, vector_d
from ...errors import ScheduleError
from ...target import Target


#: Key blocks the single-row (decode) loop prefetches ahead: while a block is computed, the K and
#: V rows of the next one are requested (``memref.prefetch`` of each 64-byte line), so the reads
#: of a block do not wait on DRAM where the hardware prefetchers stop (at a page boundary: a
#: block of 16 keys of 64 floats is one 4 KiB page of K and one of V).
PREFETCH_BLOCKS = 1


def key_block(target: Target) -> int:
    """Keys (and query rows) per block: one vector register of float32 (``target.vector_lanes(32)``,
    16 with AVX-512, 8 with AVX2): a row's block of scores, or a key's column of a row block's
    scores, is one register."""
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

    def __init__(self, q, k, v, bias, b, h, hk, i, scale: float, head_dim: int, prefetch=None):
        """``prefetch``: ``(buffers, ahead, last)``: K and V as memrefs
        (``bufferization.to_buffer``), the keys each full block prefetches ahead and the
        largest block start (:meth:`prefetch`); None: no prefetch."""
        self.k, self.v, self.bias, self.b, self.hk = k, v, bias, b, hk
        self.d = head_dim
        self.ahead = prefetch
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
        if self.ahead is not None and n > 1:
            self.prefetch(j0, n)
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

    def prefetch(self, j0: ir.Value, n: int) -> None:
        """Prefetch (``memref.prefetch``, read, locality 3) the K and V rows of the ``n`` keys
        ``ahead`` after block ``j0`` (at most the last full block), one prefetch per ``n``
        floats (a vector register: a 64-byte line with AVX-512)."""
        buffers, ahead, last = self.ahead
        start = arith_d.minsi(arith_d.addi(j0, _idx(ahead)), last)
        for buf in buffers:
            for t in range(n):
                j = arith_d.addi(start, _idx(t)) if t else start
                for c in range(0, self.d, n):
                    memref_d.prefetch(buf, [self.b, self.hk, j, _idx(c)], False, 3, True)

    def bias_max(self, j0: ir.Value, n: int) -> ir.Value:
        """The largest bias of keys ``j0 .. j0 + n - 1``."""
        return vector_d.reduction(ir.F32Type.get(), vector_d.CombiningKind.MAXIMUMF,
                                  _read(self.bias, self.bias_at + [j0], n))


def _key_loop(rows, lo: ir.Value, hi: ir.Value, n: int, init) -> List[ir.Value]:
    """``scf.for`` over blocks of ``n`` keys in ``[lo, hi)`` (``hi - lo`` a multiple of ``n``)
    carrying ``init``, each block emitted by ``rows.block(j0, n, *carried)`` (a :class:`_Row` or
    :class:`_RowBlock`); with a bias, a block whose ``rows.bias_max`` is ``-inf`` is skipped
    (``scf.if``)."""
    loop = scf_d.ForOp(lo, hi, _idx(n), list(init))
    with ir.InsertionPoint(loop.body):
        j0 = loop.induction_variable
        carried = list(loop.inner_iter_args)
        if rows.bias is None:
            scf_d.YieldOp(list(rows.block(j0, n, *carried)))
        else:
            live = arith_d.cmpf(arith_d.CmpFPredicate.ONE, rows.bias_max(j0, n), _f32(float("-inf")))
            branch = scf_d.IfOp(live, [c.type for c in carried], has_else=True)
            with ir.InsertionPoint(branch.then_block):
                scf_d.YieldOp(list(rows.block(j0, n, *carried)))
            with ir.InsertionPoint(branch.else_block):
                scf_d.YieldOp(carried)
            scf_d.YieldOp(list(branch.results))
    return list(loop.results)



def _tree(values: List[ir.Value], op) -> ir.Value:
    """Combine ``values`` pairwise (a balanced tree of ``op``)."""
    while len(values) > 1:
        values = [op(a, b) for a, b in zip(values[::2], values[1::2])] + ([values[-1]] if len(values) % 2 else [])
    return values[0]


def _read_col(src: ir.Value, indices: Sequence[ir.Value], n: int) -> ir.Value:
    """``vector<n>`` along dim 2 (query rows) of the rank-4 ``src`` at ``indices`` (a strided read)."""
    perm = ir.AffineMap.get(4, 0, [ir.AffineDimExpr.get(2)])
    return vector_d.transfer_read(ir.VectorType.get([n], ir.F32Type.get()), src, list(indices),
                                  ir.AffineMapAttr.get(perm), _f32(0.0), ir.ArrayAttr.get([ir.BoolAttr.get(True)]))


class _RowBlock:
    """Emits ``L`` query rows ``i0 .. i0 + L - 1`` of one head at once (``L`` = the vector lanes):
    scores are columns (one ``vector<L>`` over the rows per key), so ``Q K^T`` is one FMA with a
    broadcast key element per (key, d) and the online softmax runs on vectors of rows. ``Q^T``
    (scaled) and ``acc^T`` live in stack buffers ``(D, L)``; ``m`` and ``l`` are vectors."""

    def __init__(self, q, k, v, bias, b, h, hk, i0, scale: float, head_dim: int, lanes: int, unroll: int):
        f32 = ir.F32Type.get()
        self.k, self.v, self.bias, self.b, self.hk, self.i0 = k, v, bias, b, hk, i0
        self.d, self.n, self.unroll = head_dim, lanes, unroll
        self.vt = ir.VectorType.get([lanes], f32)
        buf = ir.MemRefType.get([head_dim, lanes], f32)
        self.qt, self.acc = memref_d.alloca(buf, [], []), memref_d.alloca(buf, [], [])
        zero, sc = vector_d.broadcast(self.vt, _f32(0.0)), vector_d.broadcast(self.vt, _f32(scale))
        loop = scf_d.ForOp(_idx(0), _idx(head_dim), _idx(1))
        with ir.InsertionPoint(loop.body):
            dd = loop.induction_variable
            vector_d.store(arith_d.mulf(_read_col(q, [b, h, i0, dd], lanes), sc), self.qt, [dd, _idx(0)])
            vector_d.store(zero, self.acc, [dd, _idx(0)])
            scf_d.YieldOp([])
        if bias is not None:
            bt = ir.RankedTensorType(bias.type)
            self.bias_rows = bt.shape[2] != 1
            self.bias_at = [(x if bt.shape[n] != 1 else _idx(0)) for n, x in enumerate((b, h, i0))]

    def _element(self, src: ir.Value, j: ir.Value, dd: ir.Value) -> ir.Value:
        """``src[b, hk, j, dd]`` (a key or value element) broadcast to ``vector<L>``."""
        return vector_d.broadcast(self.vt, tensor_d.extract(src, [self.b, self.hk, j, dd]))

    def _bias(self, j: ir.Value) -> ir.Value:
        if self.bias_rows:
            return _read_col(self.bias, self.bias_at + [j], self.n)
        return vector_d.broadcast(self.vt, tensor_d.extract(self.bias, self.bias_at + [j]))

    def block(self, j0: ir.Value, n: int, m, l):
        """Emit the update of ``(m, l)`` and ``acc^T`` by keys ``j0 .. j0 + n - 1``."""
        keys = [arith_d.addi(j0, _idx(t)) if t else j0 for t in range(n)]
        zero = vector_d.broadcast(self.vt, _f32(0.0))
        loop = scf_d.ForOp(_idx(0), _idx(self.d), _idx(1), [zero] * n)
        with ir.InsertionPoint(loop.body):
            dd = loop.induction_variable
            qv = vector_d.load(self.vt, self.qt, [dd, _idx(0)])
            scf_d.YieldOp([vector_d.fma(qv, self._element(self.k, j, dd), s)
                           for j, s in zip(keys, loop.inner_iter_args)])
        cols = list(loop.results)
        if self.bias is not None:
            cols = [arith_d.addf(c, self._bias(j)) for c, j in zip(cols, keys)]
        m_new = arith_d.maximumf(m, _tree(cols, arith_d.maximumf))
        ninf = vector_d.broadcast(self.vt, _f32(float("-inf")))
        dead = arith_d.cmpf(arith_d.CmpFPredicate.OEQ, m_new, ninf)
        shift = arith_d.select(dead, zero, m_new)
        alpha = math_d.exp(arith_d.subf(m, shift))
        p = [math_d.exp(arith_d.subf(c, shift)) for c in cols]
        l_new = arith_d.addf(arith_d.mulf(l, alpha), _tree(p, arith_d.addf))
        u = self.unroll
        loop = scf_d.ForOp(_idx(0), _idx(self.d), _idx(u))
        with ir.InsertionPoint(loop.body):
            base = loop.induction_variable
            rows = [arith_d.addi(base, _idx(r)) if r else base for r in range(u)]
            accs = [arith_d.mulf(vector_d.load(self.vt, self.acc, [dd, _idx(0)]), alpha) for dd in rows]
            for j, pj in zip(keys, p):
                accs = [vector_d.fma(pj, self._element(self.v, j, dd), a) for dd, a in zip(rows, accs)]
            for dd, a in zip(rows, accs):
                vector_d.store(a, self.acc, [dd, _idx(0)])
            scf_d.YieldOp([])
        return m_new, l_new

    def bias_max(self, j0: ir.Value, n: int) -> ir.Value:
        """The largest bias of keys ``j0 .. j0 + n - 1`` over the block's rows."""
        keys = [arith_d.addi(j0, _idx(t)) if t else j0 for t in range(n)]
        return vector_d.reduction(ir.F32Type.get(), vector_d.CombiningKind.MAXIMUMF,
                                  _tree([self._bias(j) for j in keys], arith_d.maximumf))

    def write(self, tile: ir.Value, l: ir.Value) -> ir.Value:
        """``tile`` (``(1, 1, L, D)``) holding ``acc^T / l`` transposed back (0 for rows with
        ``l == 0``)."""
        zero = vector_d.broadcast(self.vt, _f32(0.0))
        empty_row = arith_d.cmpf(arith_d.CmpFPredicate.OEQ, l, zero)
        inv = arith_d.select(empty_row, zero, arith_d.divf(vector_d.broadcast(self.vt, _f32(1.0)), l))
        perm = ir.AffineMap.get(4, 0, [ir.AffineDimExpr.get(2)])
        loop = scf_d.ForOp(_idx(0), _idx(self.d), _idx(1), [tile])
        with ir.InsertionPoint(loop.body):
            dd = loop.induction_variable
            val = arith_d.mulf(vector_d.load(self.vt, self.acc, [dd, _idx(0)]), inv)
            scf_d.YieldOp([vector_d.transfer_write(tile.type, val, loop.inner_iter_args[0],
                                                   [_idx(0), _idx(0), _idx(0), dd], ir.AffineMapAttr.get(perm),
                                                   ir.ArrayAttr.get([ir.BoolAttr.get(True)]))])
        return loop.results[0]


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
    lanes = key_block(target)
    unroll = max(u for u in range(1, 9) if d % u == 0 and u <= max(1, (target.vector_registers - lanes) // 2))
    with ir.InsertionPoint(entry):
        q, k, v = entry.arguments[:3]
        bias = entry.arguments[3] if bias_type is not None else None
        strided = ir.Attribute.parse("strided<[?, ?, ?, ?], offset: ?>")
        buffers = [bufferization_d.ToBufferOp(ir.MemRefType.get(t.shape, f32, strided), x, read_only=True).result
                   for t, x in ((k_type, k), (v_type, v))]
        sq = _dim(q, 2)
        out = tensor_d.EmptyOp([x if x != dyn else sq for x in q_type.shape], f32).result
        n_kv = _dim(k, 2)
        full_kv = arith_d.muli(arith_d.divui(n_kv, _idx(lanes)), _idx(lanes))
        blocks = arith_d.divui(sq, _idx(lanes))
        full_q = arith_d.muli(blocks, _idx(lanes))
        strides = [1, 1, 1, 1]
        # blocks of `lanes` query rows (prefill)
        forall = scf_d.ForallOp([0, 0, 0], [bq, h, blocks], [1, 1, 1], shared_outs=[out])
        with ir.InsertionPoint(forall.body):
            b, hh, blk = forall.induction_variables
            shared = forall.body.arguments[3]
            hk = arith_d.divui(hh, _idx(h // hkv)) if h != hkv else hh
            i0 = arith_d.muli(blk, _idx(lanes))
            tile_t = ir.RankedTensorType.get([1, 1, lanes, d], f32)
            rows = _RowBlock(q, k, v, bias, b, hh, hk, i0, scale, d, lanes, unroll)
            vt = ir.VectorType.get([lanes], f32)
            carried = [vector_d.broadcast(vt, _f32(float("-inf"))), vector_d.broadcast(vt, _f32(0.0))]
            carried = _key_loop(rows, _idx(0), full_kv, lanes, carried)
            _, l = _key_loop(rows, full_kv, n_kv, 1, carried)
            tile = tensor_d.extract_slice(tile_t, shared, [b, hh, i0], [], [], [dyn, dyn, dyn, 0],
                                          [1, 1, lanes, d], strides)
            tile = rows.write(tile, l)
            term = scf_d.InParallelOp()
            with ir.InsertionPoint(term.region.blocks[0]):
                tensor_d.parallel_insert_slice(tile, shared, [b, hh, i0], [], [], [dyn, dyn, dyn, 0],
                                               [1, 1, lanes, d], strides)
        # the remaining rows one by one (decode: the only one)
        forall = scf_d.ForallOp([0, 0, 0], [bq, h, arith_d.subi(sq, full_q)], [1, 1, 1],
                                shared_outs=[forall.results[0]])
        with ir.InsertionPoint(forall.body):
            b, hh, r = forall.induction_variables
            i = arith_d.addi(full_q, r)
            shared = forall.body.arguments[3]
            hk = arith_d.divui(hh, _idx(h // hkv)) if h != hkv else hh
            ahead = (buffers, PREFETCH_BLOCKS * lanes, arith_d.subi(full_kv, _idx(lanes)))
            row = _Row(q, k, v, bias, b, hh, hk, i, scale, d, ahead if PREFETCH_BLOCKS else None)
            dvt = ir.VectorType.get([d], f32)
            carried = [_f32(float("-inf")), _f32(0.0), vector_d.broadcast(dvt, _f32(0.0))]
            carried = _key_loop(row, _idx(0), full_kv, lanes, carried)
            _, l, acc = _key_loop(row, full_kv, n_kv, 1, carried)
            empty_row = arith_d.cmpf(arith_d.CmpFPredicate.OEQ, l, _f32(0.0))
            inv = arith_d.select(empty_row, _f32(0.0), arith_d.divf(_f32(1.0), l))
            res = arith_d.mulf(acc, vector_d.broadcast(dvt, inv))
            slice_t = ir.RankedTensorType.get([1, 1, 1, d], f32)
            tile = tensor_d.extract_slice(slice_t, shared, [b, hh, i], [], [], [dyn, dyn, dyn, 0], [1, 1, 1, d],
                                          strides)
            perm = ir.AffineMap.get(4, 0, [ir.AffineDimExpr.get(3)])
            tile = vector_d.transfer_write(slice_t, res, tile, [_idx(0)] * 4, ir.AffineMapAttr.get(perm),
                                           ir.ArrayAttr.get([ir.BoolAttr.get(True)]))
            term = scf_d.InParallelOp()
            with ir.InsertionPoint(term.region.blocks[0]):
                tensor_d.parallel_insert_slice(tile, shared, [b, hh, i], [], [], [dyn, dyn, dyn, 0], [1, 1, 1, d],
                                               strides)
        func_d.ReturnOp([forall.results[0]])
    return fn
