"""Part of stage ``lower`` of :func:`mlc_mlir.compile`: each top-level loop nest of a function
that holds several becomes a function of its own, called in its place, so that LLVM optimizes
and generates code for one kernel per function instead of one graph function holding every
kernel of the model.

The units that stay in a graph function (those that write in place into their consumer's
padded buffer or concatenation slice, and those that occur once:
:mod:`~mlc_mlir.pipeline.shared_units`) all end up in its body; after the vector unrolling a
light Inception v1's ``main`` is about 225k lines of LLVM IR. LLVM's loop passes
(``LoopFullUnrollPass``, ``LoopRotatePass``) then cost time that grows faster than the function's
size (about 80% of ``opt -O2`` on that ``main``). Cut into one function per loop nest, the same
code compiles in a fraction of the time and runs the same instructions.

:func:`outline_loop_nests` runs on the buffers (after bufferization, before the loops are
lowered): every ``scf.for`` / ``scf.forall`` / ``scf.parallel`` and ``linalg`` op directly in
the body of a function with at least two of them moves to a new private function with MLIR's
``transform.loop.outline`` (its operands and the buffers it reads and writes become arguments;
strided subviews keep their static layouts in the argument types). Constants it used from the
caller are cloned into the new function (``transform.loop.outline`` sinks index constants
only), so the lowering still sees constant bounds and values. The new functions are
``noinline`` for LLVM (each has one call site, which LLVM would otherwise inline back).

Nests that outline to the same function (the same loops on buffers of the same types, the
same constants: DenseNet-121's dense layers of one block, the border fills of equal pads) are
compiled once: :func:`merge_identical_functions` keeps the first of each group of identical
outlined functions and points the other calls to it (DenseNet-121: a third of the LLVM IR).

Outlining has a price at run time: a nest in its own function no longer sees the caller's
allocations (alignment, no aliasing between distinct buffers), and ResNet-18 / BERT run 1-3%
slower outlined. So by default only functions of at least :data:`OUTLINE_MIN_OPS` operations are
cut (``CompileOptions.outline_nests``, ``"auto"``); see that constant for the cost curve.

Source: MLIR's ``transform.loop.outline`` (``outlineSingleBlockRegion``); IREE's dispatch
regions and TVM's per-PrimFunc code generation (one kernel per function); LLVM's own advice
that very large functions make its loop and scheduling passes superlinear; IREE's
deduplication of equivalent executables and LLVM's ``MergeFunctions`` for the merging.
"""

from __future__ import annotations

import collections
from typing import Dict, List

from .._mlir import ir, loop_transform_d, structured_transform_d, transform_interpreter
from ..errors import PipelineError
from ..ir.module import OP_NAME_ATTR, Module, diagnostics
from ..ir.transform_values import any_op, build_script
from ..ir.walk import find_ops
from .shared_units import llvm_noinline

#: Marks the loop nests to outline (its value names their function); removed afterwards.
OUTLINE_ATTR = "mlc.outline"
#: Suffix of the outlined functions' names (``main_nest``, ``main_nest_0``, ...).
NEST_SUFFIX = "_nest"
#: Size (operations nested in the function, counted on the buffers before the loops are lowered)
#: from which ``outline_nests="auto"`` outlines a function's nests. LLVM's CPU time for a graph
#: function, measured on the znver5 host with and without outlining (same process, outputs
#: bit-identical; ``benchmarks/results/compile_cpu_2026-11-26_znver5_compile-time.txt`` and
#: ``outline_ab_2026-11-26_znver5_session17.txt``):
#: SqueezeNet's ``main``, 4.4k ops: 8.5 s inline, 6.6 s outlined (1.9 vs 1.5 ms per op);
#: ResNet-18's, 4.3k ops: no gain in the whole compile (6.2 vs 6.6 s); Inception v1's,
#: 10.1k ops: 76.6 vs 23.4 s (7.6 vs 2.3 ms per op); DenseNet-121's: 111 vs 22 s. The outlined
#: cost per op stays about flat (one kernel per function), while the inline cost per op
#: quadruples between 4.4k and 10k ops: the superlinear part (LLVM's loop passes on one huge
#: function) is about a quarter of the LLVM time at 4.4k ops and twice the linear part at 10k.
#: The threshold sits between the two regimes, where the saving of outlining starts to
#: outweigh its 1-3% of run time by seconds of compile time.
OUTLINE_MIN_OPS = 6000
#: Ops that compute a loop nest of their own (linalg ops become loops in ``convert-linalg-to-loops``).
_NEST_OPS = ("scf.for", "scf.forall", "scf.parallel")
#: Ops whose results are cloned into an outlined function instead of passed to it.
_CONSTANTS = ("arith.constant", "llvm.mlir.constant")


def _is_nest(op: ir.Operation) -> bool:
    return op.name in _NEST_OPS or op.name.startswith("linalg.")


def count_ops(op: ir.Operation) -> int:
    """The number of operations nested in ``op``, ``op`` included."""
    n = 0

    def visit(_op):
        nonlocal n
        n += 1
        return ir.WalkResult.ADVANCE

    op.walk(visit)
    return n


def _mark(module: Module, min_ops: int) -> List[str]:
    """Mark the top-level nests of each function with two or more and at least ``min_ops``
    operations; the names of those functions."""
    marked = []
    for f in module.func_ops():
        if f.is_external:
            continue
        nests = [op.operation for op in f.regions[0].blocks[0].operations if _is_nest(op.operation)]
        if len(nests) < 2 or (min_ops > 0 and count_ops(f.operation) < min_ops):
            continue
        name = f.sym_name.value
        for op in nests:
            op.attributes[OUTLINE_ATTR] = ir.StringAttr.get(name)
        marked.append(name)
    return marked


def _sink_constants(fn: ir.Operation, call: ir.Operation) -> None:
    """Replace each used argument of ``fn`` that ``call`` passes a constant with a clone of that
    constant at the top of ``fn`` (the argument stays, unused: LLVM drops it)."""
    entry = fn.regions[0].blocks[0]
    first = entry.operations[0]
    for arg, value in zip(entry.arguments, call.operands):
        owner = value.owner
        if isinstance(owner, ir.Block):
            continue
        owner = owner.operation if hasattr(owner, "operation") else owner
        if owner.name in _CONSTANTS and next(iter(arg.uses), None) is not None:
            clone = owner.clone(ip=ir.InsertionPoint(first))
            arg.replace_all_uses_with(clone.results[0])


def _strip_names(fn: ir.Operation) -> None:
    """Remove the ``mlc.name`` of each op nested in ``fn`` (graph op names, for messages and
    traces only: the lowering ignores them, and two equal nests of different ops differ in them)."""
    def visit(op):
        op = op.operation if hasattr(op, "operation") else op
        if OP_NAME_ATTR in op.attributes:
            del op.attributes[OP_NAME_ATTR]
        return ir.WalkResult.ADVANCE

    fn.walk(visit, ir.WalkOrder.PRE_ORDER)


def function_shape(fn: ir.Operation) -> tuple:
    """A cheap necessary condition of two functions (``func.func`` or ``llvm.func``) printing
    the same up to their names and constant values: their type and the number of ops of each
    block."""
    return (str(fn.attributes["function_type"]),) + tuple(len(b.operations) for b in fn.regions[0].blocks)


def merge_identical_functions(module: Module, functions: Dict[str, ir.Operation]) -> Dict[str, str]:
    """Merge the identical functions among ``functions`` (name -> ``func.func`` of ``module``):
    two are identical when they print the same up to their symbol names and the ``mlc.name``
    of their ops (which are removed); each ``func.call`` of ``module`` to a later one of a group
    calls the first instead, and the later ones are erased. Identical text means the same ops,
    types, attributes and constants, so the calls compute what they computed before. Modifies
    ``module`` in place; returns ``{erased name: kept name}``. Call it with ``module``'s context
    active."""
    first: Dict[str, str] = {}
    merged: Dict[str, str] = {}
    shapes = collections.Counter(function_shape(fn.operation) for fn in functions.values())
    for name, fn in functions.items():
        fn = fn.operation
        if shapes[function_shape(fn)] < 2:   # printing is most of the time: only functions that may match
            continue
        _strip_names(fn)
        # local scope: the printer numbers this function's values only, not the whole module's
        text = fn.get_asm(enable_debug_info=False, use_local_scope=True, assume_verified=True)
        key = text.replace(f"@{name}(", "@(", 1)
        if key in first:
            merged[name] = first[key]
        else:
            first[key] = name
    if not merged:
        return merged
    for call in find_ops(module, "func.call"):
        kept = merged.get(ir.FlatSymbolRefAttr(call.attributes["callee"]).value)
        if kept is not None:
            call.attributes["callee"] = ir.FlatSymbolRefAttr.get(kept)
    for name in merged:
        functions[name].operation.erase()
    return merged


def outline_loop_nests(module: Module, min_ops: int = 0) -> Module:
    """``module`` (memrefs, after bufferization) with each top-level loop nest of a function
    holding two or more and at least ``min_ops`` operations (:func:`count_ops`; 0: any size)
    moved to a private ``noinline`` function ``<function>_nest[_k]`` and called in its place,
    identical ones merged (:func:`merge_identical_functions`; see the module docstring);
    ``module`` itself, unchanged, when no function qualifies. Modifies ``module`` in place.

    Raises
    ------
    PipelineError
        If ``transform.loop.outline`` fails (with MLIR's diagnostics).
    """
    with module.context, ir.Location.unknown():
        marked = _mark(module, min_ops)
        if not marked:
            return module
        before = {f.sym_name.value for f in module.func_ops()}   # external declarations too

        def build(root: ir.Value) -> None:
            for name in marked:
                nests = structured_transform_d.MatchOp(
                    any_op(), root, op_attrs=ir.DictAttr.get({OUTLINE_ATTR: ir.StringAttr.get(name)}))
                loop_transform_d.LoopOutlineOp(any_op(), any_op(), nests.result,
                                               func_name=name + NEST_SUFFIX)

        script, seq = build_script(build)
        try:
            transform_interpreter.apply_named_sequence(module.operation, seq, script)
        except ir.MLIRError as e:
            raise PipelineError(f"lower: outlining the loop nests failed: {diagnostics(e)}") from None
        outlined: Dict[str, ir.Operation] = {f.sym_name.value: f for f in module.func_ops()
                                             if f.sym_name.value not in before}
        for call in find_ops(module, "func.call"):
            fn = outlined.get(ir.FlatSymbolRefAttr(call.attributes["callee"]).value)
            if fn is not None:
                _sink_constants(fn, call)
        for fn in outlined.values():
            fn.attributes["sym_visibility"] = ir.StringAttr.get("private")
            llvm_noinline(fn)
            for op in fn.regions[0].blocks[0].operations:
                if OUTLINE_ATTR in op.operation.attributes:
                    del op.operation.attributes[OUTLINE_ATTR]
        merge_identical_functions(module, outlined)
    return module
