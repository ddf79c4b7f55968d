// `mlc-grouped-conv-to-batch-matmul` on grouped convolutions: a pointwise one of one image
// becomes a batch matmul over the groups of two views (no copy); a strided 3x3 one reads a
// per-group im2col copy; with two images the (G, F, N*OH*OW) product is transposed back.
// RUN: %mlc-opt %s --mlc-grouped-conv-to-batch-matmul | FileCheck %s

func.func @pointwise(%x: tensor<1x4x68x14x14xf32>, %w: tensor<4x68x68x1x1xf32>) -> tensor<1x4x68x14x14xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<1x4x68x14x14xf32>
  %i = linalg.fill {mlc.name = "pw.init"} ins(%zero : f32) outs(%e : tensor<1x4x68x14x14xf32>) -> tensor<1x4x68x14x14xf32>
  %y = linalg.conv_2d_ngchw_gfchw {mlc.name = "pw", dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>}
        ins(%x, %w : tensor<1x4x68x14x14xf32>, tensor<4x68x68x1x1xf32>) outs(%i : tensor<1x4x68x14x14xf32>) -> tensor<1x4x68x14x14xf32>
  return %y : tensor<1x4x68x14x14xf32>
}

// CHECK-LABEL: func.func @pointwise(
// CHECK-NOT: linalg.generic
// CHECK: tensor.collapse_shape %arg0 {{\[\[}}0, 1], [2], [3, 4]] {mlc.name = "pw.im2col_3d"} : tensor<1x4x68x14x14xf32> into tensor<4x68x196xf32>
// CHECK: tensor.collapse_shape %arg1 {{\[\[}}0], [1], [2, 3, 4]] {mlc.name = "pw.w_gemm"} : tensor<4x68x68x1x1xf32> into tensor<4x68x68xf32>
// CHECK: linalg.fill {mlc.name = "pw.init"} {{.*}} -> tensor<4x68x196xf32>
// CHECK: linalg.batch_matmul {mlc.name = "pw"} ins(%{{.*}}, %{{.*}} : tensor<4x68x68xf32>, tensor<4x68x196xf32>)
// CHECK: tensor.expand_shape %{{.*}} {{\[\[}}0, 1], [2], [3, 4]] output_shape [1, 4, 68, 14, 14]
// CHECK-NOT: linalg.conv_2d_ngchw_gfchw


func.func @strided(%x: tensor<1x3x2x11x13xf32>, %w: tensor<3x3x2x3x3xf32>) -> tensor<1x3x3x5x6xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<1x3x3x5x6xf32>
  %i = linalg.fill {mlc.name = "s2.init"} ins(%zero : f32) outs(%e : tensor<1x3x3x5x6xf32>) -> tensor<1x3x3x5x6xf32>
  %y = linalg.conv_2d_ngchw_gfchw {mlc.name = "s2", dilations = dense<1> : tensor<2xi64>, strides = dense<2> : tensor<2xi64>}
        ins(%x, %w : tensor<1x3x2x11x13xf32>, tensor<3x3x2x3x3xf32>) outs(%i : tensor<1x3x3x5x6xf32>) -> tensor<1x3x3x5x6xf32>
  return %y : tensor<1x3x3x5x6xf32>
}

// CHECK-LABEL: func.func @strided(
// CHECK: linalg.generic {{.*}} ins(%arg0 : tensor<1x3x2x11x13xf32>) outs(%{{.*}} : tensor<3x2x3x3x1x5x6xf32>) attrs = {mlc.name = "s2.im2col"}
// CHECK: tensor.collapse_shape %{{.*}} {{\[\[}}0], [1, 2, 3], [4, 5, 6]] {mlc.name = "s2.im2col_3d"} : tensor<3x2x3x3x1x5x6xf32> into tensor<3x18x30xf32>
// CHECK: linalg.batch_matmul {mlc.name = "s2"} ins(%{{.*}}, %{{.*}} : tensor<3x3x18xf32>, tensor<3x18x30xf32>)


func.func @batched(%x: tensor<2x2x4x6x6xf32>, %w: tensor<2x4x4x1x1xf32>, %acc: tensor<2x2x4x6x6xf32>) -> tensor<2x2x4x6x6xf32> {
  %y = linalg.conv_2d_ngchw_gfchw {mlc.name = "b2", dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>}
        ins(%x, %w : tensor<2x2x4x6x6xf32>, tensor<2x4x4x1x1xf32>) outs(%acc : tensor<2x2x4x6x6xf32>) -> tensor<2x2x4x6x6xf32>
  return %y : tensor<2x2x4x6x6xf32>
}

// CHECK-LABEL: func.func @batched(
// CHECK: linalg.generic {{.*}} outs(%{{.*}} : tensor<2x4x1x1x2x6x6xf32>) attrs = {mlc.name = "b2.im2col"}
// CHECK: linalg.transpose ins(%arg2 : tensor<2x2x4x6x6xf32>) {{.*}} permutation = [1, 2, 0, 3, 4] {{.*}}mlc.name = "b2.init_gfn"
// CHECK: linalg.batch_matmul {mlc.name = "b2"} ins(%{{.*}}, %{{.*}} : tensor<2x4x4xf32>, tensor<2x4x72xf32>)
// CHECK: linalg.transpose ins(%{{.*}} : tensor<2x4x2x6x6xf32>) {{.*}} permutation = [2, 0, 1, 3, 4] {{.*}}mlc.name = "b2.to_ngchw"
