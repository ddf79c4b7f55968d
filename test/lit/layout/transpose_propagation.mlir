// PropagateTransposes: the NCHW round trip between two NHWC convolutions cancels; the bias+relu
// between them runs in NHWC with its per-channel bias map renumbered to the last dim.
// RUN: %mlc-opt %s --mlc-propagate-transposes | FileCheck %s

// CHECK: #[[MAP:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
// CHECK: #[[BIAS:.*]] = affine_map<(d0, d1, d2, d3) -> (d3)>
// CHECK-NOT: linalg.transpose
// CHECK: linalg.generic {indexing_maps = [#[[MAP]], #[[BIAS]], #[[MAP]]]{{.*}} ins(%arg0, %arg1 : tensor<1x8x8x16xf32>, tensor<16xf32>) outs(%{{.*}} : tensor<1x8x8x16xf32>)
// CHECK-NOT: linalg.transpose
// CHECK: return
#id = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#ch = affine_map<(d0, d1, d2, d3) -> (d1)>
func.func @main(%y: tensor<1x8x8x16xf32>, %b: tensor<16xf32>) -> tensor<1x8x8x16xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<1x16x8x8xf32>
  %t = linalg.transpose {mlc.name = "conv.to_nchw"} ins(%y : tensor<1x8x8x16xf32>) outs(%e : tensor<1x16x8x8xf32>) permutation = [0, 3, 1, 2]
  %e1 = tensor.empty() : tensor<1x16x8x8xf32>
  %r = linalg.generic {indexing_maps = [#id, #ch, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%t, %b : tensor<1x16x8x8xf32>, tensor<16xf32>) outs(%e1 : tensor<1x16x8x8xf32>) attrs = {mlc.name = "bias_relu"} {
  ^bb0(%a: f32, %bb: f32, %o: f32):
    %s = arith.addf %a, %bb : f32
    %m = arith.maximumf %s, %z : f32
    linalg.yield %m : f32
  } -> tensor<1x16x8x8xf32>
  %e2 = tensor.empty() : tensor<1x8x8x16xf32>
  %back = linalg.transpose {mlc.name = "conv2.x_nhwc"} ins(%r : tensor<1x16x8x8xf32>) outs(%e2 : tensor<1x8x8x16xf32>) permutation = [0, 2, 3, 1]
  return %back : tensor<1x8x8x16xf32>
}
