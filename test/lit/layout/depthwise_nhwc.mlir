// `mlc-depthwise-to-nhwc`: a depthwise convolution (one input and one output channel per
// group) becomes linalg.depthwise_conv_2d_nhwc_hwc between layout transposes, its bias + relu
// epilogue moved into NHWC before the transpose back; a grouped convolution with two channels
// per group is no depthwise one and keeps its op.
// RUN: %mlc-opt %s --mlc-depthwise-to-nhwc | FileCheck %s

#map = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#map1 = affine_map<(d0, d1, d2, d3) -> (d1, 0, 0)>

// the per-channel bias is read along the last (channel) dim once the epilogue is in NHWC
// CHECK: #map1 = affine_map<(d0, d1, d2, d3) -> (d3, 0, 0)>
// CHECK-LABEL: func.func @depthwise(
// the padded NHWC input: a fill of the border, the input transposed into its interior
// CHECK: linalg.fill {{.*}} -> tensor<1x12x12x16xf32>
// CHECK: linalg.transpose ins(%arg0 : tensor<1x16x10x10xf32>) {{.*}} permutation = [0, 2, 3, 1]
// CHECK: linalg.transpose ins(%arg1 : tensor<16x1x3x3xf32>) {{.*}} permutation = [2, 3, 1, 0] {mlc.name = "conv2d.w_hwcf"}
// CHECK: linalg.fill {mlc.name = "conv2d.init"} {{.*}} -> tensor<1x10x10x16xf32>
// CHECK: linalg.depthwise_conv_2d_nhwc_hwc {{.*}}mlc.name = "conv2d"{{.*}} ins(%{{.*}}, %{{.*}} : tensor<1x12x12x16xf32>, tensor<3x3x16xf32>) outs(%{{.*}} : tensor<1x10x10x16xf32>)
// CHECK-NOT: linalg.conv_2d_ngchw_gfchw
// CHECK: linalg.generic {{.*}} outs(%{{.*}} : tensor<1x10x10x16xf32>) attrs = {mlc.name = "conv2d.bias_add"}
// CHECK: linalg.generic {{.*}} outs(%{{.*}} : tensor<1x10x10x16xf32>) attrs = {mlc.name = "relu"}
// CHECK: linalg.transpose {{.*}} outs(%{{.*}} : tensor<1x16x10x10xf32>) permutation = [0, 3, 1, 2]
// CHECK-NEXT: return
func.func @depthwise(%arg0: tensor<1x16x10x10xf32>, %arg1: tensor<16x1x3x3xf32>, %arg2: tensor<16xf32>) -> tensor<1x16x10x10xf32> {
  %cst = arith.constant 0.000000e+00 : f32
  %padded = tensor.pad %arg0 low[0, 0, 1, 1] high[0, 0, 1, 1] {
  ^bb0(%i0: index, %i1: index, %i2: index, %i3: index):
    tensor.yield %cst : f32
  } {mlc.name = "conv2d.pad"} : tensor<1x16x10x10xf32> to tensor<1x16x12x12xf32>
  %xg = tensor.expand_shape %padded [[0], [1, 2], [3], [4]] output_shape [1, 16, 1, 12, 12] {mlc.name = "conv2d.expand_x"} : tensor<1x16x12x12xf32> into tensor<1x16x1x12x12xf32>
  %wg = tensor.expand_shape %arg1 [[0, 1], [2], [3], [4]] output_shape [16, 1, 1, 3, 3] {mlc.name = "conv2d.expand_w"} : tensor<16x1x3x3xf32> into tensor<16x1x1x3x3xf32>
  %0 = tensor.empty() : tensor<1x16x1x10x10xf32>
  %1 = linalg.fill {mlc.name = "conv2d.init"} ins(%cst : f32) outs(%0 : tensor<1x16x1x10x10xf32>) -> tensor<1x16x1x10x10xf32>
  %2 = linalg.conv_2d_ngchw_gfchw {dilations = dense<1> : tensor<2xi64>, mlc.name = "conv2d", strides = dense<1> : tensor<2xi64>} ins(%xg, %wg : tensor<1x16x1x12x12xf32>, tensor<16x1x1x3x3xf32>) outs(%1 : tensor<1x16x1x10x10xf32>) -> tensor<1x16x1x10x10xf32>
  %y = tensor.collapse_shape %2 [[0], [1, 2], [3], [4]] {mlc.name = "conv2d.collapse"} : tensor<1x16x1x10x10xf32> into tensor<1x16x10x10xf32>
  %b = tensor.expand_shape %arg2 [[0, 1, 2]] output_shape [16, 1, 1] {mlc.name = "conv2d.bias_reshape"} : tensor<16xf32> into tensor<16x1x1xf32>
  %3 = tensor.empty() : tensor<1x16x10x10xf32>
  %4 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%y, %b : tensor<1x16x10x10xf32>, tensor<16x1x1xf32>) outs(%3 : tensor<1x16x10x10xf32>) attrs = {mlc.name = "conv2d.bias_add"} {
  ^bb0(%in: f32, %in_b: f32, %out: f32):
    %s = arith.addf %in, %in_b : f32
    linalg.yield %s : f32
  } -> tensor<1x16x10x10xf32>
  %5 = tensor.empty() : tensor<1x16x10x10xf32>
  %6 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%4 : tensor<1x16x10x10xf32>) outs(%5 : tensor<1x16x10x10xf32>) attrs = {mlc.name = "relu"} {
  ^bb0(%in: f32, %out: f32):
    %m = arith.maximumf %in, %cst : f32
    linalg.yield %m : f32
  } -> tensor<1x16x10x10xf32>
  return %6 : tensor<1x16x10x10xf32>
}

// two input channels per group: no depthwise convolution, left as it is
// CHECK-LABEL: func.func @two_channels_per_group(
// CHECK-NOT: linalg.depthwise_conv_2d_nhwc_hwc
// CHECK-NOT: linalg.transpose
// CHECK: linalg.conv_2d_ngchw_gfchw {{.*}}mlc.name = "grouped"{{.*}} -> tensor<1x8x2x8x8xf32>
// CHECK-NOT: linalg.transpose
func.func @two_channels_per_group(%arg0: tensor<1x16x10x10xf32>, %arg1: tensor<16x2x3x3xf32>) -> tensor<1x16x8x8xf32> {
  %cst = arith.constant 0.000000e+00 : f32
  %xg = tensor.expand_shape %arg0 [[0], [1, 2], [3], [4]] output_shape [1, 8, 2, 10, 10] : tensor<1x16x10x10xf32> into tensor<1x8x2x10x10xf32>
  %wg = tensor.expand_shape %arg1 [[0, 1], [2], [3], [4]] output_shape [8, 2, 2, 3, 3] : tensor<16x2x3x3xf32> into tensor<8x2x2x3x3xf32>
  %0 = tensor.empty() : tensor<1x8x2x8x8xf32>
  %1 = linalg.fill {mlc.name = "grouped.init"} ins(%cst : f32) outs(%0 : tensor<1x8x2x8x8xf32>) -> tensor<1x8x2x8x8xf32>
  %2 = linalg.conv_2d_ngchw_gfchw {dilations = dense<1> : tensor<2xi64>, mlc.name = "grouped", strides = dense<1> : tensor<2xi64>} ins(%xg, %wg : tensor<1x8x2x10x10xf32>, tensor<8x2x2x3x3xf32>) outs(%1 : tensor<1x8x2x8x8xf32>) -> tensor<1x8x2x8x8xf32>
  %y = tensor.collapse_shape %2 [[0], [1, 2], [3], [4]] : tensor<1x8x2x8x8xf32> into tensor<1x16x8x8xf32>
  return %y : tensor<1x16x8x8xf32>
}
