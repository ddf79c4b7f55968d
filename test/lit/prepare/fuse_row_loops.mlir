// `mlc-fuse-row-loops`: a reduction loop that reads back, step by step, the row the preceding
// loop of the same bounds just wrote is merged into that loop, the values forwarded from the
// write (softmax's exp loop then also accumulates the row sum). Loops of other steps, or a
// row read between the two loops, are left alone.
// RUN: %mlc-opt %s --mlc-fuse-row-loops | FileCheck %s

// CHECK-LABEL: func.func @exp_then_sum(
// CHECK-SAME: %[[X:[a-z0-9]+]]: tensor<1x64xf32>, %[[BUF:[a-z0-9]+]]: tensor<1x64xf32>
// one loop, carrying the row buffer and the sum
// CHECK: %[[R:.*]]:2 = scf.for %[[K:[a-z0-9]+]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%[[B:.*]] = %[[BUF]], %[[ACC:.*]] = %{{.*}}) -> (tensor<1x64xf32>, vector<16xf32>)
// CHECK: %[[V:.*]] = vector.transfer_read %[[X]][%{{.*}}, %[[K]]]
// CHECK: %[[E:.*]] = math.exp %[[V]] : vector<16xf32>
// CHECK: %[[W:.*]] = vector.transfer_write %[[E]], %[[B]][%{{.*}}, %[[K]]]
// the sum adds the exponentials themselves, not a read of the buffer
// CHECK-NOT: vector.transfer_read
// CHECK: %[[S:.*]] = arith.addf %[[ACC]], %[[E]] : vector<16xf32>
// CHECK: scf.yield %[[W]], %[[S]] : tensor<1x64xf32>, vector<16xf32>
// CHECK-NOT: scf.for
// CHECK: return %[[R]]#0, %[[R]]#1
func.func @exp_then_sum(%x: tensor<1x64xf32>, %buf: tensor<1x64xf32>) -> (tensor<1x64xf32>, vector<16xf32>) {
  %c0 = arith.constant 0 : index
  %c16 = arith.constant 16 : index
  %c64 = arith.constant 64 : index
  %pad = arith.constant 0.0 : f32
  %zero = arith.constant dense<0.0> : vector<16xf32>
  %e = scf.for %k = %c0 to %c64 step %c16 iter_args(%b = %buf) -> (tensor<1x64xf32>) {
    %v = vector.transfer_read %x[%c0, %k], %pad {in_bounds = [true]} : tensor<1x64xf32>, vector<16xf32>
    %ex = math.exp %v : vector<16xf32>
    %w = vector.transfer_write %ex, %b[%c0, %k] {in_bounds = [true]} : vector<16xf32>, tensor<1x64xf32>
    scf.yield %w : tensor<1x64xf32>
  }
  %s = scf.for %k = %c0 to %c64 step %c16 iter_args(%acc = %zero) -> (vector<16xf32>) {
    %r = vector.transfer_read %e[%c0, %k], %pad {in_bounds = [true]} : tensor<1x64xf32>, vector<16xf32>
    %a = arith.addf %acc, %r : vector<16xf32>
    scf.yield %a : vector<16xf32>
  }
  return %e, %s : tensor<1x64xf32>, vector<16xf32>
}

// the sum loop takes 32-element steps: two loops stay
// CHECK-LABEL: func.func @other_steps(
// CHECK: scf.for {{.*}} -> (tensor<1x64xf32>)
// CHECK: vector.transfer_write
// CHECK: scf.for {{.*}} -> (vector<32xf32>)
// CHECK: vector.transfer_read
func.func @other_steps(%x: tensor<1x64xf32>, %buf: tensor<1x64xf32>) -> (tensor<1x64xf32>, vector<32xf32>) {
  %c0 = arith.constant 0 : index
  %c16 = arith.constant 16 : index
  %c32 = arith.constant 32 : index
  %c64 = arith.constant 64 : index
  %pad = arith.constant 0.0 : f32
  %zero = arith.constant dense<0.0> : vector<32xf32>
  %e = scf.for %k = %c0 to %c64 step %c16 iter_args(%b = %buf) -> (tensor<1x64xf32>) {
    %v = vector.transfer_read %x[%c0, %k], %pad {in_bounds = [true]} : tensor<1x64xf32>, vector<16xf32>
    %ex = math.exp %v : vector<16xf32>
    %w = vector.transfer_write %ex, %b[%c0, %k] {in_bounds = [true]} : vector<16xf32>, tensor<1x64xf32>
    scf.yield %w : tensor<1x64xf32>
  }
  %s = scf.for %k = %c0 to %c64 step %c32 iter_args(%acc = %zero) -> (vector<32xf32>) {
    %r = vector.transfer_read %e[%c0, %k], %pad {in_bounds = [true]} : tensor<1x64xf32>, vector<32xf32>
    %a = arith.addf %acc, %r : vector<32xf32>
    scf.yield %a : vector<32xf32>
  }
  return %e, %s : tensor<1x64xf32>, vector<32xf32>
}

// the written row is read between the loops: merging would move that read's producer
// CHECK-LABEL: func.func @read_between(
// CHECK: scf.for {{.*}} -> (tensor<1x64xf32>)
// CHECK: tensor.extract
// CHECK: scf.for {{.*}} -> (vector<16xf32>)
func.func @read_between(%x: tensor<1x64xf32>, %buf: tensor<1x64xf32>) -> (f32, vector<16xf32>) {
  %c0 = arith.constant 0 : index
  %c16 = arith.constant 16 : index
  %c64 = arith.constant 64 : index
  %pad = arith.constant 0.0 : f32
  %zero = arith.constant dense<0.0> : vector<16xf32>
  %e = scf.for %k = %c0 to %c64 step %c16 iter_args(%b = %buf) -> (tensor<1x64xf32>) {
    %v = vector.transfer_read %x[%c0, %k], %pad {in_bounds = [true]} : tensor<1x64xf32>, vector<16xf32>
    %ex = math.exp %v : vector<16xf32>
    %w = vector.transfer_write %ex, %b[%c0, %k] {in_bounds = [true]} : vector<16xf32>, tensor<1x64xf32>
    scf.yield %w : tensor<1x64xf32>
  }
  %first = tensor.extract %e[%c0, %c0] : tensor<1x64xf32>
  %s = scf.for %k = %c0 to %c64 step %c16 iter_args(%acc = %zero) -> (vector<16xf32>) {
    %r = vector.transfer_read %e[%c0, %k], %pad {in_bounds = [true]} : tensor<1x64xf32>, vector<16xf32>
    %a = arith.addf %acc, %r : vector<16xf32>
    scf.yield %a : vector<16xf32>
  }
  return %first, %s : f32, vector<16xf32>
}
