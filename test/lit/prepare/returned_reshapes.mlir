// `mlc-sink-returned-reshapes`: a private function that returns a static reshape of a value it
// computes returns the value, and each call reshapes its result (buffer-results-to-out-params
// then writes the value into the out-param instead of copying the reshape into it). Reshapes
// of arguments, dynamic reshapes and public functions are left alone.
// RUN: %mlc-opt %s --mlc-sink-returned-reshapes | FileCheck %s

// CHECK-LABEL: func.func private @unit(
// CHECK-SAME: -> tensor<4x4x8xf32>
// CHECK: %[[T:.*]] = linalg.generic
// CHECK-NOT: tensor.collapse_shape
// CHECK: return %[[T]] : tensor<4x4x8xf32>
func.func private @unit(%a: tensor<4x4x8xf32>) -> tensor<16x8xf32> {
  %e = tensor.empty() : tensor<4x4x8xf32>
  %t = linalg.generic {indexing_maps = [affine_map<(i, j, k) -> (i, j, k)>, affine_map<(i, j, k) -> (i, j, k)>],
                       iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%a : tensor<4x4x8xf32>) outs(%e : tensor<4x4x8xf32>) {
  ^bb0(%x: f32, %o: f32):
    %y = arith.addf %x, %x : f32
    linalg.yield %y : f32
  } -> tensor<4x4x8xf32>
  %r = tensor.collapse_shape %t [[0, 1], [2]] : tensor<4x4x8xf32> into tensor<16x8xf32>
  return %r : tensor<16x8xf32>
}

// an expand_shape, the value also used before the reshape: both results keep theirs
// CHECK-LABEL: func.func private @two(
// CHECK-SAME: -> (tensor<16x8xf32>, tensor<16x8xf32>)
// CHECK: %[[S:.*]] = arith.addf
// CHECK: return %[[S]], %[[S]] : tensor<16x8xf32>, tensor<16x8xf32>
func.func private @two(%a: tensor<16x8xf32>) -> (tensor<16x8xf32>, tensor<2x8x8xf32>) {
  %s = arith.addf %a, %a : tensor<16x8xf32>
  %r = tensor.expand_shape %s [[0, 1], [2]] output_shape [2, 8, 8] : tensor<16x8xf32> into tensor<2x8x8xf32>
  return %s, %r : tensor<16x8xf32>, tensor<2x8x8xf32>
}

// a reshaped argument is not moved (it is copied into the out-param either way)
// CHECK-LABEL: func.func private @arg(
// CHECK-SAME: -> tensor<16x8xf32>
// CHECK: tensor.collapse_shape
func.func private @arg(%a: tensor<4x4x8xf32>) -> tensor<16x8xf32> {
  %r = tensor.collapse_shape %a [[0, 1], [2]] : tensor<4x4x8xf32> into tensor<16x8xf32>
  return %r : tensor<16x8xf32>
}

// a public function keeps its signature
// CHECK-LABEL: func.func @main(
// CHECK-SAME: -> (tensor<16x8xf32>, tensor<2x8x8xf32>, tensor<16x8xf32>, tensor<16x8xf32>)
// CHECK: %[[U:.*]] = call @unit(%{{.*}}) : (tensor<4x4x8xf32>) -> tensor<4x4x8xf32>
// CHECK: %[[UR:.*]] = tensor.collapse_shape %[[U]] {{\[}}[0, 1], [2]] : tensor<4x4x8xf32> into tensor<16x8xf32>
// CHECK: %[[W:.*]]:2 = call @two(%[[UR]]) : (tensor<16x8xf32>) -> (tensor<16x8xf32>, tensor<16x8xf32>)
// CHECK: %[[WR:.*]] = tensor.expand_shape %[[W]]#1 {{\[}}[0, 1], [2]] output_shape [2, 8, 8] : tensor<16x8xf32> into tensor<2x8x8xf32>
// CHECK: %[[U2:.*]] = call @unit(%{{.*}}) : (tensor<4x4x8xf32>) -> tensor<4x4x8xf32>
// CHECK: %[[U2R:.*]] = tensor.collapse_shape %[[U2]]
// CHECK: %[[A:.*]] = call @arg(%{{.*}}) : (tensor<4x4x8xf32>) -> tensor<16x8xf32>
// CHECK: %[[R:.*]] = tensor.collapse_shape
// CHECK: return %[[W]]#0, %[[WR]], %[[U2R]], %[[R]]
func.func @main(%a: tensor<4x4x8xf32>) -> (tensor<16x8xf32>, tensor<2x8x8xf32>, tensor<16x8xf32>, tensor<16x8xf32>) {
  %u = call @unit(%a) : (tensor<4x4x8xf32>) -> tensor<16x8xf32>
  %w:2 = call @two(%u) : (tensor<16x8xf32>) -> (tensor<16x8xf32>, tensor<2x8x8xf32>)
  %u2 = call @unit(%a) : (tensor<4x4x8xf32>) -> tensor<16x8xf32>
  %x = call @arg(%a) : (tensor<4x4x8xf32>) -> tensor<16x8xf32>
  %r = tensor.collapse_shape %a [[0, 1], [2]] : tensor<4x4x8xf32> into tensor<16x8xf32>
  return %w#0, %w#1, %u2, %r : tensor<16x8xf32>, tensor<2x8x8xf32>, tensor<16x8xf32>, tensor<16x8xf32>
}
