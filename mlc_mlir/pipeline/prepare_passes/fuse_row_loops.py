"""``FuseRowLoops`` (``mlc-fuse-row-loops``): a reduction loop that reads back, step by step,
the row a preceding loop of the same steps just wrote is merged into that loop, the values
forwarded from the write instead of read back.

A row chain (:mod:`~mlc_mlir.schedule.rules.row_fused`) computes softmax's ``exp(x - max)``
into a buffer of one row, then sums the buffer in a second loop, then scales it into the
output: three passes over the row where two do. After the rewrite the exponential loop also
accumulates the sum: one pass fewer over a buffer that outgrows L1 for long rows (64 KiB per
row of 16384 floats). Before::

    %e = scf.for %k = 0 to C step S iter_args(%b = %buf) {
      ... %v = exp(...) ...
      %w = vector.transfer_write %v, %b[%c0, %k]
      scf.yield %w
    }
    ... ops that do not read %e ...
    %s:2 = scf.for %k = 0 to C step S iter_args(%t = %fill, %acc = %zero) {
      %r = vector.transfer_read %e[%c0, %k]
      %a = arith.addf %acc, %r
      scf.yield %t, %a
    }

After: one loop at the second one's place, iter_args ``(%buf, %fill, %zero)``, whose body is
the first body, then the second with ``%r`` replaced by ``%v``.

Conditions: equal static bounds and steps; the first loop carries one tensor, yielded by its
one ``vector.transfer_write`` at indices fixed outside the loop but for the loop's index last;
the second reads that loop's result only through ``vector.transfer_read`` ops of the written
vector type at the same indices, has no other writes, and the first loop's result has no
other reader before the second loop.

Source: loop fusion of producer-consumer loops with store-to-load forwarding (MLIR
``transform.loop.fuse_sibling`` fuses sibling loops; the forwarding is
``vector`` store-to-load forwarding, ``transfer_read(transfer_write)`` folding).
"""

from __future__ import annotations

from typing import List, Optional

from ..._mlir import ir, scf_d
from ...graph.pass_manager import Pass, register_pass
from ...graph.use_def import clone_ops
from ...ir.module import Module


def _op(owner) -> ir.Operation:
    return owner.operation if hasattr(owner, "operation") else owner


def _bounds(loop: ir.Operation) -> Optional[tuple]:
    vals = []
    for v in list(loop.operands)[:3]:
        owner = _op(v.owner)
        if not (isinstance(owner, ir.Operation) and owner.name == "arith.constant"):
            return None
        vals.append(ir.IntegerAttr(owner.attributes["value"]).value)
    return tuple(vals)


def _body(loop: ir.Operation) -> List[ir.Operation]:
    return [_op(o) for o in loop.regions[0].blocks[0].operations]


def _producer_write(loop: ir.Operation) -> Optional[ir.Operation]:
    """The one ``vector.transfer_write`` whose result ``loop`` yields as its only iter_arg,
    writing at the loop's index last, else None."""
    body = loop.regions[0].blocks[0]
    if len(body.arguments) != 2:
        return None
    ops = _body(loop)
    writes = [o for o in ops if o.name == "vector.transfer_write"]
    if len(writes) != 1 or len(list(ops[-1].operands)) != 1 or ops[-1].operands[0] != writes[0].results[0]:
        return None
    w = writes[0]
    idx = list(w.operands)[2:]
    iv = body.arguments[0]
    if w.operands[1] != body.arguments[1] or not idx or idx[-1] != iv or any(v == iv for v in idx[:-1]):
        return None
    inside = {r for o in ops for r in o.results}
    if any(v in inside for v in idx[:-1]) or len(list(w.operands)) != 2 + len(idx):
        return None
    return w


def _consumer_reads(loop: ir.Operation, value: ir.Value, write: ir.Operation) -> Optional[list]:
    """The reads of ``value`` in ``loop`` (each like ``write``'s slot), else None."""
    ops = _body(loop)
    iv = loop.regions[0].blocks[0].arguments[0]
    w_idx = list(write.operands)[2:]
    reads = []
    for o in ops:
        if o.name in ("vector.transfer_write", "tensor.insert_slice") or len(o.regions):
            return None
        if not any(v == value for v in o.operands):
            continue
        if o.name != "vector.transfer_read" or o.results[0].type != write.operands[0].type:
            return None
        idx = list(o.operands)[1:len(o.operands) - 1]
        if len(idx) != len(w_idx) or idx[-1] != iv or len(o.operands) != len(idx) + 2:
            return None
        if any(a != b for a, b in zip(idx[:-1], w_idx[:-1])):
            return None
        if o.attributes["permutation_map"] != write.attributes["permutation_map"]:
            return None
        reads.append(o)
    return reads or None


def _fuse(prod: ir.Operation, cons: ir.Operation, write: ir.Operation, reads: List[ir.Operation]) -> None:
    p_body, c_body = prod.regions[0].blocks[0], cons.regions[0].blocks[0]
    inits = list(prod.operands)[3:] + list(cons.operands)[3:]
    lb, ub, step = list(cons.operands)[:3]
    with ir.InsertionPoint(cons):
        fused = scf_d.ForOp(lb, ub, step, inits)
    f_body = fused.body
    n_prod = len(list(prod.operands)) - 3
    vmap = {p_body.arguments[0]: fused.induction_variable, c_body.arguments[0]: fused.induction_variable}
    for i, a in enumerate(list(p_body.arguments)[1:]):
        vmap[a] = fused.inner_iter_args[i]
    for i, a in enumerate(list(c_body.arguments)[1:]):
        vmap[a] = fused.inner_iter_args[n_prod + i]
    p_ops, c_ops = _body(prod), _body(cons)
    with ir.InsertionPoint(f_body):
        for o in p_ops[:-1] + c_ops[:-1]:
            if o in reads:
                vmap[o.results[0]] = vmap.get(write.operands[0], write.operands[0])
                continue
            clone_ops([o], vmap)
        scf_d.YieldOp([vmap.get(v, v) for v in list(p_ops[-1].operands) + list(c_ops[-1].operands)])
    prod.results[0].replace_all_uses_with(fused.results[0])
    for i, r in enumerate(cons.results):
        r.replace_all_uses_with(fused.results[n_prod + i])
    cons.erase()
    prod.erase()


def _candidates(mod: Module) -> List[ir.Operation]:
    found = []

    def visit(op):
        op = _op(op)
        if op.name == "scf.for" and _producer_write(op) is not None:
            found.append(op)
        return ir.WalkResult.ADVANCE

    for f in mod.defined_functions():
        f.operation.walk(visit, ir.WalkOrder.PRE_ORDER)
    return found


@register_pass
class FuseRowLoops(Pass):
    """Merge a reduction loop into the preceding loop that writes the row it reads (see the
    module docstring). Runs on tensors, after scheduling; shapes and dtypes are unchanged."""

    name = "mlc-fuse-row-loops"

    def transform(self, mod: Module) -> Module:
        # the ops of each block holding a candidate and their positions, listed again after a
        # fusion changed the IR (listing a graph function's block for each of its candidates
        # was quadratic in the model)
        listed = {}
        for prod in _candidates(mod):
            write = _producer_write(prod)
            bounds = _bounds(prod)
            if bounds is None:
                continue
            value = prod.results[0]
            users = [_op(u.owner) for u in value.uses]
            if prod.block not in listed:
                ops = [_op(o) for o in prod.block.operations]
                listed[prod.block] = (ops, {o: n for n, o in enumerate(ops)})
            block_ops, position = listed[prod.block]
            pos = position[prod]
            # the consumer: the first later loop of the block with the same bounds whose body
            # has an op reading the row (the loops holding a user, not a scan of the block)
            loops = [_op(u.parent) for u in users if u.parent is not None]
            later = sorted(position[p] for p in loops
                           if p.name == "scf.for" and position.get(p, -1) > pos and _bounds(p) == bounds)
            if not later:
                continue
            cpos = later[0]
            cons = block_ops[cpos]
            if any(pos < position.get(u, -1) < cpos for u in users):
                continue
            if any(isinstance(a.type, ir.RankedTensorType) and a != y
                   for a, y in zip(list(cons.regions[0].blocks[0].arguments)[1:], list(_body(cons)[-1].operands))):
                continue    # the consumer carries tensors it writes
            reads = _consumer_reads(cons, value, write)
            if reads is None:
                continue
            _fuse(prod, cons, write, reads)
            listed.clear()
        return mod
