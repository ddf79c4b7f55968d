// The mlc dialect (IRDL) in upstream mlir-opt: a well-formed mlc.call_library parses; a
// missing callee or a result type other than the init's is diagnosed.
// RUN: mlir-opt --irdl-file=%irdl %s --split-input-file --verify-diagnostics | FileCheck %s

// CHECK-LABEL: func.func @sgemm
// CHECK: "mlc.call_library"(%arg0, %arg1, %arg2) {callee = "openblas.sgemm"
func.func @sgemm(%a: tensor<4x8xf32>, %b: tensor<8x16xf32>, %c: tensor<4x16xf32>) -> tensor<4x16xf32> {
  %r = "mlc.call_library"(%a, %b, %c) {callee = "openblas.sgemm", operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>} : (tensor<4x8xf32>, tensor<8x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  return %r : tensor<4x16xf32>
}

// -----

func.func @no_callee(%a: tensor<4xf32>, %c: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @below {{attribute "callee" is expected but not provided}}
  %r = "mlc.call_library"(%a, %c) {operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 1>} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

func.func @result_type(%a: tensor<4xf32>, %c: tensor<4xf32>) -> tensor<5xf32> {
  // expected-error @below {{expected 'tensor<4xf32>' but got 'tensor<5xf32>'}}
  %r = "mlc.call_library"(%a, %c) {callee = "env.relu", operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 1>} : (tensor<4xf32>, tensor<4xf32>) -> tensor<5xf32>
  return %r : tensor<5xf32>
}
