// Copies into and out of a padded edge tile (pipeline/prepare_passes/edge_copies.py).
// RUN: %mlc-opt %s --mlc-copy-edge-tiles | FileCheck %s

// the edge tile is padded by a fill of its padding only (columns 5..8) and a generic copy of
// its interior, and copied back by a generic instead of materialize_in_destination
// CHECK-LABEL: func.func @edge_tile(
// CHECK-NOT: tensor.pad
// CHECK: %[[E:.*]] = tensor.empty() : tensor<4x8xf32>
// CHECK: %[[S:.*]] = tensor.extract_slice %[[E]][0, 5] [4, 3] [1, 1]
// CHECK: %[[P:.*]] = linalg.fill {{.*}} outs(%[[S]] : tensor<4x3xf32>)
// CHECK: %[[F:.*]] = tensor.insert_slice %[[P]] into %[[E]][0, 5] [4, 3] [1, 1]
// CHECK: %[[I:.*]] = tensor.extract_slice %[[F]][0, 0] [4, 5] [1, 1]
// CHECK: %[[C:.*]] = linalg.generic {{.*}} ins(%{{.*}} : tensor<4x5xf32>) outs(%[[I]] : tensor<4x5xf32>) attrs = {mlc.name = "pad.copy"}
// CHECK: tensor.insert_slice %[[C]] into %[[F]][0, 0] [4, 5] [1, 1]
// CHECK-NOT: bufferization.materialize_in_destination
// CHECK: linalg.generic {{.*}} attrs = {mlc.name = "edge_tile.copy"}
func.func @edge_tile(%c: tensor<4x5xf32>, %h: index) -> tensor<4x5xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %z = arith.constant 0.0 : f32
  %r = scf.for %k = %c0 to %c1 step %c1 iter_args(%t = %c) -> (tensor<4x5xf32>) {
    %p = tensor.pad %t low[0, 0] high[0, %h] {
    ^bb0(%i: index, %j: index):
      tensor.yield %z : f32
    } : tensor<4x5xf32> to tensor<4x8xf32>
    %s = tensor.extract_slice %p[0, 0] [4, 5] [1, 1] : tensor<4x8xf32> to tensor<4x5xf32>
    %m = bufferization.materialize_in_destination %s in %t : (tensor<4x5xf32>, tensor<4x5xf32>) -> tensor<4x5xf32>
    scf.yield %m : tensor<4x5xf32>
  }
  return %r : tensor<4x5xf32>
}

// a source with a dynamic row count padded to 16 rows: only the rows past it are filled
// CHECK-LABEL: func.func @dynamic_rows(
// CHECK: affine.apply
// CHECK: %[[N:.*]] = tensor.dim %arg0, %{{.*}} : tensor<?x9xf32>
// CHECK: %[[E:.*]] = tensor.empty() : tensor<16x9xf32>
// CHECK: %[[R:.*]] = arith.subi %{{.*}}, %[[N]] : index
// CHECK: %[[S:.*]] = tensor.extract_slice %[[E]][%[[N]], 0] [%[[R]], 9] [1, 1]
// CHECK: linalg.fill {{.*}} outs(%[[S]] : tensor<?x9xf32>)
// CHECK: tensor.extract_slice %{{.*}}[0, 0] [%[[N]], 9] [1, 1]
// CHECK: linalg.generic {{.*}} ins(%arg0 : tensor<?x9xf32>) {{.*}} attrs = {mlc.name = "pad.copy"}
func.func @dynamic_rows(%b: tensor<?x9xf32>) -> tensor<16x9xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<16x9xf32>
  %r = scf.for %k = %c0 to %c1 step %c1 iter_args(%t = %e) -> (tensor<16x9xf32>) {
    %n = tensor.dim %b, %c0 : tensor<?x9xf32>
    %rows = affine.apply affine_map<()[s0] -> (16 - s0)>()[%n]
    %p = tensor.pad %b low[0, 0] high[%rows, 0] {
    ^bb0(%i: index, %j: index):
      tensor.yield %z : f32
    } : tensor<?x9xf32> to tensor<16x9xf32>
    scf.yield %p : tensor<16x9xf32>
  }
  return %r : tensor<16x9xf32>
}
