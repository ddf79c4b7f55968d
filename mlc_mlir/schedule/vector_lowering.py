"""The vector lowering of a scheduled function's transform script: :func:`vectorize_unit_tile`
(an ``linalg.mmt4d`` register tile vectorized without its unit dims) and, after vectorization,
:func:`lower_vectors` (MLIR's vector transform patterns: subset folding, loop-invariant subset
hoisting, contraction lowering to outer products or parallel FMAs, multi-reduction and transpose
lowering). Source: MLIR ``transform.apply_patterns.vector.*``, IREE's CPU codegen pipeline.
"""

from __future__ import annotations

from .._mlir import (ir, loop_transform_d, structured_transform_d, tensor_transform_d, transform_d,
                     vector_transform_d)
from ..ir.transform_values import any_op


#: ``fastmath`` of the multiply and add of a flattened mmt4d tile (:func:`vectorize_unit_tile`):
#: LLVM fuses them into one FMA (one rounding, as the ``vector.fma`` of a contraction).
CONTRACT_FASTMATH = "#arith.fastmath<contract>"

#: ``fastmath`` of the horizontal reductions of an rfactor's partial results: ``reassoc`` lets
#: LLVM sum a vector as a tree of shuffles (log2 of the lanes deep) instead of one lane after
#: the other, which is also the more accurate order (pairwise summation).
TREE_FASTMATH = "#arith.fastmath<reassoc>"

#: Block annotation (``sch.annotate(block, AVX2_TRANSPOSE_ATTR, True)``, a rule's decision for a
#: target with AVX2): the 8 x 8 ``f32`` transposes of the block's function are lowered by
#: MLIR's x86 AVX2 patterns (``vunpcklps`` / ``vshufps`` / ``vblendps`` / ``vperm2f128``, 24
#: instructions) instead of one 64-lane ``vector.shuffle``, which LLVM turns into a longer
#: sequence of permutes and inserts. Source: ``transform.apply_patterns.vector.lower_transpose
#: avx2_lowering_strategy = true`` (``x86vector::avx2::transpose8x8xf32``).
AVX2_TRANSPOSE_ATTR = "mlc.avx2_transpose"


def match_in(target: ir.Value, *names: str, each: bool = False, op_attrs=None) -> ir.Value:
    """The ops named ``names`` (any op when none) carrying ``op_attrs`` (an ``ir.DictAttr``) in
    ``target``; ``each``: in each of its payload ops (``transform.foreach``: ``structured.match``
    takes one, and a peeled tile's loop handle holds the main and the remainder loop)."""
    if each:
        loop = transform_d.ForeachOp([any_op()], [target])
        body = loop.body
        with ir.InsertionPoint(body):
            transform_d.YieldOp([match_in(body.arguments[0], *names, op_attrs=op_attrs)])
        return loop.results[0]
    return structured_transform_d.MatchOp(
        any_op(), target, ops=ir.ArrayAttr.get([ir.StringAttr.get(n) for n in names]) if names else None,
        op_attrs=op_attrs).result


def vectorize_unit_tile(tile: ir.Value, each: bool = False) -> None:
    """Vectorize the static register tile ``tile`` (transform handle) of a ``linalg.mmt4d``
    ``(M, N1, K, M0, N0, K0)`` whose ``N1``, ``K``, ``M0`` and ``K0`` extents are 1 (the
    :func:`~mlc_mlir.schedule.rules.matmul.schedule_mmt4d` nest: ``MR`` rows of A times one
    ``NR``-wide row of a packed B panel). The tile is generalized and its unit dims are folded
    away (``linalg.fold_unit_extent_dims_via_slices``: rank-reducing slices), so it vectorizes as
    ``C (MR, NR) += A (MR) x B (NR)`` on 2-D vectors: B is read as one ``vector<NRxf32>`` and
    the C tile stays a loop-carried ``vector<MRxNR>`` (the slices fold into the transfers).
    Vectorized as a 4-D ``vector.contract``, the ``(..., NR, 1)`` operand tiles have a unit
    innermost dim: B is read one element at a time and its transpose to the result's order is
    lowered to one ``vector.extract``/``vector.insert`` pair per element and operand per k step,
    most of the code LLVM then has to combine. The tile's multiply and add get
    :data:`CONTRACT_FASTMATH` so that LLVM emits one FMA for them. The tile's parent op (its k
    loop) is the scope of the rewrites; ``tile`` is consumed. ``each``: ``tile`` holds several
    copies (a peeled edge: the main tiles' and the remainder's), each in its own loop.

    Source: MLIR ``linalg::populateFoldUnitExtentDimsPatterns`` (``DropUnitDims``), IREE's
    ``mmt4d`` ukernel-free CPU path (unit dims dropped before vectorization)."""
    loop = transform_d.GetParentOp(any_op(), tile).result
    structured_transform_d.GeneralizeOp(tile)
    p = transform_d.ApplyPatternsOp(loop)
    with ir.InsertionPoint(p.patterns):
        structured_transform_d.ApplyFoldUnitExtentDimsViaSlicesPatternsOp()
    v = structured_transform_d.VectorizeOp(match_in(loop, "linalg.generic", each=each))
    v.operation.attributes["create_named_contraction"] = ir.UnitAttr.get()
    contract = transform_d.ParamConstantOp(transform_d.AnyParamType.get(),
                                           ir.Attribute.parse(CONTRACT_FASTMATH)).result
    transform_d.AnnotateOp(match_in(loop, "arith.mulf", "arith.addf", each=each), "fastmath", param=contract)


def vectorize_register_tiles(tiles, scope=None, each: bool = False) -> None:
    """Vectorize the init and epilogue tiles ``tiles`` (transform handles, consumed) of one
    register tile whole, each as one vector of the tile's shape: the zeros the init writes
    and the sums the k loop leaves then fold into the reads that follow them (``transfer_read``
    of a ``transfer_write`` of the same shape), and C stays in registers from its init to the
    epilogue's store. ``scope``: the handle of the loop holding the tiles of an
    ``linalg.mmt4d`` (``(MR, 1, 1, NR)`` tiles), where they are generalized and their unit dims
    folded away first, as :func:`vectorize_unit_tile` does for the k loop's tile, so that their
    transfers have its ``(MR, NR)`` shape and permutation map (``each``: ``scope`` holds several
    loops, :func:`vectorize_unit_tile`).

    Source: MLIR ``vector.transfer_read`` folding (``foldReadInitWrite``), IREE's CPU epilogue
    fusion into the micro-kernel's register tile; oneDNN post-ops."""
    if scope is None:
        for h in tiles:
            structured_transform_d.VectorizeOp(h)
        return
    for h in tiles:
        structured_transform_d.GeneralizeOp(h)
    p = transform_d.ApplyPatternsOp(scope)
    with ir.InsertionPoint(p.patterns):
        structured_transform_d.ApplyFoldUnitExtentDimsViaSlicesPatternsOp()
    structured_transform_d.VectorizeOp(match_in(scope, "linalg.generic", each=each))


def lower_vectors(func: ir.Value, unit_reduction_loops=(), masked: bool = False,
                  tree_reductions: bool = False, avx2_transposes: bool = False) -> None:
    """Fold tensor slices into vector transfers, hoist loop-invariant subsets (the C tile
    becomes a vector iter_arg of the reduction loop, kept in registers), then lower
    contractions to outer products (FMAs). No canonicalization after the lowering: MLIR 22's
    canonicalizer scalarizes the rows of the accumulator (benchmarks/recipe/NOTES.md).

    ``unit_reduction_loops`` (handles of the ops around vectorized ``linalg.mmt4d`` tiles; a
    static tile has no contraction left there, :func:`vectorize_unit_tile`, a masked one has):
    there, contractions are lowered first to elementwise FMAs on broadcast operands
    (``ParallelArith``: every reduction dim of the tile has size 1). The outer-product
    lowering does not take the tile's extra unit dims (``m0``, ``k0``) and falls back to one
    ``vector<1xf32>`` dot product per element (45 ms instead of 5.7 ms for a 52 x 4608 x 512
    mmt4d); elsewhere (direct convolutions) outer products make the smaller code.

    ``func``: the transform handle of the payload function; ``masked``: the function has masked
    vector transfers (partial tiles of dynamic extents); ``tree_reductions``: the function has
    vectorized rfactor merges (``vector.multi_reduction`` over the partial results' lanes):
    they are lowered first to ``vector.reduction`` ops (``InnerReduction``) marked
    :data:`TREE_FASTMATH`; ``avx2_transposes``: a block of the function is annotated
    :data:`AVX2_TRANSPOSE_ATTR` (its 8 x 8 ``f32`` transposes take the AVX2 patterns, every
    other transpose the 1-d shuffle)."""
    if masked:   # masks move into the transfers before canonicalization touches them
        p = transform_d.ApplyPatternsOp(func)
        with ir.InsertionPoint(p.patterns):
            vector_transform_d.ApplyLowerMaskedTransfersPatternsOp()
    p = transform_d.ApplyPatternsOp(func)
    with ir.InsertionPoint(p.patterns):
        tensor_transform_d.ApplyFoldTensorSubsetOpsIntoVectorTransfersPatternsOp()
        transform_d.ApplyCanonicalizationPatternsOp()
    transform_d.ApplyCommonSubexpressionEliminationOp(func)
    loops = structured_transform_d.MatchOp(
        any_op(), func, ops=ir.ArrayAttr.get([ir.StringAttr.get("scf.for")])).result
    loop_transform_d.HoistLoopInvariantSubsetsOp(loops)
    for loop in unit_reduction_loops:
        p = transform_d.ApplyPatternsOp(loop)
        with ir.InsertionPoint(p.patterns):
            vector_transform_d.ApplyLowerContractionPatternsOp(
                lowering_strategy=vector_transform_d.VectorContractLowering.ParallelArith)
    if tree_reductions:
        p = transform_d.ApplyPatternsOp(func)
        with ir.InsertionPoint(p.patterns):
            vector_transform_d.ApplyLowerMultiReductionPatternsOp(
                lowering_strategy=vector_transform_d.VectorMultiReductionLowering.InnerReduction)
        reds = structured_transform_d.MatchOp(
            any_op(), func, ops=ir.ArrayAttr.get([ir.StringAttr.get("vector.reduction")])).result
        tree = transform_d.ParamConstantOp(transform_d.AnyParamType.get(),
                                           ir.Attribute.parse(TREE_FASTMATH)).result
        transform_d.AnnotateOp(reds, "fastmath", param=tree)
    p = transform_d.ApplyPatternsOp(func)
    with ir.InsertionPoint(p.patterns):
        vector_transform_d.ApplyLowerContractionPatternsOp(
            lowering_strategy=vector_transform_d.VectorContractLowering.OuterProduct)
        vector_transform_d.ApplyLowerMultiReductionPatternsOp(
            lowering_strategy=vector_transform_d.VectorMultiReductionLowering.InnerParallel)
        vector_transform_d.ApplyTransferPermutationPatternsOp()
        vector_transform_d.ApplyLowerOuterProductPatternsOp()
        vector_transform_d.ApplyLowerTransposePatternsOp(
            lowering_strategy=vector_transform_d.VectorTransposeLowering.Shuffle1D,
            avx2_lowering_strategy=avx2_transposes or None)
