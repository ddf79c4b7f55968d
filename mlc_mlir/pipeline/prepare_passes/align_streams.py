"""``AlignStreamedReductions`` (``mlc-align-streamed-reductions``): a vectorized reduction loop
that streams a row of a function argument starts its full-width loads at a vector-aligned
address read at run time.

A row reduction scheduled with ``rfactor`` (:func:`~mlc_mlir.schedule.rules.reduction.schedule_reduction`,
softmax's max pass, a GEMV row) is a loop ``for k in [0, K) step S`` that reads ``S``
contiguous elements of the row at ``k`` and combines them lane-wise into vector accumulators
(its ``iter_args``). Its loads are as aligned as the row: an argument comes from its caller
(numpy aligns large arrays to 16 bytes, not 64), so with AVX-512 every full-width load of a
row 16 bytes off a 64-byte boundary touches two cache lines (row sum 64 x 65536 on a 2-core
Zen 5, one thread, loaded host: 0.152 ms aligned, 0.233 ms at a 16-byte offset; PyTorch's
sum 0.136 and 0.138 ms).

A loop of ``T`` steps streams an argument when each of its reads indexed by the loop reads
``S`` contiguous elements of the argument's last dim at ``k`` (the loop steps over the row),
directly or through a ``tensor.expand_shape`` that only adds unit dims (a GEMV's vector as
``1 x K``), or one whole row of an ``expand_shape`` view per step (``(C, L / C)``: the first
level of a blocked sum, one step per ``L / C`` contiguous elements). The rewrite:

* ``p``: the elements from the row's first address to the next multiple of the target's vector
  width in bytes (``memref.extract_aligned_pointer_as_index`` of the argument's buffer,
  ``bufferization.to_buffer``; the layout at a function boundary is the identity), for the
  largest streamed argument (a GEMV's matrix, not its vector);
* a head step at offset 0 whose streamed reads are masked to the first ``p`` lanes
  (``vector.create_mask``), the accumulators updated only in those lanes (``arith.select``);
* the loop's first ``T - 1`` steps, each streamed read moved ``p`` elements on (aligned);
* a tail step for the last ``S - p`` elements, masked the same way.

Every element is read once; the lanes of the accumulators hold other partial results than
before (another association of the sum, as the ``reassoc`` final reduction already allows).
Only loops whose body is reads, ``arith``/``math`` ops and ``vector`` broadcasts and shape
casts (no writes), whose vector accumulators have the reads' ``S`` lanes, whose steps are at
least one vector register wide and that run at least :data:`MIN_STEPS` steps are rewritten:
the two masked steps cost about two steps. Measured (2-core Zen 5, one thread, numpy-allocated
inputs, loaded host): row sum 1024 x 4096 0.174 -> 0.144 ms, GEMV 256 x 65536 2.12 -> 1.55 ms.

Source: loop peeling for alignment (GCC's vectorizer, ``vect_do_peeling``: a scalar prologue
up to an aligned address), here a masked vector step in place of the scalar prologue.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

from ..._mlir import arith_d, bufferization_d, ir, memref_d, vector_d
from ...graph.pass_manager import Pass, register_pass
from ...graph.use_def import clone_ops
from ...ir.module import Module
from ...target import host_target

#: Fewest steps of a loop the rewrite applies to: its head and tail steps cost about one step
#: each, so a loop of 16 steps pays at most 1/8 more instructions for its aligned loads.
MIN_STEPS = 16

_PURE_VECTOR_OPS = ("vector.broadcast", "vector.shape_cast", "vector.transfer_read")


def _op(owner) -> ir.Operation:
    return owner.operation if hasattr(owner, "operation") else owner


def _const_index(v: ir.Value) -> Optional[int]:
    owner = _op(v.owner)
    if isinstance(owner, ir.Operation) and owner.name == "arith.constant":
        attr = owner.attributes["value"]
        if isinstance(attr, ir.IntegerAttr):
            return attr.value
    return None


def _index(v: int) -> ir.Value:
    return arith_d.constant(ir.IndexType.get(), v)


def _read_indices(read: ir.Operation) -> List[ir.Value]:
    """The indices of an unmasked ``vector.transfer_read`` (operands: source, indices, padding)."""
    return list(read.operands)[1:len(read.operands) - 1]


class _Stream:
    """A read of ``width`` contiguous elements of the last dim of ``src`` (a function argument)
    at ``outer`` (its other indices) and flat offset ``iv * unit`` (``unit`` 1: the loop steps
    over the row; ``unit`` = ``width``: one step per row of an ``expand_shape`` view)."""

    def __init__(self, read, src, outer, unit, width):
        self.read, self.src, self.outer, self.unit, self.width = read, src, outer, unit, width


def _stream(op: ir.Operation, iv, step: int, args, inside) -> Optional[_Stream]:
    """``op`` (a ``vector.transfer_read`` indexed by ``iv``) as a :class:`_Stream`, or None."""
    src = op.operands[0]
    t = src.type
    if not isinstance(t, ir.RankedTensorType) or len(op.operands) != t.rank + 2:
        return None
    t = ir.RankedTensorType(t)
    if not t.has_static_shape:
        return None
    vt = ir.VectorType(op.results[0].type)
    idx = _read_indices(op)
    perm = ir.AffineMapAttr(op.attributes["permutation_map"]).value
    if (perm != ir.AffineMap.get_minor_identity(t.rank, vt.rank) or any(d != 1 for d in vt.shape[:-1])
            or not all(ir.BoolAttr(b).value for b in ir.ArrayAttr(op.attributes["in_bounds"]))):
        return None
    width = vt.shape[-1]
    if src in args and idx[-1] == iv and width == step:
        outer = idx[:-1]
        return _Stream(op, src, outer, 1, width) if not any(v == iv or v in inside for v in outer) else None
    owner = _op(src.owner)
    if not (isinstance(owner, ir.Operation) and owner.name == "tensor.expand_shape" and owner.operands[0] in args
            and ir.RankedTensorType(owner.operands[0].type).has_static_shape):
        return None
    groups = [[ir.IntegerAttr(d).value for d in ir.ArrayAttr(g)]
              for g in ir.ArrayAttr(owner.attributes["reassociation"])]
    if (step == 1 and t.rank >= 2 and idx[-2] == iv and _const_index(idx[-1]) == 0 and width == t.shape[-1]
            and groups[-1] == [t.rank - 2, t.rank - 1] and all(len(g) == 1 for g in groups[:-1])):
        outer, unit = idx[:-2], width          # one step per row of the view: a contiguous stream
    elif idx[-1] == iv and width == step:
        # a view that only adds unit dims: each group's index is that of its one non-unit dim
        outer = []
        for g in groups:
            big = [d for d in g if t.shape[d] != 1]
            if len(big) > 1:
                return None
            outer.append(idx[big[0] if big else g[-1]])
        if outer[-1] != iv:
            return None
        outer, unit = outer[:-1], 1
    else:
        return None
    if any(v == iv or v in inside for v in outer):
        return None
    return _Stream(op, owner.operands[0], outer, unit, width)


class _Plan:
    """A loop the rewrite applies to: its bounds, streamed reads and the positions of its
    vector accumulators among its ``iter_args``."""

    def __init__(self, loop, extent, step, streams, accs):
        self.loop, self.extent, self.step, self.streams, self.accs = loop, extent, step, streams, accs


def _hoist_index_math(loop: ir.Operation) -> None:
    """Move the ``affine.apply`` and ``arith`` ops of ``loop``'s body that compute from values
    defined outside the loop (a row index of a parallel tile) before the loop (loop-invariant
    code motion, so the rows' indices are known outside it)."""
    body = loop.regions[0].blocks[0]
    local = set(body.arguments)
    for op in [o.operation for o in body.operations][:-1]:
        movable = (op.name == "affine.apply" or op.name.startswith("arith.")) and not len(op.regions) \
            and not any(w in op.name for w in ("div", "rem"))     # no division hoisted past a guard
        if movable and all(isinstance(r.type, ir.IndexType) for r in op.results) \
                and not any(v in local for v in op.operands):
            op.move_before(loop)
        else:
            local.update(op.results)


def _plan(loop: ir.Operation, args, boundary: int, min_steps: int) -> Optional[_Plan]:
    lb, ub, step = (_const_index(loop.operands[i]) for i in range(3))
    if lb != 0 or ub is None or not step or ub % step or ub // step < min_steps:
        return None
    body = loop.regions[0].blocks[0]
    iv, iters = body.arguments[0], list(body.arguments)[1:]
    ops = [op.operation for op in body.operations]
    yielded = list(ops[-1].operands)
    inside = {r for op in ops for r in op.results}
    accs = []
    for i, a in enumerate(iters):
        if isinstance(a.type, ir.VectorType):
            accs.append(i)
        elif yielded[i] != a:              # a tensor carried through unchanged
            return None
    streams: List[_Stream] = []
    for op in ops[:-1]:
        if len(op.regions) or not (op.name.startswith(("arith.", "math.")) or op.name in _PURE_VECTOR_OPS):
            return None
        if not any(o == iv for o in op.operands):
            continue
        st = _stream(op, iv, step, args, inside) if op.name == "vector.transfer_read" else None
        if st is None:
            return None
        streams.append(st)
    if not streams or not accs:
        return None
    width = streams[0].width
    nbytes = ir.RankedTensorType(streams[0].src.type).element_type.width // 8
    shapes = [ir.VectorType(iters[i].type).shape for i in accs]
    if (any(st.width != width for st in streams) or width * nbytes < boundary
            or any(sh[-1] != width or any(d != 1 for d in sh[:-1]) for sh in shapes)):
        return None
    return _Plan(loop, ub, step, streams, accs)


def _peel_count(st: _Stream, boundary: int) -> ir.Value:
    """Elements from the first address of ``st``'s row to the next multiple of ``boundary``
    bytes (the argument's buffer is dense: its layout at a function boundary is the identity)."""
    t = ir.RankedTensorType(st.src.type)
    nbytes = max(1, t.element_type.width // 8)
    buf = bufferization_d.to_buffer(ir.MemRefType.get(t.shape, t.element_type), st.src, read_only=True)
    addr = memref_d.extract_aligned_pointer_as_index(buf)
    stride = t.shape[-1]
    for d in range(t.rank - 2, -1, -1):
        addr = arith_d.addi(addr, arith_d.muli(st.outer[d], _index(stride * nbytes)))
        stride *= t.shape[d]
    b = _index(boundary)
    gap = arith_d.remui(arith_d.subi(b, arith_d.remui(addr, b)), b)
    return arith_d.divui(gap, _index(nbytes))


def _nbytes(v: ir.Value) -> int:
    t = ir.RankedTensorType(v.type)
    n = t.element_type.width // 8
    for d in t.shape:
        n *= d
    return n


def _mask(shape, count: ir.Value) -> ir.Value:
    return vector_d.create_mask(ir.VectorType.get(shape, ir.IntegerType.get_signless(1)),
                                [_index(1) for _ in shape[:-1]] + [count])


def _flat_read(st: _Stream, vmap, flat: ir.Value, mask: Optional[ir.Value]) -> ir.Value:
    """``st``'s read of ``width`` elements of its argument's row at ``flat``, shaped as the
    original read."""
    t = ir.RankedTensorType(st.src.type)
    old = st.read
    vt = ir.VectorType(old.results[0].type)
    flat_t = ir.VectorType.get([1] * (t.rank - 1) + [st.width], vt.element_type)
    # a masked read may end past the row (the tail step): its last dim is bounds-checked
    in_bounds = ir.ArrayAttr.get([ir.BoolAttr.get(True)] * (t.rank - 1) + [ir.BoolAttr.get(mask is None)])
    perm = ir.AffineMapAttr.get(ir.AffineMap.get_minor_identity(t.rank, t.rank))
    v = vector_d.TransferReadOp(flat_t, st.src, [vmap.get(i, i) for i in st.outer] + [flat], perm,
                                old.operands[len(old.operands) - 1], in_bounds, mask=mask).result
    return v if flat_t == vt else vector_d.shape_cast(vt, v)


def _step(plan: _Plan, flat0: ir.Value, count: Optional[ir.Value], vmap: Dict) -> List[ir.Value]:
    """Clone ``plan``'s loop body for one step whose streamed reads start at flat offset
    ``flat0`` (masked to ``count`` lanes when given, the accumulators updated in those lanes
    only); ``vmap`` maps the body's block arguments. Returns the new accumulators."""
    body = plan.loop.regions[0].blocks[0]
    ops = [op.operation for op in body.operations]
    by_read = {st.read: st for st in plan.streams}
    masks: Dict[Tuple[int, ...], ir.Value] = {}

    def mask(shape):
        key = tuple(shape)
        if key not in masks:
            masks[key] = _mask(shape, count)
        return masks[key]

    for op in ops[:-1]:
        st = by_read.get(op)
        if st is not None:
            t = ir.RankedTensorType(st.src.type)
            m = mask([1] * (t.rank - 1) + [st.width]) if count is not None else None
            vmap[op.results[0]] = _flat_read(st, vmap, flat0, m)
            continue
        clone_ops([op], vmap)
    yielded = list(ops[-1].operands)
    args = list(body.arguments)
    out = []
    for i in plan.accs:
        v = vmap.get(yielded[i], yielded[i])
        acc = vmap[args[1 + i]]
        out.append(arith_d.select(mask(ir.VectorType(acc.type).shape), v, acc) if count is not None else v)
    return out


def _rewrite(plan: _Plan, boundary: int) -> None:
    loop = plan.loop
    body = loop.regions[0].blocks[0]
    args = list(body.arguments)
    inits = list(loop.operands)[3:]
    carried = {args[1 + i]: inits[i] for i in range(len(inits)) if i not in plan.accs}
    width = plan.streams[0].width
    with ir.InsertionPoint(loop):
        # the largest argument comes from the farthest memory (a GEMV's matrix, not its vector)
        peel = _peel_count(max(plan.streams, key=lambda st: _nbytes(st.src)), boundary)
        vmap = dict(carried)
        vmap.update({args[1 + i]: inits[i] for i in plan.accs})
        head = _step(plan, _index(0), peel, vmap)
    for i, v in zip(plan.accs, head):
        loop.operands[3 + i] = v
    last = plan.extent - plan.step
    with ir.InsertionPoint(loop):
        loop.operands[1] = _index(last)
    results = [loop.results[i] for i in plan.accs]
    before = [{_op(u.owner) for u in r.uses} for r in results]
    nxt = list(loop.block.operations)
    pos = next(n for n, o in enumerate(nxt) if _op(o) == loop)
    with ir.InsertionPoint(_op(nxt[pos + 1])):
        vmap = dict(carried)
        vmap.update({args[1 + i]: r for i, r in zip(plan.accs, results)})
        vmap[args[0]] = _index(last)
        flat0 = arith_d.addi(_index((last // plan.step) * width), peel)
        tail = _step(plan, flat0, arith_d.subi(_index(width), peel), vmap)
    for r, v, old in zip(results, tail, before):
        r.replace_all_uses_except(v, [_op(u.owner) for u in r.uses if _op(u.owner) not in old])
    # the main loop: every streamed read moves ``peel`` elements on (aligned)
    with ir.InsertionPoint.at_block_begin(body):
        for st in plan.streams:
            flat = body.arguments[0] if st.unit == 1 else arith_d.muli(body.arguments[0], _index(st.unit))
            new = _flat_read(st, {}, arith_d.addi(flat, peel), None)
            st.read.results[0].replace_all_uses_with(new)
    for st in plan.streams:
        st.read.erase()


def _loops(module: Module) -> List[Tuple[ir.Operation, set]]:
    found = []
    for f in module.func_ops():
        if f.is_external:
            continue
        args = set(f.regions[0].blocks[0].arguments)

        def visit(op, args=args):
            op = _op(op)
            if op.name == "scf.for":
                found.append((op, args))
            return ir.WalkResult.ADVANCE

        f.operation.walk(visit, ir.WalkOrder.PRE_ORDER)
    return found


@register_pass
class AlignStreamedReductions(Pass):
    """Peel the vectorized reduction loops that stream rows of function arguments to the
    target's vector alignment (see the module docstring). Runs on tensors, after scheduling;
    shapes and dtypes are unchanged.

    Parameters
    ----------
    boundary : int, optional
        The alignment in bytes the main loop's loads start at: the target's vector width
        (``Target.vector_bits // 8``; a full-width load at such an address stays in one cache
        line). Default: the host's.
    min_steps : int
        Fewest steps of a loop that is rewritten (:data:`MIN_STEPS`).
    """

    name = "mlc-align-streamed-reductions"

    def __init__(self, boundary: Optional[int] = None, min_steps: int = MIN_STEPS):
        self.boundary = boundary or host_target().vector_bits // 8
        self.min_steps = min_steps

    def transform(self, mod: Module) -> Module:
        for loop, args in _loops(mod):
            _hoist_index_math(loop)
            plan = _plan(loop, args, self.boundary, self.min_steps)
            if plan is not None:
                _rewrite(plan, self.boundary)
        return mod
