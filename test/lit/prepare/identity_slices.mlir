// Whole-tensor slices of dynamically shaped tiles (pipeline/prepare_passes/identity_slices.py).
// RUN: %mlc-opt %s --mlc-fold-identity-slices | FileCheck %s

// the slice of the whole partial tile is the tile; the reduction loop that carried both loses
// the iter_arg it yielded unchanged, and the insert of its result into the whole tile is the result
// CHECK-LABEL: func.func @partial_tile(
// CHECK: %[[S:.*]] = tensor.extract_slice %arg0[0, %arg1] [4, %arg2] [1, 1]
// CHECK-NOT: tensor.extract_slice %[[S]]
// CHECK: %[[R:.*]] = scf.for {{.*}} iter_args(%[[A:.*]] = %[[S]]) -> (tensor<4x?xf32>)
// CHECK: tensor.insert_slice %[[R]] into %arg0[0, %arg1] [4, %arg2] [1, 1]
func.func @partial_tile(%c: tensor<4x16xf32>, %j: index, %n: index) -> tensor<4x16xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c3 = arith.constant 3 : index
  %one = arith.constant 1.0 : f32
  %s = tensor.extract_slice %c[0, %j] [4, %n] [1, 1] : tensor<4x16xf32> to tensor<4x?xf32>
  %w = tensor.extract_slice %s[0, 0] [4, %n] [1, 1] : tensor<4x?xf32> to tensor<4x?xf32>
  %r:2 = scf.for %k = %c0 to %c3 step %c1 iter_args(%a = %s, %b = %w) -> (tensor<4x?xf32>, tensor<4x?xf32>) {
    %x = linalg.fill ins(%one : f32) outs(%b : tensor<4x?xf32>) -> tensor<4x?xf32>
    scf.yield %a, %x : tensor<4x?xf32>, tensor<4x?xf32>
  }
  %i = tensor.insert_slice %r#1 into %r#0[0, 0] [4, %n] [1, 1] : tensor<4x?xf32> into tensor<4x?xf32>
  %o = tensor.insert_slice %i into %c[0, %j] [4, %n] [1, 1] : tensor<4x?xf32> into tensor<4x16xf32>
  return %o : tensor<4x16xf32>
}

// a slice of part of the tile stays
// CHECK-LABEL: func.func @part(
// CHECK: tensor.extract_slice %{{.*}}[0, 0] [2, %arg2] [1, 1]
func.func @part(%c: tensor<4x16xf32>, %j: index, %n: index) -> tensor<2x?xf32> {
  %s = tensor.extract_slice %c[0, %j] [4, %n] [1, 1] : tensor<4x16xf32> to tensor<4x?xf32>
  %w = tensor.extract_slice %s[0, 0] [2, %n] [1, 1] : tensor<4x?xf32> to tensor<2x?xf32>
  return %w : tensor<2x?xf32>
}
