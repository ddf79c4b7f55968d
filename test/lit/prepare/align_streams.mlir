// `mlc-align-streamed-reductions`: a vectorized reduction loop that streams a row of a function
// argument gets a head step masked to the elements before the next vector-aligned address
// (read at run time from the argument's buffer), a main loop one step shorter whose loads
// start that many elements on, and a masked tail step for the rest. Loops of fewer than 16
// steps, and loops over rows that are no function argument, are left alone. The alignment is
// the host's vector width (the pass's default): no CHECK line depends on it.
// RUN: %mlc-opt %s --mlc-align-streamed-reductions | FileCheck %s

// a row sum of 1024 floats in 64 steps of 16
// CHECK-LABEL: func.func @row_sum(
// CHECK-SAME: %[[X:[a-z0-9]+]]: tensor<1x1024xf32>
// the elements before the next aligned address of the row: p = ((B - a % B) % B) / 4, with
// a = the buffer's address + the row's offset
// CHECK: %[[BUF:.*]] = bufferization.to_buffer %[[X]] read_only
// CHECK: %[[ADDR:.*]] = memref.extract_aligned_pointer_as_index %[[BUF]]
// CHECK: %[[ROW:.*]] = arith.addi %[[ADDR]], %{{.*}} : index
// CHECK: arith.remui %[[ROW]]
// CHECK: %[[P:.*]] = arith.divui
// the head step: the first p lanes, the accumulator updated in those lanes only
// CHECK: %[[HRM:.*]] = vector.create_mask %{{.*}}, %[[P]] : vector<1x16xi1>
// CHECK: %[[HR:.*]] = vector.transfer_read %[[X]][%{{.*}}, %{{.*}}], %{{.*}}, %[[HRM]] {in_bounds = [true, false]}
// CHECK: %[[HV:.*]] = vector.shape_cast %[[HR]]
// CHECK: %[[HS:.*]] = arith.addf %{{.*}}, %[[HV]] : vector<16xf32>
// CHECK: %[[HM:.*]] = vector.create_mask %[[P]] : vector<16xi1>
// CHECK: %[[HA:.*]] = arith.select %[[HM]], %[[HS]], %{{.*}} : vector<16xi1>, vector<16xf32>
// the main loop: 63 steps, each read p elements on
// CHECK: %[[C1008:.*]] = arith.constant 1008 : index
// CHECK: %[[L:.*]] = scf.for %[[K:[a-z0-9]+]] = %{{.*}} to %[[C1008]] step %{{.*}} iter_args(%{{.*}} = %[[HA]])
// CHECK: %[[OFF:.*]] = arith.addi %[[K]], %[[P]] : index
// CHECK: vector.transfer_read %[[X]][%{{.*}}, %[[OFF]]], %{{.*}} {in_bounds = [true, true]}
// CHECK: scf.yield
// the tail step: the last 16 - p elements, from 1008 + p
// CHECK: %[[TOFF:.*]] = arith.addi %{{.*}}, %[[P]] : index
// CHECK: %[[TN:.*]] = arith.subi %{{.*}}, %[[P]] : index
// CHECK: %[[TRM:.*]] = vector.create_mask %{{.*}}, %[[TN]] : vector<1x16xi1>
// CHECK: vector.transfer_read %[[X]][%{{.*}}, %[[TOFF]]], %{{.*}}, %[[TRM]] {in_bounds = [true, false]}
// CHECK: %[[TS:.*]] = arith.addf %[[L]], %{{.*}} : vector<16xf32>
// CHECK: %[[TM:.*]] = vector.create_mask %[[TN]] : vector<16xi1>
// CHECK: %[[T:.*]] = arith.select %[[TM]], %[[TS]], %[[L]]
// CHECK: return %[[T]]
func.func @row_sum(%x: tensor<1x1024xf32>) -> vector<16xf32> {
  %c0 = arith.constant 0 : index
  %c16 = arith.constant 16 : index
  %c1024 = arith.constant 1024 : index
  %pad = arith.constant 0.0 : f32
  %zero = arith.constant dense<0.0> : vector<16xf32>
  %s = scf.for %k = %c0 to %c1024 step %c16 iter_args(%acc = %zero) -> (vector<16xf32>) {
    %r = vector.transfer_read %x[%c0, %k], %pad {in_bounds = [true]} : tensor<1x1024xf32>, vector<16xf32>
    %a = arith.addf %acc, %r : vector<16xf32>
    scf.yield %a : vector<16xf32>
  }
  return %s : vector<16xf32>
}

// 8 steps: the masked head and tail would cost a quarter more
// CHECK-LABEL: func.func @short_row(
// CHECK-NOT: vector.create_mask
// CHECK: scf.for {{.*}} to %c128
// CHECK-NOT: vector.create_mask
// CHECK: return
func.func @short_row(%x: tensor<1x128xf32>) -> vector<16xf32> {
  %c0 = arith.constant 0 : index
  %c16 = arith.constant 16 : index
  %c128 = arith.constant 128 : index
  %pad = arith.constant 0.0 : f32
  %zero = arith.constant dense<0.0> : vector<16xf32>
  %s = scf.for %k = %c0 to %c128 step %c16 iter_args(%acc = %zero) -> (vector<16xf32>) {
    %r = vector.transfer_read %x[%c0, %k], %pad {in_bounds = [true]} : tensor<1x128xf32>, vector<16xf32>
    %a = arith.addf %acc, %r : vector<16xf32>
    scf.yield %a : vector<16xf32>
  }
  return %s : vector<16xf32>
}

// the row is computed in the function (its alignment is the allocator's, not the caller's)
// CHECK-LABEL: func.func @not_an_argument(
// CHECK-NOT: vector.create_mask
// CHECK: scf.for {{.*}} to %c1024
// CHECK-NOT: vector.create_mask
// CHECK: return
func.func @not_an_argument(%v: f32) -> vector<16xf32> {
  %c0 = arith.constant 0 : index
  %c16 = arith.constant 16 : index
  %c1024 = arith.constant 1024 : index
  %pad = arith.constant 0.0 : f32
  %zero = arith.constant dense<0.0> : vector<16xf32>
  %e = tensor.empty() : tensor<1x1024xf32>
  %x = linalg.fill ins(%v : f32) outs(%e : tensor<1x1024xf32>) -> tensor<1x1024xf32>
  %s = scf.for %k = %c0 to %c1024 step %c16 iter_args(%acc = %zero) -> (vector<16xf32>) {
    %r = vector.transfer_read %x[%c0, %k], %pad {in_bounds = [true]} : tensor<1x1024xf32>, vector<16xf32>
    %a = arith.addf %acc, %r : vector<16xf32>
    scf.yield %a : vector<16xf32>
  }
  return %s : vector<16xf32>
}
