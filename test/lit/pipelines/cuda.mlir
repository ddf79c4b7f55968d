// pipelines/cuda.pipeline on a mapped elementwise kernel (the payload is what
// mlc_mlir.pipeline.cuda produces from a bound schedule after bufferization and
// gpu.map_forall_to_blocks / map_nested_forall_to_threads: a gpu.launch): one kernel, launched
// on a 64x2 grid of 128-thread blocks, compiled to PTX for sm_90.
// RUN: mlir-opt %s --pass-pipeline=%cuda_pipeline | FileCheck %s
// CHECK: llvm.func @main
// CHECK-DAG: %[[C64:.*]] = llvm.mlir.constant(64 : index) : i64
// CHECK-DAG: %[[C2:.*]] = llvm.mlir.constant(2 : index) : i64
// CHECK-DAG: %[[C128:.*]] = llvm.mlir.constant(128 : index) : i64
// CHECK: gpu.launch_func @main_kernel::@main_kernel blocks in (%[[C64]], %[[C2]], %{{.*}}) threads in (%[[C128]], %{{.*}}, %{{.*}})
// CHECK: gpu.binary @main_kernel
// CHECK-SAME: #nvvm.target<chip = "sm_90"
// CHECK-SAME: .target sm_90
// CHECK-SAME: max{{.*}}.f32
module attributes {gpu.container_module} {
  func.func @main(%x: memref<64x256xf32>, %out: memref<64x256xf32>) {
    %c1 = arith.constant 1 : index
    %c2 = arith.constant 2 : index
    %c64 = arith.constant 64 : index
    %c128 = arith.constant 128 : index
    gpu.launch blocks(%bx, %by, %bz) in (%gx = %c64, %gy = %c2, %gz = %c1)
               threads(%tx, %ty, %tz) in (%sx = %c128, %sy = %c1, %sz = %c1) {
      %zero = arith.constant 0.000000e+00 : f32
      %col0 = arith.muli %by, %c128 : index
      %col = arith.addi %col0, %tx : index
      %v = memref.load %x[%bx, %col] : memref<64x256xf32>
      %r = arith.maximumf %v, %zero : f32
      memref.store %r, %out[%bx, %col] : memref<64x256xf32>
      gpu.terminator
    }
    return
  }
}
