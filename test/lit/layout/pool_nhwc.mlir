// `mlc-pool-to-nhwc`: NCHW poolings whose init is a linalg.fill become NHWC poolings between
// layout transposes (a padded input is built as a fill + the transposed input in its interior,
// the pad's -inf border kept); a pooling that accumulates into an argument is left alone.
// RUN: %mlc-opt %s --mlc-pool-to-nhwc | FileCheck %s

// CHECK-LABEL: func.func @max_pool(
// CHECK: %[[NEG:.*]] = arith.constant 0xFF800000 : f32
// CHECK: linalg.fill {{.*}}ins(%[[NEG]] : f32) {{.*}} -> tensor<1x14x14x16xf32>
// CHECK: linalg.transpose ins(%arg0 : tensor<1x16x12x12xf32>) {{.*}} permutation = [0, 2, 3, 1]
// CHECK: linalg.fill {{.*}} -> tensor<1x6x6x16xf32>
// CHECK: linalg.pooling_nhwc_max {{.*}}mlc.name = "max_pool2d"{{.*}}strides = dense<2>{{.*}} ins(%{{.*}}, %{{.*}} : tensor<1x14x14x16xf32>, tensor<3x3xf32>) outs(%{{.*}} : tensor<1x6x6x16xf32>)
// CHECK-NOT: linalg.pooling_nchw_max
// CHECK: linalg.transpose ins(%{{.*}} : tensor<1x6x6x16xf32>) {{.*}} permutation = [0, 3, 1, 2]
// CHECK-NEXT: return
func.func @max_pool(%arg0: tensor<1x16x12x12xf32>) -> tensor<1x16x6x6xf32> {
  %cst = arith.constant 0xFF800000 : f32
  %padded = tensor.pad %arg0 low[0, 0, 1, 1] high[0, 0, 1, 1] {
  ^bb0(%i0: index, %i1: index, %i2: index, %i3: index):
    tensor.yield %cst : f32
  } {mlc.name = "max_pool2d.pad"} : tensor<1x16x12x12xf32> to tensor<1x16x14x14xf32>
  %0 = tensor.empty() : tensor<1x16x6x6xf32>
  %1 = linalg.fill {mlc.name = "max_pool2d.init"} ins(%cst : f32) outs(%0 : tensor<1x16x6x6xf32>) -> tensor<1x16x6x6xf32>
  %2 = tensor.empty() : tensor<3x3xf32>
  %3 = linalg.pooling_nchw_max {dilations = dense<1> : tensor<2xi64>, mlc.name = "max_pool2d", strides = dense<2> : tensor<2xi64>} ins(%padded, %2 : tensor<1x16x14x14xf32>, tensor<3x3xf32>) outs(%1 : tensor<1x16x6x6xf32>) -> tensor<1x16x6x6xf32>
  return %3 : tensor<1x16x6x6xf32>
}

// an unpadded sum pooling (avg_pool2d's window sum)
// CHECK-LABEL: func.func @sum_pool(
// CHECK: linalg.transpose ins(%arg0 : tensor<1x16x12x12xf32>) {{.*}} permutation = [0, 2, 3, 1]
// CHECK: linalg.pooling_nhwc_sum {{.*}} ins(%{{.*}}, %{{.*}} : tensor<1x12x12x16xf32>, tensor<2x2xf32>) outs(%{{.*}} : tensor<1x6x6x16xf32>)
// CHECK-NOT: linalg.pooling_nchw_sum
// CHECK: linalg.transpose ins(%{{.*}} : tensor<1x6x6x16xf32>) {{.*}} permutation = [0, 3, 1, 2]
func.func @sum_pool(%arg0: tensor<1x16x12x12xf32>) -> tensor<1x16x6x6xf32> {
  %cst = arith.constant 0.000000e+00 : f32
  %0 = tensor.empty() : tensor<1x16x6x6xf32>
  %1 = linalg.fill {mlc.name = "avg_pool2d.init"} ins(%cst : f32) outs(%0 : tensor<1x16x6x6xf32>) -> tensor<1x16x6x6xf32>
  %2 = tensor.empty() : tensor<2x2xf32>
  %3 = linalg.pooling_nchw_sum {dilations = dense<1> : tensor<2xi64>, mlc.name = "avg_pool2d.sum", strides = dense<2> : tensor<2xi64>} ins(%arg0, %2 : tensor<1x16x12x12xf32>, tensor<2x2xf32>) outs(%1 : tensor<1x16x6x6xf32>) -> tensor<1x16x6x6xf32>
  return %3 : tensor<1x16x6x6xf32>
}

// the pooling accumulates into %acc (no fill): not rewritten
// CHECK-LABEL: func.func @accumulating(
// CHECK-NOT: linalg.transpose
// CHECK: linalg.pooling_nchw_max {{.*}} outs(%arg1 : tensor<1x16x6x6xf32>)
// CHECK-NOT: linalg.pooling_nhwc_max
func.func @accumulating(%arg0: tensor<1x16x12x12xf32>, %acc: tensor<1x16x6x6xf32>) -> tensor<1x16x6x6xf32> {
  %2 = tensor.empty() : tensor<2x2xf32>
  %3 = linalg.pooling_nchw_max {dilations = dense<1> : tensor<2xi64>, mlc.name = "acc", strides = dense<2> : tensor<2xi64>} ins(%arg0, %2 : tensor<1x16x12x12xf32>, tensor<2x2xf32>) outs(%acc : tensor<1x16x6x6xf32>) -> tensor<1x16x6x6xf32>
  return %3 : tensor<1x16x6x6xf32>
}
