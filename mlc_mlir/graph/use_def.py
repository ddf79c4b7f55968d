"""Walking the IR of graph functions through the bindings (never printed IR): an op's producer,
its users among the top-level ops of a block, the values it reads (operands and values its
regions capture from above), the named ops of a module, and cloning ops with their nested uses
remapped.

Source: MLIR ``getUsedValuesDefinedAbove`` / ``IRMapping`` + ``Operation::clone``.
"""

from __future__ import annotations

from typing import Dict, Iterable, List, Optional

from .._mlir import ir
from ..ir.module import OP_NAME_ATTR


def producer(value) -> Optional[ir.Operation]:
    """The operation defining ``value``, or None for a block argument.

    Parameters
    ----------
    value : ir.Value

    Returns
    -------
    ir.Operation or None
    """
    owner = value.owner
    return None if isinstance(owner, ir.Block) else owner.operation


def op_name(op) -> str:
    """The op's ``mlc.name`` (the builder's stable name), else the short op name
    (``matmul`` for ``linalg.matmul``)."""
    op = getattr(op, "operation", op)
    if OP_NAME_ATTR in op.attributes:
        return ir.StringAttr(op.attributes[OP_NAME_ATTR]).value
    return op.name.split(".")[-1]


def has_uses(op) -> bool:
    """True if any result of ``op`` is used."""
    op = getattr(op, "operation", op)
    return any(True for r in op.results for _ in r.uses)


def is_inside(op, root) -> bool:
    """True if ``op`` is ``root`` or nested in one of its regions."""
    root = getattr(root, "operation", root)
    o = getattr(op, "operation", op)
    while o is not None:
        if o == root:
            return True
        o = o.parent
        o = None if o is None else o.operation
    return False


def _defined_inside(value, root) -> bool:
    owner = value.owner
    if isinstance(owner, ir.Block):
        return owner.owner is not None and is_inside(owner.owner, root)
    return is_inside(owner, root)


def used_values(op) -> List[ir.Value]:
    """Values ``op`` reads from outside itself, in first-use order: its operands, then values
    its regions capture from above (e.g. a scalar ``arith.constant`` used in a
    ``linalg.generic`` body after ``canonicalize``/``cse``).

    Source: MLIR ``getUsedValuesDefinedAbove``.
    """
    op = getattr(op, "operation", op)
    out: List[ir.Value] = []

    def add(v):
        if all(v != x for x in out):
            out.append(v)

    for v in op.operands:
        add(v)
    if op.regions:
        nested: List[ir.Operation] = []

        def visit(o):
            if o != op:
                nested.append(o)
            return ir.WalkResult.ADVANCE

        op.walk(visit, ir.WalkOrder.PRE_ORDER)
        for o in nested:
            for v in o.operands:
                if not _defined_inside(v, op):
                    add(v)
    return out


def top_level(op, block) -> Optional[ir.Operation]:
    """The ancestor of ``op`` (itself included) that sits directly in ``block``."""
    o = getattr(op, "operation", op)
    while o is not None and o.block != block:
        o = o.parent
        o = None if o is None else o.operation
    return o


def users_in(value, block) -> List[ir.Operation]:
    """Top-level ops of ``block`` that use ``value`` (directly or inside their regions)."""
    out: List[ir.Operation] = []
    for u in value.uses:
        t = top_level(u.owner, block)
        if t is not None and all(t != x for x in out):
            out.append(t)
    return out


def clone_ops(ops: Iterable, mapping: Dict) -> None:
    """Clone ``ops`` (in order) at the current insertion point, replacing every use of a value in
    ``mapping`` (old value -> new value), in operands and inside the ops' regions, and adding each
    clone's results to ``mapping``.

    Source: MLIR ``Operation::clone(IRMapping&)``.
    """
    for op in ops:
        op = getattr(op, "operation", op)
        c = op.clone()

        def remap(o):
            for i, v in enumerate(o.operands):
                if v in mapping:
                    o.operands[i] = mapping[v]
            return ir.WalkResult.ADVANCE

        c.walk(remap, ir.WalkOrder.PRE_ORDER)
        for old, new in zip(op.results, c.results):
            mapping[old] = new


def named_ops(mod, op_name: str, functions=None) -> List:
    """The top-level ops named ``op_name`` (e.g. ``linalg.conv_2d_nhwc_hwcf``) that carry an
    ``mlc.name``, in the function bodies of ``mod`` (only ``functions`` when given), in
    program order: a list, safe to rewrite while iterating."""
    out = []
    for f in mod.defined_functions(functions):
        out += [o.operation for o in f.regions[0].blocks[0].operations
                if o.operation.name == op_name and OP_NAME_ATTR in o.operation.attributes]
    return out
