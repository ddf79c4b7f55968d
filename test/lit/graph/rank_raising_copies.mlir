// FuseOps: a relu read by two rank-raising copies (the im2col of a 1x1 convolution and of a
// strided one, as in ResNet-50's downsampling blocks) with the first convolution's matmul between
// them. The copies read no row value (no reduction upstream), so the relu, used twice, is
// materialized and each copy joins its own convolution's side; before, both copies joined the
// relu's group, whose call came after the first matmul that reads it ("does not dominate").
// RUN: %mlc-opt %s --mlc-fuse-ops | FileCheck %s

#id4 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#in6 = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2, d5)>
#s26 = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1 * 2, d2 * 2, d5)>
#id6 = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2, d3, d4, d5)>
func.func @main(%x: tensor<1x4x4x8xf32>, %wa: tensor<8x3xf32>, %wb: tensor<8x5xf32>)
    -> (tensor<16x3xf32>, tensor<4x5xf32>) {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<1x4x4x8xf32>
  %relu = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%x : tensor<1x4x4x8xf32>) outs(%e : tensor<1x4x4x8xf32>) attrs = {mlc.name = "relu"} {
  ^bb0(%in: f32, %out: f32):
    %m = arith.maximumf %in, %zero : f32
    linalg.yield %m : f32
  } -> tensor<1x4x4x8xf32>
  %ea = tensor.empty() : tensor<1x4x4x1x1x8xf32>
  %ca = linalg.generic {indexing_maps = [#in6, #id6], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel", "parallel"]}
      ins(%relu : tensor<1x4x4x8xf32>) outs(%ea : tensor<1x4x4x1x1x8xf32>) attrs = {mlc.name = "conv_a.im2col"} {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  } -> tensor<1x4x4x1x1x8xf32>
  %la = tensor.collapse_shape %ca [[0, 1, 2], [3, 4, 5]] {mlc.name = "conv_a.im2col_2d"} : tensor<1x4x4x1x1x8xf32> into tensor<16x8xf32>
  %oa = tensor.empty() : tensor<16x3xf32>
  %ia = linalg.fill {mlc.name = "conv_a.init"} ins(%zero : f32) outs(%oa : tensor<16x3xf32>) -> tensor<16x3xf32>
  %ya = linalg.matmul {mlc.name = "conv_a"} ins(%la, %wa : tensor<16x8xf32>, tensor<8x3xf32>) outs(%ia : tensor<16x3xf32>) -> tensor<16x3xf32>
  %eb = tensor.empty() : tensor<1x2x2x1x1x8xf32>
  %cb = linalg.generic {indexing_maps = [#s26, #id6], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel", "parallel"]}
      ins(%relu : tensor<1x4x4x8xf32>) outs(%eb : tensor<1x2x2x1x1x8xf32>) attrs = {mlc.name = "conv_b.im2col"} {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  } -> tensor<1x2x2x1x1x8xf32>
  %lb = tensor.collapse_shape %cb [[0, 1, 2], [3, 4, 5]] {mlc.name = "conv_b.im2col_2d"} : tensor<1x2x2x1x1x8xf32> into tensor<4x8xf32>
  %ob = tensor.empty() : tensor<4x5xf32>
  %ib = linalg.fill {mlc.name = "conv_b.init"} ins(%zero : f32) outs(%ob : tensor<4x5xf32>) -> tensor<4x5xf32>
  %yb = linalg.matmul {mlc.name = "conv_b"} ins(%lb, %wb : tensor<4x8xf32>, tensor<8x5xf32>) outs(%ib : tensor<4x5xf32>) -> tensor<4x5xf32>
  return %ya, %yb : tensor<16x3xf32>, tensor<4x5xf32>
}
// CHECK-LABEL: func.func @main
// CHECK: %[[R:.*]] = call @fused_relu(
// CHECK: call @{{.*}}conv_a{{.*}}(%[[R]]
// CHECK: call @{{.*}}conv_b{{.*}}(%[[R]]
// CHECK: return
