// dense + bias + relu: relu(x(M,K) @ W(K,N) + b(N)) with the epilogue tiled and the matmul + fill
// fused into its tiles (see matmul_recipe.mlir for the matmul part, which is the same).
// Payload: tensor.empty + linalg.fill + linalg.matmul, then a linalg.generic (add bias, max 0).
// Divisibility: M % (THREADS*MC) == 0, MC % MR == 0, N % NC == 0, NC % NR == 0,
//   K % UNROLL == 0 (K is not tiled: the packed B panel is K x NR), NR multiple of 16.
module attributes {transform.with_named_sequence} {
  transform.named_sequence @__transform_main(%root: !transform.any_op {transform.consumed}) {
    %THREADS = transform.param.constant 2 : i64 -> !transform.param<i64>
    %MC = transform.param.constant 32 : i64 -> !transform.param<i64>
    %NC = transform.param.constant 128 : i64 -> !transform.param<i64>
    %KC = transform.param.constant 784 : i64 -> !transform.param<i64>
    %NR = transform.param.constant 32 : i64 -> !transform.param<i64>
    %MR = transform.param.constant 8 : i64 -> !transform.param<i64>

    %func = transform.structured.match ops{["func.func"]} in %root
        : (!transform.any_op) -> !transform.any_op
    %epi = transform.structured.match ops{["linalg.generic"]} in %root
        : (!transform.any_op) -> !transform.any_op
    %mm = transform.structured.match ops{["linalg.matmul"]} in %root
        : (!transform.any_op) -> !transform.any_op
    %fill = transform.structured.match ops{["linalg.fill"]} in %root
        : (!transform.any_op) -> !transform.any_op

    // 1. Threads over M on the epilogue (the consumer), matmul and fill fused into the forall.
    %epi_t, %forall = transform.structured.tile_using_forall %epi num_threads [%THREADS, 0]
        : (!transform.any_op, !transform.param<i64>) -> (!transform.any_op, !transform.any_op)
    %mm_f, %forall_2 = transform.structured.fuse_into_containing_op %mm into %forall
        : (!transform.any_op, !transform.any_op) -> (!transform.any_op, !transform.any_op)
    %fill_f, %forall_3 = transform.structured.fuse_into_containing_op %fill into %forall_2
        : (!transform.any_op, !transform.any_op) -> (!transform.any_op, !transform.any_op)

    // 2. Cache tiles of the epilogue, MC x NC, loops N then M; the matmul (all of K) and the fill
    //    are fused into each tile: the C tile is still in L1 when bias+relu read it.
    %epi_c, %lc:2 = transform.structured.fuse %epi_t tile_sizes [%MC, %NC] interchange [1, 0]
        : (!transform.any_op, !transform.param<i64>, !transform.param<i64>)
        -> (!transform.any_op, !transform.any_op, !transform.any_op)
    //    The original matmul/fill (outside the forall, and the forall-level copies) are dead now.
    transform.apply_patterns to %func {
      transform.apply_patterns.canonicalization
    } : !transform.any_op
    transform.apply_cse to %func : !transform.any_op
    %mm_c = transform.structured.match ops{["linalg.matmul"]} in %func
        : (!transform.any_op) -> !transform.any_op
    %mm_n, %ln = transform.structured.tile_using_for %mm_c tile_sizes [0, %NR, 0]
        : (!transform.any_op, !transform.param<i64>) -> (!transform.any_op, !transform.any_op)

    // 3. Pack B (K x NR panels), hoisted out of the NR loop and the M loop.
    %padded, %pads, %copy = transform.structured.pad %mm_n {
        padding_values = [0.0 : f32, 0.0 : f32, 0.0 : f32],
        padding_dimensions = [0, 1, 2],
        nofold_flags = [0, 1, 0],
        copy_back_op = "none"
    } : (!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op)
    %pad_b = transform.get_producer_of_operand %padded[1] : (!transform.any_op) -> !transform.any_op
    transform.apply_patterns to %func {
      transform.apply_patterns.tensor.merge_consecutive_insert_extract_slice
      transform.apply_patterns.canonicalization
    } : !transform.any_op
    transform.apply_cse to %func : !transform.any_op
    %packed = transform.structured.hoist_pad %pad_b by 2 loops
        : (!transform.any_op) -> !transform.any_op
    %pad_h = transform.structured.match ops{["tensor.pad"]} in %func
        : (!transform.any_op) -> !transform.any_op
    transform.structured.vectorize %pad_h vector_sizes [%KC, %NR]
        : !transform.any_op, !transform.param<i64>, !transform.param<i64>

    // 4. Register tile MR x NR x 1, vectorize, unroll k by 4.
    %mm_in = transform.structured.match ops{["linalg.matmul"]} in %func
        : (!transform.any_op) -> !transform.any_op
    %mm_r, %lr:2 = transform.structured.tile_using_for %mm_in tile_sizes [%MR, 0, 1]
        : (!transform.any_op, !transform.param<i64>) -> (!transform.any_op, !transform.any_op, !transform.any_op)
    transform.structured.vectorize %mm_r {create_named_contraction} : !transform.any_op
    transform.loop.unroll %lr#1 {factor = 4} : !transform.any_op

    // 5. Fill and epilogue: one row per iteration, vectorized.
    %fill_in = transform.structured.match ops{["linalg.fill"]} in %func
        : (!transform.any_op) -> !transform.any_op
    %fill_r, %lf = transform.structured.tile_using_for %fill_in tile_sizes [1, 0]
        : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    transform.structured.vectorize %fill_r : !transform.any_op
    %epi_in = transform.structured.match ops{["linalg.generic"]} in %func
        : (!transform.any_op) -> !transform.any_op
    %epi_r, %le = transform.structured.tile_using_for %epi_in tile_sizes [1, 0]
        : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    transform.structured.vectorize %epi_r : !transform.any_op

    // 6. Fold slices into transfers; keep the C register tile in registers across k.
    transform.apply_patterns to %func {
      transform.apply_patterns.tensor.fold_tensor_subset_ops_into_vector_transfers
      transform.apply_patterns.canonicalization
    } : !transform.any_op
    transform.apply_cse to %func : !transform.any_op
    %fors = transform.structured.match ops{["scf.for"]} in %func
        : (!transform.any_op) -> !transform.any_op
    transform.loop.hoist_loop_invariant_subsets %fors : !transform.any_op

    // 7. Bufferize the whole module (function boundaries too, identity layouts so that
    //    buffer-results-to-out-params applies); linalg.copy rather than memref.copy (no
    //    memrefCopy runtime call).
    transform.bufferization.eliminate_empty_tensors %func : !transform.any_op
    %root_b = transform.bufferization.one_shot_bufferize layout{IdentityLayoutMap} %root
        {bufferize_function_boundaries = true, memcpy_op = "linalg.copy"}
        : (!transform.any_op) -> !transform.any_op
    %func_b = transform.structured.match ops{["func.func"]} in %root_b
        : (!transform.any_op) -> !transform.any_op
    //    Bufferization leaves self-copies of loop-carried subviews: canonicalize, CSE,
    //    canonicalize erases them.
    transform.apply_patterns to %func_b {
      transform.apply_patterns.canonicalization
    } : !transform.any_op
    transform.apply_cse to %func_b : !transform.any_op
    transform.apply_patterns to %func_b {
      transform.apply_patterns.canonicalization
    } : !transform.any_op

    // 8. Vector lowering to 1-D: contract -> outer products -> vector.fma, transfers -> 1-D
    //    vector.load/store, fully unrolled. NO canonicalization in this set: MLIR 22's
    //    canonicalizer rewrites the 8 vector.insert of the C tile into to_elements/from_elements
    //    (256 scalars) around the k loop.
    transform.apply_patterns to %func_b {
      transform.apply_patterns.vector.lower_contraction lowering_strategy = "outerproduct"
      transform.apply_patterns.vector.transfer_permutation_patterns
      transform.apply_patterns.vector.lower_outerproduct
      transform.apply_patterns.vector.transfer_to_scf max_transfer_rank = 1 full_unroll = true
      transform.apply_patterns.vector.lower_transfer max_transfer_rank = 1
    } : !transform.any_op
    transform.apply_cse to %func_b : !transform.any_op
    transform.yield
  }
}
