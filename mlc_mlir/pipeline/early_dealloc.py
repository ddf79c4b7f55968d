"""Deallocate each buffer after its last use, not at the end of its block.

MLIR's ownership-based buffer deallocation (``buffer-deallocation-pipeline``) inserts the
``bufferization.dealloc`` of a block's buffers before the block's terminator: in a graph
function's straight-line body, every intermediate buffer then lives until the function
returns. For a decoder of 12 layers the buffers of all layers are live at once (GPT-2 124M
prefill of 960 tokens: ~2.4 GB of attention scores and activations at the end of one call),
where the buffers of one layer would do: freed after their last use, the next layer's
requests of the same sizes get the same blocks back from the buffer cache
(:mod:`mlc_mlir.pipeline.buffer_cache`).

:func:`dealloc_after_last_use` runs after the deallocation pipeline (the ``memref.dealloc`` ops
it leaves): each ``memref.dealloc %m`` directly in a block moves up to just after the last op
of that block that reads or writes the buffer through any alias (back from ``%m`` through views
and the values an ``scf.if``/``scf.for`` result may be, then forward through the results of
every op on them; a use inside a region counts at the op of the block holding it). A buffer whose address leaves the memref world
(``memref.extract_aligned_pointer_as_index``, an unrealized cast, a return) is left as it is.
A ``memref.extract_strided_metadata`` whose base buffer only the dealloc reads (the dealloc of
an ``scf.if`` result) moves with it. Moving a dealloc earlier within its block changes no
ownership: the same buffer is freed once on the same path.

Source: MLIR's former ``-buffer-deallocation`` pass (deallocs placed after the last use, by
liveness and post-dominance); the liveness-based buffer reuse of TVM's
``StorageRewrite`` / XLA's buffer assignment.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Set

from .._mlir import ir
from ..ir.module import Module

#: Ops after which a buffer's address is an integer or a foreign value: its uses are not tracked.
_ESCAPES = ("memref.extract_aligned_pointer_as_index", "builtin.unrealized_conversion_cast",
            "func.return", "llvm.return")


def _is_memref(t: ir.Type) -> bool:
    return isinstance(t, (ir.MemRefType, ir.UnrankedMemRefType))


def _op(op) -> ir.Operation:
    return op.operation if hasattr(op, "operation") else op


def _in_block(op, block) -> Optional[ir.Operation]:
    """The op of ``block`` that is or holds ``op``, or None when ``op`` is outside it."""
    op = _op(op)
    while op.block != block:
        if op.parent is None or op.name == "builtin.module":
            return None
        op = _op(op.parent)
    return op


def _owner_in(value: ir.Value, block) -> Optional[ir.Operation]:
    owner = value.owner
    if isinstance(owner, ir.Block):
        return None
    owner = _op(owner)
    return owner if owner.block == block else None


#: Ops whose memref result is a view of their first operand.
_VIEWS = ("memref.cast", "memref.subview", "memref.expand_shape", "memref.collapse_shape",
          "memref.reinterpret_cast", "memref.reshape", "memref.view", "memref.transpose",
          "memref.extract_strided_metadata", "memref.memory_space_cast")


def _sources(value: ir.Value, block, out: List[ir.Value]) -> None:
    """Append ``value`` and every value of ``block`` it may be a view of: through view ops to
    their source, and from a result of a region op (``scf.if``, ``scf.for``) to the values of
    ``block`` its regions yield at that position and its memref operands (loop inits)."""
    if value in out:
        return
    out.append(value)
    op = _owner_in(value, block)
    if op is None:
        return
    if op.name in _VIEWS:
        _sources(op.operands[0], block, out)
        return
    if len(op.regions):
        index = next(i for i, r in enumerate(op.results) if r == value)
        for region in op.regions:
            for b in region.blocks:
                ops = list(b.operations)
                term = _op(ops[-1]) if ops else None
                if term is not None and index < len(term.operands):
                    _sources(term.operands[index], block, out)
        for v in op.operands:
            if _is_memref(v.type):
                _sources(v, block, out)


def _last_use(roots: List[ir.Value], block, skip: Set, order: Dict) -> Optional[int]:
    """The position in ``block`` of the last op using any alias of ``roots`` (ops in ``skip``
    aside); ``-1`` if there is none; None if an alias escapes."""
    last, seen, work = -1, set(), list(roots)
    while work:
        v = work.pop()
        if v in seen:
            continue
        seen.add(v)
        for use in v.uses:
            user = _op(use.owner)
            if user.name in _ESCAPES:
                return None
            anc = _in_block(user, block)
            if anc is None:
                return None
            if anc in skip:
                continue
            last = max(last, order[anc])
            if user.name in ("scf.yield", "scf.condition") or user.name.endswith(".yield"):
                parent = _op(user.parent)
                work.extend(r for r in parent.results if _is_memref(r.type))
            work.extend(r for r in user.results if _is_memref(r.type))
            if any(str(r.type).startswith("!llvm.") for r in user.results):
                return None
    return last


def _move_deallocs(block) -> int:
    ops = [op.operation for op in block.operations]
    deallocs = [op for op in ops if op.name == "memref.dealloc"]
    if not deallocs:
        return 0
    order = {op: i for i, op in enumerate(ops)}
    moved = 0
    for dealloc in deallocs:
        value = dealloc.operands[0]
        carry: List[ir.Operation] = []
        meta = _owner_in(value, block)
        if meta is not None and meta.name == "memref.extract_strided_metadata" and \
                all(len(list(r.uses)) == (1 if i == 0 else 0) for i, r in enumerate(meta.results)):
            carry, roots = [meta], [meta.operands[0]]
        else:
            roots = [value]
        aliases: List[ir.Value] = []
        for r in roots:
            _sources(r, block, aliases)
        last = _last_use(aliases, block, set([dealloc] + carry), order)
        if last is None:
            continue
        defs = [order[o] for o in (_owner_in(r, block) for r in aliases) if o is not None]
        anchor_at = max([last] + defs)
        if anchor_at < 0 or anchor_at >= order[dealloc] - 1 - len(carry):
            continue
        anchor = ops[anchor_at]
        for op in reversed(carry + [dealloc]):   # anchor, carry..., dealloc
            op.move_after(anchor)
        moved += 1
    return moved


def dealloc_after_last_use(module: Module) -> Module:
    """A copy of ``module`` (buffers and ``memref.dealloc`` ops, after
    ``buffer-deallocation-pipeline``) whose deallocs sit right after the last use of their
    buffer in their block (see the module docstring); ``module`` itself when none moves."""
    out = module.clone()
    blocks = []

    def visit(op):
        op = op.operation if hasattr(op, "operation") else op
        for region in op.regions:
            for block in region.blocks:
                if any(o.operation.name == "memref.dealloc" for o in block.operations):
                    blocks.append(block)
        return ir.WalkResult.ADVANCE

    with out.context:
        out.operation.walk(visit, ir.WalkOrder.PRE_ORDER)
        moved = sum(_move_deallocs(b) for b in blocks)
    return out if moved else module
