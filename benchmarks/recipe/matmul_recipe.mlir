// Fast f32 CPU matmul C(M,N) = A(M,K) @ B(K,N) on upstream MLIR 22 (the DESIGN.md recipe).
//
// Payload: func.func @main(tensor<MxK>, tensor<KxN>) -> tensor<MxN> with
//   tensor.empty + linalg.fill (0) + linalg.matmul   (what mlc_mlir.ops.matmul builds).
// Result: the function bufferized (memref in, memref out, identity layouts), vectors lowered to
// 1-D vector.load/store/fma; lowering continues with RECIPE_PIPELINE in run_recipe.py.
//
// Sizes (transform.param.constant below; run_recipe.py rewrites these lines, `--emit` prints it):
//   THREADS  scf.forall chunks over M (OpenMP threads actually used come from OMP_NUM_THREADS)
//   MC, NC, KC  cache blocking: loops N(NC) -> K(KC) -> M(MC)   (Goto order, KC x NC B block)
//   NR       micro-panel width of packed B (N inside NC)
//   MR       register-tile rows; the register tile is MR x NR (8 x 32 = 16 zmm accumulators)
//   KC also fixes the pack vector size below ([KC, NR]).
// Divisibility (no padding of partial tiles; partial tiles make `vectorize` fail):
//   M % (THREADS*MC) == 0, MC % MR == 0, N % NC == 0, NC % NR == 0, K % KC == 0,
//   NR a multiple of 16 (zmm width), KC % 4 == 0 (unroll factor of the k loop).
// Run standalone:  mlir-opt payload.mlir --transform-preload-library=transform-library-paths=THIS \
//                    --transform-interpreter
module attributes {transform.with_named_sequence} {
  // %root is consumed by one_shot_bufferize at the end, hence transform.consumed.
  transform.named_sequence @__transform_main(%root: !transform.any_op {transform.consumed}) {
    %THREADS = transform.param.constant 2 : i64 -> !transform.param<i64>
    %MC = transform.param.constant 32 : i64 -> !transform.param<i64>
    %NC = transform.param.constant 256 : i64 -> !transform.param<i64>
    %KC = transform.param.constant 512 : i64 -> !transform.param<i64>
    %NR = transform.param.constant 32 : i64 -> !transform.param<i64>
    %MR = transform.param.constant 8 : i64 -> !transform.param<i64>

    %func = transform.structured.match ops{["func.func"]} in %root
        : (!transform.any_op) -> !transform.any_op
    %mm = transform.structured.match ops{["linalg.matmul"]} in %root
        : (!transform.any_op) -> !transform.any_op
    %fill = transform.structured.match ops{["linalg.fill"]} in %root
        : (!transform.any_op) -> !transform.any_op

    // 1. Threads over M (each thread owns M/THREADS rows of C and packs its own B block),
    //    the zero fill fused into the forall (each thread zeroes its rows).
    %mm_t, %forall = transform.structured.tile_using_forall %mm num_threads [%THREADS, 0, 0]
        : (!transform.any_op, !transform.param<i64>) -> (!transform.any_op, !transform.any_op)
    %fill_f, %forall_2 = transform.structured.fuse_into_containing_op %fill into %forall
        : (!transform.any_op, !transform.any_op) -> (!transform.any_op, !transform.any_op)

    // 2. Goto loop order: tile (M, N, K) by (MC, NC, KC), loops ordered N, K, M (interchange).
    %mm_c, %lc:3 = transform.structured.tile_using_for %mm_t tile_sizes [%MC, %NC, %KC]
        interchange = [1, 2, 0]
        : (!transform.any_op, !transform.param<i64>, !transform.param<i64>, !transform.param<i64>)
        -> (!transform.any_op, !transform.any_op, !transform.any_op, !transform.any_op)
    //    The NR-wide micro-panel loop of N, innermost of the cache loops.
    %mm_n, %ln = transform.structured.tile_using_for %mm_c tile_sizes [0, %NR, 0]
        : (!transform.any_op, !transform.param<i64>) -> (!transform.any_op, !transform.any_op)

    // 3. Pack B: a nofold pad of B's KC x NR slice (no real padding; nofold keeps the copy),
    //    no copy-back (B is read-only) ...
    %padded, %pads, %copy = transform.structured.pad %mm_n {
        padding_values = [0.0 : f32, 0.0 : f32, 0.0 : f32],
        padding_dimensions = [0, 1, 2],
        nofold_flags = [0, 1, 0],
        copy_back_op = "none"
    } : (!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op)
    %pad_b = transform.get_producer_of_operand %padded[1] : (!transform.any_op) -> !transform.any_op
    //    ... hoist_pad needs the padded slice to come straight from the function argument:
    //    merge the nested extract_slices first.
    transform.apply_patterns to %func {
      transform.apply_patterns.tensor.merge_consecutive_insert_extract_slice
      transform.apply_patterns.canonicalization
    } : !transform.any_op
    transform.apply_cse to %func : !transform.any_op
    //    ... then hoist it out of the NR loop and the M loop: a packed (NC/NR) x KC x NR buffer
    //    built once per (N, K) block, reused by every MC block of the thread.
    %packed = transform.structured.hoist_pad %pad_b by 2 loops
        : (!transform.any_op) -> !transform.any_op
    //    Vectorize the packing copy (KC x NR; lowered to KC*NR/16 zmm load/store pairs).
    %pad_h = transform.structured.match ops{["tensor.pad"]} in %func
        : (!transform.any_op) -> !transform.any_op
    transform.structured.vectorize %pad_h vector_sizes [%KC, %NR]
        : !transform.any_op, !transform.param<i64>, !transform.param<i64>

    // 4. Register tile MR x NR, k by 1; vectorize into vector.contract (MR x 1) * (1 x NR).
    %mm_in = transform.structured.match ops{["linalg.matmul"]} in %func
        : (!transform.any_op) -> !transform.any_op
    %mm_r, %lr:2 = transform.structured.tile_using_for %mm_in tile_sizes [%MR, 0, 1]
        : (!transform.any_op, !transform.param<i64>) -> (!transform.any_op, !transform.any_op, !transform.any_op)
    transform.structured.vectorize %mm_r {create_named_contraction} : !transform.any_op
    //    Unroll the k loop by 4.
    transform.loop.unroll %lr#1 {factor = 4} : !transform.any_op

    // 5. The fill: one row (vector<1xN/...>) per iteration, vectorized.
    %fill_in = transform.structured.match ops{["linalg.fill"]} in %func
        : (!transform.any_op) -> !transform.any_op
    %fill_r, %lf = transform.structured.tile_using_for %fill_in tile_sizes [1, 0]
        : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    transform.structured.vectorize %fill_r : !transform.any_op

    // 6. Fold extract/insert_slice into the transfers (so transfer_read/write address C, A, packed
    //    B directly), then hoist the C tile's read/write pair out of the k loop: the MR x NR
    //    accumulator stays in registers across k.
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
