// A convolution's `mlc.conv_algorithm` (a tuning record's choice, set by the layout stage's
// `algorithm` step) overrides the rewrites' own selection: with every convolution selected by
// default, the one marked 0 (direct) stays a convolution, the one marked 1 becomes im2col + a
// matmul, and the Winograd pass gives the one marked 2 the F(2x2, 3x3) tile (16 points) instead
// of its default F(4x4, 3x3).
// RUN: %mlc-opt %s --mlc-conv-to-im2col | FileCheck %s --check-prefix=IM2COL
// RUN: %mlc-opt %s --mlc-conv-to-winograd | FileCheck %s --check-prefix=WINO

func.func @main(%x: tensor<1x10x10x16xf32>, %w: tensor<3x3x16x16xf32>) -> (tensor<1x8x8x16xf32>, tensor<1x8x8x16xf32>, tensor<1x8x8x16xf32>) {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<1x8x8x16xf32>
  %i0 = linalg.fill {mlc.name = "direct.init"} ins(%zero : f32) outs(%e : tensor<1x8x8x16xf32>) -> tensor<1x8x8x16xf32>
  %y0 = linalg.conv_2d_nhwc_hwcf {mlc.name = "direct", mlc.conv_algorithm = 0 : i64, dilations = dense<1> : tensor<2xi64>,
          strides = dense<1> : tensor<2xi64>}
        ins(%x, %w : tensor<1x10x10x16xf32>, tensor<3x3x16x16xf32>) outs(%i0 : tensor<1x8x8x16xf32>) -> tensor<1x8x8x16xf32>
  %i1 = linalg.fill {mlc.name = "gemm.init"} ins(%zero : f32) outs(%e : tensor<1x8x8x16xf32>) -> tensor<1x8x8x16xf32>
  %y1 = linalg.conv_2d_nhwc_hwcf {mlc.name = "gemm", mlc.conv_algorithm = 1 : i64, dilations = dense<1> : tensor<2xi64>,
          strides = dense<1> : tensor<2xi64>}
        ins(%x, %w : tensor<1x10x10x16xf32>, tensor<3x3x16x16xf32>) outs(%i1 : tensor<1x8x8x16xf32>) -> tensor<1x8x8x16xf32>
  %i2 = linalg.fill {mlc.name = "wino.init"} ins(%zero : f32) outs(%e : tensor<1x8x8x16xf32>) -> tensor<1x8x8x16xf32>
  %y2 = linalg.conv_2d_nhwc_hwcf {mlc.name = "wino", mlc.conv_algorithm = 2 : i64, dilations = dense<1> : tensor<2xi64>,
          strides = dense<1> : tensor<2xi64>}
        ins(%x, %w : tensor<1x10x10x16xf32>, tensor<3x3x16x16xf32>) outs(%i2 : tensor<1x8x8x16xf32>) -> tensor<1x8x8x16xf32>
  return %y0, %y1, %y2 : tensor<1x8x8x16xf32>, tensor<1x8x8x16xf32>, tensor<1x8x8x16xf32>
}

// IM2COL-LABEL: func.func @main(
// IM2COL: linalg.conv_2d_nhwc_hwcf {{.*}}mlc.name = "direct"
// IM2COL-NOT: mlc.name = "gemm"{{.*}}linalg.conv_2d
// IM2COL: mlc.name = "gemm.im2col"
// IM2COL: linalg.matmul {mlc.name = "gemm"}
// IM2COL: linalg.conv_2d_nhwc_hwcf {{.*}}mlc.name = "wino"

// WINO-LABEL: func.func @main(
// WINO: linalg.conv_2d_nhwc_hwcf {{.*}}mlc.name = "direct"
// WINO: linalg.conv_2d_nhwc_hwcf {{.*}}mlc.name = "gemm"
// WINO-NOT: linalg.conv_2d
// WINO: linalg.batch_matmul {mlc.name = "wino"} ins(%{{.*}}, %{{.*}} : tensor<16x16x16xf32>, tensor<16x16x16xf32>)
