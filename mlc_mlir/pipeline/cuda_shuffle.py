"""Warp-shuffle combine of block-per-row reductions (after the thread mapping, before the
workgroup allocations become launch attributions).

:mod:`mlc_mlir.schedule.gpu_reduction` emits a cross-thread reduction as ``T`` threads each
reducing a strided slice of the row into its element of a shared array ``P[T]``, then one
thread combining ``P`` into the output -- the last combining op annotated
:data:`~mlc_mlir.schedule.gpu_reduction.WARP_SHUFFLE` (the value is ``T``). After
``gpu.map_nested_forall_to_threads`` the kernel reads::

    P = memref.alloca() : memref<1x..xTxf32, workgroup>
    p = memref.subview P[.., thread_id.x]          # the thread's element
    linalg.fill / linalg.generic(row slice) -> p    # its partial
    gpu.barrier
    scf.if thread_id.x < 1 { linalg.fill(O); linalg.reduce {mlc.warp_shuffle} ins(P) outs(O) }

:func:`shuffle_reductions` rewrites it to (CUB's ``WarpReduce`` / ``BlockReduce`` scheme; the
CUDA samples' ``reduce`` kernels; TVM's lowering of a thread-bound ``allreduce``)::

    acc = memref.alloca() : memref<1x..x1xf32>     # private: a register after SROA
    linalg.fill / linalg.generic(row slice) -> acc
    v = load acc; v = v (op) shuffle_xor(v, 1), .., 16   # each warp, shfl.sync.bfly
    if lane == 0: W[warp] = v                      # W: (T / 32) floats in shared memory
    gpu.barrier
    if thread_id.x < T / 32: w = W[thread_id.x]; butterfly over the warp totals; total = w
    scf.if thread_id.x < 1 { linalg.fill(O); linalg.reduce ins(total) outs(O) }

one barrier instead of one per tree level, and no shared-memory round trip for the partials
(with one warp, ``T == 32``, no barrier and no shared memory at all). Several rows per block
(``threadIdx.y``, whole warps per row) keep ``W`` as ``[rows, T / 32]``; a warp per row needs
no ``W``. A thread that owns ``E`` contiguous partials (``split(k, [None, T, E])``) keeps them
in ``acc[E]`` and combines them before the shuffles; its partial op gets a vector twin
(:func:`_vector_partial`: ``ld.global.v4`` where the row is 16-byte aligned). The combiner is the
reduction's own payload op (``arith.addf``, ``arith.maximumf``, ...), cloned per level. A warp
cut short (``T`` not a multiple of 32) shuffles with ``width`` = its live lanes, and keeps its
own value where the partner lane does not exist (``gpu.shuffle``'s ``valid`` result).

Why not the upstream ops: ``gpu.subgroup_reduce`` on ``f32`` is illegal for
``gpu-lower-to-nvvm-pipeline`` (only ``i32`` lowers, to ``redux.sync``); ``gpu.all_reduce``
lowers (``populateGpuAllReducePatterns``) but emits both a full-warp and a partial-warp
butterfly with run-time masks, two barriers and a broadcast through shared memory.
"""

from __future__ import annotations

import math
from typing import List, Optional

from .._mlir import arith_d, gpu_d, ir, memref_d, scf_d, vector_d
from ..errors import PipelineError
from ..ir.module import Module
from ..ir.emitters import index_constant
from ..ir.walk import ancestor_in, defining_op, find_ops, users
from ..schedule.gpu_reduction import WARP_SHUFFLE
from ..target import WARP_SIZE

_WORKGROUP = "#gpu.address_space<workgroup>"


def _launch_of(op: ir.Operation) -> Optional[ir.Operation]:
    p = op.parent
    while p is not None and p.operation.name != "gpu.launch":
        p = p.parent
    return p.operation if p is not None else None


def _combiner(red: ir.Operation) -> ir.Operation:
    """The single combining op of a reduction's payload, ``yield op(in, init)``."""
    body = red.regions[0].blocks[0]
    ops = [o.operation for o in body.operations]
    args = list(body.arguments)
    if len(ops) != 2 or len(args) != 2 or len(ops[0].operands) != 2 or \
            set(ops[0].operands) != set(args) or ops[1].operands[0] != ops[0].results[0]:
        raise PipelineError(f"cuda shuffle: the reduction annotated {WARP_SHUFFLE} has a payload "
                            f"other than 'yield op(in, init)':\n{red}")
    return ops[0]


def _combine(comb: ir.Operation, a: ir.Value, b: ir.Value) -> ir.Value:
    """A clone of ``comb`` on ``(a, b)`` (its attributes, e.g. ``fastmath``, kept)."""
    attrs = {name: comb.attributes[name] for name in comb.attributes}
    return ir.Operation.create(comb.name, results=[a.type], operands=[a, b],
                               attributes=attrs).results[0]


def _i32(v: int) -> ir.Value:
    return arith_d.constant(ir.IntegerType.get_signless(32), v)


def _butterfly(v: ir.Value, comb: ir.Operation, lanes: int, width: ir.Value, full: bool) -> ir.Value:
    """``v`` combined over ``lanes`` (<= 32) lanes with ``gpu.shuffle xor`` at offsets 1, 2, ..
    below ``lanes``; lane 0 holds the total (every lane does when ``full``: a power-of-two
    ``width`` all of whose lanes run). ``width``: i32, the live lanes of this warp."""
    off = 1
    while off < lanes:
        got, valid = _shuffle_xor(v, off, width)
        c = _combine(comb, got, v)
        v = c if full else arith_d.select(valid, c, v)
        off *= 2
    return v


def _shuffle_xor(v: ir.Value, off: int, width: ir.Value):
    """``gpu.shuffle xor`` of ``v``: ``(value, valid)``. A value narrower than 32 bits (f16,
    bf16, i8) travels widened to f32 / i32 (``nvvm.shfl.sync`` moves 32-bit registers; the
    round trip is exact); 64-bit values are split by the NVVM lowering itself."""
    t = v.type
    bits = getattr(t, "width", 32)
    if bits >= 32:
        shuffle = gpu_d.ShuffleOp(v, _i32(off), width, gpu_d.ShuffleMode.XOR)
        return shuffle.results[0], shuffle.results[1]
    if isinstance(t, ir.FloatType):
        wide = arith_d.extf(ir.F32Type.get(), v)
        shuffle = gpu_d.ShuffleOp(wide, _i32(off), width, gpu_d.ShuffleMode.XOR)
        return arith_d.truncf(t, shuffle.results[0]), shuffle.results[1]
    wide = arith_d.extui(ir.IntegerType.get_signless(32), v)
    shuffle = gpu_d.ShuffleOp(wide, _i32(off), width, gpu_d.ShuffleMode.XOR)
    return arith_d.trunci(t, shuffle.results[0]), shuffle.results[1]


def _block_dims(launch: ir.Operation) -> List[Optional[int]]:
    """The launch's static ``blockDim`` (x, y, z); None where not a constant."""
    out = []
    for v in list(launch.operands)[3:6]:
        o = defining_op(v)
        out.append(ir.IntegerAttr(o.attributes["value"]).value
                   if o is not None and o.name == "arith.constant" else None)
    return out


def _is_thread_id(v: ir.Value, dim: str) -> bool:
    o = defining_op(v)
    return o is not None and o.name == "gpu.thread_id" and str(o.attributes["dimension"]).endswith(f"{dim}>")


def _thread_offset(v: ir.Value, vec: int) -> bool:
    """Whether ``v`` is ``thread_id.x * vec`` (``thread_id.x`` itself for ``vec == 1``)."""
    if vec == 1:
        return _is_thread_id(v, "x")
    o = defining_op(v)
    if o is None or o.name != "affine.apply" or len(o.operands) != 1 or \
            not _is_thread_id(o.operands[0], "x"):
        return False
    times = ir.AffineExpr.get_mul(ir.AffineDimExpr.get(0), ir.AffineConstantExpr.get(vec))
    return ir.AffineMapAttr(o.attributes["map"]).value == ir.AffineMap.get(1, 0, [times])


def _partials(alloc: ir.Operation, red: ir.Operation, body: ir.Block, vec: int,
              where: str) -> List[ir.Operation]:
    """The subviews of ``P`` each thread writes its partials to: ``vec`` elements at
    ``[thread_id.y or 0, .., thread_id.x * vec]`` (every use of ``P`` but ``red``'s input)."""
    parts = []
    for sv in users(alloc.results[0]):
        if sv == red or (sv.name == "memref.subview" and users(sv.results[0]) == [red]):
            continue
        ok = sv.name == "memref.subview" and sv.block == body
        if ok:
            shape = ir.MemRefType(sv.results[0].type).shape
            dyn = list(sv.operands)[1:]
            ok = shape[-1] == vec and all(d == 1 for d in shape[:-1]) and len(dyn) in (1, 2) and \
                _thread_offset(dyn[-1], vec) and (len(dyn) == 1 or _is_thread_id(dyn[0], "y"))
        if not ok:
            raise PipelineError(f"{where}: its partials are not {vec} element(s) per thread: {sv}")
        parts.append(sv)
    return parts


def _identity_layout(t: ir.MemRefType) -> bool:
    return isinstance(t.layout, ir.AffineMapAttr) and t.layout.value == ir.AffineMap.get_identity(t.rank)


def _dims(m: ir.AffineMap) -> Optional[List[int]]:
    """The dim positions of ``m``'s results; None if one is not a plain dim."""
    out = [r.position if isinstance(r, ir.AffineDimExpr) else None for r in m.results]
    return None if None in out else out


def _vector_partial(op: ir.Operation, vec: int, body: ir.Block) -> None:
    """Give the thread's partial ``op`` (a ``linalg.generic`` over ``(1.., k0, e)``: ``e``
    the thread's ``vec`` contiguous elements, ``k0`` the reduction) a vector twin run when
    every row it reads contiguously starts on a ``vec``-element boundary: ``scf.if`` each
    such buffer's aligned pointer is a multiple of the vector's bytes, then ``scf.for k0``
    over ``vector.load {alignment}`` (PTX ``ld.global.v4``/``v2``) and the payload on
    ``vector<vec>``; else ``op`` as it was (a buffer from another library may start
    anywhere). Leaves ``op`` alone when its form differs (an input read along ``e`` that is
    not an identity-layout buffer, a payload op with regions or non-scalar types)."""
    maps = [ir.AffineMapAttr(a).value for a in op.attributes["indexing_maps"]]
    kinds = [str(a) for a in op.attributes["iterator_types"]]
    n = len(kinds)
    nin = len(op.operands) - 1
    red = [i for i, k in enumerate(kinds) if "reduction" in k]
    dims = [_dims(m) for m in maps]
    acc = op.operands[nin]
    if len(red) != 1 or red[0] != n - 2 or "parallel" not in kinds[-1] or None in dims or \
            dims[nin] != [d for d in range(n) if d != n - 2] or \
            ir.MemRefType(acc.type).shape[-1] != vec or len(op.regions[0].blocks) != 1:
        return
    k0 = n - 2
    extent = None
    checks = []   # (root buffer, bytes) whose alignment the vector loads need
    for j in range(nin):
        t = ir.MemRefType(op.operands[j].type)
        if k0 in dims[j]:
            extent = t.shape[dims[j].index(k0)]
        if n - 1 in dims[j]:
            view = defining_op(op.operands[j])
            if dims[j][-1] != n - 1 or t.shape[-1] != vec or view is None or \
                    view.name != "memref.subview" or view.block != body:
                return
            root = ir.MemRefType(view.operands[0].type)
            width = getattr(root.element_type, "width", 0)
            if not width or width % 8 or not _identity_layout(root) or root.shape[-1] % vec:
                return
            checks.append((view.operands[0], vec * width // 8))
    payload = [o.operation for o in op.regions[0].blocks[0].operations]
    if extent is None or not checks or any(
            len(o.regions) or any(not isinstance(r.type, (ir.FloatType, ir.IntegerType))
                                  for r in o.results) for o in payload[:-1]):
        return
    with ir.InsertionPoint(op):
        ok = None
        for root, nbytes in checks:
            ptr = memref_d.extract_aligned_pointer_as_index(root)
            c = arith_d.cmpi(arith_d.CmpIPredicate.eq, arith_d.remui(ptr, index_constant(nbytes)), index_constant(0))
            ok = c if ok is None else arith_d.andi(ok, c)
        branch = scf_d.IfOp(ok, has_else=True)
    with ir.InsertionPoint(branch.then_block):
        zeros = [index_constant(0)] * (n - 1)
        elem = ir.MemRefType(acc.type).element_type
        vt = ir.VectorType.get([vec], elem)
        loop = scf_d.ForOp(index_constant(0), index_constant(extent), index_constant(1), [vector_d.load(vt, acc, zeros)])
        with ir.InsertionPoint(loop.body):
            args = list(op.regions[0].blocks[0].arguments)
            values = {}
            for j in range(nin):
                src = op.operands[j]
                idx = [loop.induction_variable if d == k0 else index_constant(0) for d in dims[j]]
                et = ir.MemRefType(src.type).element_type
                if n - 1 in dims[j]:
                    nbytes = dict(checks)[defining_op(src).operands[0]]
                    values[args[j]] = vector_d.load(ir.VectorType.get([vec], et), src, idx,
                                                    alignment=nbytes)
                else:
                    values[args[j]] = vector_d.broadcast(ir.VectorType.get([vec], et),
                                                         memref_d.load(src, idx))
            values[args[nin]] = loop.inner_iter_args[0]
            for o in payload[:-1]:
                attrs = {name: o.attributes[name] for name in o.attributes}
                res = ir.Operation.create(
                    o.name, results=[ir.VectorType.get([vec], r.type) for r in o.results],
                    operands=[values.get(v, v) for v in o.operands], attributes=attrs)
                for r, nr in zip(o.results, res.results):
                    values[r] = nr
            scf_d.YieldOp([values.get(payload[-1].operands[0], payload[-1].operands[0])])
        vector_d.store(loop.results[0], acc, zeros)
        scf_d.YieldOp([])
    with ir.InsertionPoint(branch.else_block):
        scf_d.YieldOp([])
    op.move_before(list(branch.else_block.operations)[0].operation)


def _rewrite(red: ir.Operation) -> None:
    """Rewrite one annotated combining op (module docstring)."""
    nthreads = ir.IntegerAttr(red.attributes[WARP_SHUFFLE]).value
    launch = _launch_of(red)
    where = f"cuda shuffle: the reduction annotated {WARP_SHUFFLE}"
    dims = _block_dims(launch) if launch is not None else None
    if dims is None or dims[0] != nthreads or dims[1] is None or dims[2] != 1 or \
            (dims[1] > 1 and nthreads % WARP_SIZE):
        raise PipelineError(f"{where} is not in a gpu.launch of ({nthreads}, rows, 1) threads "
                            f"(whole warps when rows > 1): {dims}")
    nrows = dims[1]
    body = launch.regions[0].blocks[0]
    view = red.operands[0]
    alloc = defining_op(view)
    if alloc is not None and alloc.name == "memref.subview":
        alloc = defining_op(alloc.operands[0])
    st = ir.MemRefType(alloc.results[0].type) if alloc is not None else None
    vec = st.shape[-1] // nthreads if st is not None else 0
    if alloc is None or alloc.name != "memref.alloca" or alloc.block != body or vec < 1 or \
            st.shape[-1] != nthreads * vec or math.prod(st.shape[:-1]) != nrows or \
            ir.MemRefType(view.type).rank != st.rank:
        raise PipelineError(f"{where} does not read the shared partials of {nrows} row(s) of "
                            f"{nthreads} threads: {view.type}")
    stmt = ancestor_in(red, body)
    parts = _partials(alloc, red, body, vec, where)
    comb = _combiner(red)
    elem = st.element_type
    with ir.InsertionPoint.at_block_begin(body):
        acc = memref_d.alloca(ir.MemRefType.get([1] * (st.rank - 1) + [vec], elem), [], [])
        # the row's total: the final reduce reads it alone (acc keeps the thread's vec partials)
        total = acc if vec == 1 else memref_d.alloca(ir.MemRefType.get([1] * st.rank, elem), [], [])
    for sv in parts:
        sv.results[0].replace_all_uses_with(acc)
        sv.erase()
    if vec > 1:
        for op in [o.operation for o in body.operations]:
            if op.name == "linalg.generic" and op.operands[len(op.operands) - 1] == acc:
                _vector_partial(op, vec, body)
    # the barrier after the partials ordered their stores to P before the tree's loads; other
    # shared buffers written before it keep it
    others = [a for a in find_ops(launch, "memref.alloca")
              if a != alloc and ir.MemRefType(a.results[0].type).memory_space is not None]
    ops = [o.operation for o in body.operations]
    before = ops[:ops.index(stmt)]
    last = max((i for i, o in enumerate(before) if any(v == acc for v in o.operands)), default=-1)
    bars = [o for o in before[last + 1:] if o.name == "gpu.barrier"]
    if bars and not others:
        bars[0].erase()
    nwarps = -(-nthreads // WARP_SIZE)
    full = nthreads % WARP_SIZE == 0
    with ir.InsertionPoint(stmt):
        zero = index_constant(0)
        idx = [zero] * st.rank
        tid = gpu_d.thread_id(gpu_d.Dimension.x)
        v = memref_d.load(acc, idx)
        for j in range(1, vec):   # the thread's vector of partials
            v = _combine(comb, memref_d.load(acc, idx[:-1] + [index_constant(j)]), v)
        if full:
            width = _i32(WARP_SIZE)
        else:   # the last warp has nthreads % 32 lanes
            first = arith_d.andi(tid, index_constant(~(WARP_SIZE - 1)))
            live = arith_d.minui(index_constant(WARP_SIZE), arith_d.subi(index_constant(nthreads), first))
            width = arith_d.index_cast(ir.IntegerType.get_signless(32), live)
        v = _butterfly(v, comb, WARP_SIZE, width, full)
        if nwarps == 1:
            memref_d.store(v, total, idx)
        else:
            ws = ir.Attribute.parse(_WORKGROUP)   # debt: no builder for the address space
            with ir.InsertionPoint.at_block_begin(body):
                totals = memref_d.alloca(ir.MemRefType.get([nrows, nwarps], elem, memory_space=ws),
                                         [], [])
            row = gpu_d.thread_id(gpu_d.Dimension.y)
            lane = arith_d.andi(tid, index_constant(WARP_SIZE - 1))
            warp = arith_d.shrui(tid, index_constant(WARP_SIZE.bit_length() - 1))
            first_lane = scf_d.IfOp(arith_d.cmpi(arith_d.CmpIPredicate.eq, lane, zero))
            with ir.InsertionPoint(first_lane.then_block):
                memref_d.store(v, totals, [row, warp])
                scf_d.YieldOp([])
            gpu_d.barrier()
            lead = scf_d.IfOp(arith_d.cmpi(arith_d.CmpIPredicate.ult, tid, index_constant(nwarps)))
            with ir.InsertionPoint(lead.then_block):
                w = memref_d.load(totals, [row, tid])
                pow2 = nwarps & (nwarps - 1) == 0
                w = _butterfly(w, comb, nwarps, _i32(nwarps), pow2)
                memref_d.store(w, total, idx)
                scf_d.YieldOp([])
    old = red.operands[0]
    red.operands[0] = total
    if old != alloc.results[0] and not users(old):
        defining_op(old).erase()
    alloc.erase()
    # the barrier the thread mapping puts after the last combine orders nothing: the kernel ends
    ops = [o.operation for o in body.operations]
    tail = ops[ops.index(stmt) + 1:]
    if [o.name for o in tail] == ["gpu.barrier", "gpu.terminator"]:
        tail[0].erase()


def shuffle_reductions(module: Module) -> Module:
    """Rewrite every linalg op annotated
    :data:`~mlc_mlir.schedule.gpu_reduction.WARP_SHUFFLE` in a ``gpu.launch`` of ``module``
    (module docstring); returns a verified copy, or ``module`` when none is annotated.

    Raises
    ------
    PipelineError
        If an annotated op is not the combine of one row of per-thread partials in shared
        memory in a launch of ``(T, 1, 1)`` threads, or its payload is not one binary op.
    """
    found = [op for name in ("linalg.reduce", "linalg.generic") for op in find_ops(module, name)
             if WARP_SHUFFLE in op.attributes]
    if not found:
        return module
    out = module.clone()
    with out.context, ir.Location.unknown():
        for name in ("linalg.reduce", "linalg.generic"):
            for op in find_ops(out, name):
                if WARP_SHUFFLE in op.attributes:
                    _rewrite(op)
    return out.verify()
