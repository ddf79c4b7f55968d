// An exported schedule (Inputs/stochastic_mm.transform.mlir, written by
// Schedule.transform_script()) applied by upstream mlir-opt; the design space (knobs without a
// decision) is refused with the interpreter's diagnostic.
// RUN: mlir-opt %s --transform-preload-library=transform-library-paths=%S/Inputs/stochastic_mm.transform.mlir --transform-interpreter | FileCheck %s
// RUN: not mlir-opt %s --transform-preload-library=transform-library-paths=%S/Inputs/stochastic_mm.space.transform.mlir --transform-interpreter 2>&1 | FileCheck %s --check-prefix=SPACE

// CHECK-LABEL: func.func @main
// CHECK: scf.for %[[I:.*]] = %c0 to %c128 step %c1
// CHECK: scf.for %[[J0:.*]] = %c0 to %c128 step %c4
// CHECK: linalg.fill {mlc.name = "matmul.init"} {{.*}} -> tensor<1x4xf32>
// CHECK: scf.for %[[K:.*]] = %c0 to %c128 step %c1
// CHECK: linalg.matmul {mlc.name = "matmul"} {{.*}} tensor<1x1xf32>, tensor<1x4xf32>
// SPACE: error: non-deterministic choice "matmul.j.tile1" is only resolved through providing a `selected` attr
func.func @main(%arg0: tensor<128x128xf32>, %arg1: tensor<128x128xf32>) -> tensor<128x128xf32> {
  %0 = tensor.empty() : tensor<128x128xf32>
  %cst = arith.constant 0.000000e+00 : f32
  %1 = linalg.fill {mlc.name = "matmul.init"} ins(%cst : f32) outs(%0 : tensor<128x128xf32>) -> tensor<128x128xf32>
  %2 = linalg.matmul {mlc.name = "matmul"} ins(%arg0, %arg1 : tensor<128x128xf32>, tensor<128x128xf32>) outs(%1 : tensor<128x128xf32>) -> tensor<128x128xf32>
  return %2 : tensor<128x128xf32>
}
