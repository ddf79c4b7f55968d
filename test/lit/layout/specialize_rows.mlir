// SpecializeUnitRows: a matmul with a dynamic row count gets an M == 1 version (static, for the
// GEMV schedule) chosen at run time next to the dynamic one.
// RUN: %mlc-opt %s --mlc-specialize-unit-rows | FileCheck %s

// CHECK-LABEL: func.func private @main_mm_rows1(%arg0: tensor<1x64xf32>, %arg1: tensor<64x48xf32>) -> tensor<1x48xf32>
// CHECK: linalg.fill {mlc.name = "mm.init"} {{.*}} -> tensor<1x48xf32>
// CHECK: linalg.matmul {mlc.name = "mm"} {{.*}} -> tensor<1x48xf32>
// CHECK-LABEL: func.func private @main_mm_rows(%arg0: tensor<?x64xf32>, %arg1: tensor<64x48xf32>) -> tensor<?x48xf32>
// CHECK: linalg.matmul {mlc.name = "mm"} {{.*}} -> tensor<?x48xf32>
// CHECK-LABEL: func.func @main(
// CHECK-NOT: linalg.matmul
// CHECK: %[[ONE:.*]] = arith.cmpi eq, %{{.*}}, %c1 : index
// CHECK: scf.if %[[ONE]] -> (tensor<?x48xf32>)
// CHECK: tensor.cast %arg0 : tensor<?x64xf32> to tensor<1x64xf32>
// CHECK: func.call @main_mm_rows1(
// CHECK: } else {
// CHECK: func.call @main_mm_rows(%arg0, %arg1)
func.func @main(%x: tensor<?x64xf32>, %w: tensor<64x48xf32>) -> tensor<?x48xf32> {
  %z = arith.constant 0.0 : f32
  %c0 = arith.constant 0 : index
  %m = tensor.dim %x, %c0 : tensor<?x64xf32>
  %e = tensor.empty(%m) : tensor<?x48xf32>
  %f = linalg.fill {mlc.name = "mm.init"} ins(%z : f32) outs(%e : tensor<?x48xf32>) -> tensor<?x48xf32>
  %y = linalg.matmul {mlc.name = "mm"} ins(%x, %w : tensor<?x64xf32>, tensor<64x48xf32>) outs(%f : tensor<?x48xf32>) -> tensor<?x48xf32>
  return %y : tensor<?x48xf32>
}
