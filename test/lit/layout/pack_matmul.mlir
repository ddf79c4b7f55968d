// PackMatmulWeights: a matmul with a constant B and no elementwise consumer becomes an mmt4d
// on (N / NR, K, NR) panels; the one feeding relu keeps its matmul (the epilogue fuses into it).
// RUN: %mlc-opt %s --mlc-pack-matmul-weights=16 | FileCheck %s
// RUN: %mlc-opt %s --mlc-pack-matmul-weights=5 | FileCheck %s --check-prefix=NODIV
// RUN: %mlc-opt %s --mlc-pack-matmul-weights | FileCheck %s --check-prefix=HOST
// RUN: not %mlc-opt %s --mlc-pack-matmul-weights=0 2>&1 | FileCheck %s --check-prefix=BADARG

// CHECK: tensor.expand_shape %arg0 {{\[\[}}0], [1, 2, 3]] output_shape [64, 72, 1, 1] {mlc.name = "mm.lhs_4d"}
// CHECK: tensor.expand_shape %{{.*}} {{\[\[}}0], [1, 2]] output_shape [72, 2, 16] {mlc.name = "mm.w_panels"}
// CHECK: linalg.transpose ins(%{{.*}} : tensor<72x2x16xf32>) outs(%{{.*}} : tensor<2x72x16xf32>) permutation = [1, 0, 2] {mlc.name = "mm.w_packed"}
// CHECK: linalg.mmt4d {mlc.name = "mm"} ins(%{{.*}}, %{{.*}} : tensor<64x72x1x1xf32>, tensor<2x72x16x1xf32>) outs(%{{.*}} : tensor<64x2x1x16xf32>)
// CHECK: tensor.collapse_shape %{{.*}} {{\[\[}}0], [1, 2, 3]] {mlc.name = "mm.2d"} : tensor<64x2x1x16xf32> into tensor<64x32xf32>
// CHECK: linalg.matmul {mlc.name = "mm2"}
// CHECK-NOT: linalg.mmt4d

// NODIV-NOT: linalg.mmt4d
// NODIV: linalg.matmul {mlc.name = "mm"}
// NODIV: linalg.matmul {mlc.name = "mm2"}

// HOST: func.func @main
// HOST: linalg.matmul {mlc.name = "mm2"}

// BADARG: mlc-opt: error: --mlc-pack-matmul-weights: expected a positive panel width NR, got '0'
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @main(%a: tensor<64x72xf32>) -> (tensor<64x32xf32>, tensor<64x32xf32>) {
  %w = arith.constant dense<0.25> : tensor<72x32xf32>
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<64x32xf32>
  %f = linalg.fill {mlc.name = "mm.init"} ins(%z : f32) outs(%e : tensor<64x32xf32>) -> tensor<64x32xf32>
  %y = linalg.matmul {mlc.name = "mm"} ins(%a, %w : tensor<64x72xf32>, tensor<72x32xf32>) outs(%f : tensor<64x32xf32>) -> tensor<64x32xf32>
  %y2 = linalg.matmul {mlc.name = "mm2"} ins(%a, %w : tensor<64x72xf32>, tensor<72x32xf32>) outs(%f : tensor<64x32xf32>) -> tensor<64x32xf32>
  %e2 = tensor.empty() : tensor<64x32xf32>
  %r = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%y2 : tensor<64x32xf32>) outs(%e2 : tensor<64x32xf32>) attrs = {mlc.name = "relu"} {
  ^bb0(%v: f32, %o: f32):
    %m = arith.maximumf %v, %z : f32
    linalg.yield %m : f32
  } -> tensor<64x32xf32>
  return %y, %r : tensor<64x32xf32>, tensor<64x32xf32>
}
