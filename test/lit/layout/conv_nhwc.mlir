// Layout rewrites of a convolution: NCHW -> NHWC between transposes (its bias+relu epilogue
// moved before the transpose back, in NHWC), then the NHWC convolution as im2col + GEMM.
// RUN: %mlc-opt %s --mlc-conv-to-nhwc | FileCheck %s --check-prefix=NHWC
// RUN: %mlc-opt %s --mlc-conv-to-nhwc --mlc-conv-to-im2col | FileCheck %s --check-prefix=IM2COL
// RUN: %mlc-opt %s --mlc-conv-to-im2col | FileCheck %s --check-prefix=NCHW

// NHWC: linalg.transpose ins(%arg0 : tensor<1x8x10x10xf32>) outs(%{{.*}} : tensor<1x10x10x8xf32>) permutation = [0, 2, 3, 1] {mlc.name = "conv.x_nhwc"}
// NHWC: linalg.transpose ins(%arg1 : tensor<16x8x3x3xf32>) outs(%{{.*}} : tensor<3x3x8x16xf32>) permutation = [2, 3, 1, 0] {mlc.name = "conv.w_hwcf"}
// NHWC: linalg.fill {mlc.name = "conv.init"} {{.*}} -> tensor<1x8x8x16xf32>
// NHWC: linalg.conv_2d_nhwc_hwcf {{.*}}mlc.name = "conv"{{.*}} -> tensor<1x8x8x16xf32>
// NHWC-NOT: linalg.conv_2d_nchw_fchw
// the epilogue runs in NHWC, its per-channel bias read along the last dim
// NHWC: linalg.generic {indexing_maps = [#map, #map1, #map]{{.*}} ins(%{{.*}}, %arg2 : tensor<1x8x8x16xf32>, tensor<16xf32>){{.*}}mlc.name = "bias_relu"
// NHWC: linalg.transpose {{.*}} outs(%{{.*}} : tensor<1x16x8x8xf32>) permutation = [0, 3, 1, 2] {mlc.name = "conv.to_nchw"}
// NHWC-NEXT: return

// IM2COL: #map = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1 + d3, d2 + d4, d5)>
// IM2COL: linalg.generic {{.*}} ins(%{{.*}} : tensor<1x10x10x8xf32>) outs(%{{.*}} : tensor<1x8x8x3x3x8xf32>) attrs = {mlc.name = "conv.im2col"}
// IM2COL: tensor.collapse_shape %{{.*}} {{\[\[}}0, 1, 2], [3, 4, 5]] {mlc.name = "conv.im2col_2d"} : tensor<1x8x8x3x3x8xf32> into tensor<64x72xf32>
// IM2COL: tensor.collapse_shape %{{.*}} {{\[\[}}0, 1, 2], [3]] {mlc.name = "conv.w_gemm"} : tensor<3x3x8x16xf32> into tensor<72x16xf32>
// IM2COL: linalg.matmul {mlc.name = "conv"} ins(%{{.*}}, %{{.*}} : tensor<64x72xf32>, tensor<72x16xf32>) outs(%{{.*}} : tensor<64x16xf32>)
// IM2COL: tensor.expand_shape %{{.*}} {{\[\[}}0, 1, 2], [3]] output_shape [1, 8, 8, 16] {mlc.name = "conv.nhwc"}
// IM2COL-NOT: linalg.conv_2d

// im2col rewrites NHWC convolutions only
// NCHW: linalg.conv_2d_nchw_fchw
// NCHW-NOT: linalg.matmul
func.func @main(%x: tensor<1x8x10x10xf32>, %w: tensor<16x8x3x3xf32>, %b: tensor<16xf32>) -> tensor<1x16x8x8xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<1x16x8x8xf32>
  %f = linalg.fill {mlc.name = "conv.init"} ins(%z : f32) outs(%e : tensor<1x16x8x8xf32>) -> tensor<1x16x8x8xf32>
  %y = linalg.conv_2d_nchw_fchw {mlc.name = "conv", dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>} ins(%x, %w : tensor<1x8x10x10xf32>, tensor<16x8x3x3xf32>) outs(%f : tensor<1x16x8x8xf32>) -> tensor<1x16x8x8xf32>
  %e2 = tensor.empty() : tensor<1x16x8x8xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(n, c, h, w) -> (n, c, h, w)>, affine_map<(n, c, h, w) -> (c)>, affine_map<(n, c, h, w) -> (n, c, h, w)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%y, %b : tensor<1x16x8x8xf32>, tensor<16xf32>) outs(%e2 : tensor<1x16x8x8xf32>) attrs = {mlc.name = "bias_relu"} {
  ^bb0(%a: f32, %bb: f32, %o: f32):
    %s = arith.addf %a, %bb : f32
    %m = arith.maximumf %s, %z : f32
    linalg.yield %m : f32
  } -> tensor<1x16x8x8xf32>
  return %r : tensor<1x16x8x8xf32>
}
