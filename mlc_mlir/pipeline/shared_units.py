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

A unit of symbolic sizes (a prefill step's ``seq x 768`` rows) is shared in destination-passing
style: each of its results of dynamic shape is written into a ``tensor.empty`` of the caller,
passed as an argument (:func:`_dynamic_destinations`), so the result is the argument itself
(bufferization drops it from the signature, ``drop-equivalent-buffer-results``, and the caller
allocates the buffer, whose size it knows). Its calls are marked ``no_inline``, so the
``prepare`` stage, which inlines the calls that still return dynamically shaped tensors, keeps
them. A unit with a dynamic result that is not such a destination (a reshape) stays in place.

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
from ..ir.pass_pipeline import run_pass_pipeline
from ..ir.workload import structural_key

def llvm_noinline(fn) -> None:
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


def _dynamic(v) -> bool:
    return isinstance(v.type, ir.RankedTensorType) and not ir.RankedTensorType(v.type).has_static_shape


def _empty_destination(result) -> Optional[ir.Operation]:
    """The ``tensor.empty`` that ``result`` of a linalg op is written into (its destination, or
    the destination of the ``linalg.fill`` that is), else None."""
    op = producer(result)
    if op is None or not op.name.startswith("linalg."):
        return None
    dests = _destinations(op)
    n = ir.OpResult(result).result_number
    d = producer(dests[n]) if n < len(dests) else None
    if d is not None and d.name == "linalg.fill":
        d = producer(d.operands[1])
    return d if d is not None and d.name == "tensor.empty" else None


def _dynamic_destinations(group: Sequence[ir.Operation]) -> set:
    """The ``tensor.empty`` ops that the dynamically shaped results of ``group`` used outside
    it are written into: the caller allocates them and passes them in."""
    members, block = set(group), group[0].block
    out = set()
    for op in group:
        for r in op.results:
            if _dynamic(r) and any(u not in members for u in users_in(r, block)):
                out.add(_empty_destination(r))
    out.discard(None)
    return out


def _outline(module: Module, fn, group, names) -> ir.Operation:
    """``group`` outlined from ``fn`` (:func:`outline`): weights and the destinations of its
    dynamic results are arguments; its call is ``no_inline``."""
    empties = _dynamic_destinations(group)
    user, index = _outside_use(group)
    prim = outline(module, fn, group, used_names=names,
                   keep_outside=lambda op: is_weight(op) or op in empties)
    if user is not None:
        user.operands[index].owner.attributes["no_inline"] = ir.UnitAttr.get()
    return prim


def shareable(group: Sequence[ir.Operation]) -> bool:
    """Whether the unit ``group`` (ops of one graph function) has a plain boundary: it creates
    every buffer it writes (its dynamically shaped results: a ``tensor.empty`` the caller can
    make, :func:`_empty_destination`), pads or inserts nothing it reads, and none of its results
    is copied into a buffer by its caller (see the module docstring)."""
    members = set(group)
    block = group[0].block
    for op in group:
        if any(_dynamic(r) and _empty_destination(r) is None for r in op.results
               if any(u not in members for u in users_in(r, block))):
            return False   # a dynamic result the caller cannot allocate
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
            prim = _outline(trial, fns[fname], group, names)
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
            prim = _outline(out, fns[fname], group, names)
            first = shared.get(key)
            if first is None:
                llvm_noinline(prim)
                shared[key] = prim
                continue
            call = user.operands[index].owner
            if str(first.type) != str(prim.type):   # equal keys have equal types
                llvm_noinline(prim)
                continue
            call.attributes["callee"] = ir.FlatSymbolRefAttr.get(first.sym_name.value)
            names.discard(prim.sym_name.value)
            prim.operation.erase()
    return out.verify()


#: The bufferization of the CPU pipeline (``pipelines/cpu.pipeline``), as an analysis that
#: annotates each ``func.return`` with the arguments its results are equivalent to.
_EQUIVALENCE_ANALYSIS = ("builtin.module(eliminate-empty-tensors, one-shot-bufferize{bufferize-function-boundaries "
                         "test-analysis-only function-boundary-type-conversion=identity-layout-map})")


def _dynamic_calls(module: Module) -> List[ir.Operation]:
    """The ``no_inline`` calls that return a dynamically shaped tensor."""
    out = []
    for f in module.func_ops():
        for block in f.regions[0].blocks:
            for op in block.operations:
                op = op.operation
                if op.name == "func.call" and "no_inline" in op.attributes and any(_dynamic(r) for r in op.results):
                    out.append(op)
    return out


def _callees_only(module: Module, callees: set) -> Module:
    """A copy of ``module`` with the functions ``callees``, the declarations and the functions
    they call (the analysis of a function's return needs only its own body and its callees'),
    not the graph functions that call them."""
    out = module.clone()
    with out.context:
        funcs = {f.sym_name.value: f for f in out.func_ops()}
        keep = set().union(*(out.callees(funcs[n]) for n in callees if n in funcs))
        for name, f in funcs.items():
            if name not in keep and not f.is_external:
                f.operation.erase()
    return out


def inline_unequivalent_calls(module: Module) -> Module:
    """``module`` with ``no_inline`` dropped from each call of a shared unit whose dynamically
    shaped results bufferization does not write into the destinations passed in (by
    One-Shot Bufferize's analysis: ``__equivalent_func_args__``); such calls are inlined by
    the ``prepare`` stage like any call with a dynamic result. ``module`` itself (unchanged)
    when every such call is fine."""
    with module.context:
        calls = _dynamic_calls(module)
        if not calls:
            return module
        callees = {ir.FlatSymbolRefAttr(c.attributes["callee"]).value for c in calls}
    analysed = run_pass_pipeline(_callees_only(module, callees), _EQUIVALENCE_ANALYSIS, "prepare")
    bad = set()
    with analysed.context:
        for f in analysed.func_ops():
            name = f.sym_name.value
            if name not in callees:
                continue
            ret = f.regions[0].blocks[0].operations[len(f.regions[0].blocks[0].operations) - 1].operation
            equivalent = list(ir.ArrayAttr(ret.attributes["__equivalent_func_args__"])) \
                if "__equivalent_func_args__" in ret.attributes else []
            for i, r in enumerate(ret.operands):
                if _dynamic(r) and (i >= len(equivalent) or ir.IntegerAttr(equivalent[i]).value < 0):
                    bad.add(name)
    if not bad:
        return module
    out = module.clone()
    with out.context:
        for c in _dynamic_calls(out):
            if ir.FlatSymbolRefAttr(c.attributes["callee"]).value in bad:
                del c.attributes["no_inline"]
    return out
