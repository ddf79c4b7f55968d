// PropagateReshapes: the batch norm (per-channel scale), residual add and relu of an NHWC 1x1
// convolution packed as an mmt4d (M = 2 * 4 * 4 = 32 pixels, N = 32 = 2 panels of 16) run in
// the mmt4d's (32, 2, 1, 16) result shape: the scale vector is expanded to (2, 1, 16), the
// residual is reshaped (a view), the chain is reshaped back to NHWC once, at its end. A generic
// reading a transposed operand, or one not rooted at a contraction, keeps its shape.
// RUN: %mlc-opt %s --mlc-propagate-reshapes | FileCheck %s

// CHECK-DAG: #[[ID:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
// CHECK-DAG: #[[CH:.*]] = affine_map<(d0, d1, d2, d3) -> (d1, d2, d3)>
// CHECK-LABEL: func.func @main
// CHECK: %[[R:.*]] = linalg.mmt4d {mlc.name = "conv"}
// CHECK: %[[S:.*]] = tensor.expand_shape %arg2 {{\[\[}}0, 1, 2]] output_shape [2, 1, 16] {mlc.name = "bn.channels"} : tensor<32xf32> into tensor<2x1x16xf32>
// CHECK: %[[BN:.*]] = linalg.generic {indexing_maps = [#[[ID]], #[[CH]], #[[ID]]], {{.*}} ins(%[[R]], %[[S]] : tensor<32x2x1x16xf32>, tensor<2x1x16xf32>) {{.*}} attrs = {mlc.name = "bn"}
// CHECK: %[[RC:.*]] = tensor.collapse_shape %arg1 {{\[\[}}0, 1, 2], [3]] {mlc.name = "add.in_4d"} : tensor<2x4x4x32xf32> into tensor<32x32xf32>
// CHECK: %[[RE:.*]] = tensor.expand_shape %[[RC]] {{\[\[}}0], [1, 2, 3]] output_shape [32, 2, 1, 16] {mlc.name = "add.in_4d"}
// CHECK: %[[ADD:.*]] = linalg.generic {{.*}} ins(%[[BN]], %[[RE]] : tensor<32x2x1x16xf32>, tensor<32x2x1x16xf32>) {{.*}} attrs = {mlc.name = "add"}
// CHECK: %[[RELU:.*]] = linalg.generic {{.*}} ins(%[[ADD]] : tensor<32x2x1x16xf32>) {{.*}} attrs = {mlc.name = "relu"}
// CHECK: %[[C:.*]] = tensor.collapse_shape %[[RELU]] {{\[\[}}0], [1, 2, 3]] {mlc.name = "relu.out_4d"} : tensor<32x2x1x16xf32> into tensor<32x32xf32>
// CHECK: %[[OUT:.*]] = tensor.expand_shape %[[C]] {{\[\[}}0, 1, 2], [3]] output_shape [2, 4, 4, 32] {mlc.name = "relu.out_4d"}
// CHECK: linalg.generic {{.*}} ins(%[[OUT]] : tensor<2x4x4x32xf32>) {{.*}} attrs = {mlc.name = "transposed"}
// CHECK: return %[[OUT]]

// CHECK-LABEL: func.func @not_rooted
// CHECK: linalg.generic {{.*}} ins(%{{.*}} : tensor<2x4x4x32xf32>) {{.*}} attrs = {mlc.name = "relu2"}
#id4 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#ch4 = affine_map<(d0, d1, d2, d3) -> (d3)>
#tr4 = affine_map<(d0, d1, d2, d3) -> (d0, d2, d1, d3)>
func.func @main(%a: tensor<32x8x1x1xf32>, %res: tensor<2x4x4x32xf32>, %scale: tensor<32xf32>)
    -> (tensor<2x4x4x32xf32>, tensor<2x4x4x32xf32>) {
  %w = arith.constant dense<0.5> : tensor<2x8x16x1xf32>
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<32x2x1x16xf32>
  %f = linalg.fill {mlc.name = "conv.init"} ins(%z : f32) outs(%e : tensor<32x2x1x16xf32>) -> tensor<32x2x1x16xf32>
  %r = linalg.mmt4d {mlc.name = "conv"} ins(%a, %w : tensor<32x8x1x1xf32>, tensor<2x8x16x1xf32>) outs(%f : tensor<32x2x1x16xf32>) -> tensor<32x2x1x16xf32>
  %c = tensor.collapse_shape %r [[0], [1, 2, 3]] {mlc.name = "conv.2d"} : tensor<32x2x1x16xf32> into tensor<32x32xf32>
  %x = tensor.expand_shape %c [[0, 1, 2], [3]] output_shape [2, 4, 4, 32] {mlc.name = "conv.nhwc"} : tensor<32x32xf32> into tensor<2x4x4x32xf32>
  %e1 = tensor.empty() : tensor<2x4x4x32xf32>
  %bn = linalg.generic {indexing_maps = [#id4, #ch4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%x, %scale : tensor<2x4x4x32xf32>, tensor<32xf32>) outs(%e1 : tensor<2x4x4x32xf32>) attrs = {mlc.name = "bn"} {
  ^bb0(%v: f32, %s: f32, %o: f32):
    %m = arith.mulf %v, %s : f32
    linalg.yield %m : f32
  } -> tensor<2x4x4x32xf32>
  %add = linalg.generic {indexing_maps = [#id4, #id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%bn, %res : tensor<2x4x4x32xf32>, tensor<2x4x4x32xf32>) outs(%e1 : tensor<2x4x4x32xf32>) attrs = {mlc.name = "add"} {
  ^bb0(%v: f32, %u: f32, %o: f32):
    %s = arith.addf %v, %u : f32
    linalg.yield %s : f32
  } -> tensor<2x4x4x32xf32>
  %relu = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%add : tensor<2x4x4x32xf32>) outs(%e1 : tensor<2x4x4x32xf32>) attrs = {mlc.name = "relu"} {
  ^bb0(%v: f32, %o: f32):
    %m = arith.maximumf %v, %z : f32
    linalg.yield %m : f32
  } -> tensor<2x4x4x32xf32>
  %t = linalg.generic {indexing_maps = [#tr4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%relu : tensor<2x4x4x32xf32>) outs(%e1 : tensor<2x4x4x32xf32>) attrs = {mlc.name = "transposed"} {
  ^bb0(%v: f32, %o: f32):
    linalg.yield %v : f32
  } -> tensor<2x4x4x32xf32>
  return %relu, %t : tensor<2x4x4x32xf32>, tensor<2x4x4x32xf32>
}

func.func @not_rooted(%a: tensor<32x32xf32>) -> tensor<2x4x4x32xf32> {
  %z = arith.constant 0.0 : f32
  %x = tensor.expand_shape %a [[0, 1, 2], [3]] output_shape [2, 4, 4, 32] : tensor<32x32xf32> into tensor<2x4x4x32xf32>
  %e1 = tensor.empty() : tensor<2x4x4x32xf32>
  %relu = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%x : tensor<2x4x4x32xf32>) outs(%e1 : tensor<2x4x4x32xf32>) attrs = {mlc.name = "relu2"} {
  ^bb0(%v: f32, %o: f32):
    %m = arith.maximumf %v, %z : f32
    linalg.yield %m : f32
  } -> tensor<2x4x4x32xf32>
  return %relu : tensor<2x4x4x32xf32>
}
