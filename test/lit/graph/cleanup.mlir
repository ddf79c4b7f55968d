// Zero-size folding, CSE and unused-function removal.
// RUN: %mlc-opt %s --mlc-fold-zero-size | FileCheck %s --check-prefix=ZERO
// RUN: %mlc-opt %s --mlc-cse | FileCheck %s --check-prefix=CSE
// RUN: %mlc-opt %s --mlc-remove-unused-functions | FileCheck %s --check-prefix=UNUSED

// a K = 0 matmul is its zero init; a relu of a 0x4 tensor an empty tensor
// ZERO-LABEL: func.func @main(
// ZERO-NOT: linalg.matmul
// ZERO-NOT: linalg.generic
// ZERO: %[[INIT:.*]] = linalg.fill {mlc.name = "mm.init"}
// ZERO: %[[EMPTY:.*]] = tensor.empty() : tensor<0x4xf32>
// ZERO: return %[[INIT]], %{{.*}}, %[[EMPTY]]

// the two identical fills are one
// CSE-LABEL: func.func @main(
// CSE: %[[F:.*]] = linalg.fill
// CSE-NOT: linalg.fill
// CSE: linalg.matmul {{.*}} outs(%[[F]] : tensor<3x4xf32>)
// CSE: call @helper(%[[F]])

// @unused is public but not reached from @main; @helper is called
// UNUSED-NOT: @unused
// UNUSED: func.func private @helper(
// UNUSED: func.func @main(
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @unused(%x: tensor<3x4xf32>) -> tensor<3x4xf32> {
  return %x : tensor<3x4xf32>
}
func.func private @helper(%x: tensor<3x4xf32>) -> tensor<3x4xf32> {
  return %x : tensor<3x4xf32>
}
func.func @main(%a: tensor<3x0xf32>, %b: tensor<0x4xf32>, %x: tensor<0x4xf32>) -> (tensor<3x4xf32>, tensor<3x4xf32>, tensor<0x4xf32>) {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<3x4xf32>
  %f = linalg.fill {mlc.name = "mm.init"} ins(%z : f32) outs(%e : tensor<3x4xf32>) -> tensor<3x4xf32>
  %mm = linalg.matmul {mlc.name = "mm"} ins(%a, %b : tensor<3x0xf32>, tensor<0x4xf32>) outs(%f : tensor<3x4xf32>) -> tensor<3x4xf32>
  %e1 = tensor.empty() : tensor<3x4xf32>
  %f1 = linalg.fill {mlc.name = "mm.init"} ins(%z : f32) outs(%e1 : tensor<3x4xf32>) -> tensor<3x4xf32>
  %h = func.call @helper(%f1) : (tensor<3x4xf32>) -> tensor<3x4xf32>
  %e2 = tensor.empty() : tensor<0x4xf32>
  %r = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%x : tensor<0x4xf32>) outs(%e2 : tensor<0x4xf32>) attrs = {mlc.name = "relu"} {
  ^bb0(%v: f32, %o: f32):
    %m = arith.maximumf %v, %z : f32
    linalg.yield %m : f32
  } -> tensor<0x4xf32>
  return %mm, %h, %r : tensor<3x4xf32>, tensor<3x4xf32>, tensor<0x4xf32>
}
