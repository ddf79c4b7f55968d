// ConvToWinograd (F(4x4, 3x3), the pass's default tile) on a stride-1 3x3 NHWC convolution whose
// filter is an argument: a filter-transform contraction, the two input-transform steps over
// strided slices, one 36-point batch_matmul over the 2x2 tiles, the two output-transform steps
// with the relu inside, and the (N, tH, 4, tW, 4, F) result collapsed to NHWC.
// RUN: %mlc-opt %s --mlc-conv-to-winograd | FileCheck %s

#id = affine_map<(n, h, w, f) -> (n, h, w, f)>
func.func @main(%x: tensor<1x10x10x16xf32>, %w: tensor<3x3x16x32xf32>) -> tensor<1x8x8x32xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<1x8x8x32xf32>
  %init = linalg.fill {mlc.name = "conv.init"} ins(%zero : f32) outs(%e : tensor<1x8x8x32xf32>) -> tensor<1x8x8x32xf32>
  %y = linalg.conv_2d_nhwc_hwcf {mlc.name = "conv", dilations = dense<1> : tensor<2xi64>,
         strides = dense<1> : tensor<2xi64>}
       ins(%x, %w : tensor<1x10x10x16xf32>, tensor<3x3x16x32xf32>) outs(%init : tensor<1x8x8x32xf32>) -> tensor<1x8x8x32xf32>
  %e2 = tensor.empty() : tensor<1x8x8x32xf32>
  %r = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
       ins(%y : tensor<1x8x8x32xf32>) outs(%e2 : tensor<1x8x8x32xf32>) attrs = {mlc.name = "relu"} {
  ^bb0(%a: f32, %o: f32):
    %m = arith.maximumf %a, %zero : f32
    linalg.yield %m : f32
  } -> tensor<1x8x8x32xf32>
  return %r : tensor<1x8x8x32xf32>
}

// CHECK-LABEL: func.func @main(
// CHECK-NOT: linalg.conv_2d
// CHECK: linalg.generic {{.*}} ins(%{{.*}}, %{{.*}}, %arg1 : tensor<6x3xf32>, tensor<6x3xf32>, tensor<3x3x16x32xf32>) outs(%{{.*}} : tensor<6x6x16x32xf32>) {{.*}}mlc.name = "conv.winograd_filter"
// CHECK: tensor.extract_slice %arg0[0, 5, 0, 0] [1, 2, 10, 16] [1, 4, 1, 1]
// CHECK: mlc.name = "conv.winograd_input_rows"
// CHECK: } -> tensor<6x1x2x10x16xf32>
// CHECK: tensor.extract_slice %{{.*}}[0, 0, 0, 5, 0] [6, 1, 2, 2, 16] [1, 1, 1, 4, 1]
// CHECK: mlc.name = "conv.winograd_input"
// CHECK: } -> tensor<6x6x1x2x2x16xf32>
// CHECK: linalg.batch_matmul {mlc.name = "conv"} ins(%{{.*}}, %{{.*}} : tensor<36x4x16xf32>, tensor<36x16x32xf32>) outs(%{{.*}} : tensor<36x4x32xf32>)
// CHECK: mlc.name = "conv.winograd_output_rows"
// CHECK: } -> tensor<4x6x1x2x2x32xf32>
// CHECK: mlc.name = "conv.winograd_output"
// CHECK: arith.maximumf
// CHECK: } -> tensor<1x2x4x2x4x32xf32>
// CHECK: %[[Y:.*]] = tensor.collapse_shape %{{.*}} {{\[\[}}0], [1, 2], [3, 4], [5]] {mlc.name = "conv.winograd_output_4d"} : tensor<1x2x4x2x4x32xf32> into tensor<1x8x8x32xf32>
// CHECK-NOT: mlc.name = "relu"
// CHECK: return %[[Y]]
