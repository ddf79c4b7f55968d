// `mlc-conv-to-im2col` on a 1x1 stride-1 convolution (no padding): the im2col matrix is the
// input itself, so the GEMM reads it collapsed to (N*H*W, C), a view; a stride-2 1x1 keeps the
// strided im2col copy.
// RUN: %mlc-opt %s --mlc-conv-to-im2col | FileCheck %s

func.func @pointwise(%x: tensor<1x7x9x16xf32>, %w: tensor<1x1x16x32xf32>) -> tensor<1x7x9x32xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<1x7x9x32xf32>
  %i = linalg.fill {mlc.name = "pw.init"} ins(%zero : f32) outs(%e : tensor<1x7x9x32xf32>) -> tensor<1x7x9x32xf32>
  %y = linalg.conv_2d_nhwc_hwcf {mlc.name = "pw", dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>}
        ins(%x, %w : tensor<1x7x9x16xf32>, tensor<1x1x16x32xf32>) outs(%i : tensor<1x7x9x32xf32>) -> tensor<1x7x9x32xf32>
  return %y : tensor<1x7x9x32xf32>
}

// CHECK-LABEL: func.func @pointwise(
// CHECK-NOT: linalg.generic
// CHECK: tensor.collapse_shape %arg0 {{\[\[}}0, 1, 2], [3]] {mlc.name = "pw.im2col_2d"} : tensor<1x7x9x16xf32> into tensor<63x16xf32>
// CHECK: linalg.matmul {mlc.name = "pw"} ins(%{{.*}}, %{{.*}} : tensor<63x16xf32>, tensor<16x32xf32>)


func.func @strided(%x: tensor<1x14x18x16xf32>, %w: tensor<1x1x16x32xf32>) -> tensor<1x7x9x32xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<1x7x9x32xf32>
  %i = linalg.fill {mlc.name = "s2.init"} ins(%zero : f32) outs(%e : tensor<1x7x9x32xf32>) -> tensor<1x7x9x32xf32>
  %y = linalg.conv_2d_nhwc_hwcf {mlc.name = "s2", dilations = dense<1> : tensor<2xi64>, strides = dense<2> : tensor<2xi64>}
        ins(%x, %w : tensor<1x14x18x16xf32>, tensor<1x1x16x32xf32>) outs(%i : tensor<1x7x9x32xf32>) -> tensor<1x7x9x32xf32>
  return %y : tensor<1x7x9x32xf32>
}

// CHECK-LABEL: func.func @strided(
// CHECK: linalg.generic {{.*}} ins(%arg0 : tensor<1x14x18x16xf32>) outs(%{{.*}} : tensor<1x7x9x1x1x16xf32>) attrs = {mlc.name = "s2.im2col"}
// CHECK: linalg.matmul {mlc.name = "s2"} ins(%{{.*}}, %{{.*}} : tensor<63x16xf32>, tensor<16x32xf32>)
