"""Fused attention on CPU: ``softmax(scale * Q K^T + bias) V`` as one loop nest with an online
softmax over key blocks (flash attention's recurrence), emitted as a private function on
tensors (``scf.forall`` / ``scf.for`` / ``vector``).

Rows run in parallel (``scf.forall`` over batch, heads and row blocks, or serial loops), each
walking the keys in blocks of ``n`` with the running row maximum ``m``, the running sum ``l``
and the accumulator ``acc`` (``D`` values per row):

    s     = scale * q K_block^T + bias[block]
    m'    = max(m, max(s));  a = exp(m - m');  p = exp(s - m')
    l     = a * l + sum(p);  acc = a * acc + p V_block
    out   = acc / l          (0 where every key is masked: l == 0, as torch's safe softmax)

* Blocks of ``R * L`` query rows (:class:`_RowBlock`, prefill; ``L`` the vector lanes): scores
  are columns, ``R`` vectors over the rows per key, so ``q K^T`` is ``R`` FMAs per (key, d)
  with the key element broadcast, and ``m``, ``l``, the exponentials and ``acc^T`` (a
  ``(D, R * L)`` stack buffer, as is the scaled ``Q^T``) are vectors over rows; the ``P V``
  update runs ``unroll`` rows of ``acc^T`` at once (independent FMA chains, from the target's
  vector registers).
* The rows after the last full block, one at a time (:class:`_Row`, decode's single row):
  ``q`` and ``acc`` are ``vector<D>``; a key block's ``n`` dot products are reduced together by
  a shuffle butterfly; the K and V rows of a block some blocks ahead are prefetched (a decode
  step reads the whole cache from DRAM, like its weights).

``n``, ``R``, the prefetch distance, serial or parallel rows, the exponential
(:mod:`.softmax_exp`) and how a row block's queries and outputs are transposed
(:mod:`.register_transpose`) are the kernel's decisions (:mod:`.attention_knobs`).

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

from ..._mlir import arith_d, bufferization_d, func_d, ir, memref_d, scf_d, tensor_d, vector_d
from ...errors import ScheduleError
from ...ir.emitters import index_constant, ordered_max
from ...target import Target
from .attention_knobs import AttentionKnobs, default_knobs
from .register_transpose import transpose_registers
from .softmax_exp import EXP_DEGREES, shifted_exp


def attention_key(q_type: ir.RankedTensorType, k_type: ir.RankedTensorType, v_type: ir.RankedTensorType,
                  bias_type: Optional[ir.RankedTensorType]) -> str:
    """The database key of the kernel's decisions for these operand types (the scale does not
    change the loops)."""
    types = [q_type, k_type, v_type] + ([bias_type] if bias_type is not None else [])
    return "flash_attention " + " ".join(str(t) for t in types)


def _f32(v: float) -> ir.Value:
    return arith_d.ConstantOp(ir.F32Type.get(), v).result


def _dim(t: ir.Value, d: int) -> ir.Value:
    tt = ir.RankedTensorType(t.type)
    return index_constant(tt.shape[d]) if not tt.is_dynamic_dim(d) else tensor_d.dim(t, index_constant(d))


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

    def __init__(self, q, k, v, bias, b, h, hk, i, scale: float, head_dim: int, prefetch=None, exp_degree=0):
        """``prefetch``: ``(buffers, ahead, last)``: K and V as memrefs
        (``bufferization.to_buffer``), the keys each full block prefetches ahead and the
        largest block start (:meth:`prefetch`); None: no prefetch."""
        self.k, self.v, self.bias, self.b, self.hk = k, v, bias, b, hk
        self.d = head_dim
        self.ahead, self.exp_degree = prefetch, exp_degree
        self.q = arith_d.mulf(_read(q, [b, h, i, index_constant(0)], head_dim),
                              vector_d.broadcast(ir.VectorType.get([head_dim], ir.F32Type.get()), _f32(scale)))
        if bias is not None:
            bt = ir.RankedTensorType(bias.type)
            self.bias_at = [(x if bt.shape[n] != 1 else index_constant(0)) for n, x in enumerate((b, h, i))]

    def scores(self, j0: ir.Value, n: int) -> ir.Value:
        """``vector<n>`` of ``q . k_j`` for keys ``j0 .. j0 + n - 1``. With ``n`` a power of two
        dividing ``D``, each key's products are first summed chunk-wise into one ``vector<n>``
        and the ``n`` vectors are reduced together by a butterfly of shuffles and adds (``n - 1``
        adds of pairs, log2(n) levels: the transpose-reduce of ``hadd`` networks) instead of one
        horizontal reduction per key."""
        f32 = ir.F32Type.get()
        vt = ir.VectorType.get([n], f32)
        keys = [arith_d.addi(j0, index_constant(t)) if t else j0 for t in range(n)]
        if n == 1 or n & (n - 1) or self.d % n:
            return vector_d.from_elements(vt, [vector_d.reduction(
                f32, vector_d.CombiningKind.ADD,
                arith_d.mulf(self.q, _read(self.k, [self.b, self.hk, j, index_constant(0)], self.d)),
                fastmath=_fast()) for j in keys])
        chunks = [vector_d.extract_strided_slice(vt, self.q, [c], [n], [1]) for c in range(0, self.d, n)]
        parts = []
        for j in keys:
            w = None
            for c, qc in zip(range(0, self.d, n), chunks):
                kc = _read(self.k, [self.b, self.hk, j, index_constant(c)], n)
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
        alpha = shifted_exp(m, shift, self.exp_degree)
        p = shifted_exp(s, vector_d.broadcast(vt, shift), self.exp_degree)
        l_new = arith_d.addf(arith_d.mulf(l, alpha), vector_d.reduction(f32, vector_d.CombiningKind.ADD, p,
                                                                       fastmath=_fast()))
        dvt = ir.VectorType.get([self.d], f32)
        acc = arith_d.mulf(acc, vector_d.broadcast(dvt, alpha))
        for t in range(n):
            j = arith_d.addi(j0, index_constant(t)) if t else j0
            vv = _read(self.v, [self.b, self.hk, j, index_constant(0)], self.d)
            pt = vector_d.broadcast(dvt, vector_d.extract(p, [], [t]))
            acc = vector_d.fma(pt, vv, acc)
        return m_new, l_new, acc

    def prefetch(self, j0: ir.Value, n: int) -> None:
        """Prefetch (``memref.prefetch``, read, locality 3) the K and V rows of the ``n`` keys
        ``ahead`` after block ``j0`` (at most the last full block), one prefetch per ``n``
        floats (a vector register: a 64-byte line with AVX-512)."""
        buffers, ahead, last = self.ahead
        start = arith_d.minsi(arith_d.addi(j0, index_constant(ahead)), last)
        for buf in buffers:
            for t in range(n):
                j = arith_d.addi(start, index_constant(t)) if t else start
                for c in range(0, self.d, n):
                    memref_d.prefetch(buf, [self.b, self.hk, j, index_constant(c)], False, 3, True)

    def bias_max(self, j0: ir.Value, n: int) -> ir.Value:
        """The largest bias of keys ``j0 .. j0 + n - 1``."""
        return vector_d.reduction(ir.F32Type.get(), vector_d.CombiningKind.MAXIMUMF,
                                  _read(self.bias, self.bias_at + [j0], n))


def _key_loop(rows, lo: ir.Value, hi: ir.Value, n: int, init) -> List[ir.Value]:
    """``scf.for`` over blocks of ``n`` keys in ``[lo, hi)`` (``hi - lo`` a multiple of ``n``)
    carrying ``init``, each block emitted by ``rows.block(j0, n, *carried)`` (a :class:`_Row` or
    :class:`_RowBlock`); with a bias, a block whose ``rows.bias_max`` is ``-inf`` is skipped
    (``scf.if``)."""
    loop = scf_d.ForOp(lo, hi, index_constant(n), list(init))
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
    """Emits ``R * L`` query rows ``i0 ..`` of one head at once (``L`` the vector lanes, ``R``
    the row vectors): scores are columns (``R`` vectors over the rows per key), so ``Q K^T``
    is ``R`` FMAs with one broadcast key element per (key, d) and the online softmax runs on
    vectors of rows. ``Q^T`` (scaled) and ``acc^T`` live in stack buffers ``(D, R * L)``;
    ``m`` and ``l`` are ``R`` vectors each, carried as ``m_0 .. m_R-1, l_0 .. l_R-1``."""

    def __init__(self, q, k, v, bias, b, h, hk, i0, scale: float, head_dim: int, lanes: int,
                 row_vectors: int, unroll: int, exp_degree: int = 0, transpose: bool = False):
        """``transpose``: ``Q`` enters ``Q^T`` and ``acc^T`` leaves it as ``L x L`` blocks transposed
        in registers (:func:`~.register_transpose.transpose_registers`; ``D % L == 0``), else
        one strided column of ``L`` rows per ``d``."""
        f32 = ir.F32Type.get()
        self.k, self.v, self.bias, self.b, self.hk, self.i0 = k, v, bias, b, hk, i0
        self.d, self.n, self.r, self.unroll, self.exp_degree = head_dim, lanes, row_vectors, unroll, exp_degree
        self.step = lanes if transpose else 1
        self.vt = ir.VectorType.get([lanes], f32)
        buf = ir.MemRefType.get([head_dim, lanes * row_vectors], f32)
        self.qt, self.acc = memref_d.alloca(buf, [], []), memref_d.alloca(buf, [], [])
        self.offsets = [index_constant(r * lanes) for r in range(row_vectors)]
        self.rows = [arith_d.addi(i0, index_constant(r * lanes)) if r else i0 for r in range(row_vectors)]
        zero, sc = vector_d.broadcast(self.vt, _f32(0.0)), vector_d.broadcast(self.vt, _f32(scale))
        loop = scf_d.ForOp(index_constant(0), index_constant(head_dim), index_constant(self.step))
        with ir.InsertionPoint(loop.body):
            d0 = loop.induction_variable
            for row, off in zip(self.rows, self.offsets):
                cols = transpose_registers([_read(q, [b, h, arith_d.addi(row, index_constant(t)), d0], lanes)
                                            for t in range(lanes)]) if transpose else [_read_col(q, [b, h, row, d0], lanes)]
                for dd, col in zip(self._ds(d0), cols):
                    vector_d.store(arith_d.mulf(col, sc), self.qt, [dd, off])
                    vector_d.store(zero, self.acc, [dd, off])
            scf_d.YieldOp([])
        if bias is not None:
            bt = ir.RankedTensorType(bias.type)
            self.bias_rows = bt.shape[2] != 1
            self.bias_at = [(x if bt.shape[n] != 1 else index_constant(0)) for n, x in enumerate((b, h))]

    def _element(self, src: ir.Value, j: ir.Value, dd: ir.Value) -> ir.Value:
        """``src[b, hk, j, dd]`` (a key or value element) broadcast to ``vector<L>``."""
        return vector_d.broadcast(self.vt, tensor_d.extract(src, [self.b, self.hk, j, dd]))

    def _bias(self, j: ir.Value, r: int) -> ir.Value:
        """The bias of key ``j`` for row vector ``r``."""
        if self.bias_rows:
            return _read_col(self.bias, self.bias_at + [self.rows[r], j], self.n)
        return vector_d.broadcast(self.vt, tensor_d.extract(self.bias, self.bias_at + [index_constant(0), j]))

    def block(self, j0: ir.Value, n: int, *carried):
        """Emit the update of ``(m, l)`` and ``acc^T`` by keys ``j0 .. j0 + n - 1``."""
        rr = range(self.r)
        m, l = carried[:self.r], carried[self.r:]
        keys = [arith_d.addi(j0, index_constant(t)) if t else j0 for t in range(n)]
        zero = vector_d.broadcast(self.vt, _f32(0.0))
        loop = scf_d.ForOp(index_constant(0), index_constant(self.d), index_constant(1), [zero] * (n * self.r))
        with ir.InsertionPoint(loop.body):
            dd = loop.induction_variable
            qv = [vector_d.load(self.vt, self.qt, [dd, off]) for off in self.offsets]
            acc = list(loop.inner_iter_args)
            out = []
            for t, j in enumerate(keys):
                e = self._element(self.k, j, dd)
                out += [vector_d.fma(qv[r], e, acc[t * self.r + r]) for r in rr]
            scf_d.YieldOp(out)
        cols = [list(loop.results)[t * self.r:(t + 1) * self.r] for t in range(n)]   # [key][row vector]
        if self.bias is not None:
            cols = [[arith_d.addf(c[r], self._bias(j, r)) for r in rr] for c, j in zip(cols, keys)]
        ninf = vector_d.broadcast(self.vt, _f32(float("-inf")))
        m_new, l_new, alpha, p = [], [], [], [[None] * self.r for _ in keys]
        for r in rr:
            # a NaN score may be left out of the maximum: its exponential is NaN all the same
            mr = ordered_max(m[r], _tree([c[r] for c in cols], ordered_max))
            dead = arith_d.cmpf(arith_d.CmpFPredicate.OEQ, mr, ninf)
            shift = arith_d.select(dead, zero, mr)
            alpha.append(shifted_exp(m[r], shift, self.exp_degree))
            for t, c in enumerate(cols):
                p[t][r] = shifted_exp(c[r], shift, self.exp_degree)
            m_new.append(mr)
            l_new.append(arith_d.addf(arith_d.mulf(l[r], alpha[r]), _tree([pt[r] for pt in p], arith_d.addf)))
        u = self.unroll
        loop = scf_d.ForOp(index_constant(0), index_constant(self.d), index_constant(u))
        with ir.InsertionPoint(loop.body):
            base = loop.induction_variable
            drows = [arith_d.addi(base, index_constant(x)) if x else base for x in range(u)]
            accs = [[arith_d.mulf(vector_d.load(self.vt, self.acc, [dd, off]), alpha[r])
                     for r, off in enumerate(self.offsets)] for dd in drows]
            for j, pj in zip(keys, p):
                for a, dd in zip(accs, drows):
                    e = self._element(self.v, j, dd)
                    a[:] = [vector_d.fma(pj[r], e, a[r]) for r in rr]
            for dd, a in zip(drows, accs):
                for r, off in enumerate(self.offsets):
                    vector_d.store(a[r], self.acc, [dd, off])
            scf_d.YieldOp([])
        return m_new + l_new

    def bias_max(self, j0: ir.Value, n: int) -> ir.Value:
        """The largest bias of keys ``j0 .. j0 + n - 1`` over the block's rows."""
        keys = [arith_d.addi(j0, index_constant(t)) if t else j0 for t in range(n)]
        return vector_d.reduction(ir.F32Type.get(), vector_d.CombiningKind.MAXIMUMF,
                                  _tree([self._bias(j, r) for j in keys for r in range(self.r)],
                                        arith_d.maximumf))

    def write(self, tile: ir.Value, l: Sequence[ir.Value]) -> ir.Value:
        """``tile`` (``(1, 1, R * L, D)``) holding ``acc^T / l`` transposed back (0 for rows
        with ``l == 0``)."""
        zero = vector_d.broadcast(self.vt, _f32(0.0))
        one = vector_d.broadcast(self.vt, _f32(1.0))
        inv = [arith_d.select(arith_d.cmpf(arith_d.CmpFPredicate.OEQ, lr, zero), zero, arith_d.divf(one, lr))
               for lr in l]
        loop = scf_d.ForOp(index_constant(0), index_constant(self.d), index_constant(self.step), [tile])
        with ir.InsertionPoint(loop.body):
            d0 = loop.induction_variable
            cur = loop.inner_iter_args[0]
            for off, ir_ in zip(self.offsets, inv):
                vals = [arith_d.mulf(vector_d.load(self.vt, self.acc, [dd, off]), ir_) for dd in self._ds(d0)]
                # a row of L values along d each (transposed), or one column of L rows
                rows = transpose_registers(vals) if self.step > 1 else vals
                dim = 3 if self.step > 1 else 2
                for t, val in enumerate(rows):
                    at = [index_constant(0), index_constant(0), arith_d.addi(off, index_constant(t)), d0]
                    cur = vector_d.transfer_write(tile.type, val, cur, at,
                                                  ir.AffineMapAttr.get(ir.AffineMap.get(4, 0, [ir.AffineDimExpr.get(dim)])),
                                                  ir.ArrayAttr.get([ir.BoolAttr.get(True)]))
            scf_d.YieldOp([cur])
        return loop.results[0]

    def _ds(self, d0: ir.Value) -> List[ir.Value]:
        """The ``d`` indices ``d0 .. d0 + step - 1`` of one step of the staging loops."""
        return [arith_d.addi(d0, index_constant(c)) for c in range(self.step)]


def _grid(extents: Sequence, out: ir.Value, tile_type: ir.RankedTensorType, parallel: bool, body) -> ir.Value:
    """Loops over ``(b, h, x)`` in ``extents`` (ints or index values) writing one tile of
    ``tile_type`` each into ``out``: ``body(b, h, x, dest)`` returns ``(tile, offsets)`` (the
    tile read from ``dest`` at ``offsets`` and updated). ``parallel``: one ``scf.forall``
    (``tensor.parallel_insert_slice``), else nested ``scf.for`` (``tensor.insert_slice``).
    Returns the result tensor."""
    dyn = ir.ShapedType.get_dynamic_size()
    sizes, strides, static = list(tile_type.shape), [1, 1, 1, 1], [dyn, dyn, dyn, 0]
    if parallel:
        forall = scf_d.ForallOp([0, 0, 0], list(extents), [1, 1, 1], shared_outs=[out])
        with ir.InsertionPoint(forall.body):
            b, h, x = forall.induction_variables
            shared = forall.body.arguments[3]
            tile, offsets = body(b, h, x, shared)
            term = scf_d.InParallelOp()
            with ir.InsertionPoint(term.region.blocks[0]):
                tensor_d.parallel_insert_slice(tile, shared, offsets, [], [], static, sizes, strides)
        return forall.results[0]

    def nest(ivs, dest):
        if len(ivs) == len(extents):
            tile, offsets = body(*ivs, dest)
            return tensor_d.insert_slice(tile, dest, offsets, [], [], static, sizes, strides)
        e = extents[len(ivs)]
        upper = e if isinstance(e, ir.Value) else index_constant(e)
        loop = scf_d.ForOp(index_constant(0), upper, index_constant(1), [dest])
        with ir.InsertionPoint(loop.body):
            scf_d.YieldOp([nest(ivs + [loop.induction_variable], loop.inner_iter_args[0])])
        return loop.results[0]
    return nest([], out)


def emit_flash_attention(module_body, name: str, q_type: ir.RankedTensorType, k_type: ir.RankedTensorType,
                         v_type: ir.RankedTensorType, bias_type: Optional[ir.RankedTensorType],
                         scale: float, target: Target, knobs: Optional[AttentionKnobs] = None) -> func_d.FuncOp:
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
        The vector lanes and registers, and the defaults of the knobs.
    knobs : AttentionKnobs, optional
        The kernel's decisions (a tuning record's, :func:`decided_knobs`); default
        :func:`default_knobs`.

    Returns
    -------
    func_d.FuncOp
        ``out: tensor (B, H, Sq, D) f32``.

    Raises
    ------
    ScheduleError
        If the shapes or dtypes disagree (the message names the operand, expected vs actual), or
        a knob is out of range (not positive, a prefetch below 0).
    """
    f32 = ir.F32Type.get()
    for what, t in (("q", q_type), ("k", k_type), ("v", v_type)) + ((("bias", bias_type),) if bias_type else ()):
        if t.rank != 4 or t.element_type != f32:
            raise ScheduleError(f"flash attention: operand '{what}' is {t}; expected a rank-4 f32 tensor")
    bq, h, sq_static, d = q_type.shape
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
    knobs = default_knobs(target, d) if knobs is None else knobs
    if min(knobs.key_block, knobs.row_vectors, knobs.threads) < 1 or knobs.prefetch < 0 or \
            knobs.exp_degree not in EXP_DEGREES or knobs.transpose not in (0, 1) or \
            (knobs.transpose and d % target.vector_lanes(32)):
        raise ScheduleError(f"flash attention: knobs {knobs} for head dim {d}; expected key_block, "
                            f"row_vectors and threads >= 1, prefetch >= 0, exp_degree in {EXP_DEGREES} "
                            "and transpose 0 or 1 (1 only where the vector lanes divide the head dim)")
    inputs = [q_type, k_type, v_type] + ([bias_type] if bias_type is not None else [])
    with ir.InsertionPoint(module_body):
        fn = func_d.FuncOp(name, ir.FunctionType.get(inputs, [q_type]), visibility="private")
    entry = fn.regions[0].blocks.append(*inputs)
    lanes, n, nr = target.vector_lanes(32), knobs.key_block, knobs.row_vectors
    rows = lanes * nr
    budget = max(1, (target.vector_registers - n * nr - 1) // nr)
    unroll = max(u for u in range(1, 9) if d % u == 0 and u <= budget)
    parallel = knobs.threads > 1
    with ir.InsertionPoint(entry):
        q, k, v = entry.arguments[:3]
        bias = entry.arguments[3] if bias_type is not None else None
        strided = ir.Attribute.parse("strided<[?, ?, ?, ?], offset: ?>")
        buffers = [bufferization_d.ToBufferOp(ir.MemRefType.get(t.shape, f32, strided), x, read_only=True).result
                   for t, x in ((k_type, k), (v_type, v))]
        sq = _dim(q, 2)
        out = tensor_d.EmptyOp([x if x != dyn else sq for x in q_type.shape], f32).result
        n_kv = _dim(k, 2)
        full_kv = arith_d.muli(arith_d.divui(n_kv, index_constant(n)), index_constant(n))
        blocks = arith_d.divui(sq, index_constant(rows))
        full_q = arith_d.muli(blocks, index_constant(rows))

        def head(hh):
            return arith_d.divui(hh, index_constant(h // hkv)) if h != hkv else hh

        def row_block(b, hh, blk, dest):   # blocks of `rows` query rows (prefill)
            i0 = arith_d.muli(blk, index_constant(rows))
            block = _RowBlock(q, k, v, bias, b, hh, head(hh), i0, scale, d, lanes, nr, unroll, knobs.exp_degree,
                              bool(knobs.transpose))
            vt = ir.VectorType.get([lanes], f32)
            carried = [vector_d.broadcast(vt, _f32(float("-inf")))] * nr + [vector_d.broadcast(vt, _f32(0.0))] * nr
            carried = _key_loop(block, index_constant(0), full_kv, n, carried)
            carried = _key_loop(block, full_kv, n_kv, 1, carried)
            tile_t = ir.RankedTensorType.get([1, 1, rows, d], f32)
            tile = tensor_d.extract_slice(tile_t, dest, [b, hh, i0], [], [], [dyn, dyn, dyn, 0], [1, 1, rows, d],
                                          [1, 1, 1, 1])
            return block.write(tile, carried[nr:]), [b, hh, i0]

        def single_row(b, hh, r, dest):   # the remaining rows one by one (decode: the only one)
            i = arith_d.addi(full_q, r)
            ahead = (buffers, knobs.prefetch * n, arith_d.subi(full_kv, index_constant(n)))
            row = _Row(q, k, v, bias, b, hh, head(hh), i, scale, d, ahead if knobs.prefetch else None,
                       knobs.exp_degree)
            dvt = ir.VectorType.get([d], f32)
            carried = [_f32(float("-inf")), _f32(0.0), vector_d.broadcast(dvt, _f32(0.0))]
            carried = _key_loop(row, index_constant(0), full_kv, n, carried)
            _, l, acc = _key_loop(row, full_kv, n_kv, 1, carried)
            empty_row = arith_d.cmpf(arith_d.CmpFPredicate.OEQ, l, _f32(0.0))
            inv = arith_d.select(empty_row, _f32(0.0), arith_d.divf(_f32(1.0), l))
            res = arith_d.mulf(acc, vector_d.broadcast(dvt, inv))
            slice_t = ir.RankedTensorType.get([1, 1, 1, d], f32)
            tile = tensor_d.extract_slice(slice_t, dest, [b, hh, i], [], [], [dyn, dyn, dyn, 0], [1, 1, 1, d],
                                          [1, 1, 1, 1])
            perm = ir.AffineMap.get(4, 0, [ir.AffineDimExpr.get(3)])
            tile = vector_d.transfer_write(slice_t, res, tile, [index_constant(0)] * 4, ir.AffineMapAttr.get(perm),
                                           ir.ArrayAttr.get([ir.BoolAttr.get(True)]))
            return tile, [b, hh, i]

        # a static length emits only the loops that run
        if sq_static == dyn or sq_static >= rows:
            out = _grid([bq, h, blocks], out, ir.RankedTensorType.get([1, 1, rows, d], f32), parallel, row_block)
        if sq_static == dyn or sq_static % rows:
            out = _grid([bq, h, arith_d.subi(sq, full_q)], out, ir.RankedTensorType.get([1, 1, 1, d], f32),
                        parallel, single_row)
        func_d.ReturnOp([out])
    return fn
