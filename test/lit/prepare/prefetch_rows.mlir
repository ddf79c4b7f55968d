// `mlc-prefetch-rows`: in a loop annotated mlc.prefetch_rows = D, each full-tile read of a 2-d
// tensor at [%k, %j] (%k the loop's induction variable, a row of the tile at least a cache
// line) is preceded by one memref.prefetch per cache line of each of its rows D rows ahead,
// clamped to the last row. Loops without the annotation, and reads of fewer columns than a
// cache line, get none.
// RUN: %mlc-opt %s --mlc-prefetch-rows | FileCheck %s

// a 2 x 32 float tile (two 64-byte lines per row), prefetched 8 rows ahead: rows %k + 8 and
// %k + 9, clamped to row 63, at columns %j and %j + 16
// CHECK-LABEL: func.func @annotated(
// CHECK-SAME: %[[B:[a-z0-9]+]]: tensor<64x64xf32>, %[[J:[a-z0-9]+]]: index
// CHECK: scf.for %[[K:[a-z0-9]+]] =
// CHECK: %[[BUF:.*]] = bufferization.to_buffer %[[B]] read_only : tensor<64x64xf32> to memref<64x64xf32>
// CHECK: %[[LAST:.*]] = arith.constant 63 : index
// CHECK: %[[D8:.*]] = arith.constant 8 : index
// CHECK: %[[S8:.*]] = arith.addi %[[K]], %[[D8]] : index
// CHECK: %[[R8:.*]] = arith.minui %[[S8]], %[[LAST]] : index
// CHECK: memref.prefetch %[[BUF]][%[[R8]], %[[J]]], read, locality<3>, data : memref<64x64xf32>
// CHECK: %[[J16:.*]] = arith.addi %[[J]], %{{.*}} : index
// CHECK: memref.prefetch %[[BUF]][%[[R8]], %[[J16]]], read, locality<3>, data
// CHECK: %[[D9:.*]] = arith.constant 9 : index
// CHECK: %[[S9:.*]] = arith.addi %[[K]], %[[D9]] : index
// CHECK: %[[R9:.*]] = arith.minui %[[S9]], %[[LAST]] : index
// CHECK: memref.prefetch %[[BUF]][%[[R9]], %[[J]]]
// CHECK: memref.prefetch %[[BUF]][%[[R9]], %{{.*}}]
// CHECK-NOT: memref.prefetch
// CHECK: vector.transfer_read %[[B]][%[[K]], %[[J]]]
// CHECK: {mlc.prefetch_rows = 8 : i64}
func.func @annotated(%b: tensor<64x64xf32>, %j: index, %acc: vector<32xf32>) -> vector<32xf32> {
  %c0 = arith.constant 0 : index
  %c2 = arith.constant 2 : index
  %c64 = arith.constant 64 : index
  %pad = arith.constant 0.0 : f32
  %r = scf.for %k = %c0 to %c64 step %c2 iter_args(%a = %acc) -> (vector<32xf32>) {
    %t = vector.transfer_read %b[%k, %j], %pad {in_bounds = [true, true]} : tensor<64x64xf32>, vector<2x32xf32>
    %s = vector.multi_reduction <add>, %t, %a [0] : vector<2x32xf32> to vector<32xf32>
    scf.yield %s : vector<32xf32>
  } {mlc.prefetch_rows = 8 : i64}
  return %r : vector<32xf32>
}

// the same loop without the annotation
// CHECK-LABEL: func.func @not_annotated(
// CHECK-NOT: memref.prefetch
// CHECK: vector.transfer_read
// CHECK-NOT: memref.prefetch
// CHECK: return
func.func @not_annotated(%b: tensor<64x64xf32>, %j: index, %acc: vector<16xf32>) -> vector<16xf32> {
  %c0 = arith.constant 0 : index
  %c4 = arith.constant 4 : index
  %c64 = arith.constant 64 : index
  %pad = arith.constant 0.0 : f32
  %r = scf.for %k = %c0 to %c64 step %c4 iter_args(%a = %acc) -> (vector<16xf32>) {
    %t = vector.transfer_read %b[%k, %j], %pad {in_bounds = [true, true]} : tensor<64x64xf32>, vector<4x16xf32>
    %s = vector.multi_reduction <add>, %t, %a [0] : vector<4x16xf32> to vector<16xf32>
    scf.yield %s : vector<16xf32>
  }
  return %r : vector<16xf32>
}

// annotated, but the tile's rows are 4 floats (a peeled edge column, under a cache line)
// CHECK-LABEL: func.func @narrow_tile(
// CHECK-NOT: memref.prefetch
// CHECK: vector.transfer_read
// CHECK-NOT: memref.prefetch
// CHECK: return
func.func @narrow_tile(%b: tensor<64x64xf32>, %j: index, %acc: vector<4xf32>) -> vector<4xf32> {
  %c0 = arith.constant 0 : index
  %c4 = arith.constant 4 : index
  %c64 = arith.constant 64 : index
  %pad = arith.constant 0.0 : f32
  %r = scf.for %k = %c0 to %c64 step %c4 iter_args(%a = %acc) -> (vector<4xf32>) {
    %t = vector.transfer_read %b[%k, %j], %pad {in_bounds = [true, true]} : tensor<64x64xf32>, vector<4x4xf32>
    %s = vector.multi_reduction <add>, %t, %a [0] : vector<4x4xf32> to vector<4xf32>
    scf.yield %s : vector<4xf32>
  } {mlc.prefetch_rows = 8 : i64}
  return %r : vector<4xf32>
}
