"""The vector lowering of a scheduled function's transform script, after vectorization:
:func:`lower_vectors` (MLIR's vector transform patterns: subset folding, loop-invariant subset
hoisting, contraction lowering to outer products or parallel FMAs, multi-reduction and transpose
lowering). Source: MLIR ``transform.apply_patterns.vector.*``, IREE's CPU codegen pipeline.
"""

from __future__ import annotations

from .._mlir import (ir, loop_transform_d, structured_transform_d, tensor_transform_d, transform_d,
                     vector_transform_d)
from ..ir.transform_values import any_op


#: ``fastmath`` of the horizontal reductions of an rfactor's partial results: ``reassoc`` lets
#: LLVM sum a vector as a tree of shuffles (log2 of the lanes deep) instead of one lane after
#: the other, which is also the more accurate order (pairwise summation).
TREE_FASTMATH = "#arith.fastmath<reassoc>"


def lower_vectors(func: ir.Value, unit_reduction_loops=(), masked: bool = False,
                  tree_reductions: bool = False) -> None:
    """Fold tensor slices into vector transfers, hoist loop-invariant subsets (the C tile
    becomes a vector iter_arg of the reduction loop, kept in registers), then lower
    contractions to outer products (FMAs). No canonicalization after the lowering: MLIR 22's
    canonicalizer scalarizes the rows of the accumulator (benchmarks/recipe/NOTES.md).

    ``unit_reduction_loops`` (handles of the ops around vectorized ``linalg.mmt4d`` tiles):
    there, contractions are lowered first to elementwise FMAs on broadcast operands
    (``ParallelArith``: every reduction dim of the tile has size 1). The outer-product
    lowering does not take the tile's extra unit dims (``m0``, ``k0``) and falls back to one
    ``vector<1xf32>`` dot product per element (45 ms instead of 5.7 ms for a 52 x 4608 x 512
    mmt4d); elsewhere (direct convolutions) outer products make the smaller code.

    ``func``: the transform handle of the payload function; ``masked``: the function has masked
    vector transfers (partial tiles of dynamic extents); ``tree_reductions``: the function has
    vectorized rfactor merges (``vector.multi_reduction`` over the partial results' lanes):
    they are lowered first to ``vector.reduction`` ops (``InnerReduction``) marked
    :data:`TREE_FASTMATH`."""
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
            lowering_strategy=vector_transform_d.VectorTransposeLowering.Shuffle1D)
