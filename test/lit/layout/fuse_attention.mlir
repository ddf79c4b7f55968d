// `mlc-fuse-attention`: softmax(Q K^T * scale) V written as batch_matmul -> scale -> softmax ->
// batch_matmul becomes one call of a fused (flash) attention function on 4-D (B, H, S, D)
// views of Q, K and V; a softmax(A B) C whose first product reads B's batch transposed (no
// Q K^T of the same heads) is left alone.
// The ops the call replaces are dead afterwards; the compiler's attention step erases them with
// DCE, as the second pass here does.
// RUN: %mlc-opt %s --mlc-fuse-attention --mlc-dce | FileCheck %s

#map = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#map1 = affine_map<(d0, d1, d2) -> (d0, d1)>
#map2 = affine_map<(d0, d1) -> (d0, d1)>

// CHECK-LABEL: func.func @attention(
// CHECK-NOT: linalg.
// CHECK-DAG: tensor.expand_shape %arg0 {{.*}} : tensor<4x8x16xf32> into tensor<1x4x8x16xf32>
// CHECK-DAG: tensor.expand_shape %arg1 {{.*}} : tensor<4x12x16xf32> into tensor<1x4x12x16xf32>
// CHECK-DAG: tensor.expand_shape %arg2 {{.*}} : tensor<4x12x16xf32> into tensor<1x4x12x16xf32>
// CHECK: %[[A:.*]] = call @attention_attention(%{{.*}}, %{{.*}}, %{{.*}}) {mlc.name = "batch_matmul_1.attention"} : (tensor<1x4x8x16xf32>, tensor<1x4x12x16xf32>, tensor<1x4x12x16xf32>) -> tensor<1x4x8x16xf32>
// CHECK: %[[O:.*]] = tensor.collapse_shape %[[A]] {{\[\[}}0, 1], [2], [3]] {{.*}} into tensor<4x8x16xf32>
// CHECK-NEXT: return %[[O]]
func.func @attention(%arg0: tensor<4x8x16xf32>, %arg1: tensor<4x12x16xf32>, %arg2: tensor<4x12x16xf32>) -> tensor<4x8x16xf32> {
  %0 = tensor.empty() : tensor<4x16x12xf32>
  %transposed = linalg.transpose ins(%arg1 : tensor<4x12x16xf32>) outs(%0 : tensor<4x16x12xf32>) permutation = [0, 2, 1]  {mlc.name = "transpose"}
  %1 = tensor.empty() : tensor<4x8x12xf32>
  %cst = arith.constant 0.000000e+00 : f32
  %2 = linalg.fill {mlc.name = "batch_matmul.init"} ins(%cst : f32) outs(%1 : tensor<4x8x12xf32>) -> tensor<4x8x12xf32>
  %3 = linalg.batch_matmul {mlc.name = "batch_matmul"} ins(%arg0, %transposed : tensor<4x8x16xf32>, tensor<4x16x12xf32>) outs(%2 : tensor<4x8x12xf32>) -> tensor<4x8x12xf32>
  %4 = tensor.empty() : tensor<4x8x12xf32>
  %5 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%3 : tensor<4x8x12xf32>) outs(%4 : tensor<4x8x12xf32>) attrs =  {mlc.name = "multiply"} {
  ^bb0(%in: f32, %out: f32):
    %cst_3 = arith.constant 2.500000e-01 : f32
    %21 = arith.mulf %in, %cst_3 : f32
    linalg.yield %21 : f32
  } -> tensor<4x8x12xf32>
  %6 = tensor.empty() : tensor<4x8xf32>
  %cst_0 = arith.constant 0xFF800000 : f32
  %7 = linalg.fill {mlc.name = "softmax.max.init"} ins(%cst_0 : f32) outs(%6 : tensor<4x8xf32>) -> tensor<4x8xf32>
  %8 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "parallel", "reduction"]} ins(%5 : tensor<4x8x12xf32>) outs(%7 : tensor<4x8xf32>) attrs =  {mlc.name = "softmax.max"} {
  ^bb0(%in: f32, %out: f32):
    %21 = arith.maxnumf %out, %in : f32
    linalg.yield %21 : f32
  } -> tensor<4x8xf32>
  %9 = tensor.empty() {mlc.buffer = "softmax.exp"} : tensor<4x8x12xf32>
  %10 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%5, %8 : tensor<4x8x12xf32>, tensor<4x8xf32>) outs(%9 : tensor<4x8x12xf32>) attrs =  {mlc.name = "softmax.exp"} {
  ^bb0(%in: f32, %in_3: f32, %out: f32):
    %21 = arith.subf %in, %in_3 : f32
    %22 = math.exp %21 : f32
    linalg.yield %22 : f32
  } -> tensor<4x8x12xf32>
  %11 = tensor.empty() : tensor<4x8xf32>
  %cst_1 = arith.constant 0.000000e+00 : f32
  %12 = linalg.fill {mlc.name = "softmax.sum.init"} ins(%cst_1 : f32) outs(%11 : tensor<4x8xf32>) -> tensor<4x8xf32>
  %13 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "parallel", "reduction"]} ins(%10 : tensor<4x8x12xf32>) outs(%12 : tensor<4x8xf32>) attrs =  {mlc.name = "softmax.sum"} {
  ^bb0(%in: f32, %out: f32):
    %21 = arith.addf %out, %in : f32
    linalg.yield %21 : f32
  } -> tensor<4x8xf32>
  %14 = tensor.empty() : tensor<4x8xf32>
  %15 = linalg.generic {indexing_maps = [#map2, #map2], iterator_types = ["parallel", "parallel"]} ins(%13 : tensor<4x8xf32>) outs(%14 : tensor<4x8xf32>) attrs =  {mlc.name = "softmax.inv"} {
  ^bb0(%in: f32, %out: f32):
    %cst_3 = arith.constant 1.000000e+00 : f32
    %21 = arith.divf %cst_3, %in : f32
    linalg.yield %21 : f32
  } -> tensor<4x8xf32>
  %16 = tensor.empty() : tensor<4x8x12xf32>
  %17 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%10, %15 : tensor<4x8x12xf32>, tensor<4x8xf32>) outs(%16 : tensor<4x8x12xf32>) attrs =  {mlc.name = "softmax"} {
  ^bb0(%in: f32, %in_3: f32, %out: f32):
    %21 = arith.mulf %in, %in_3 : f32
    linalg.yield %21 : f32
  } -> tensor<4x8x12xf32>
  %18 = tensor.empty() : tensor<4x8x16xf32>
  %cst_2 = arith.constant 0.000000e+00 : f32
  %19 = linalg.fill {mlc.name = "batch_matmul_1.init"} ins(%cst_2 : f32) outs(%18 : tensor<4x8x16xf32>) -> tensor<4x8x16xf32>
  %20 = linalg.batch_matmul {mlc.name = "batch_matmul_1"} ins(%17, %arg2 : tensor<4x8x12xf32>, tensor<4x12x16xf32>) outs(%19 : tensor<4x8x16xf32>) -> tensor<4x8x16xf32>
  return %20 : tensor<4x8x16xf32>
}

// CHECK-LABEL: func.func @not_q_kt(
// CHECK-NOT: call @
// CHECK: linalg.batch_matmul {mlc.name = "batch_matmul"}
// CHECK: linalg.batch_matmul {mlc.name = "batch_matmul_1"}
// CHECK-NOT: call @

// the fused function: one per distinct attention (operand types and scale)
// CHECK-LABEL: func.func private @attention_attention(
// CHECK-SAME: tensor<1x4x8x16xf32>, %{{.*}}: tensor<1x4x12x16xf32>, %{{.*}}: tensor<1x4x12x16xf32>) -> tensor<1x4x8x16xf32>
// the online softmax over key blocks: running maximum (arith.maximumf, or the cmpf ogt + select
// of the kernel that transposes key blocks in registers, a choice made from the host target),
// rescaling by exp of its change
// CHECK: scf.forall
// CHECK: scf.for
// CHECK: {{arith.maximumf|arith.cmpf ogt}}
// CHECK: math.exp
// CHECK-NOT: func.func private
func.func @not_q_kt(%arg0: tensor<3x5x8xf32>, %arg1: tensor<8x3x6xf32>, %arg2: tensor<3x6x8xf32>) -> tensor<3x5x8xf32> {
  %0 = tensor.empty() : tensor<3x8x6xf32>
  %transposed = linalg.transpose ins(%arg1 : tensor<8x3x6xf32>) outs(%0 : tensor<3x8x6xf32>) permutation = [1, 0, 2]  {mlc.name = "transpose"}
  %1 = tensor.empty() : tensor<3x5x6xf32>
  %cst = arith.constant 0.000000e+00 : f32
  %2 = linalg.fill {mlc.name = "batch_matmul.init"} ins(%cst : f32) outs(%1 : tensor<3x5x6xf32>) -> tensor<3x5x6xf32>
  %3 = linalg.batch_matmul {mlc.name = "batch_matmul"} ins(%arg0, %transposed : tensor<3x5x8xf32>, tensor<3x8x6xf32>) outs(%2 : tensor<3x5x6xf32>) -> tensor<3x5x6xf32>
  %4 = tensor.empty() : tensor<3x5xf32>
  %cst_0 = arith.constant 0xFF800000 : f32
  %5 = linalg.fill {mlc.name = "softmax.max.init"} ins(%cst_0 : f32) outs(%4 : tensor<3x5xf32>) -> tensor<3x5xf32>
  %6 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "parallel", "reduction"]} ins(%3 : tensor<3x5x6xf32>) outs(%5 : tensor<3x5xf32>) attrs =  {mlc.name = "softmax.max"} {
  ^bb0(%in: f32, %out: f32):
    %19 = arith.maxnumf %out, %in : f32
    linalg.yield %19 : f32
  } -> tensor<3x5xf32>
  %7 = tensor.empty() {mlc.buffer = "softmax.exp"} : tensor<3x5x6xf32>
  %8 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%3, %6 : tensor<3x5x6xf32>, tensor<3x5xf32>) outs(%7 : tensor<3x5x6xf32>) attrs =  {mlc.name = "softmax.exp"} {
  ^bb0(%in: f32, %in_3: f32, %out: f32):
    %19 = arith.subf %in, %in_3 : f32
    %20 = math.exp %19 : f32
    linalg.yield %20 : f32
  } -> tensor<3x5x6xf32>
  %9 = tensor.empty() : tensor<3x5xf32>
  %cst_1 = arith.constant 0.000000e+00 : f32
  %10 = linalg.fill {mlc.name = "softmax.sum.init"} ins(%cst_1 : f32) outs(%9 : tensor<3x5xf32>) -> tensor<3x5xf32>
  %11 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "parallel", "reduction"]} ins(%8 : tensor<3x5x6xf32>) outs(%10 : tensor<3x5xf32>) attrs =  {mlc.name = "softmax.sum"} {
  ^bb0(%in: f32, %out: f32):
    %19 = arith.addf %out, %in : f32
    linalg.yield %19 : f32
  } -> tensor<3x5xf32>
  %12 = tensor.empty() : tensor<3x5xf32>
  %13 = linalg.generic {indexing_maps = [#map2, #map2], iterator_types = ["parallel", "parallel"]} ins(%11 : tensor<3x5xf32>) outs(%12 : tensor<3x5xf32>) attrs =  {mlc.name = "softmax.inv"} {
  ^bb0(%in: f32, %out: f32):
    %cst_3 = arith.constant 1.000000e+00 : f32
    %19 = arith.divf %cst_3, %in : f32
    linalg.yield %19 : f32
  } -> tensor<3x5xf32>
  %14 = tensor.empty() : tensor<3x5x6xf32>
  %15 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%8, %13 : tensor<3x5x6xf32>, tensor<3x5xf32>) outs(%14 : tensor<3x5x6xf32>) attrs =  {mlc.name = "softmax"} {
  ^bb0(%in: f32, %in_3: f32, %out: f32):
    %19 = arith.mulf %in, %in_3 : f32
    linalg.yield %19 : f32
  } -> tensor<3x5x6xf32>
  %16 = tensor.empty() : tensor<3x5x8xf32>
  %cst_2 = arith.constant 0.000000e+00 : f32
  %17 = linalg.fill {mlc.name = "batch_matmul_1.init"} ins(%cst_2 : f32) outs(%16 : tensor<3x5x8xf32>) -> tensor<3x5x8xf32>
  %18 = linalg.batch_matmul {mlc.name = "batch_matmul_1"} ins(%15, %arg2 : tensor<3x5x6xf32>, tensor<3x6x8xf32>) outs(%17 : tensor<3x5x8xf32>) -> tensor<3x5x8xf32>
  return %18 : tensor<3x5x8xf32>
}
