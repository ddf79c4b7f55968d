"""Part of stage ``tasks`` of :func:`mlc_mlir.compile`: units that occur more than once are
outlined into one private function each, called from every site, so that the schedule stage,
the lowering pipeline and LLVM work once per distinct kernel and not once per layer (a 12-layer
transformer holds about 20 distinct units, each repeated 12 times).

The units are ``graph.FuseOps``' groups (:func:`~mlc_mlir.graph.fuse_ops.fusion_groups`, the
grouping the ``tasks`` stage marks and the tuner outlines); each is outlined with
:func:`~mlc_mlir.graph.fuse_ops.outline`, weight constants passed as
arguments (:func:`is_weight`), so the layers' units differ only in their arguments. Two outlined units
with the same :func:`~mlc_mlir.ir.workload.structural_key` (the same IR up to op names,
constant values included) are one function: the second site calls the first one's function.

Only units whose boundary is plain values are shared (:func:`shareable`); a unit that writes
into a buffer of its caller (a KV cache row ``tensor.insert_slice``-d into an in/out argument, an
op accumulating into a value it does not create), that pads a value it reads or inserts it into a
buffer of its own (a padded convolution input after the layout stage), or whose result is
inserted into a slice or padded by its caller (a padded convolution input, a concatenation)
stays where it is, so the ``prepare`` stage's in-place writes across units (producers writing
into the next padded buffer or their slice of a concatenation) hold as before. A unit that occurs
once stays in its graph function too.

The shared functions are ``private``, marked ``mlc.primitive`` (one unit each, for
:func:`~mlc_mlir.pipeline.tasks.task_units` and the tuning database) and ``noinline`` for LLVM
(which would otherwise inline them back into every call site and optimize each copy again).

Source: TVM Relax's deduplication of structurally equal PrimFuncs after ``FuseOps`` /
``FuseTIR``; IREE's dispatch region deduplication (``iree-flow-deduplicate-executables``).
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

from .._mlir import ir
from ..graph.fuse_ops import PRIMITIVE_ATTR, fusion_groups, outline
from ..graph.use_def import producer, top_level, users_in
from ..ir.module import Module
from ..ir.workload import structural_key

def _no_inline(fn) -> None:
    """Keep LLVM from inlining ``fn``: ``passthrough = ["noinline"]``, which the conversion to
    the LLVM dialect carries over to ``llvm.func`` and translation to the LLVM function
    attribute."""
    fn.attributes["passthrough"] = ir.ArrayAttr.get([ir.StringAttr.get("noinline")])

_RESHAPES = ("tensor.collapse_shape", "tensor.expand_shape")
#: Ops that copy a value into a buffer; a producer that feeds one directly is rewritten by the
#: ``prepare`` stage to write in place, which a call boundary would prevent.
_IN_PLACE_CONSUMERS = ("tensor.insert_slice", "tensor.pad", "tensor.concat")


def is_weight(op: ir.Operation) -> bool:
    """Whether ``op`` is an ``arith.constant`` holding a tensor that is not a splat (weights,
    biases, tables): a shared function takes it as an argument, so units that differ only in
    such values are one function. Splats (zeros, an epsilon) stay in the kernel."""
    if op.name != "arith.constant" or not isinstance(op.results[0].type, ir.RankedTensorType):
        return False
    value = op.attributes["value"]
    return ir.RankedTensorType(op.results[0].type).rank > 0 and \
        not (isinstance(value, ir.DenseElementsAttr) and value.is_splat)


def _destinations(op: ir.Operation) -> List[ir.Value]:
    """The operands ``op`` writes into (destination-passing style): a linalg op's ``outs``, the
    destination of ``tensor.insert_slice`` / ``tensor.insert``."""
    if op.name in ("tensor.insert_slice", "tensor.insert"):
        return [op.operands[1]]
    if not op.name.startswith("linalg."):
        return []
    if "operandSegmentSizes" in op.attributes:
        sizes = list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]))
        return list(op.operands)[sizes[0]:sizes[0] + sizes[1]]
    return [op.operands[len(op.operands) - 1]] if len(op.operands) else []


def _made_inside(v, members) -> bool:
    """Whether ``v`` is computed by a member of the group or by a free op the outlined function
    clones (``tensor.empty``, a fill of one, a constant)."""
    p = producer(v)
    if p is None:
        return False
    if p in members or p.name in ("tensor.empty", "arith.constant"):
        return True
    return p.name == "linalg.fill" and _made_inside(p.operands[1], members)


def _feeds_in_place(v, block, seen=None) -> bool:
    """Whether ``v`` reaches, through reshapes, an op of ``block`` that copies it into a buffer
    (:data:`_IN_PLACE_CONSUMERS`)."""
    for u in users_in(v, block):
        if u.name in _IN_PLACE_CONSUMERS:
            return True
        if u.name in _RESHAPES and _feeds_in_place(u.results[0], block):
            return True
    return False


def shareable(group: Sequence[ir.Operation]) -> bool:
    """Whether the unit ``group`` (ops of one graph function) has static shapes and a plain
    boundary: it creates every buffer it writes, pads or inserts nothing it reads, and none of
    its results is copied into a buffer by its caller (see the module docstring)."""
    members = set(group)
    block = group[0].block
    for op in group:
        if any(isinstance(v.type, ir.RankedTensorType) and not ir.RankedTensorType(v.type).has_static_shape
               for v in list(op.operands) + list(op.results)):
            return False   # symbolic sizes: the prepare stage inlines such calls again
        if any(not _made_inside(d, members) for d in _destinations(op)):
            return False
        if op.name in ("tensor.pad", "tensor.insert_slice") and not _made_inside(op.operands[0], members):
            return False   # a value of the caller copied into a (padded) buffer
        for r in op.results:
            outside = [u for u in users_in(r, block) if u not in members]
            if outside and _feeds_in_place(r, block):
                return False
    return True


def _groups(module: Module, functions: Sequence[str]) -> List[Tuple[str, List[ir.Operation]]]:
    """``(function, group)`` for the shareable units of ``functions``, in order."""
    out = []
    for f in module.func_ops():
        name = f.sym_name.value
        if name in functions and not f.is_external and PRIMITIVE_ATTR not in f.attributes:
            out += [(name, g) for g in fusion_groups(f) if shareable(g)]
    return out


def _outside_use(group) -> Tuple[Optional[ir.Operation], int]:
    """An op outside ``group`` and the index of its operand that is a result of the group (after
    outlining, a result of the call)."""
    members, block = set(group), group[0].block
    for op in group:
        for r in op.results:
            for u in r.uses:
                if top_level(u.owner, block) not in members:
                    return u.owner.operation, u.operand_number
    return None, 0   # a dead unit (the graph stage erases dead ops)


def _repeated(module: Module, functions: Sequence[str]) -> List[Optional[str]]:
    """The structural key of each shareable unit (:func:`_groups` order) that occurs more than
    once, None for the others; computed on a copy with every shareable unit outlined."""
    trial = module.clone()
    keys: List[Optional[str]] = []
    with trial.context, ir.Location.unknown():
        names = set(trial.function_names())
        fns = {f.sym_name.value: f for f in trial.func_ops()}
        for fname, group in _groups(trial, functions):
            prim = outline(trial, fns[fname], group, used_names=names, keep_outside=is_weight)
            keys.append(structural_key(trial, prim.sym_name.value))
    counts: Dict[str, int] = {}
    for k in keys:
        counts[k] = counts.get(k, 0) + 1
    return [k if counts[k] > 1 else None for k in keys]


def share_repeated_units(module: Module, functions: Sequence[str]) -> Module:
    """A copy of ``module`` in which each unit of ``functions`` that occurs more than once (and
    has a plain boundary, :func:`shareable`) is a call of one private function per distinct
    unit (see the module docstring); ``module`` itself when no unit repeats.

    Parameters
    ----------
    module : Module
        After the ``layout`` stage.
    functions : sequence of str
        The graph functions to divide (the unscheduled ones).
    """
    keys = _repeated(module, functions)
    if not any(keys):
        return module
    out = module.clone()
    shared: Dict[str, ir.Operation] = {}
    with out.context, ir.Location.unknown():
        names = set(out.function_names())
        fns = {f.sym_name.value: f for f in out.func_ops()}
        groups = _groups(out, functions)
        if len(groups) != len(keys):   # the grouping is deterministic; a mismatch is a bug
            return module
        for (fname, group), key in zip(groups, keys):
            if key is None:
                continue
            user, index = _outside_use(group)
            if user is None:
                continue
            prim = outline(out, fns[fname], group, used_names=names, keep_outside=is_weight)
            first = shared.get(key)
            if first is None:
                _no_inline(prim)
                shared[key] = prim
                continue
            call = user.operands[index].owner
            if str(first.type) != str(prim.type):   # equal keys have equal types
                _no_inline(prim)
                continue
            call.attributes["callee"] = ir.FlatSymbolRefAttr.get(first.sym_name.value)
            names.discard(prim.sym_name.value)
            prim.operation.erase()
    return out.verify()
