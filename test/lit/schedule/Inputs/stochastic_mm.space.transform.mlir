// The design space of stochastic_schedule_mm: the knob has options but no decision.
module attributes {transform.with_named_sequence} {
  transform.named_sequence @__transform_main(%arg0: !transform.any_op {transform.readonly}) {
    %0 = transform.structured.match ops{["func.func"]} attributes {sym_name = "main"} in %arg0 : (!transform.any_op) -> !transform.any_op
    %1 = transform.structured.match attributes {mlc.name = "matmul"} in %0 : (!transform.any_op) -> !transform.any_op
    %transformed, %loops = transform.structured.fuse %1 tile_sizes [1, 0, 0] : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    %2 = transform.tune.knob<"matmul.j.tile1"> options = [1, 2, 4, 8, 16, 32, 64, 128] -> !transform.param<i64>
    %transformed_0, %loops_1 = transform.structured.fuse %transformed tile_sizes [0, %2, 0] : (!transform.any_op, !transform.param<i64>) -> (!transform.any_op, !transform.any_op)
    %tiled_linalg_op, %loops_2 = transform.structured.tile_using_for %transformed_0 tile_sizes [0, 0, 1] : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    transform.apply_patterns to %0 {
      transform.apply_patterns.tensor.merge_consecutive_insert_extract_slice
      transform.apply_patterns.canonicalization
    } : !transform.any_op
    transform.apply_cse to %0 : !transform.any_op
    transform.yield 
  }
}
