// MergeProjections: matmuls of one input (directly or through the same collapse_shape) with
// constant weights become one matmul over the weights concatenated along N, sliced after, with
// static or dynamic M (a prefill step symbolic in its rows: the slices take the row count from
// tensor.dim); a matmul of another input, and matmuls whose weights are not constants, stay.
// RUN: %mlc-opt %s --mlc-merge-projections | FileCheck %s
// RUN: %mlc-opt %s | FileCheck %s --check-prefix=NOPASS

// CHECK-LABEL: func.func @qkv
// CHECK: %[[W:[a-z_0-9]+]] = arith.constant {{.*}} : tensor<16x40xf32>
// CHECK: %[[Y:.*]] = linalg.matmul {mlc.name = "q"} ins(%{{.*}}, %[[W]] : tensor<4x16xf32>, tensor<16x40xf32>) outs(%{{.*}} : tensor<4x40xf32>)
// CHECK: tensor.extract_slice %[[Y]][0, 0] [4, 24] [1, 1] {mlc.name = "q.part0"}
// CHECK: tensor.extract_slice %[[Y]][0, 24] [4, 8] [1, 1] {mlc.name = "q.part1"}
// CHECK: tensor.extract_slice %[[Y]][0, 32] [4, 8] [1, 1] {mlc.name = "q.part2"}
// CHECK: linalg.matmul {mlc.name = "other"} ins(%arg1, %{{.*}} : tensor<4x16xf32>, tensor<16x8xf32>)
// CHECK-NOT: linalg.matmul
// CHECK-LABEL: func.func @dynamic
// CHECK: %[[WD:[a-z_0-9]+]] = arith.constant {{.*}} : tensor<16x16xf32>
// CHECK: %[[M:.*]] = tensor.dim %arg0, %{{.*}} : tensor<?x16xf32>
// CHECK: %[[E:.*]] = tensor.empty(%[[M]]) : tensor<?x16xf32>
// CHECK: %[[F:.*]] = linalg.fill {mlc.name = "d0.init"} {{.*}} outs(%[[E]] : tensor<?x16xf32>)
// CHECK: %[[YD:.*]] = linalg.matmul {mlc.name = "d0"} ins(%arg0, %[[WD]] : tensor<?x16xf32>, tensor<16x16xf32>) outs(%[[F]] : tensor<?x16xf32>)
// CHECK: tensor.extract_slice %[[YD]][0, 0] [%[[M]], 8] [1, 1] {mlc.name = "d0.part0"} : tensor<?x16xf32> to tensor<?x8xf32>
// CHECK: tensor.extract_slice %[[YD]][0, 8] [%[[M]], 8] [1, 1] {mlc.name = "d0.part1"} : tensor<?x16xf32> to tensor<?x8xf32>
// CHECK-NOT: linalg.matmul
// CHECK-LABEL: func.func @weights_not_constant
// CHECK: linalg.matmul {mlc.name = "n0"} ins(%arg0, %arg1
// CHECK: linalg.matmul {mlc.name = "n1"} ins(%arg0, %arg2
// CHECK-NOT: extract_slice

// NOPASS-LABEL: func.func @qkv
// NOPASS-COUNT-4: linalg.matmul
// NOPASS-NOT: extract_slice
func.func @qkv(%a: tensor<4x16xf32>, %b: tensor<4x16xf32>) -> (tensor<4x24xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) {
  %wq = arith.constant dense<0.5> : tensor<16x24xf32>
  %wk = arith.constant dense<0.25> : tensor<16x8xf32>
  %wv = arith.constant dense<0.125> : tensor<16x8xf32>
  %z = arith.constant 0.0 : f32
  %e0 = tensor.empty() : tensor<4x24xf32>
  %f0 = linalg.fill {mlc.name = "q.init"} ins(%z : f32) outs(%e0 : tensor<4x24xf32>) -> tensor<4x24xf32>
  %q = linalg.matmul {mlc.name = "q"} ins(%a, %wq : tensor<4x16xf32>, tensor<16x24xf32>) outs(%f0 : tensor<4x24xf32>) -> tensor<4x24xf32>
  %e1 = tensor.empty() : tensor<4x8xf32>
  %f1 = linalg.fill {mlc.name = "k.init"} ins(%z : f32) outs(%e1 : tensor<4x8xf32>) -> tensor<4x8xf32>
  %k = linalg.matmul {mlc.name = "k"} ins(%a, %wk : tensor<4x16xf32>, tensor<16x8xf32>) outs(%f1 : tensor<4x8xf32>) -> tensor<4x8xf32>
  %e2 = tensor.empty() : tensor<4x8xf32>
  %f2 = linalg.fill {mlc.name = "v.init"} ins(%z : f32) outs(%e2 : tensor<4x8xf32>) -> tensor<4x8xf32>
  %v = linalg.matmul {mlc.name = "v"} ins(%a, %wv : tensor<4x16xf32>, tensor<16x8xf32>) outs(%f2 : tensor<4x8xf32>) -> tensor<4x8xf32>
  %e3 = tensor.empty() : tensor<4x8xf32>
  %f3 = linalg.fill {mlc.name = "other.init"} ins(%z : f32) outs(%e3 : tensor<4x8xf32>) -> tensor<4x8xf32>
  %o = linalg.matmul {mlc.name = "other"} ins(%b, %wk : tensor<4x16xf32>, tensor<16x8xf32>) outs(%f3 : tensor<4x8xf32>) -> tensor<4x8xf32>
  return %q, %k, %v, %o : tensor<4x24xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
}

func.func @dynamic(%a: tensor<?x16xf32>) -> (tensor<?x8xf32>, tensor<?x8xf32>) {
  %c0 = arith.constant 0 : index
  %m = tensor.dim %a, %c0 : tensor<?x16xf32>
  %wk = arith.constant dense<0.25> : tensor<16x8xf32>
  %wv = arith.constant dense<0.125> : tensor<16x8xf32>
  %z = arith.constant 0.0 : f32
  %e0 = tensor.empty(%m) : tensor<?x8xf32>
  %f0 = linalg.fill {mlc.name = "d0.init"} ins(%z : f32) outs(%e0 : tensor<?x8xf32>) -> tensor<?x8xf32>
  %d0 = linalg.matmul {mlc.name = "d0"} ins(%a, %wk : tensor<?x16xf32>, tensor<16x8xf32>) outs(%f0 : tensor<?x8xf32>) -> tensor<?x8xf32>
  %e1 = tensor.empty(%m) : tensor<?x8xf32>
  %f1 = linalg.fill {mlc.name = "d1.init"} ins(%z : f32) outs(%e1 : tensor<?x8xf32>) -> tensor<?x8xf32>
  %d1 = linalg.matmul {mlc.name = "d1"} ins(%a, %wv : tensor<?x16xf32>, tensor<16x8xf32>) outs(%f1 : tensor<?x8xf32>) -> tensor<?x8xf32>
  return %d0, %d1 : tensor<?x8xf32>, tensor<?x8xf32>
}

func.func @weights_not_constant(%a: tensor<?x16xf32>, %w0: tensor<16x8xf32>, %w1: tensor<16x8xf32>) -> (tensor<?x8xf32>, tensor<?x8xf32>) {
  %c0 = arith.constant 0 : index
  %m = tensor.dim %a, %c0 : tensor<?x16xf32>
  %z = arith.constant 0.0 : f32
  %e0 = tensor.empty(%m) : tensor<?x8xf32>
  %f0 = linalg.fill {mlc.name = "n0.init"} ins(%z : f32) outs(%e0 : tensor<?x8xf32>) -> tensor<?x8xf32>
  %n0 = linalg.matmul {mlc.name = "n0"} ins(%a, %w0 : tensor<?x16xf32>, tensor<16x8xf32>) outs(%f0 : tensor<?x8xf32>) -> tensor<?x8xf32>
  %e1 = tensor.empty(%m) : tensor<?x8xf32>
  %f1 = linalg.fill {mlc.name = "n1.init"} ins(%z : f32) outs(%e1 : tensor<?x8xf32>) -> tensor<?x8xf32>
  %n1 = linalg.matmul {mlc.name = "n1"} ins(%a, %w1 : tensor<?x16xf32>, tensor<16x8xf32>) outs(%f1 : tensor<?x8xf32>) -> tensor<?x8xf32>
  return %n0, %n1 : tensor<?x8xf32>, tensor<?x8xf32>
}
