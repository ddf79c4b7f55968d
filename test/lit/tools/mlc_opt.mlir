// mlc-opt: pipelines by name, graph passes and schedules in command-line order, clean errors.
// RUN: %mlc-opt %s --pipeline cpu | FileCheck %s --check-prefix=CPU
// RUN: %mlc-opt %s --pipeline %pipelines/cpu.pipeline | FileCheck %s --check-prefix=CPU
// RUN: %mlc-opt %s --pass-pipeline 'builtin.module(func.func(linalg-generalize-named-ops))' | FileCheck %s --check-prefix=GEN
// RUN: %mlc-opt %s --schedule %S/Inputs/split_j4.json | FileCheck %s --check-prefix=SCHED
// RUN: not %mlc-opt %s --pipeline nope 2>&1 | FileCheck %s --check-prefix=NOPIPE
// RUN: not %mlc-opt %S/Inputs/invalid.mlir 2>&1 | FileCheck %s --check-prefix=INVALID
// RUN: not %mlc-opt %s --schedule %S/Inputs/bad_block.json 2>&1 | FileCheck %s --check-prefix=BADSCHED

// CPU: llvm.func @main
// CPU-NOT: linalg.matmul
// GEN: linalg.generic
// GEN-NOT: linalg.matmul
// SCHED: scf.for %{{.*}} = %c0 to %c16 step %c4
// SCHED: linalg.matmul {mlc.name = "matmul"} {{.*}} -> tensor<1x4xf32>
// NOPIPE: mlc-opt: error: pipeline: no pipeline named 'nope'; available: ['cpu', 'cuda', 'cuda_kernels']
// INVALID: mlc-opt: error: Module.parse: the text is not valid MLIR
// INVALID: type of return operand 0 ('tensor<4xf32>') doesn't match function result type ('tensor<5xf32>') in function @f
// BADSCHED: mlc-opt: error: trace: instruction 0 (b0 = sch.get_block('conv')): get_block: no block named 'conv'; blocks: ['matmul', 'matmul.init']
func.func @main(%a: tensor<4x8xf32>, %b: tensor<8x16xf32>) -> tensor<4x16xf32> {
  %e = tensor.empty() : tensor<4x16xf32>
  %z = arith.constant 0.0 : f32
  %f = linalg.fill {mlc.name = "matmul.init"} ins(%z : f32) outs(%e : tensor<4x16xf32>) -> tensor<4x16xf32>
  %m = linalg.matmul {mlc.name = "matmul"} ins(%a, %b : tensor<4x8xf32>, tensor<8x16xf32>) outs(%f : tensor<4x16xf32>) -> tensor<4x16xf32>
  return %m : tensor<4x16xf32>
}
