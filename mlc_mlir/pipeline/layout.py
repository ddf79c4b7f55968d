"""Stage ``layout`` of :func:`mlc_mlir.compile`: the per-op layout and algorithm rewrites the
default schedule rules ask for, as a flat list of named steps (:data:`LAYOUT_STEPS`), each
dumped with ``dump_ir``.

Each step rewrites the functions that nobody scheduled (no ``scf`` loops yet); it runs when the
module gets default schedules or a tuning database's (``schedule="default"`` or a
``database``), and is the identity otherwise:

0. ``attention``      -- ``batch_matmul -> softmax -> batch_matmul`` attentions become calls of
   one fused function each (``layout_passes.FuseAttention`` with
   :func:`~mlc_mlir.schedule.rules.attention.emit_flash_attention`: an online softmax over
   key blocks, K/V read in place), with a tuning database's knobs where its record beats the
   default (:func:`recorded_attention_knobs`);
1. ``nhwc``           -- NCHW convolutions that :func:`~mlc_mlir.schedule.rules.conv_strategy.prefers_nhwc`
   picks for the target become NHWC ones between transposes (``layout_passes.ConvToNHWC``), and the
   transposes sink through elementwise ops, pads and poolings until inverse pairs cancel
   (``layout_passes.PropagateTransposes``: consecutive convolutions stay NHWC); so do the
   depthwise grouped convolutions that
   :func:`~mlc_mlir.schedule.rules.depthwise.prefers_depthwise_nhwc` picks
   (``layout_passes.DepthwiseToNHWC``: ``linalg.depthwise_conv_2d_nhwc_hwc``) and the strided
   NCHW poolings that :func:`~mlc_mlir.schedule.rules.pooling.prefers_pool_nhwc` picks
   (``layout_passes.PoolToNHWC``); in a module
   without such convolutions, inverse transpose pairs cancel (``PropagateTransposes(sink=False)``:
   BERT's imported attention output goes through two transposes that undo each other);
2. ``algorithm``      -- with a tuning database, each NHWC convolution whose algorithm record
   (key :func:`conv_algorithm_key`) beats the default gets the record's decision as its
   ``mlc.conv_algorithm`` attribute (:func:`~mlc_mlir.schedule.rules.conv_strategy.conv_algorithms`:
   direct, im2col, Winograd F(2x2, 3x3) or F(4x4, 3x3)); the steps below follow it;
3. ``fold-filters``   -- the transposes of constant filters become constants (evaluated with
   numpy), so that the Winograd transforms of step 4 are constants too;
4. ``winograd``       -- stride-1 3x3 NHWC convolutions become Winograd ones
   (``layout_passes.ConvToWinograd``) where step 2 chose it, else where
   :func:`~mlc_mlir.schedule.rules.conv_strategy.winograd_tile` picks them: F(2x2, 3x3) only
   (:data:`~mlc_mlir.schedule.rules.conv_strategy.WINDOW_LOCAL_TILES`) by default, F(4x4, 3x3) too
   with ``CompileOptions.winograd=True``, none with False;
5. ``im2col``         -- the NHWC convolutions step 2 chose im2col for, and without a choice
   those with small output maps (:func:`~mlc_mlir.schedule.rules.conv_strategy.prefers_im2col`), become
   im2col + ``linalg.matmul`` (``layout_passes.ConvToIm2col``), and so do the NCHW ones that
   :func:`~mlc_mlir.schedule.rules.conv_strategy.prefers_nchw_im2col` kept out of step 1 (the GEMM
   ``W x cols``, output pixels in its columns);
6. ``grouped``        -- grouped convolutions (not depthwise) that
   :func:`~mlc_mlir.schedule.rules.conv_strategy.prefers_grouped_gemm` picks become a per-group im2col
   (a view for a pointwise one of one image) + ``linalg.batch_matmul`` over the groups
   (``layout_passes.GroupedConvToBatchMatmul``);
7. ``merge-projections`` -- matmuls that read one input with constant weights (Llama's q/k/v
   projections, its gate and up projections), of static or dynamic M, become one matmul over
   the weights concatenated along N, sliced after (``layout_passes.MergeProjections``): a decode
   step streams them in one GEMV, one fork/join instead of one per projection, and the steps
   of one model share the concatenated weights (one copy of each weight);
8. ``pack-weights``   -- matmuls on a constant B that feed no elementwise op get B packed into
   the panels of their register tile (``layout_passes.PackMatmulWeights``,
   :func:`~mlc_mlir.schedule.cpu_recipes.packed_b_panel`: a ``linalg.mmt4d``);
9. ``epilogues``     -- elementwise ops that read a reshaped matmul / mmt4d result (an NHWC 1x1
   or im2col convolution's batch norm, residual add and relu) run in that result's shape
   (``layout_passes.PropagateReshapes``), so task formation fuses them as its epilogue;
10. ``fold-constants`` -- the packed weights and the remaining constant filter transposes become
   constants;
11. ``specialize-rows`` -- a matmul of dynamic M gets an ``M == 1`` version (a GEMV) chosen at
   run time by ``scf.if`` (``layout_passes.SpecializeUnitRows``, as Relax dispatches on symbolic
   sizes).

Steps 0, 7, 8, 9 and 11 run on CPU targets only (:func:`cpu_only`: their forms have no GPU rule);
the others decide per op with target-aware predicates that leave a GPU's ops as they are.

Constant evaluation (steps 3 and 10) is ``graph.FoldConstant`` restricted to the data-movement
ops numpy evaluates (:data:`~mlc_mlir.graph.constant_eval.NUMPY_OPS`): no constant subgraph is
compiled, the compiler never calls itself. Source: TVM Relay ``AlterOpLayout`` /
``ConvertLayout`` before ``FoldConstant``; Triton's named stages.
"""

from __future__ import annotations

import dataclasses
from functools import partial
from typing import Callable, List, Optional, Tuple

from .._mlir import ir
from ..graph.constant_eval import NUMPY_OPS
from ..graph.dce import DeadCodeElimination
from ..graph.fold_constant import FoldConstant
from ..graph.emit_rewrites import named_fill
from ..graph.linalg_attrs import int_list
from ..graph.use_def import named_ops
from .layout_passes.conv_select import chosen_algorithm, conv_signature
from ..ir.module import CONV_ALGORITHM_ATTR, OP_NAME_ATTR, Module
from ..ir.walk import has_op
from ..schedule.cpu_recipes import packed_b_panel
from ..schedule.rules.attention import attention_key, emit_flash_attention
from ..schedule.rules.attention_knobs import AttentionKnobs, decided_knobs, default_knobs, knob_candidates
from ..schedule.rules.depthwise import prefers_depthwise_nhwc
from ..schedule.rules.pooling import prefers_pool_nhwc
from ..schedule.rules.conv_strategy import (conv_algorithms, decided_algorithm, prefers_grouped_gemm,
                                            prefers_im2col, prefers_nchw_im2col, prefers_nhwc, winograd_tile,
                                            WINDOW_LOCAL_TILES)
from ..schedule.trace import Trace
from ..target import Target
from .layout_passes.conv_grouped import GroupedConvToBatchMatmul
from .layout_passes.conv_depthwise import DepthwiseToNHWC
from .layout_passes.conv_im2col import ConvToIm2col
from .layout_passes.conv_nhwc import ConvToNHWC
from .layout_passes.conv_winograd import ConvToWinograd, winograd_applies
from .layout_passes.fuse_attention import FuseAttention
from .layout_passes.merge_projections import MergeProjections
from .layout_passes.pack_matmul import PackMatmulWeights
from .layout_passes.reshape_propagation import PropagateReshapes
from .layout_passes.pool_nhwc import PoolToNHWC
from .layout_passes.specialize_rows import SpecializeUnitRows
from .layout_passes.transpose_propagation import PropagateTransposes, has_inverse_pair
from .options import CompileOptions

#: ``step(module, target, functions, options) -> module``; ``functions``: the unscheduled ones.
LayoutStep = Callable[[Module, Target, List[str], CompileOptions], Module]


def _constant_filter_transposed(module: Module) -> bool:
    """Whether a filter transpose made by ``ConvToNHWC`` (``<conv>.w_hwcf``) reads a constant.

    Only those are folded: folding the ``transpose(W)`` of imported ``Linear`` layers too made
    the small BERT's LLVM compile 4x slower (23 s instead of 6 s; the matmuls then read
    constant globals) for no measurable run-time gain (0.72 -> 0.74x onnxruntime, in noise)."""
    found = []

    def visit(op):
        op = op.operation if hasattr(op, "operation") else op
        if op.name == "linalg.transpose" and OP_NAME_ATTR in op.attributes and \
                ir.StringAttr(op.attributes[OP_NAME_ATTR]).value.endswith(".w_hwcf"):
            src = op.operands[0].owner
            if not isinstance(src, ir.Block) and src.name == "arith.constant":
                found.append(op)
                return ir.WalkResult.INTERRUPT
        return ir.WalkResult.ADVANCE

    with module.context:
        module.operation.walk(visit, ir.WalkOrder.PRE_ORDER)
    return bool(found)


def recorded_attention_knobs(database, target: Target, q_type, k_type, v_type,
                             bias_type) -> Optional[AttentionKnobs]:
    """The knobs of the best record of ``database`` for this attention
    (:func:`~mlc_mlir.schedule.rules.attention.attention_key`), or None (no database, no record,
    the default's record is best, or the record's knobs are not candidates for ``target``)."""
    if database is None:
        return None
    text = database.query_best_trace(attention_key(q_type, k_type, v_type, bias_type), target.key())
    knobs = decided_knobs(Trace.from_json(text)) if text is not None else None
    return knobs if knobs in knob_candidates(target, q_type.shape[3]) else None


def _attention_kernel(target: Target, database, threads: Optional[int], module_body, name, q_type, k_type,
                      v_type, bias_type, scale):
    """The ``FuseAttention`` kernel: the fused function with the database's knobs, if any, else
    the default knobs with rows on at most the compile's ``threads`` (serial loops on one
    thread: no OpenMP region that would fork a team of one)."""
    knobs = recorded_attention_knobs(database, target, q_type, k_type, v_type, bias_type)
    if knobs is None and threads is not None and threads < target.cores:
        knobs = dataclasses.replace(default_knobs(target, q_type.shape[3]), threads=threads)
    return emit_flash_attention(module_body, name, q_type, k_type, v_type, bias_type, scale, target, knobs)


def fuse_attention(module: Module, target: Target, functions: List[str], options: CompileOptions) -> Module:
    """Step ``attention`` (see the module docstring; CPU targets only, :func:`cpu_only`); the
    ops the fused calls replace are erased.
    With a tuning database, an attention whose record beats the default gets the record's
    knobs (:func:`recorded_attention_knobs`)."""
    if not has_op(module, "linalg.batch_matmul"):
        return module
    fused = FuseAttention(partial(_attention_kernel, target, options.database, options.threads), functions)(module)
    added = len(fused.function_names()) > len(module.function_names())
    return DeadCodeElimination()(fused) if added else fused


def to_nhwc(module: Module, target: Target, functions: List[str], options: CompileOptions) -> Module:
    """Step ``nhwc`` (see the module docstring)."""
    # depthwise convolutions and poolings change layout on CPU targets only (their predicates)
    cpu = target.kind == "cpu"
    dense = has_op(module, "linalg.conv_2d_nchw_fchw")
    grouped = cpu and has_op(module, "linalg.conv_2d_ngchw_gfchw")
    pools = cpu and (has_op(module, "linalg.pooling_nchw_max") or has_op(module, "linalg.pooling_nchw_sum"))
    if dense or grouped or pools:
        if dense:
            module = ConvToNHWC(partial(prefers_nhwc, target), functions)(module)
        if grouped:
            module = DepthwiseToNHWC(partial(prefers_depthwise_nhwc, target), functions)(module)
        if pools:
            module = PoolToNHWC(partial(prefers_pool_nhwc, target), functions)(module)
        return PropagateTransposes(functions)(module)
    if not has_inverse_pair(module, functions):
        return module
    return PropagateTransposes(functions, sink=False)(module)


def conv_algorithm_key(op: ir.Operation) -> str:
    """The database key of the algorithm decision of a ``linalg.conv_2d_nhwc_hwcf`` op: its
    shapes, dtype, strides, dilations and whether its output starts from a named fill (what the
    rewrites and :func:`~mlc_mlir.schedule.rules.conv_strategy.conv_algorithms` read)."""
    x, w, out, dtype = conv_signature(op)
    dims = " ".join("x".join(map(str, s)) for s in (x, w, out))
    return (f"conv2d_nhwc_hwcf algorithm {dims} {dtype} strides {int_list(op.attributes['strides'])} "
            f"dilations {int_list(op.attributes['dilations'])} "
            f"{'fill' if named_fill(op.operands[2]) is not None else 'accumulate'}")


def conv_choices(module: Module, target: Target, functions: List[str], winograd: Optional[bool],
                 replay: bool = False) -> List[Tuple[ir.Operation, str, List[int], int]]:
    """``(op, key, candidates, default)`` of each NHWC convolution of ``functions``
    (:func:`conv_algorithm_key`, :func:`~mlc_mlir.schedule.rules.conv_strategy.conv_algorithms` with
    ``winograd``), in program order. With ``replay`` the candidates include the Winograd tiles
    even for ``winograd=False`` (a record that chose one is replayed), the default does not."""
    out = []
    with module.context:
        for op in named_ops(module, "linalg.conv_2d_nhwc_hwcf", set(functions)):
            *shapes, dtype = conv_signature(op)
            fits = named_fill(op.operands[2]) is not None and winograd_applies(
                *shapes, int_list(op.attributes["strides"]), int_list(op.attributes["dilations"]))
            cands, default = conv_algorithms(target, *shapes, dtype, fits, winograd)
            if replay and winograd is False:
                cands = conv_algorithms(target, *shapes, dtype, fits, None)[0]
            out.append((op, conv_algorithm_key(op), cands, default))
    return out


def set_conv_algorithm(op: ir.Operation, algorithm: int) -> None:
    """Give a convolution op its ``mlc.conv_algorithm`` (the steps after ``algorithm`` follow
    it)."""
    with op.context:
        op.attributes[CONV_ALGORITHM_ATTR] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), algorithm)


def choose_algorithms(module: Module, target: Target, functions: List[str], options: CompileOptions) -> Module:
    """Step ``algorithm`` (see the module docstring): a copy of ``module`` with the database's
    decisions, or ``module`` itself when no record beats a default. A record is replayed only
    when its choice is a candidate of the convolution (a Winograd choice even when
    ``options.winograd`` is False: the tuner measured and checked it, see :func:`mlc_mlir.tune`)."""
    if options.database is None or not has_op(module, "linalg.conv_2d_nhwc_hwcf"):
        return module
    tkey = target.key()
    chosen = {}
    for op, key, cands, default in conv_choices(module, target, functions, options.winograd, replay=True):
        text = options.database.query_best_trace(key, tkey)
        code = decided_algorithm(Trace.from_json(text)) if text is not None else None
        if code is not None and code in cands and code != default and chosen_algorithm(op) is None:
            chosen[key] = code
    if not chosen:
        return module
    out = module.clone()
    for op, key, _, _ in conv_choices(out, target, functions, options.winograd, replay=True):
        if key in chosen:
            set_conv_algorithm(op, chosen[key])
    return out


def _chooses_winograd(module: Module, functions: List[str]) -> bool:
    with module.context:
        return any(chosen_algorithm(op) in (2, 4)
                   for op in named_ops(module, "linalg.conv_2d_nhwc_hwcf", set(functions)))


def fold_filters(module: Module, target: Target, functions: List[str], options: CompileOptions) -> Module:
    """Step ``fold-filters``: the constant filter transposes, before ``winograd`` reads them."""
    if has_op(module, "linalg.conv_2d_nhwc_hwcf") and \
            (options.winograd is not False or _chooses_winograd(module, functions)) and \
            _constant_filter_transposed(module):
        return FoldConstant(only=NUMPY_OPS)(module)
    return module


def _no_winograd(*_) -> int:
    return 0


def to_winograd(module: Module, target: Target, functions: List[str], options: CompileOptions) -> Module:
    """Step ``winograd`` (see the module docstring)."""
    if not has_op(module, "linalg.conv_2d_nhwc_hwcf") or \
            (options.winograd is False and not _chooses_winograd(module, functions)):
        return module
    select = _no_winograd if options.winograd is False else partial(
        winograd_tile, target, tiles=(4, 2) if options.winograd else WINDOW_LOCAL_TILES)
    return ConvToWinograd(select, functions)(module)


def to_im2col(module: Module, target: Target, functions: List[str], options: CompileOptions) -> Module:
    """Step ``im2col`` (see the module docstring)."""
    if not has_op(module, "linalg.conv_2d_nhwc_hwcf") and not has_op(module, "linalg.conv_2d_nchw_fchw"):
        return module
    return ConvToIm2col(partial(prefers_im2col, target), functions,
                        select_nchw=partial(prefers_nchw_im2col, target))(module)


def grouped_to_gemm(module: Module, target: Target, functions: List[str], options: CompileOptions) -> Module:
    """Step ``grouped`` (see the module docstring)."""
    if not has_op(module, "linalg.conv_2d_ngchw_gfchw"):
        return module
    return GroupedConvToBatchMatmul(partial(prefers_grouped_gemm, target), functions)(module)


def merge_projections(module: Module, target: Target, functions: List[str], options: CompileOptions) -> Module:
    """Step ``merge-projections`` (see the module docstring)."""
    if not has_op(module, "linalg.matmul"):
        return module
    return MergeProjections(functions=functions)(module)


def pack_weights(module: Module, target: Target, functions: List[str], options: CompileOptions) -> Module:
    """Step ``pack-weights`` (see the module docstring; CPU targets only, :func:`cpu_only`)."""
    if not has_op(module, "linalg.matmul"):
        return module
    return PackMatmulWeights(partial(packed_b_panel, target), functions)(module)


def propagate_reshapes(module: Module, target: Target, functions: List[str], options: CompileOptions) -> Module:
    """Step ``epilogues`` (see the module docstring; CPU targets only, :func:`cpu_only`)."""
    if not (has_op(module, "linalg.mmt4d") or has_op(module, "linalg.matmul")):
        return module
    return PropagateReshapes(functions)(module)


def fold_constants(module: Module, target: Target, functions: List[str], options: CompileOptions) -> Module:
    """Step ``fold-constants``: packed weights and constant filter transposes."""
    if has_op(module, "linalg.mmt4d") or _constant_filter_transposed(module):
        return FoldConstant(only=NUMPY_OPS)(module)
    return module


def specialize_rows(module: Module, target: Target, functions: List[str], options: CompileOptions) -> Module:
    """Step ``specialize-rows`` (see the module docstring)."""
    if not has_op(module, "linalg.matmul"):
        return module
    return SpecializeUnitRows(functions)(module)


def cpu_only(step: LayoutStep) -> LayoutStep:
    """``step`` on CPU targets, the identity on the others: a rewrite into what only the CPU
    schedules run (a fused attention function with its loops, ``linalg.mmt4d`` on packed
    panels, an ``scf.if`` on the row count) or whose reason is a CPU's (one fork/join for
    several projections). The GPU rules have no rule for those forms."""
    def run(module: Module, target: Target, functions: List[str], options: CompileOptions) -> Module:
        return step(module, target, functions, options) if target.kind == "cpu" else module

    run.__name__, run.__doc__ = step.__name__, step.__doc__
    return run


#: The steps of the ``layout`` stage, in order. The steps not marked :func:`cpu_only` decide
#: per op with target-aware predicates (``prefers_nhwc`` and the like), which keep the GPU's
#: ops as they are, or are layout-neutral (inverse transposes cancelling, constant folding).
LAYOUT_STEPS: Tuple[Tuple[str, LayoutStep], ...] = (
    ("attention", cpu_only(fuse_attention)),
    ("nhwc", to_nhwc),
    ("algorithm", choose_algorithms),
    ("fold-filters", fold_filters),
    ("winograd", to_winograd),
    ("im2col", to_im2col),
    ("grouped", grouped_to_gemm),
    ("merge-projections", cpu_only(merge_projections)),
    ("pack-weights", cpu_only(pack_weights)),
    ("epilogues", cpu_only(propagate_reshapes)),
    ("fold-constants", fold_constants),
    ("specialize-rows", cpu_only(specialize_rows)),
)


def layout_rewrites(module: Module, target: Target, functions: List[str],
                    options: CompileOptions) -> Module:
    """All :data:`LAYOUT_STEPS` on ``functions`` of ``module`` (``module`` itself when there is
    nothing to rewrite)."""
    for _, step in LAYOUT_STEPS:
        module = step(module, target, functions, options)
    return module
